"""When a ConsumerGroup gets a reconcile pass: on events, not on a clock.

A pass is requested by a watch event on the group or on one of its pods, by the group's
coordinator (a journal entry: a member joined, left, a rebalance ended), by the webhook's
admission of a pod, and by the resync (the safety net: every group once per period, spread
evenly over it — not Kopf's per-object timers, which fired for all groups of a restart within
the same second and logged a line for each). Requests for a group
coalesce: at most one pass runs per group, and requests arriving meanwhile make one more
pass after it. A pass that is not done — it acted, a rollout is under way, an adopted slot
waits out its grace period — asks for another after `requeue_seconds` (the only clock a
settled fleet never sees). A pass may also ask for one at a known moment (the deadline of
a scale-up's expected members) through `request(..., delay=...)`. A pod or Secret deleted
while a watch was down is one more event: the informer tells it when it lists again (informer.py).

Passes and their timers run in an empty context of their own, not in the requester's: a
request made from a Kopf handler would otherwise keep that handler's context (Kopf's cause
in its context variables, with the whole object as the event brought it, managedFields
included) for as long as the timer or task lives, one per group (docs/performance.md,
"What the operator's memory held").
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from staticfleet_operator.group_ref import GroupRef

log = logging.getLogger("staticfleet.operator.passes")

# A failed pass is tried again after this long (doubling up to RETRY_MAX_SECONDS).
RETRY_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0
DEFAULT_CONCURRENCY = 16


def retry_delay(failures: int) -> float:
    """How long after its `failures`-th failure in a row a failed job is tried again."""
    return min(RETRY_SECONDS * 2.0 ** (failures - 1), RETRY_MAX_SECONDS)


@dataclass
class Passes:
    """Runs `run(namespace, name)` per group on request; `run` answers whether the group
    wants another pass after `requeue_seconds`."""

    run: Callable[[str, str], Awaitable[bool]]
    requeue_seconds: float
    concurrency: int = DEFAULT_CONCURRENCY
    _dirty: set[GroupRef] = field(default_factory=set)
    _tasks: dict[GroupRef, asyncio.Task[None]] = field(default_factory=dict)
    _timers: dict[GroupRef, asyncio.TimerHandle] = field(default_factory=dict)
    _failures: dict[GroupRef, int] = field(default_factory=dict)
    _limit: asyncio.Semaphore | None = None
    _resync: asyncio.Task[None] | None = None
    stopped: bool = False

    def request(self, namespace: str, name: str, delay: float = 0.0) -> None:
        """A pass for the group now, or after `delay`: one timer per group, the sooner
        request wins (a requeue is not lost behind a later deadline, nor the reverse)."""
        key = GroupRef(namespace, name)
        if self.stopped:
            return
        if delay > 0:
            if key in self._dirty:
                return
            loop = asyncio.get_running_loop()
            armed = self._timers.get(key)
            if armed is not None:
                if armed.when() <= loop.time() + delay:
                    return
                armed.cancel()
            self._timers[key] = loop.call_later(
                delay, self._due, key, context=contextvars.Context()
            )
            return
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._dirty.add(key)
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(
                self._passes(key), name=f"pass {key}", context=contextvars.Context()
            )

    def resync(self, groups: Callable[[], Iterable[GroupRef]], period_s: float) -> None:
        """Start the safety net: each of `groups()` gets a pass once per `period_s`, one
        request every `period_s / len(groups)`, so a thousand groups make a steady trickle
        rather than a burst that stalls the webhook. The list is read again every round (a
        new group is also requested by its own event)."""
        if period_s <= 0:
            raise ValueError("period_s must be positive")
        if self._resync is None and not self.stopped:
            self._resync = asyncio.create_task(
                self._sweep(groups, period_s), name="resync", context=contextvars.Context()
            )

    async def _sweep(self, groups: Callable[[], Iterable[GroupRef]], period_s: float) -> None:
        while True:
            keys = sorted(set(groups()))
            if not keys:
                await asyncio.sleep(period_s)
                continue
            step = period_s / len(keys)
            for key in keys:
                await asyncio.sleep(step)
                self.request(*key)

    def forget(self, namespace: str, name: str) -> None:
        key = GroupRef(namespace, name)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._dirty.discard(key)
        self._failures.pop(key, None)

    @property
    def running(self) -> int:
        """Groups with a pass running or about to."""
        return len(self._tasks)

    @property
    def due(self) -> int:
        """Groups with a pass asked for and not yet started (now or after a delay)."""
        return len(self._timers) + len(self._dirty)

    def stop(self) -> list[asyncio.Task[None]]:
        """No more passes: pending ones are dropped, running ones cancelled (returned)."""
        self.stopped = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._dirty.clear()
        tasks = list(self._tasks.values())
        if self._resync is not None:
            tasks.append(self._resync)
            self._resync = None
        for task in tasks:
            task.cancel()
        return tasks

    async def close(self) -> None:
        for task in self.stop():
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _due(self, key: GroupRef) -> None:
        self._timers.pop(key, None)
        self.request(*key)

    async def _passes(self, key: GroupRef) -> None:
        if self._limit is None:
            self._limit = asyncio.Semaphore(self.concurrency)
        try:
            while key in self._dirty:
                self._dirty.discard(key)
                async with self._limit:
                    delay = await self._one(key)
                if delay is not None:
                    self.request(*key, delay=delay)
        finally:
            self._tasks.pop(key, None)

    async def _one(self, key: GroupRef) -> float | None:
        """One pass; the delay before the next one it asks for (None: none)."""
        try:
            again = bool(await self.run(*key))
        except asyncio.CancelledError:
            raise
        except Exception as error:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            delay = retry_delay(failures)
            log.warning(
                "%s/%s: pass failed (again in %.0f s): %s",
                *key,
                delay,
                error,
                exc_info=failures == 1,
            )
            return delay
        self._failures.pop(key, None)
        return self.requeue_seconds if again else None
