"""Error recovery: ILLEGAL_GENERATION (KIP-792), UNKNOWN_MEMBER_ID, unreachable coordinator."""

from __future__ import annotations

import asyncio

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore, SystemClock
from coordinator.assignors import get_assignor
from coordinator.assignors.range_assignor import RangeAssignor
from coordinator.client import GroupMember, MemberFailure
from coordinator.errors import ErrorCode

from .helpers import (
    TOPIC,
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


async def start_pair(coordinator, members, ledger, protocol="cooperative", instance=None):
    transport = FaultyTransport(in_process(coordinator))
    subject = GroupMember(
        transport,
        member_config(instance, rebalance_protocol=protocol),
        ledger.listener("subject"),
    )
    other = GroupMember(
        in_process(coordinator),
        member_config(None, rebalance_protocol=protocol),
        ledger.listener("other"),
    )
    members.extend([subject, other])
    await subject.start()
    await other.start()
    await wait_until(lambda: settled([subject, other], PARTITIONS))
    return subject, other, transport


async def test_illegal_generation_keeps_member_id_and_drops_partitions(coordinator, members):
    ledger = Ledger()
    subject, other, transport = await start_pair(coordinator, members, ledger)
    member_id, generation, owned = subject.member_id, subject.generation_id, subject.assignment

    transport.heartbeat_errors.append(ErrorCode.ILLEGAL_GENERATION)
    await wait_until(lambda: listener_of(subject).lost)
    await wait_until(lambda: settled([subject, other], PARTITIONS))

    assert listener_of(subject).lost == [owned]  # lost, not revoked: no commit of them
    assert listener_of(subject).revoked == []
    assert subject.member_id == member_id
    assert subject.generation_id > generation
    assert ledger.violations == []


async def test_unknown_member_id_resets_identity_and_rejoins(coordinator, members):
    ledger = Ledger()
    subject, _other, transport = await start_pair(coordinator, members, ledger, protocol="eager")
    member_id, owned = subject.member_id, subject.assignment

    transport.heartbeat_errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
    await wait_until(lambda: listener_of(subject).lost)
    assert listener_of(subject).lost == [owned]
    # The coordinator still knows the old id; it expires with its session. Meanwhile the
    # member rejoined under a fresh id and the group is whole again once that happens.
    assert subject.member_id != member_id
    await wait_until(lambda: subject.state == "stable" and subject.member_id != "")


async def test_rebalance_in_progress_on_sync_keeps_cooperative_partitions(coordinator, members):
    ledger = Ledger()
    subject, other, transport = await start_pair(coordinator, members, ledger)
    owned = subject.assignment
    transport.sync_errors.append(ErrorCode.REBALANCE_IN_PROGRESS)
    transport.heartbeat_errors.append(ErrorCode.REBALANCE_IN_PROGRESS)
    await wait_until(lambda: "sync" in transport.calls[-3:] or len(transport.sync_errors) == 0)
    await wait_until(lambda: settled([subject, other], PARTITIONS))
    assert subject.assignment == owned
    assert listener_of(subject).lost == []
    assert listener_of(subject).revoked == []


async def test_unreachable_coordinator_within_session_changes_nothing(coordinator, members):
    ledger = Ledger()
    subject, _other, transport = await start_pair(coordinator, members, ledger, instance="s-0")
    member_id, generation, owned = subject.member_id, subject.generation_id, subject.assignment

    transport.unreachable = True
    await asyncio.sleep(0.5)
    transport.unreachable = False
    await asyncio.sleep(0.3)

    assert "heartbeat" in transport.calls
    assert (subject.member_id, subject.generation_id, subject.assignment) == (
        member_id,
        generation,
        owned,
    )
    assert subject.state == "stable"
    assert listener_of(subject).lost == listener_of(subject).revoked == []


async def test_unreachable_beyond_session_timeout_loses_partitions_then_recovers(members):
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_min_session_timeout_ms=300, group_initial_rebalance_delay_ms=50),
        SystemClock(),
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
        )
        members.append(subject)
        await subject.start()
        owned = await subject.wait_for_assignment(5)
        assert owned == PARTITIONS

        transport.unreachable = True
        await wait_until(lambda: listener_of(subject).lost, within=5)
        assert listener_of(subject).lost == [owned]
        assert subject.assignment == frozenset()
        transport.unreachable = False
        await wait_until(lambda: subject.assignment == PARTITIONS, within=5)
    finally:
        await subject.close()
        await coordinator.close()


async def test_commit_and_fetch_committed(coordinator, members):
    ledger = Ledger()
    subject, other, _ = await start_pair(coordinator, members, ledger, instance="s-0")
    offsets = {tp: 10 + tp.partition for tp in subject.assignment}
    await subject.commit(offsets)
    assert await subject.fetch_committed(subject.assignment) == offsets
    assert await subject.fetch_committed(other.assignment) == {}


class BrokenAssignor(RangeAssignor):
    def assign(self, partitions_per_topic, subscriptions, *, last_assignment_by_member=None):
        raise RuntimeError("assignor bug")


async def test_a_crashing_leader_assignor_is_fatal_and_clearly_reported(coordinator, members):
    def factory(name):
        return BrokenAssignor() if name == "range" else get_assignor(name)

    leader = GroupMember(
        in_process(coordinator), member_config(), Ledger().listener("x"), assignor_factory=factory
    )
    members.append(leader)
    await leader.start()
    with pytest.raises(MemberFailure) as failure:
        await asyncio.wait_for(leader.run(), 5)
    assert "assignor bug" in str(failure.value)
    assert failure.value.code is ErrorCode.UNKNOWN_SERVER_ERROR
    member_id = leader.member_id
    await leader.close()  # dynamic: still leaves, so the group does not wait for it
    (group,) = await coordinator.describe_groups(["fleet"])
    assert member_id not in {m.member_id for m in group.members}
