"""Clocks: every timer in the coordinator goes through one, so tests control time.

`SystemClock` runs timers on the asyncio loop. `ManualClock` only moves when a test calls
`advance(ms)`, which fires (and awaits) every timer that falls due, in due order.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

TimerCallback = Callable[[], Awaitable[None] | None]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: TimerCallback) -> TimerHandle: ...


async def _run_callback(callback: TimerCallback) -> None:
    result = callback()
    if inspect.isawaitable(result):
        await result


class _SystemTimer:
    def __init__(self, handle: asyncio.TimerHandle) -> None:
        self._handle = handle
        self.task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        self._handle.cancel()


class SystemClock:
    """Wall-clock time (ms since the epoch) and asyncio timers."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_later(self, delay_ms: int, callback: TimerCallback) -> TimerHandle:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            task = loop.create_task(_run_callback(callback))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return _SystemTimer(loop.call_later(max(delay_ms, 0) / 1000.0, fire))


class _ManualTimer:
    __slots__ = ("callback", "cancelled", "due_ms")

    def __init__(self, due_ms: int, callback: TimerCallback) -> None:
        self.due_ms = due_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told; `await advance(ms)` fires what falls due."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms
        self._sequence = itertools.count()
        self._timers: list[tuple[int, int, _ManualTimer]] = []

    def now_ms(self) -> int:
        return self._now_ms

    def call_later(self, delay_ms: int, callback: TimerCallback) -> TimerHandle:
        timer = _ManualTimer(self._now_ms + max(delay_ms, 0), callback)
        heapq.heappush(self._timers, (timer.due_ms, next(self._sequence), timer))
        return timer

    def pending_timers(self) -> int:
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    async def advance(self, ms: int) -> None:
        """Move time forward by `ms`, firing due timers in order (including ones they add)."""
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        target = self._now_ms + ms
        while self._timers and self._timers[0][0] <= target:
            due_ms, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now_ms = max(self._now_ms, due_ms)
            await _run_callback(timer.callback)
            # Let tasks woken by the callback (parked joins, syncs) run before the next timer.
            await settle()
        self._now_ms = target
        await settle()


async def settle(rounds: int = 20) -> None:
    """Yield to the loop a few times so woken tasks run (tests and ManualClock use it)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
