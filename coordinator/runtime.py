"""The context every coordinator manager is given (composition, as Kafka's group
coordinator hands its shards a context): settings, clock, store, the keyed timers, the
groups map and shared group metadata, the journal, and the ONE write path.

The write path is Kafka's: an operation decides under its group's lock, with no I/O, and
returns a `CoordinatorResult` (the records to write and the response); `write` takes the
lock, runs the operation, persists the records, then answers. Every request, admin call
and timer expiry goes through it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

from coordinator.clock import Clock
from coordinator.config import CoordinatorConfig
from coordinator.errors import ErrorCode
from coordinator.expected_members import ExpectedMembers
from coordinator.group import ClassicGroup, ClassicMember
from coordinator.journal import JournalEvent, JournalKind
from coordinator.records import StoreBatch
from coordinator.store import Store, StoreError
from coordinator.store_failures import StoreFailures
from coordinator.timers import Timers

log = logging.getLogger("coordinator")

JournalListener = Callable[[JournalEvent], None]
R = TypeVar("R")
P = ParamSpec("P")


@dataclass(slots=True)
class CoordinatorResult(Generic[R]):
    """Kafka's CoordinatorResult: what an operation decided under its lock, with no I/O.

    `records` are written in one transaction before anyone is answered `response`. As
    Kafka's appendFuture, `then` runs (still under the lock) once the records are written
    and `failed` if they were not: each returns the next result (its records are written
    in turn; the last result's response is the answer), and `failed` may raise instead.
    A long poll's response is a future that a later operation, or `then`, completes.
    """

    response: R
    records: StoreBatch | None = None
    then: Callable[[], CoordinatorResult[R]] | None = None
    failed: Callable[[StoreError], CoordinatorResult[R]] | None = None


class CoordinatorContext:
    """Shared by the membership, offsets and standby managers; owned by `GroupCoordinator`."""

    def __init__(self, config: CoordinatorConfig, clock: Clock, store: Store) -> None:
        self.config = config
        self.clock = clock
        self.store = store
        self.groups: dict[str, ClassicGroup] = {}
        # Group timers by Kafka's keys; each expiry goes through `run_timer`.
        self.timers: Timers[ClassicGroup] = Timers(clock, self.run_timer)
        self.topics: dict[str, int] = {}
        # group id -> expected members; see `coordinator.expected_members`.
        self.expected_members: dict[str, ExpectedMembers] = {}
        self.journal_seq = 0
        self.journal_listeners: list[JournalListener] = []
        # The lock of records that belong to no group (topic metadata, and the expected
        # members and standby records of a group that does not exist).
        self.lock = asyncio.Lock()
        # A failing store is logged once, then summed (store_failures.py).
        self.store_failures = StoreFailures(clock, logging.getLogger("coordinator"))

    def validate_member(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, operation: str
    ) -> ErrorCode:
        code = group.validate_member(member_id, instance_id)
        if code is ErrorCode.FENCED_INSTANCE_ID:
            self.journal_fenced(group, instance_id, member_id, operation)
        return code

    # --- journal and records ------------------------------------------------------------------

    def journal(
        self,
        group: ClassicGroup,
        kind: JournalKind,
        member: ClassicMember | None,
        **detail: Any,
    ) -> None:
        event = JournalEvent(
            seq=0,  # numbered when written, so seq order is commit order
            ts_ms=self.clock.now_ms(),
            group_id=group.group_id,
            kind=kind.value,
            generation_id=group.generation_id,
            member_id=member.member_id if member else None,
            group_instance_id=member.group_instance_id if member else None,
            detail={key: value for key, value in detail.items() if value is not None},
        )
        group.pending_writes.journal.append(event)

    def journal_fenced(
        self, group: ClassicGroup, instance_id: str | None, member_id: str, operation: str
    ) -> None:
        group.pending_writes.journal.append(
            JournalEvent(
                seq=0,
                ts_ms=self.clock.now_ms(),
                group_id=group.group_id,
                kind=JournalKind.MEMBER_FENCED.value,
                generation_id=group.generation_id,
                member_id=member_id,
                group_instance_id=instance_id,
                detail={"operation": operation},
            )
        )

    def result(
        self,
        group: ClassicGroup,
        response: R,
        *,
        then: Callable[[], CoordinatorResult[R]] | None = None,
        failed: Callable[[StoreError], CoordinatorResult[R]] | None = None,
    ) -> CoordinatorResult[R]:
        """An operation's result: `response`, and the records its decision made in `group`.
        (The group's helpers add records to its buffer as they change it, where Kafka's
        pass a records list along; the operation hands them over here, all at once.)"""
        return CoordinatorResult(response, group.take_pending_writes(), then, failed)

    # --- the write path ---------------------------------------------------------------------

    async def write(
        self,
        scope: ClassicGroup | None,
        operation: Callable[P, CoordinatorResult[R]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """THE write path (Kafka's scheduleWriteOperation): take the lock of `scope` (a
        group, or None for records of no group), run the operation, persist its records,
        follow `then`/`failed`, and answer once everything is written."""
        async with self.lock if scope is None else scope.lock:
            result = operation(*args, **kwargs)
            while True:
                try:
                    await self._persist(scope, result.records)
                except StoreError as error:
                    if result.failed is None:
                        raise
                    result = result.failed(error)
                    continue
                if result.then is None:
                    return result.response
                result = result.then()

    async def run_timer(self, group: ClassicGroup, operation: Callable[[], bool]) -> None:
        """Timer expiry through the write path; `operation` returns whether it ran."""
        try:
            await self.write(group, self._timer_result, group, operation)
        except StoreError as error:
            # No request to answer: logged and counted as a request's failure would be
            # (an exception out of a timer's task reached nobody). The group stays dirty
            # (_persist), so its next write stores it.
            self.store_failures.failed(error)

    def _timer_result(
        self, group: ClassicGroup, operation: Callable[[], bool]
    ) -> CoordinatorResult[None]:
        if operation():
            return self.result(group, None)
        return CoordinatorResult(None)

    async def _persist(self, scope: ClassicGroup | None, batch: StoreBatch | None) -> None:
        if batch is None or batch.is_empty():
            return
        # Number journal rows right before the write is queued: the store applies writes in
        # order, so a reader polling with since_seq never sees a gap fill in later. The rows
        # of one write share one timestamp, its first row's (as the records of one batch
        # share one in Kafka): a batch LeaveGroup's rows read as the one request they were.
        stamp = batch.journal[0].ts_ms if batch.journal else 0
        first = self.journal_seq + 1
        batch.journal = [
            event.numbered(seq, stamp) for seq, event in enumerate(batch.journal, first)
        ]
        self.journal_seq += len(batch.journal)
        try:
            await self.store.write(batch)
        except StoreError:
            # Keep the group record dirty so the next write tries again.
            if batch.groups and scope is not None:
                scope.needs_persist = True
            raise
        self.store_failures.succeeded()
        for event in batch.journal:
            for listener in self.journal_listeners:
                try:
                    listener(event)
                except Exception:
                    log.exception("journal listener failed")
