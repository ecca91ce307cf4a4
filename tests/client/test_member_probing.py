"""KIP-268 version probing with the static-sticky assignor, over a real coordinator."""

from __future__ import annotations

import pytest

from coordinator.assignors import StaticStickyAssignor, decode_subscription_info, get_assignor
from coordinator.client import GroupMember
from coordinator.protocol import decode_subscription

from .helpers import (
    Ledger,
    advance_until,
    all_partitions,
    assignment_of,
    in_process,
    member_config,
    settled,
)

PARTITIONS = all_partitions(12)


def versioned(version: int):
    def factory(name: str):
        if name == "static-sticky":
            return StaticStickyAssignor(version=version)
        return get_assignor(name)

    return factory


@pytest.fixture
def coordinator(manual_coordinator):
    """Manual time: the coordinator and the members read the test's `clock`."""
    return manual_coordinator


async def start(coordinator, clock, members, ledger, instance_id, version):
    member = GroupMember(
        in_process(coordinator),
        member_config(
            instance_id, rebalance_protocol="cooperative", cooperative_assignor="static-sticky"
        ),
        ledger.listener(instance_id),
        assignor_factory=versioned(version),
        clock=clock,
    )
    members.append(member)
    await member.start()
    return member


async def subscription_versions(coordinator) -> dict[str, int]:
    (group,) = await coordinator.describe_groups(["fleet"])
    return {
        m.group_instance_id: decode_subscription_info(
            decode_subscription(m.member_metadata).user_data
        ).version
        for m in group.members
    }


async def test_newer_member_downgrades_then_group_upgrades_after_leader_bounce(
    coordinator, clock, members
):
    ledger = Ledger()
    leader = await start(coordinator, clock, members, ledger, "m-0", version=1)
    await assignment_of(clock, leader)
    assert leader.is_leader

    # A v2 member joins a group led by a v1 leader: the leader cannot read it, answers with
    # a probe, the member downgrades to v1 and rejoins; the group then settles on v1.
    newer = await start(coordinator, clock, members, ledger, "m-1", version=2)
    await advance_until(
        clock, lambda: settled([leader, newer], PARTITIONS) and len(newer.assignment) == 6
    )
    newer_assignor = newer.assignor("static-sticky")
    assert newer_assignor.leader_supported_version == 1
    assert newer_assignor.used_version == 1
    assert await subscription_versions(coordinator) == {"m-0": 1, "m-1": 1}

    # Bounce the leader onto v2 (static: it comes back without a rebalance and as leader),
    # after which the group moves to v2 by itself: no second bounce needed.
    before = {leader.group_instance_id: leader.assignment, "m-1": newer.assignment}
    await leader.close()
    upgraded = await start(coordinator, clock, members, ledger, "m-0", version=2)
    await advance_until(
        clock,
        lambda: (
            settled([upgraded, newer], PARTITIONS)
            and newer_assignor.leader_supported_version == 2
            and newer_assignor.used_version == 2
            and upgraded.assignor("static-sticky").used_version == 2
        ),
    )
    assert upgraded.is_leader
    await advance_until(clock, lambda: not newer._rejoin_event.is_set())
    assert await subscription_versions(coordinator) == {"m-0": 2, "m-1": 2}
    # Version changes are metadata only: static-sticky kept every partition where it was.
    assert upgraded.assignment == before["m-0"]
    assert newer.assignment == before["m-1"]
    assert ledger.violations == []
    reasons = [
        str(row.detail.get("reason", ""))
        for row in await coordinator.journal_rows("fleet")
        if row.kind == "rebalance_started"
    ]
    assert any("version probing" in reason for reason in reasons)
    assert any("written by a v1 leader" in reason for reason in reasons)
