"""Keyed timers, as Kafka's group coordinator keys them.

Every group timer has a key (`heartbeat-<group>-<member>`, `join-<group>`, `sync-<group>`);
scheduling a key replaces its timer, so a superseded timer never fires and nobody keeps a
handle on the data objects. An operation is plain code that changes the group (a decision,
no I/O): when it falls due, the service hands it to ONE write path given by the context,
which takes the group's lock, runs it and persists what it changed once (Kafka's timer
operations return records the runtime writes; here `CoordinatorContext.run_timer`).

Hand-written: no library keys timers this way on an injectable clock.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from coordinator.clock import Clock, TimerHandle

Scope = TypeVar("Scope")
TimerOperation = Callable[[], None]
# Runs `body` under the scope's lock and persists once; `body` returns whether it ran.
WritePath = Callable[[Scope, Callable[[], bool]], Awaitable[None]]


def heartbeat_key(group_id: str, member_id: str) -> str:
    """A member's session (also a pending member id's, KIP-394), as Kafka's
    classicGroupHeartbeatKey."""
    return f"heartbeat-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    """The end of a group's join phase (Kafka's classicGroupJoinKey)."""
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    """The end of a group's sync phase (Kafka's classicGroupSyncKey)."""
    return f"sync-{group_id}"


@dataclass(eq=False, slots=True, weakref_slot=True)
class _Timer(Generic[Scope]):
    key: str
    due_ms: int
    scope: Scope
    operation: TimerOperation
    service: Timers[Scope]
    handle: TimerHandle | None = field(default=None)

    def __call__(self) -> Awaitable[None]:
        """The clock's callback is the timer itself (one is held per member: no closure)."""
        return self.service._fire(self)


class Timers(Generic[Scope]):
    """Timers by key on a `Clock`; expiry goes through the context's write path."""

    def __init__(self, clock: Clock, write_path: WritePath[Scope]) -> None:
        self._clock = clock
        self._write_path = write_path
        self._timers: dict[str, _Timer[Scope]] = {}

    def schedule(self, key: str, scope: Scope, delay_ms: int, operation: TimerOperation) -> None:
        """Run `operation` in `delay_ms`; any timer under `key` is replaced."""
        self.schedule_at(key, scope, self._clock.now_ms() + max(delay_ms, 0), operation)

    def schedule_at(self, key: str, scope: Scope, due_ms: int, operation: TimerOperation) -> None:
        """Run `operation` at `due_ms` (clock time); any timer under `key` is replaced."""
        self.cancel(key)
        timer = _Timer(key, due_ms, scope, operation, self)
        self._timers[key] = timer
        timer.handle = self._clock.call_later(max(due_ms - self._clock.now_ms(), 0), timer)

    async def _fire(self, timer: _Timer[Scope]) -> None:
        # Break timer -> handle -> timer now: the server freezes the collector
        # (`server.gc_policy`), so a fired timer must go by reference counting alone.
        timer.handle = None
        if self._timers.get(timer.key) is timer:
            await self._write_path(timer.scope, functools.partial(self._expire, timer))

    def _expire(self, timer: _Timer[Scope]) -> bool:
        # Checked again under the lock: a request may have replaced or cancelled the timer
        # while this one waited for the lock.
        if self._timers.get(timer.key) is not timer:
            return False
        del self._timers[timer.key]
        timer.operation()
        return True

    def cancel(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None and timer.handle is not None:
            timer.handle.cancel()

    def cancel_all(self) -> None:
        for key in list(self._timers):
            self.cancel(key)

    def is_scheduled(self, key: str) -> bool:
        return key in self._timers

    def due_ms(self, key: str) -> int | None:
        timer = self._timers.get(key)
        return None if timer is None else timer.due_ms

    def keys(self) -> list[str]:
        """Every armed key, for tests and diagnostics."""
        return sorted(self._timers)

    def assert_timer(self, key: str, due_ms: int) -> None:
        """Test helper: the timer under `key` is armed and falls due at `due_ms`."""
        actual = self.due_ms(key)
        if actual is None:
            raise AssertionError(f"no timer under {key!r}; armed: {self.keys()}")
        if actual != due_ms:
            raise AssertionError(f"timer {key!r} is due at {actual}, expected {due_ms}")

    def assert_no_timer(self, key: str) -> None:
        """Test helper: nothing is armed under `key`."""
        if key in self._timers:
            raise AssertionError(f"timer {key!r} is armed (due at {self._timers[key].due_ms})")
