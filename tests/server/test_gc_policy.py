"""`coordinator serve`'s garbage-collection policy: what survives is frozen out of sight."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from coordinator.server.gc_policy import (
    collect_all,
    freeze_now,
    freeze_periodically,
    full_collection_due,
)


class _Node:
    def __init__(self) -> None:
        self.partner: _Node | None = None


def test_freeze_now_hides_survivors_and_collects_young_garbage() -> None:
    gc.unfreeze()
    try:
        survivor = _Node()
        cycle = _Node()
        cycle.partner = cycle  # young cyclic garbage: collected, not frozen for ever
        collected = weakref.ref(cycle)
        del cycle
        freeze_now()
        assert gc.get_freeze_count() > 0
        assert collected() is None
        # Frozen objects are out of every generation an automatic collection scans.
        assert all(obj is not survivor for obj in gc.get_objects(generation=2))
    finally:
        gc.unfreeze()


async def test_freeze_periodically_freezes_at_once_and_again() -> None:
    gc.unfreeze()
    task = asyncio.create_task(freeze_periodically(0.01))
    try:
        await asyncio.sleep(0)
        assert gc.get_freeze_count() > 0
        first = gc.get_freeze_count()
        keep = [_Node() for _ in range(100)]
        await asyncio.sleep(0.05)
        assert gc.get_freeze_count() >= first + len(keep)
    finally:
        task.cancel()
        gc.unfreeze()


async def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError):
        await freeze_periodically(0)


async def test_a_full_collection_reclaims_cycles_that_died_frozen() -> None:
    gc.unfreeze()
    try:
        cycle = _Node()
        cycle.partner = cycle
        gone = weakref.ref(cycle)
        freeze_now()  # alive when frozen ...
        del cycle  # ... and garbage since: no automatic collection ever sees it
        gc.collect()
        assert gone() is not None
        assert collect_all() >= 1
        assert gone() is None
        assert gc.get_freeze_count() > 0  # frozen again after
    finally:
        gc.unfreeze()


def test_a_full_collection_is_due_once_the_frozen_grew_by_a_quarter_and_not_too_soon() -> None:
    assert full_collection_due(1251, 1000, 30.0, 30.0)
    assert not full_collection_due(1250, 1000, 30.0, 30.0)  # grown by a quarter: not more
    assert not full_collection_due(5000, 1000, 29.9, 30.0)  # grown, but too soon
    assert not full_collection_due(900, 1000, 3600.0, 30.0)  # idle for an hour: nothing


async def test_freeze_periodically_collects_fully_once_the_frozen_grew() -> None:
    gc.unfreeze()
    task = asyncio.create_task(freeze_periodically(0.01, full_interval_s=0.05))
    try:
        await asyncio.sleep(0.02)
        few = _cycles(10)
        gone = weakref.ref(few[0])
        await asyncio.sleep(0.02)  # frozen alive ...
        del few  # ... and garbage since
        await asyncio.sleep(0.2)  # several full intervals, but too little growth
        assert gone() is not None
    finally:
        task.cancel()
        gc.unfreeze()
    # No full collection within the first second: the cycles are frozen alive, then die,
    # more than a quarter of what was frozen, and the next one due reclaims them.
    task = asyncio.create_task(freeze_periodically(0.01, full_interval_s=1.0))
    try:
        await asyncio.sleep(0.02)
        many = _cycles(gc.get_freeze_count() // 2)
        gone = weakref.ref(many[0])
        await asyncio.sleep(0.02)
        del many
        for _ in range(300):
            if gone() is None:
                break
            await asyncio.sleep(0.01)
        assert gone() is None
    finally:
        task.cancel()
        gc.unfreeze()
    with pytest.raises(ValueError):
        await freeze_periodically(1, full_interval_s=0)


def _cycles(n: int) -> list[_Node]:
    nodes = [_Node() for _ in range(n)]
    for node in nodes:
        node.partner = node
    return nodes
