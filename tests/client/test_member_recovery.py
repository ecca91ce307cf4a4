"""Error recovery: ILLEGAL_GENERATION (KIP-792), UNKNOWN_MEMBER_ID, unreachable coordinator.

On manual time: the coordinator and the members share one `ManualClock`, and the tests
advance it (`advance_until`) instead of waiting for real heartbeats."""

from __future__ import annotations

import asyncio

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, ManualClock, MemoryStore
from coordinator.assignors import get_assignor
from coordinator.assignors.range_assignor import RangeAssignor
from coordinator.client import GroupMember, MemberFailure
from coordinator.errors import ErrorCode

from .helpers import (
    TOPIC,
    FaultyTransport,
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
    return manual_coordinator


async def start_pair(coordinator, clock, members, ledger, protocol="cooperative", instance=None):
    transport = FaultyTransport(in_process(coordinator))
    subject = GroupMember(
        transport,
        member_config(instance, rebalance_protocol=protocol),
        ledger.listener("subject"),
        clock=clock,
    )
    other = GroupMember(
        in_process(coordinator),
        member_config(None, rebalance_protocol=protocol),
        ledger.listener("other"),
        clock=clock,
    )
    members.extend([subject, other])
    await subject.start()
    await other.start()
    await advance_until(clock, lambda: settled([subject, other], PARTITIONS))
    return subject, other, transport


async def test_illegal_generation_keeps_member_id_and_drops_partitions(coordinator, clock, members):
    ledger = Ledger()
    subject, other, transport = await start_pair(coordinator, clock, members, ledger)
    member_id, generation, owned = subject.member_id, subject.generation_id, subject.assignment

    transport.heartbeat_errors.append(ErrorCode.ILLEGAL_GENERATION)
    await advance_until(clock, lambda: listener_of(subject).lost)
    await advance_until(clock, lambda: settled([subject, other], PARTITIONS))

    assert listener_of(subject).lost == [owned]  # lost, not revoked: no commit of them
    assert listener_of(subject).revoked == []
    assert subject.member_id == member_id
    assert subject.generation_id > generation
    assert ledger.violations == []


async def test_unknown_member_id_resets_identity_and_rejoins(coordinator, clock, members):
    ledger = Ledger()
    subject, _other, transport = await start_pair(
        coordinator, clock, members, ledger, protocol="eager"
    )
    member_id, owned = subject.member_id, subject.assignment

    transport.heartbeat_errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
    await advance_until(clock, lambda: listener_of(subject).lost)
    assert listener_of(subject).lost == [owned]
    # The coordinator still knows the old id; it expires with its session. Meanwhile the
    # member rejoined under a fresh id and the group is whole again once that happens.
    assert subject.member_id != member_id
    await advance_until(clock, lambda: subject.state == "stable" and subject.member_id != "")


async def test_rebalance_in_progress_on_sync_keeps_cooperative_partitions(
    coordinator, clock, members
):
    ledger = Ledger()
    subject, other, transport = await start_pair(coordinator, clock, members, ledger)
    owned = subject.assignment
    transport.sync_errors.append(ErrorCode.REBALANCE_IN_PROGRESS)
    transport.heartbeat_errors.append(ErrorCode.REBALANCE_IN_PROGRESS)
    await advance_until(
        clock, lambda: "sync" in transport.calls[-3:] or len(transport.sync_errors) == 0
    )
    await advance_until(clock, lambda: settled([subject, other], PARTITIONS))
    assert subject.assignment == owned
    assert listener_of(subject).lost == []
    assert listener_of(subject).revoked == []


async def test_unreachable_coordinator_within_session_changes_nothing(coordinator, clock, members):
    ledger = Ledger()
    subject, _other, transport = await start_pair(
        coordinator, clock, members, ledger, instance="s-0"
    )
    member_id, generation, owned = subject.member_id, subject.generation_id, subject.assignment

    transport.unreachable = True
    await clock.advance(500)
    transport.unreachable = False
    await clock.advance(300)

    assert "heartbeat" in transport.calls
    assert (subject.member_id, subject.generation_id, subject.assignment) == (
        member_id,
        generation,
        owned,
    )
    assert subject.state == "stable"
    assert listener_of(subject).lost == listener_of(subject).revoked == []


async def test_unreachable_beyond_session_timeout_loses_partitions_then_recovers(members):
    clock = ManualClock()
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_min_session_timeout_ms=300, group_initial_rebalance_delay_ms=50),
        clock,
        MemoryStore(),
    )
    await coordinator.start()
    await coordinator.set_topic_metadata({TOPIC: 12})
    try:
        ledger = Ledger()
        transport = FaultyTransport(in_process(coordinator))
        subject = GroupMember(
            transport,
            member_config(rebalance_protocol="cooperative", session_timeout_ms=400),
            ledger.listener("subject"),
            clock=clock,
        )
        members.append(subject)
        await subject.start()
        await advance_until(clock, lambda: subject.state == "stable")
        owned = subject.assignment
        assert owned == PARTITIONS

        transport.unreachable = True
        await advance_until(clock, lambda: listener_of(subject).lost, within_ms=5_000)
        assert listener_of(subject).lost == [owned]
        assert subject.assignment == frozenset()
        transport.unreachable = False
        await advance_until(clock, lambda: subject.assignment == PARTITIONS, within_ms=5_000)
    finally:
        await subject.close()
        await coordinator.close()


async def test_commit_and_fetch_committed(coordinator, clock, members):
    ledger = Ledger()
    subject, other, _ = await start_pair(coordinator, clock, members, ledger, instance="s-0")
    offsets = {tp: 10 + tp.partition for tp in subject.assignment}
    await subject.commit(offsets)
    assert await subject.fetch_committed(subject.assignment) == offsets
    assert await subject.fetch_committed(other.assignment) == {}


class BrokenAssignor(RangeAssignor):
    def assign(self, partitions_per_topic, subscriptions, *, last_assignment_by_member=None):
        raise RuntimeError("assignor bug")


async def test_a_crashing_leader_assignor_is_fatal_and_clearly_reported(
    coordinator, clock, members
):
    def factory(name):
        return BrokenAssignor() if name == "range" else get_assignor(name)

    leader = GroupMember(
        in_process(coordinator),
        member_config(),
        Ledger().listener("x"),
        assignor_factory=factory,
        clock=clock,
    )
    members.append(leader)
    await leader.start()
    await advance_until(clock, lambda: leader.error is not None)
    with pytest.raises(MemberFailure) as failure:
        await asyncio.wait_for(leader.run(), 5)
    assert "assignor bug" in str(failure.value)
    assert failure.value.code is ErrorCode.UNKNOWN_SERVER_ERROR
    member_id = leader.member_id
    await leader.close()  # dynamic: still leaves, so the group does not wait for it
    (group,) = await coordinator.describe_groups(["fleet"])
    assert member_id not in {m.member_id for m in group.members}
