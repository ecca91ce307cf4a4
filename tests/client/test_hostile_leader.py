"""A member checks the assignment its leader sent: a buggy or hostile leader's nonsense is
logged and the member rejoins, never takes it."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, ManualClock, MemoryStore
from coordinator.assignors.range_assignor import RangeAssignor
from coordinator.client import GroupMember
from coordinator.client.validation import assignment_problem
from coordinator.protocol import Assignment, Subscription, TopicPartition

from .helpers import (
    TOPIC,
    Ledger,
    advance_until,
    all_partitions,
    assignment_of,
    in_process,
    member_config,
)

PARTITIONS = all_partitions(12)
NONSENSE = (
    TopicPartition(TOPIC, -3),
    TopicPartition(TOPIC, 2_147_483_647),
    TopicPartition("payments", 0),
)


class HostileRange(RangeAssignor):
    """Range for itself; nonsense for every other member."""

    def __init__(self, bad: Sequence[TopicPartition]) -> None:
        self.bad = tuple(bad)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]:
        fair = super().assign(partitions_per_topic, subscriptions)
        leader = min(subscriptions)  # whoever: only one member gets the honest share
        return {
            member: fair[member] if member == leader else Assignment(self.bad)
            for member in subscriptions
        }


@pytest.mark.parametrize("bad", [[tp] for tp in NONSENSE] + [[TopicPartition(TOPIC, 0)] * 2])
async def test_a_follower_refuses_a_nonsense_assignment_and_rejoins(
    bad: list[TopicPartition], caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=50), clock, MemoryStore()
    )
    await coordinator.start()
    await coordinator.set_topic_metadata({TOPIC: 12, "payments": 4})
    ledger = Ledger()
    hostile = GroupMember(
        in_process(coordinator),
        member_config("a-leader"),
        ledger.listener("leader"),
        assignor_factory=lambda name: HostileRange(bad),
        clock=clock,
    )
    victim_listener = ledger.listener("victim")
    victim = GroupMember(
        in_process(coordinator), member_config("b-victim"), victim_listener, clock=clock
    )
    try:
        await hostile.start()
        await assignment_of(clock, hostile)
        caplog.set_level(logging.INFO, logger="coordinator.client.member")
        await victim.start()

        def refused_twice() -> bool:
            return sum("is invalid" in r.getMessage() for r in caplog.records) >= 2

        await advance_until(clock, refused_twice)  # logged, rejoined, refused again
        assert victim.error is None, "not fatal: a later generation may be sound"
        assert victim_listener.assigned == [], "nothing of the nonsense was taken"
        assert victim.assignment == frozenset()
    finally:
        await victim.close()
        await hostile.close()
        await coordinator.close()


def test_assignment_problem() -> None:
    counts = {TOPIC: 12, "payments": 4}
    ok = Assignment((TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 11)))
    assert assignment_problem(ok, [TOPIC], counts) is None
    assert "did not subscribe" in (
        assignment_problem(Assignment((TopicPartition("payments", 0),)), [TOPIC], counts) or ""
    )
    assert "does not know" in (
        assignment_problem(Assignment((TopicPartition("ghost", 0),)), ["ghost"], counts) or ""
    )
    for partition in (-3, 12, 2_147_483_647):
        problem = assignment_problem(
            Assignment((TopicPartition(TOPIC, partition),)), [TOPIC], counts
        )
        assert problem is not None and "outside" in problem
