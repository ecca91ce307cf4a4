"""Plumbing shared by the coordinator's request handlers: settings, clock, store, the
per-group write batch and journal numbering, and the guard that turns any failure into a
Kafka error code instead of an exception."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from coordinator.clock import Clock, SystemClock, TimerHandle
from coordinator.config import CoordinatorConfig
from coordinator.errors import ErrorCode
from coordinator.expansion import Expansion
from coordinator.group import ClassicGroup, ClassicMember
from coordinator.journal import JournalEvent, JournalKind
from coordinator.records import OffsetRecord
from coordinator.standby import StandbyPromotion, StandbySession
from coordinator.store import MemoryStore, Store, StoreError
from coordinator.timers import Timers

log = logging.getLogger("coordinator")

JournalListener = Callable[[JournalEvent], None]
R = TypeVar("R")


class CoordinatorRuntime:
    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        clock: Clock | None = None,
        store: Store | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.clock: Clock = clock or SystemClock()
        self.store: Store = store or MemoryStore()
        self._groups: dict[str, ClassicGroup] = {}
        # Group timers by Kafka's keys; each expiry goes through `_run_timer`.
        self.timers: Timers[ClassicGroup] = Timers(self.clock, self._run_timer)
        self._offsets: dict[str, dict[tuple[str, int], OffsetRecord]] = {}
        self._topics: dict[str, int] = {}
        # group id -> expected members (pre-registration); see `coordinator.expansion`.
        self._expansions: dict[str, Expansion] = {}
        # Hot standby (`coordinator.standby`): group id -> standby id -> its session (in
        # memory: standbys heartbeat again after a restart) / its promotion (persisted).
        self._standby_sessions: dict[str, dict[str, StandbySession]] = {}
        self._promotions: dict[str, dict[str, StandbyPromotion]] = {}
        self._topics_lock = asyncio.Lock()
        self._journal_seq = 0
        self._journal_listeners: list[JournalListener] = []
        self._started = False
        self._closed = False
        self._journal_prune_timer: TimerHandle | None = None

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def is_ready(self) -> bool:
        return self._started and not self._closed

    def add_journal_listener(self, callback: JournalListener) -> None:
        self._journal_listeners.append(callback)

    async def _guard(self, handler: Awaitable[R], failed: Callable[[ErrorCode], R]) -> R:
        """Never let an exception out of the coordinator: answer with a Kafka error."""
        if not self.is_ready:
            if asyncio.iscoroutine(handler):
                handler.close()
            return failed(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        try:
            return await handler
        except StoreError:
            log.exception("store failure while handling a request")
            return failed(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        except Exception:
            log.exception("unexpected error while handling a request")
            return failed(ErrorCode.UNKNOWN_SERVER_ERROR)

    def _validate_member(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, operation: str
    ) -> ErrorCode:
        code = group.validate_member(member_id, instance_id)
        if code is ErrorCode.FENCED_INSTANCE_ID:
            self._journal_fenced(group, instance_id, member_id, operation)
        return code

    # --- journal and persistence ---------------------------------------------------------------

    def _journal(
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

    def _journal_fenced(
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

    async def _run_timer(self, group: ClassicGroup, operation: Callable[[], bool]) -> None:
        """The one write path of timer expiry: lock the group, run, persist once."""
        async with group.lock:
            if operation():
                await self._flush(group)

    async def _flush(self, group: ClassicGroup) -> None:
        """Write what the group changed under its lock (caller holds the lock)."""
        batch = group.take_pending_writes()
        if batch.is_empty():
            return
        # Number journal rows right before the write is queued: the store applies writes in
        # order, so a reader polling with since_seq never sees a gap fill in later.
        numbered = []
        for event in batch.journal:
            self._journal_seq += 1
            numbered.append(dataclasses.replace(event, seq=self._journal_seq))
        batch.journal = numbered
        try:
            await self.store.write(batch)
        except StoreError:
            # Keep the group record dirty so the next write tries again.
            if batch.groups:
                group.needs_persist = True
            raise
        for event in batch.journal:
            for listener in self._journal_listeners:
                try:
                    listener(event)
                except Exception:
                    log.exception("journal listener failed")
