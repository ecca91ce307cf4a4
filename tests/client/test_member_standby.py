"""Hot standby, member side: a standby waits holding nothing; once promoted it syncs in the
same generation and owns exactly the missing member's partitions, with no rebalance."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.client import GroupMember
from coordinator.client.standby import wait_for_promotion
from coordinator.errors import CoordinatorError, ErrorCode

from .helpers import (
    GROUP,
    Ledger,
    advance_until,
    all_partitions,
    assignment_of,
    in_process,
    listener_of,
    member_config,
    settled,
)

PARTITIONS = all_partitions(12)


@pytest.fixture
def coordinator(manual_coordinator):
    """Manual time: the coordinator and the members read the test's `clock`."""
    return manual_coordinator


async def start_fleet(coordinator, clock, members, ledger, count=3, protocol="eager"):
    fleet = []
    for i in range(count):
        member = GroupMember(
            in_process(coordinator),
            member_config(f"m-{i}", rebalance_protocol=protocol),
            ledger.listener(f"m-{i}"),
            clock=clock,
        )
        members.append(member)
        await member.start()
        fleet.append(member)
    await advance_until(clock, lambda: settled(fleet, PARTITIONS))
    return fleet


async def promoted_standby(coordinator, clock, members, ledger, target, protocol):
    """A standby process: waits, is promoted onto `target`, starts as that member."""
    waiting = asyncio.ensure_future(
        wait_for_promotion(
            in_process(coordinator),
            GROUP,
            "standby-0",
            session_timeout_ms=6000,
            heartbeat_interval_ms=30,
            clock=clock,
        )
    )
    await advance_until(clock, lambda: coordinator.standbys(GROUP).standby_ids == ["standby-0"])
    result = await coordinator.promote(GROUP, "standby-0", target)
    assert result.error_code is ErrorCode.NONE
    await advance_until(clock, waiting.done)  # its next standby heartbeat learns it
    promoted = waiting.result()
    member = GroupMember(
        in_process(coordinator),
        member_config(promoted.instance_id, rebalance_protocol=protocol),
        ledger.listener(f"{target} (standby-0)"),
        clock=clock,
    )
    members.append(member)
    await member.start(promoted=promoted)
    return member


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
async def test_a_promoted_standby_takes_the_exact_assignment_without_a_rebalance(
    coordinator, clock, members, protocol
):
    ledger = Ledger()
    fleet = await start_fleet(coordinator, clock, members, ledger, protocol=protocol)
    generation = coordinator.generation_of(GROUP)
    target = next(m for m in fleet if not m.is_leader)
    others = [m for m in fleet if m is not target]
    before = {m.group_instance_id: m.assignment for m in fleet}
    await target.close()  # its pod is gone (static: no LeaveGroup)
    logged = len(ledger.log)

    standby = await promoted_standby(
        coordinator, clock, members, ledger, target.group_instance_id, protocol
    )
    assert await assignment_of(clock, standby) == before[target.group_instance_id]
    assert standby.generation_id == generation
    await clock.advance(200)  # a few heartbeats: nobody is told to rebalance
    assert coordinator.generation_of(GROUP) == generation
    assert standby.rebalances == 1 and standby.state == "stable"
    for member in others:
        assert member.assignment == before[member.group_instance_id]
    names = {m.group_instance_id for m in others}
    assert not [entry for entry in ledger.log[logged:] if entry[0] in names]
    assert ledger.violations == []


async def test_the_old_holder_partitioned_away_is_fenced_and_loses_its_partitions(
    coordinator, clock, members
):
    ledger = Ledger()
    fleet = await start_fleet(coordinator, clock, members, ledger)
    zombie = next(m for m in fleet if not m.is_leader)
    owned = zombie.assignment
    standby = await promoted_standby(
        coordinator, clock, members, Ledger(), zombie.group_instance_id, "eager"
    )
    assert await assignment_of(clock, standby) == owned
    await advance_until(clock, lambda: zombie.error is not None)
    with pytest.raises(CoordinatorError) as failure:
        await asyncio.wait_for(zombie.run(), 5)
    assert failure.value.code is ErrorCode.FENCED_INSTANCE_ID
    assert listener_of(zombie).lost == [owned]
    assert standby.assignment == owned


async def test_a_promoted_leader_keeps_the_group_stable(coordinator, clock, members):
    ledger = Ledger()
    fleet = await start_fleet(coordinator, clock, members, ledger)
    generation = coordinator.generation_of(GROUP)
    leader = next(m for m in fleet if m.is_leader)
    owned = leader.assignment
    await leader.close()
    standby = await promoted_standby(
        coordinator, clock, members, ledger, leader.group_instance_id, "eager"
    )
    assert await assignment_of(clock, standby) == owned
    assert standby.is_leader
    await clock.advance(200)
    assert coordinator.generation_of(GROUP) == generation
    assert ledger.violations == []


async def test_a_standby_keeps_asking_while_its_token_is_refused(coordinator, clock):
    """A restarting operator refuses member tokens for a moment: the standby waits on."""

    class Refusing:
        def __init__(self) -> None:
            self.refusals = 2

        async def standby_heartbeat(self, request):
            if self.refusals:
                self.refusals -= 1
                raise CoordinatorError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "403 (test)")
            return await in_process(coordinator).standby_heartbeat(request)

    transport = Refusing()
    waiting = asyncio.ensure_future(
        wait_for_promotion(
            transport,
            GROUP,
            "standby-0",
            session_timeout_ms=6000,
            heartbeat_interval_ms=30,
            clock=clock,
        )
    )
    await advance_until(clock, lambda: coordinator.standbys(GROUP).standby_ids == ["standby-0"])
    assert transport.refusals == 0 and not waiting.done()
    waiting.cancel()
