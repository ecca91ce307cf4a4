"""Static membership (KIP-345): restarts without rebalances, fencing, close without leave."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.client import GroupMember
from coordinator.errors import CoordinatorError, ErrorCode

from .helpers import (
    FaultyTransport,
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


async def start_static(coordinator, clock, members, ledger, instance_id, transport=None, **config):
    member = GroupMember(
        transport or in_process(coordinator),
        member_config(instance_id, **config),
        ledger.listener(instance_id),
        clock=clock,
    )
    members.append(member)
    await member.start()
    return member


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
@pytest.mark.parametrize("restart_leader", [False, True])
async def test_static_restart_gets_same_partitions_without_rebalance(
    coordinator, clock, members, protocol, restart_leader
):
    ledger = Ledger()
    fleet = [
        await start_static(
            coordinator, clock, members, ledger, f"m-{i}", rebalance_protocol=protocol
        )
        for i in range(3)
    ]
    await advance_until(clock, lambda: settled(fleet, PARTITIONS))
    generation = coordinator.generation_of("fleet")
    target = next(m for m in fleet if m.is_leader == restart_leader)
    others = [m for m in fleet if m is not target]
    before = {m: m.assignment for m in fleet}
    callbacks_before = {m: len(ledger.log) for m in others}

    await target.close()  # static: no LeaveGroup
    replacement = await start_static(
        coordinator, clock, members, ledger, target.group_instance_id, rebalance_protocol=protocol
    )
    assigned = await assignment_of(clock, replacement)

    assert assigned == before[target]
    assert replacement.member_id != target.member_id
    assert replacement.generation_id == generation
    assert replacement.is_leader == restart_leader
    await clock.advance(200)  # a few heartbeats: nobody is told to rebalance
    assert coordinator.generation_of("fleet") == generation
    for member in others:
        assert member.assignment == before[member]
        assert member.generation_id == generation
    other_names = {m.group_instance_id for m in others}
    assert not [
        entry for entry in ledger.log[min(callbacks_before.values()) :] if entry[0] in other_names
    ]
    assert ledger.violations == []


async def test_fenced_member_is_fatal_and_never_sends_again(coordinator, clock, members):
    ledger = Ledger()
    transport = FaultyTransport(in_process(coordinator))
    zombie = await start_static(coordinator, clock, members, ledger, "m-0", transport=transport)
    other = await start_static(coordinator, clock, members, ledger, "m-1")
    await advance_until(clock, lambda: settled([zombie, other], PARTITIONS))
    owned = zombie.assignment

    # A second process with the same identity takes over (e.g. a pod replaced while the
    # old one was only partitioned away).
    usurper = GroupMember(
        in_process(coordinator), member_config("m-0"), ledger.listener("m-0'"), clock=clock
    )
    members.append(usurper)
    # The zombie's callbacks release its ledger entries; let the usurper's be separate.
    await usurper.start()
    assert await assignment_of(clock, usurper) == owned

    # The zombie's next heartbeat is answered FENCED_INSTANCE_ID.
    await advance_until(clock, lambda: zombie.error is not None)
    with pytest.raises(CoordinatorError) as failure:
        await asyncio.wait_for(zombie.run(), 5)
    assert failure.value.code is ErrorCode.FENCED_INSTANCE_ID
    assert zombie.error is failure.value
    assert zombie.state == "fatal"
    assert zombie.assignment == frozenset()
    assert listener_of(zombie).lost == [owned]
    assert listener_of(zombie).revoked == []
    with pytest.raises(CoordinatorError):
        zombie.poll()
    with pytest.raises(CoordinatorError):
        await zombie.commit({next(iter(owned)): 1})

    calls = len(transport.calls)
    await clock.advance(200)
    await zombie.close(leave=True)
    assert len(transport.calls) == calls, "a fenced member must never send again"
    assert usurper.assignment == owned


async def test_static_close_does_not_leave_but_dynamic_close_does(coordinator, clock, members):
    ledger = Ledger()
    static = await start_static(coordinator, clock, members, ledger, "m-0")
    dynamic = GroupMember(
        in_process(coordinator), member_config(), ledger.listener("d"), clock=clock
    )
    members.append(dynamic)
    await dynamic.start()
    await advance_until(clock, lambda: settled([static, dynamic], PARTITIONS))
    generation = coordinator.generation_of("fleet")

    await static.close()
    await clock.advance(200)
    # Still a member on the coordinator (its session has not expired): no rebalance.
    assert coordinator.generation_of("fleet") == generation
    described = (await coordinator.describe_groups(["fleet"]))[0]
    assert static.group_instance_id in {m.group_instance_id for m in described.members}

    await dynamic.close()
    described = (await coordinator.describe_groups(["fleet"]))[0]
    assert dynamic.member_id not in {m.member_id for m in described.members}
