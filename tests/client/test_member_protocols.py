"""Eager, compatible and cooperative members against a real in-process coordinator."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.client import GroupMember
from coordinator.errors import CoordinatorError, ErrorCode

from .helpers import (
    Ledger,
    advance_until,
    all_partitions,
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


async def start_members(coordinator, clock, members, ledger, names, **config):
    started = []
    for name in names:
        member = GroupMember(
            in_process(coordinator), member_config(**config), ledger.listener(name), clock=clock
        )
        members.append(member)
        started.append(member)
        await member.start()
    return started


async def test_eager_group_of_three_gets_a_full_disjoint_assignment(coordinator, clock, members):
    ledger = Ledger()
    started = await start_members(coordinator, clock, members, ledger, ["a", "b", "c"])
    await advance_until(clock, lambda: settled(started, PARTITIONS))

    assert sorted(len(m.assignment) for m in started) == [4, 4, 4]
    assert all(m.protocol_name == "range" and not m.cooperative for m in started)
    assert sum(m.is_leader for m in started) == 1
    assert ledger.violations == []
    assert ledger.owner == {
        tp: name for m, name in zip(started, "abc", strict=True) for tp in m.assignment
    }


async def test_eager_member_revokes_everything_before_rejoining(coordinator, clock, members):
    ledger = Ledger()
    a, b = await start_members(coordinator, clock, members, ledger, ["a", "b"])
    await advance_until(clock, lambda: settled([a, b], PARTITIONS))
    before = a.assignment
    (c,) = await start_members(coordinator, clock, members, ledger, ["c"])
    await advance_until(clock, lambda: settled([a, b, c], PARTITIONS))

    listener_a = listener_of(a)
    # Eager: the whole previous assignment was revoked, then a whole new one assigned.
    assert before in listener_a.revoked
    assert listener_a.assigned[-1] == a.assignment
    assert ledger.violations == []


async def test_cooperative_scale_up_moves_partitions_in_two_rebalances(coordinator, clock, members):
    ledger = Ledger()
    a, b = await start_members(
        coordinator, clock, members, ledger, ["a", "b"], rebalance_protocol="cooperative"
    )
    await advance_until(clock, lambda: settled([a, b], PARTITIONS))
    generation = a.generation_id
    kept = {"a": a.assignment, "b": b.assignment}

    (c,) = await start_members(
        coordinator, clock, members, ledger, ["c"], rebalance_protocol="cooperative"
    )
    await advance_until(clock, lambda: settled([a, b, c], PARTITIONS))

    assert all(m.cooperative and m.protocol_name == "cooperative-sticky" for m in (a, b, c))
    assert sorted(len(m.assignment) for m in (a, b, c)) == [4, 4, 4]
    # Two rebalances: one where a and b give up what c will get, then the follow-up.
    assert c.generation_id == generation + 2
    listener_c = listener_of(c)
    assert listener_c.assigned[0] == frozenset()
    assert listener_c.assigned[-1] == c.assignment
    for member, name in ((a, "a"), (b, "b")):
        listener = listener_of(member)
        # Cooperative: only what moved was revoked; the rest stayed owned throughout.
        assert member.assignment <= kept[name]
        revoked = frozenset().union(*listener.revoked)
        assert revoked == kept[name] - member.assignment
        assert listener.lost == []
    assert ledger.violations == []


async def test_compatible_members_offer_cooperative_first_but_behave_eagerly(
    coordinator, clock, members
):
    ledger = Ledger()
    a, b = await start_members(
        coordinator, clock, members, ledger, ["a", "b"], rebalance_protocol="compatible"
    )
    await advance_until(clock, lambda: settled([a, b], PARTITIONS))
    # Everyone's first choice is the cooperative assignor, so the group selects it...
    assert a.protocol_name == "cooperative-sticky"
    assert a.config.offered_assignors == ("cooperative-sticky", "range")
    # ...yet the members follow the eager protocol (range is eager-only).
    assert not a.cooperative
    before = {a: a.assignment, b: b.assignment}

    (c,) = await start_members(
        coordinator, clock, members, ledger, ["c"], rebalance_protocol="compatible"
    )
    await advance_until(clock, lambda: settled([a, b, c], PARTITIONS))
    for member in (a, b):
        listener = listener_of(member)
        assert before[member] in listener.revoked  # everything, before rejoining
        assert listener.assigned[-1] == member.assignment
    assert ledger.violations == []


async def test_cooperative_member_cannot_join_an_eager_group(coordinator, clock, members):
    ledger = Ledger()
    a, b = await start_members(coordinator, clock, members, ledger, ["a", "b"])
    await advance_until(clock, lambda: settled([a, b], PARTITIONS))
    generation = a.generation_id

    (rogue,) = await start_members(
        coordinator, clock, members, ledger, ["rogue"], rebalance_protocol="cooperative"
    )
    await advance_until(clock, lambda: rogue.error is not None)
    with pytest.raises(CoordinatorError) as failure:
        await asyncio.wait_for(rogue.run(), 5)
    assert failure.value.code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert "compatible" in str(failure.value)
    assert rogue.error is failure.value
    with pytest.raises(CoordinatorError):
        await rogue.wait_for_assignment(1)
    # The eager group never noticed.
    await clock.advance(100)
    assert coordinator.generation_of("fleet") == generation
    assert settled([a, b], PARTITIONS)
