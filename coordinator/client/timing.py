"""The member's time: an injected `Clock` (coordinator/clock.py), so tests drive it by hand.

A member only reads the time and sleeps; `sleep` does it through `Clock.call_later`, so on a
`ManualClock` a sleeper wakes when a test's `advance()` passes its due time, and on a real
clock it is an ordinary asyncio timer.
"""

from __future__ import annotations

import asyncio
import time

from coordinator.clock import Clock, SystemClock


class MonotonicClock(SystemClock):
    """The default member clock: asyncio timers and monotonic time, so a wall-clock step
    (NTP) cannot make a member think its session expired."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


async def sleep(clock: Clock, delay_ms: int) -> None:
    """Wait `delay_ms` on `clock`; cancelling the wait cancels its timer."""
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    handle = clock.call_later(delay_ms, wake)
    try:
        await woken
    finally:
        handle.cancel()
