"""Kopf's startup wait for its indices, with index_readiness installed: linear, and the
same answers as Kopf's own wait (everyone returns once the set is on, nobody before, a
cancelled waiter leaves the others waiting)."""

from __future__ import annotations

import asyncio

import kopf
import pytest
from kopf._cogs.aiokits.aiotoggles import ToggleSet

from staticfleet_operator import index_readiness


class CountingSet(ToggleSet):
    """Counts the checks of the set's state: one per wake-up of a waiter."""

    checks = 0

    def is_on(self) -> bool:
        CountingSet.checks += 1
        return super().is_on()


async def startup(n: int) -> int:
    """Kopf's pattern: the listing streams in one object per loop turn; each object's worker
    drops its toggle and waits for all; the listing's own toggle goes last."""
    CountingSet.checks = 0
    toggles = CountingSet(all)
    listed = await toggles.make_toggle(name="listing")

    async def worker(index: int) -> None:
        toggle = await toggles.make_toggle(name=str(index))
        await asyncio.sleep(0)
        await toggles.drop_toggle(toggle)
        await toggles.wait_for(True)

    workers = []
    for index in range(n):
        workers.append(asyncio.create_task(worker(index)))
        await asyncio.sleep(0)
    await toggles.drop_toggle(listed)
    await asyncio.wait_for(asyncio.gather(*workers), 30)
    return CountingSet.checks


@pytest.fixture(autouse=True)
def installed() -> None:
    index_readiness.install()
    assert index_readiness.installed()


async def test_the_wait_is_linear_in_the_objects() -> None:
    # Kopf's own wait checks about n²/2 times here (80,000 at n = 400).
    small, large = await startup(200), await startup(400)
    assert large <= 10 * 400
    assert large <= 2.5 * small


async def test_nobody_returns_before_the_set_is_on_and_everyone_after() -> None:
    toggles = ToggleSet(all)
    last = await toggles.make_toggle(name="last")
    waiters = [asyncio.create_task(toggles.wait_for(True)) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waiters)
    await toggles.drop_toggle(last)
    await asyncio.wait_for(asyncio.gather(*waiters), 5)
    # Already on: returns at once, and waiting for the other state still waits.
    await asyncio.wait_for(toggles.wait_for(True), 1)
    off = await toggles.make_toggle(name="off")
    await asyncio.wait_for(toggles.wait_for(False), 1)
    await toggles.drop_toggle(off)


async def test_a_cancelled_waiter_leaves_the_others_waiting() -> None:
    toggles = ToggleSet(all)
    last = await toggles.make_toggle(name="last")
    first = asyncio.create_task(toggles.wait_for(True))
    second = asyncio.create_task(toggles.wait_for(True))
    await asyncio.sleep(0.01)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert not second.done()
    await last.turn_to(True)
    await asyncio.wait_for(second, 5)


def test_any_kopf_but_the_pinned_one_is_refused_at_install(monkeypatch: pytest.MonkeyPatch) -> None:
    index_readiness.require_pinned_kopf()  # the installed one is the pinned one
    monkeypatch.setattr(kopf, "__version__", "1.46.0")
    with pytest.raises(RuntimeError, match=r"written for kopf 1\.45\.2; found 1\.46\.0"):
        index_readiness.install()


async def test_when_every_caller_is_cancelled_no_waiter_task_is_left_behind() -> None:
    """Kopf's shutdown waits 5 s for every task born while it ran before it cancels them: a
    shared waiter that outlived its callers cost each operator stop those 5 s."""
    index_readiness.install()
    toggles = ToggleSet(all)
    await toggles.make_toggle(name="never dropped")
    before = asyncio.all_tasks()
    callers = [asyncio.create_task(toggles.wait_for(True)) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert len(asyncio.all_tasks() - before) == 4  # three callers, one shared waiter
    for caller in callers:
        caller.cancel()
    await asyncio.gather(*callers, return_exceptions=True)
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before == set()
