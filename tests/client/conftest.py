from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, ManualClock, MemoryStore, SystemClock
from coordinator.client import GroupMember

from .helpers import TOPIC


@pytest.fixture
async def coordinator() -> AsyncIterator[GroupCoordinator]:
    # A short initial delay lets members started together land in one first generation.
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=150)
    coordinator = GroupCoordinator(config, SystemClock(), MemoryStore())
    await coordinator.start()
    await coordinator.set_topic_metadata({TOPIC: 12})
    yield coordinator
    await coordinator.close()


@pytest.fixture
def clock() -> ManualClock:
    """The one clock of a manual-time test: its coordinator and members all read it."""
    return ManualClock()


@pytest.fixture
async def manual_coordinator(clock: ManualClock) -> AsyncIterator[GroupCoordinator]:
    """`coordinator`, on the manual `clock`: time moves only when the test advances it."""
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=150)
    coordinator = GroupCoordinator(config, clock, MemoryStore())
    await coordinator.start()
    await coordinator.set_topic_metadata({TOPIC: 12})
    yield coordinator
    await coordinator.close()


@pytest.fixture
async def members() -> AsyncIterator[list[GroupMember]]:
    """Members a test starts; all closed at the end whatever happened."""
    started: list[GroupMember] = []
    yield started
    for member in started:
        await member.close()
