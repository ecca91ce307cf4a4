"""Static membership (KIP-345): restarts without rebalances, fencing, close without leave."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.client import GroupMember
from coordinator.errors import CoordinatorError, ErrorCode

from .helpers import (
    FaultyTransport,
    Ledger,
    all_partitions,
    in_process,
    listener_of,
    member_config,
    settled,
    wait_until,
)

PARTITIONS = all_partitions(12)


async def start_static(coordinator, members, ledger, instance_id, transport=None, **config):
    member = GroupMember(
        transport or in_process(coordinator),
        member_config(instance_id, **config),
        ledger.listener(instance_id),
    )
    members.append(member)
    await member.start()
    return member


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
@pytest.mark.parametrize("restart_leader", [False, True])
async def test_static_restart_gets_same_partitions_without_rebalance(
    coordinator, members, protocol, restart_leader
):
    ledger = Ledger()
    fleet = [
        await start_static(coordinator, members, ledger, f"m-{i}", rebalance_protocol=protocol)
        for i in range(3)
    ]
    await wait_until(lambda: settled(fleet, PARTITIONS))
    generation = coordinator.generation_of("fleet")
    target = next(m for m in fleet if m.is_leader == restart_leader)
    others = [m for m in fleet if m is not target]
    before = {m: m.assignment for m in fleet}
    callbacks_before = {m: len(ledger.log) for m in others}

    await target.close()  # static: no LeaveGroup
    replacement = await start_static(
        coordinator, members, ledger, target.group_instance_id, rebalance_protocol=protocol
    )
    assigned = await replacement.wait_for_assignment(5)

    assert assigned == before[target]
    assert replacement.member_id != target.member_id
    assert replacement.generation_id == generation
    assert replacement.is_leader == restart_leader
    await asyncio.sleep(0.2)  # a few heartbeats: nobody is told to rebalance
    assert coordinator.generation_of("fleet") == generation
    for member in others:
        assert member.assignment == before[member]
        assert member.generation_id == generation
    other_names = {m.group_instance_id for m in others}
    assert not [
        entry for entry in ledger.log[min(callbacks_before.values()) :] if entry[0] in other_names
    ]
    assert ledger.violations == []


async def test_fenced_member_is_fatal_and_never_sends_again(coordinator, members):
    ledger = Ledger()
    transport = FaultyTransport(in_process(coordinator))
    zombie = await start_static(coordinator, members, ledger, "m-0", transport=transport)
    other = await start_static(coordinator, members, ledger, "m-1")
    await wait_until(lambda: settled([zombie, other], PARTITIONS))
    owned = zombie.assignment

    # A second process with the same identity takes over (e.g. a pod replaced while the
    # old one was only partitioned away).
    usurper = GroupMember(in_process(coordinator), member_config("m-0"), ledger.listener("m-0'"))
    members.append(usurper)
    # The zombie's callbacks release its ledger entries; let the usurper's be separate.
    await usurper.start()
    assert await usurper.wait_for_assignment(5) == owned

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
    await asyncio.sleep(0.2)
    await zombie.close(leave=True)
    assert len(transport.calls) == calls, "a fenced member must never send again"
    assert usurper.assignment == owned


async def test_static_close_does_not_leave_but_dynamic_close_does(coordinator, members):
    ledger = Ledger()
    static = await start_static(coordinator, members, ledger, "m-0")
    dynamic = GroupMember(in_process(coordinator), member_config(), ledger.listener("d"))
    members.append(dynamic)
    await dynamic.start()
    await wait_until(lambda: settled([static, dynamic], PARTITIONS))
    generation = coordinator.generation_of("fleet")

    await static.close()
    await asyncio.sleep(0.2)
    # Still a member on the coordinator (its session has not expired): no rebalance.
    assert coordinator.generation_of("fleet") == generation
    described = (await coordinator.describe_groups(["fleet"]))[0]
    assert static.group_instance_id in {m.group_instance_id for m in described.members}

    await dynamic.close()
    described = (await coordinator.describe_groups(["fleet"]))[0]
    assert dynamic.member_id not in {m.member_id for m in described.members}
