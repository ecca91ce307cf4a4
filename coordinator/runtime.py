"""The context every coordinator manager is given (composition, as Kafka's group
coordinator hands its shards a context): settings, clock, store, the keyed timers, the
groups map and shared group metadata, the journal, and the ONE write path (`run_timer` for
timer expiry, `flush` for what a request changed under the group's lock)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from coordinator.clock import Clock
from coordinator.config import CoordinatorConfig
from coordinator.errors import ErrorCode
from coordinator.expansion import Expansion
from coordinator.group import ClassicGroup, ClassicMember
from coordinator.journal import JournalEvent, JournalKind
from coordinator.store import Store, StoreError
from coordinator.timers import Timers

log = logging.getLogger("coordinator")

JournalListener = Callable[[JournalEvent], None]
R = TypeVar("R")
P = ParamSpec("P")


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
        # group id -> expected members (pre-registration); see `coordinator.expansion`.
        self.expansions: dict[str, Expansion] = {}
        self.journal_seq = 0
        self.journal_listeners: list[JournalListener] = []

    def validate_member(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, operation: str
    ) -> ErrorCode:
        code = group.validate_member(member_id, instance_id)
        if code is ErrorCode.FENCED_INSTANCE_ID:
            self.journal_fenced(group, instance_id, member_id, operation)
        return code

    # --- journal and persistence ---------------------------------------------------------------

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

    async def write(
        self, group: ClassicGroup, operation: Callable[P, R], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """The one write path of a request whose decision needs no I/O (Kafka's
        CoordinatorResult: the operation changes the group and returns the response): lock
        the group, run it, persist what it changed once, then answer."""
        async with group.lock:
            response = operation(*args, **kwargs)
            await self.flush(group)
        return response

    async def run_timer(self, group: ClassicGroup, operation: Callable[[], bool]) -> None:
        """The one write path of timer expiry: lock the group, run, persist once."""
        async with group.lock:
            if operation():
                await self.flush(group)

    async def flush(self, group: ClassicGroup) -> None:
        """Write what the group changed under its lock (caller holds the lock)."""
        batch = group.take_pending_writes()
        if batch.is_empty():
            return
        # Number journal rows right before the write is queued: the store applies writes in
        # order, so a reader polling with since_seq never sees a gap fill in later.
        numbered = []
        for event in batch.journal:
            self.journal_seq += 1
            numbered.append(dataclasses.replace(event, seq=self.journal_seq))
        batch.journal = numbered
        try:
            await self.store.write(batch)
        except StoreError:
            # Keep the group record dirty so the next write tries again.
            if batch.groups:
                group.needs_persist = True
            raise
        for event in batch.journal:
            for listener in self.journal_listeners:
                try:
                    listener(event)
                except Exception:
                    log.exception("journal listener failed")
