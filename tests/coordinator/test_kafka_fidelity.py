"""Kafka fidelity, second pass: each test is named after the behaviour of Kafka's classic
group coordinator (GroupMetadataManager / GroupCoordinator.scala, and the 4.4 broker) it
checks, on a ManualClock. Tests marked "(kept)" pin a difference we keep on purpose; it is
written with its reason in docs/coordinator.md, "Where we differ from Kafka, and why"."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from coordinator import (
    CoordinatorConfig,
    ErrorCode,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    MemoryStore,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from coordinator.clock import settle
from coordinator.records import StoreBatch
from coordinator.store import StoreError
from tests.coordinator.harness import (
    GROUP,
    INITIAL_DELAY_MS,
    REBALANCE_MS,
    SESSION_MS,
    Harness,
    join_request,
)


def config(**overrides: int) -> CoordinatorConfig:
    return CoordinatorConfig(group_initial_rebalance_delay_ms=INITIAL_DELAY_MS, **overrides)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = await Harness().start()
    yield h
    await h.coordinator.close()


class GatedStore(MemoryStore):
    """A store whose group deletions wait for `release` (as a slow disk write would)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.fail_next = False

    async def write(self, batch: StoreBatch) -> None:
        if self.fail_next:
            self.fail_next = False
            raise StoreError("disk full")
        if batch.deleted_groups:
            await self.release.wait()
        await super().write(batch)


def commit(member_id: str, generation: int, instance_id: str | None = None) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        GROUP, generation, member_id, instance_id, [OffsetCommitPartition("t", 0, 7)]
    )


async def members_of(harness: Harness) -> list[str]:
    (described,) = await harness.coordinator.describe_groups([GROUP])
    return sorted(m.group_instance_id or m.member_id for m in described.members)


async def rebalance_started_count(harness: Harness) -> int:
    rows = await harness.coordinator.journal_rows(GROUP)
    return [row.kind for row in rows].count("rebalance_started")


# 1 -----------------------------------------------------------------------------------------


async def test_group_size_counts_real_members_only_not_pending_member_ids() -> None:
    """acceptJoiningMember: an Empty group accepts every first join (pending ids of KIP-394
    do not count); in PreparingRebalance the members awaiting join are counted."""
    harness = await Harness(config=config(group_max_size=4)).start()
    firsts = [await harness.coordinator.join_group(join_request()) for _ in range(5)]
    assert [f.error_code for f in firsts] == [ErrorCode.MEMBER_ID_REQUIRED] * 5
    seconds = [harness.join(join_request(f.member_id)) for f in firsts]
    await settle()
    refused = seconds[4].result()
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    responses = await harness.finish_join(seconds[:4])
    assert {r.error_code for r in responses} == {ErrorCode.NONE}
    assert len(await members_of(harness)) == 4
    await harness.coordinator.close()


# 2 -----------------------------------------------------------------------------------------


async def test_group_loaded_over_capacity_rebalances_and_refuses_the_last_to_rejoin() -> None:
    """onLoaded: a group over a lowered group.max.size goes to PreparingRebalance; members
    are accepted while fewer than the limit await join, the last ones are removed."""
    store = MemoryStore()
    first = await Harness(store=store).start()
    responses = await first.form_group(["i-0", "i-1", "i-2"])
    await first.coordinator.close()

    harness = await Harness(store=store, config=config(group_max_size=2)).start()
    assert await harness.state() == "PreparingRebalance"
    by_instance = {r.member_id.rsplit("-", 5)[0]: r.member_id for r in responses}
    tasks = [
        harness.join(join_request(by_instance[instance], instance_id=instance))
        for instance in ("i-0", "i-1", "i-2")
    ]
    await settle()
    assert tasks[2].result().error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert await members_of(harness) == ["i-0", "i-1"]
    await harness.clock.advance(REBALANCE_MS)
    rejoined = [task.result() for task in tasks[:2]]
    assert {r.error_code for r in rejoined} == {ErrorCode.NONE}
    assert {r.generation_id for r in rejoined} == {2}
    await harness.coordinator.close()


# 3 (kept) ------------------------------------------------------------------------------------


async def test_known_static_member_rejoining_a_full_group_with_empty_id_is_accepted() -> None:
    """(kept) Kafka sizes on the request's member id, so a known static member restarting
    with an empty id into a full group gets GROUP_MAX_SIZE_REACHED; we check it as the
    member it replaces: a restart never grows the group."""
    harness = await Harness(config=config(group_max_size=2)).start()
    await harness.form_group(["i-0", "i-1"])
    restarted = await harness.coordinator.join_group(join_request(instance_id="i-1"))
    assert restarted.error_code == ErrorCode.NONE
    assert restarted.generation_id == 1
    await harness.coordinator.close()


# 4 -----------------------------------------------------------------------------------------


async def test_new_member_waiting_in_join_expires_after_new_member_join_timeout() -> None:
    """NewMemberJoinTimeoutMs (5 min): a new member's parked JoinGroup is no sign of life."""
    harness = await Harness(config=config()).start()
    long_ms = 600_000
    tasks = [
        harness.join(join_request(instance_id=i, rebalance_ms=long_ms)) for i in ("i-0", "i-1")
    ]
    responses = await harness.finish_join(tasks)
    await harness.complete_sync(responses)
    start = harness.clock.now_ms()
    first = await harness.coordinator.join_group(join_request(rebalance_ms=long_ms))
    newcomer = harness.join(join_request(first.member_id, rebalance_ms=long_ms))
    await settle()
    assert await harness.state() == "PreparingRebalance"
    # The old members keep the rebalance open: one rejoins, the other only heartbeats.
    i0 = next(r for r in responses if r.member_id.startswith("i-0-"))
    i1 = next(r for r in responses if r.member_id.startswith("i-1-"))
    rejoin = harness.join(join_request(i0.member_id, instance_id="i-0", rebalance_ms=long_ms))
    while harness.clock.now_ms() - start < 295_000:
        await harness.clock.advance(5_000)
        assert await harness.heartbeat(i1.member_id, 1, "i-1") == ErrorCode.REBALANCE_IN_PROGRESS
    assert not newcomer.done()
    await harness.clock.advance(5_000)
    assert newcomer.done()
    assert newcomer.result().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert newcomer.result().member_id == "", "as Kafka: the id is no longer valid"
    assert await members_of(harness) == ["i-0", "i-1"]
    assert not rejoin.done()
    await harness.coordinator.close()


# 5 -----------------------------------------------------------------------------------------


async def test_join_while_group_deletion_is_being_written_answers_coordinator_not_available() -> (
    None
):
    store = GatedStore()
    harness = await Harness(store=store).start()
    simple = await harness.coordinator.commit_offsets(commit("", -1))
    assert simple.error_code == ErrorCode.NONE
    deleting = asyncio.ensure_future(harness.coordinator.delete_groups([GROUP]))
    await settle()
    joining = harness.join(join_request())
    await settle()
    store.release.set()
    assert (await deleting) == {GROUP: ErrorCode.NONE}
    assert (await joining).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # The retry creates the group afresh and the member's next request finds it.
    first = await harness.coordinator.join_group(join_request())
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    second = harness.join(join_request(first.member_id))
    (joined,) = await harness.finish_join([second])
    assert joined.error_code == ErrorCode.NONE
    await harness.coordinator.close()


# 6 -----------------------------------------------------------------------------------------


async def test_failed_static_replacement_answers_with_group_generation_leader_and_protocol() -> (
    None
):
    store = GatedStore()
    harness = await Harness(store=store).start()
    responses = await harness.form_group(["i-0", "i-1"])
    leader = responses[0].leader
    old = next(r for r in responses if r.member_id.startswith("i-1-"))
    store.fail_next = True
    failed = await harness.coordinator.join_group(join_request(instance_id="i-1"))
    assert failed == JoinGroupResponse(
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=leader,
        member_id="",
    )
    # Rolled back: the old member id is still the member.
    assert await harness.heartbeat(old.member_id, 1, "i-1") == ErrorCode.NONE
    await harness.coordinator.close()


# 7 -----------------------------------------------------------------------------------------


async def test_completing_join_restarts_every_members_session_including_kept_static() -> None:
    """onCompleteJoin reschedules every member's heartbeat, not only the rejoined ones."""
    harness = await Harness(config=config()).start()
    rebalance_ms = 6_000
    tasks = [
        harness.join(join_request(instance_id=i, rebalance_ms=rebalance_ms)) for i in ("i-0", "i-1")
    ]
    responses = await harness.finish_join(tasks)
    await harness.complete_sync(responses)
    i0 = next(r for r in responses if r.member_id.startswith("i-0-"))
    i1 = next(r for r in responses if r.member_id.startswith("i-1-"))
    start = harness.clock.now_ms()
    assert await harness.heartbeat(i1.member_id, 1, "i-1") == ErrorCode.NONE
    # i-0 changes its metadata: a rebalance that i-1 (static) does not rejoin.
    rejoin = harness.join(
        join_request(i0.member_id, instance_id="i-0", rebalance_ms=rebalance_ms, metadata=b"v2")
    )
    await settle()
    await harness.clock.advance(rebalance_ms)
    assert rejoin.result().generation_id == 2
    assert await members_of(harness) == ["i-0", "i-1"], "static members stay"
    # A session timeout after i-1's last heartbeat, it is still a member of generation 2.
    await harness.clock.advance(SESSION_MS + 1_000 - (harness.clock.now_ms() - start))
    assert harness.clock.now_ms() - start == SESSION_MS + 1_000
    assert await members_of(harness) == ["i-0", "i-1"]
    await harness.coordinator.close()


# 8 -----------------------------------------------------------------------------------------


async def test_propagating_assignment_restarts_session_of_each_member_it_answers() -> None:
    """propagateAssignment reschedules the heartbeat of every member whose SyncGroup it
    completes: a follower that synced early and waited for a slow leader is not expired."""
    harness = await Harness(config=config()).start()
    tasks = [harness.join(join_request(instance_id=i)) for i in ("i-0", "i-1")]
    responses = await harness.finish_join(tasks)
    leader = next(r for r in responses if r.leader == r.member_id)
    follower = next(r for r in responses if r is not leader)
    start = harness.clock.now_ms()
    await harness.clock.advance(1_000)
    follower_sync = harness.sync(follower.member_id, 1)
    await settle()
    await harness.clock.advance(8_000)
    assert not follower_sync.done()
    assignments = {m.member_id: b"a" for m in leader.members}
    leader_sync = harness.sync(leader.member_id, 1, assignments)
    await settle()
    assert (await follower_sync).error_code == ErrorCode.NONE
    assert (await leader_sync).error_code == ErrorCode.NONE
    await harness.clock.advance(start + 12_000 - harness.clock.now_ms())
    follower_instance = follower.member_id.rsplit("-", 5)[0]
    assert await harness.heartbeat(follower.member_id, 1, follower_instance) == ErrorCode.NONE
    await harness.coordinator.close()


# 9 -----------------------------------------------------------------------------------------


async def test_pending_member_leaving_a_stable_group_rebalances_as_the_4_4_broker(
    harness: Harness,
) -> None:
    """The issue's item 9 read Kafka 3.x's Scala coordinator (no rebalance); the Kafka 4.4
    broker rebalances a Stable group when a pending member id leaves (conformance scenario
    kip394_member_id_required, step "d heartbeats after the pending member left"). The
    broker wins."""
    await harness.form_group(["i-0"])
    before = await rebalance_started_count(harness)
    pending = await harness.coordinator.join_group(join_request())
    assert pending.error_code == ErrorCode.MEMBER_ID_REQUIRED
    left = await harness.coordinator.leave_group(
        LeaveGroupRequest(GROUP, [MemberIdentity(pending.member_id, None)])
    )
    assert left.members[0].error_code == ErrorCode.NONE
    assert await harness.state() == "PreparingRebalance"
    assert await rebalance_started_count(harness) == before + 1


# 10 (kept) -----------------------------------------------------------------------------------


async def test_empty_group_id_is_refused_for_offsets_describe_and_delete(harness: Harness) -> None:
    """(kept) Kafka lets the empty group id commit, fetch, describe and delete (for clients
    from before KIP-289); we refuse it everywhere with INVALID_GROUP_ID."""
    committed = await harness.coordinator.commit_offsets(
        OffsetCommitRequest("", -1, "", None, [OffsetCommitPartition("t", 0, 1)])
    )
    assert committed.error_code == ErrorCode.INVALID_GROUP_ID
    fetched = await harness.coordinator.fetch_offsets(OffsetFetchRequest(""))
    assert fetched.error_code == ErrorCode.INVALID_GROUP_ID
    (described,) = await harness.coordinator.describe_groups([""])
    assert described.error_code == ErrorCode.INVALID_GROUP_ID
    assert await harness.coordinator.delete_groups([""]) == {"": ErrorCode.INVALID_GROUP_ID}


# 11 ------------------------------------------------------------------------------------------


async def test_commit_in_completing_rebalance_validates_member_and_generation_first(
    harness: Harness,
) -> None:
    tasks = [harness.join(join_request(instance_id=i)) for i in ("i-0", "i-1")]
    responses = await harness.finish_join(tasks)
    assert await harness.state() == "CompletingRebalance"
    member = responses[0].member_id
    instance = member.rsplit("-", 5)[0]
    unknown = await harness.coordinator.commit_offsets(commit("ghost", 1))
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    stale = await harness.coordinator.commit_offsets(commit(member, 0, instance))
    assert stale.error_code == ErrorCode.ILLEGAL_GENERATION
    valid = await harness.coordinator.commit_offsets(commit(member, 1, instance))
    assert valid.error_code == ErrorCode.REBALANCE_IN_PROGRESS


# 12 ------------------------------------------------------------------------------------------


async def test_leave_with_empty_member_list_answers_none_with_no_results(harness: Harness) -> None:
    await harness.form_group(["i-0"])
    for group_id in (GROUP, "unknown-group"):
        response = await harness.coordinator.leave_group(LeaveGroupRequest(group_id, []))
        assert (response.error_code, response.members) == (ErrorCode.NONE, [])
    assert await harness.state() == "Stable"


# 13 ------------------------------------------------------------------------------------------


async def test_lone_static_member_rejoining_with_protocol_change_completes_join_at_once(
    harness: Harness,
) -> None:
    """prepareRebalance → maybeCompleteJoinElseSchedule: if every member has joined, the
    join phase completes now instead of at the rebalance timeout."""
    await harness.form_group(["i-0"], names=("range", "roundrobin"))
    restarted = harness.join(join_request(instance_id="i-0", names=("roundrobin", "range")))
    await settle()
    assert restarted.done(), "the only member has joined: nothing to wait for"
    response = restarted.result()
    assert response.error_code == ErrorCode.NONE
    assert (response.generation_id, response.protocol_name) == (2, "roundrobin")
    assert response.leader == response.member_id


async def test_lone_static_member_rejoining_while_completing_rebalance_completes_join_at_once(
    harness: Harness,
) -> None:
    (joined,) = await harness.finish_join([harness.join(join_request(instance_id="i-0"))])
    assert await harness.state() == "CompletingRebalance"
    restarted = harness.join(join_request(instance_id="i-0"))
    await settle()
    assert restarted.done()
    assert restarted.result().generation_id == joined.generation_id + 1


# 14 ------------------------------------------------------------------------------------------


async def test_join_with_unknown_member_and_no_common_protocol_is_inconsistent_protocol(
    harness: Harness,
) -> None:
    await harness.form_group(["i-0"])
    response = await harness.coordinator.join_group(join_request("ghost", names=("roundrobin",)))
    assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


# 15 ------------------------------------------------------------------------------------------


async def test_batch_leave_echoes_member_id_as_sent(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1"])
    i1 = next(r for r in responses if r.member_id.startswith("i-1-"))
    result = await harness.coordinator.leave_group(
        LeaveGroupRequest(GROUP, [MemberIdentity("", "i-0"), MemberIdentity(i1.member_id, "i-1")])
    )
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in result.members] == [
        ("", "i-0", ErrorCode.NONE),
        (i1.member_id, "i-1", ErrorCode.NONE),
    ]


# 16 ------------------------------------------------------------------------------------------


async def test_offset_fetch_ignores_member_id_and_generation_for_classic_groups(
    harness: Harness,
) -> None:
    responses = await harness.form_group(["i-0", "i-1"])
    member = next(r for r in responses if r.member_id.startswith("i-0-"))
    assert (
        await harness.coordinator.commit_offsets(commit(member.member_id, 1, "i-0"))
    ).error_code == (ErrorCode.NONE)
    await harness.coordinator.join_group(join_request(instance_id="i-0"))  # replaces the id
    for member_id, generation, instance in (
        (member.member_id, 0, None),  # stale generation
        ("ghost", 1, None),  # unknown member id
        (member.member_id, 1, "i-0"),  # replaced (fenced) member
    ):
        fetched = await harness.coordinator.fetch_offsets(
            OffsetFetchRequest(GROUP, [("t", 0)], member_id, generation, instance)
        )
        assert fetched.error_code == ErrorCode.NONE
        assert [p.committed_offset for p in fetched.partitions] == [7]


# 17 (kept) -----------------------------------------------------------------------------------


async def test_commit_with_generation_to_missing_group_is_illegal_generation_as_v8(
    harness: Harness,
) -> None:
    """(kept) OffsetCommit v8 answers ILLEGAL_GENERATION, v9 (KIP-848) GROUP_ID_NOT_FOUND;
    our API mirrors the classic protocol's last version, v8."""
    response = await harness.coordinator.commit_offsets(commit("m", 3))
    assert response.error_code == ErrorCode.ILLEGAL_GENERATION


# 18 ------------------------------------------------------------------------------------------


async def test_group_that_empties_keeps_its_protocol_type(harness: Harness) -> None:
    await harness.form_group(["i-0"])
    await harness.coordinator.leave_group(LeaveGroupRequest(GROUP, [MemberIdentity("", "i-0")]))
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert (described.group_state, described.protocol_type) == ("Empty", "consumer")
    listed = {g.group_id: g for g in await harness.coordinator.list_groups()}
    assert listed[GROUP].protocol_type == "consumer"


# 19 ------------------------------------------------------------------------------------------


async def test_describe_fills_member_assignment_while_rebalancing(harness: Harness) -> None:
    """DescribeGroups (4.4 broker): assignment in every state; metadata only when Stable."""
    await harness.form_group(["i-0"])
    joining = harness.join(join_request(instance_id="i-1"))
    await settle()
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert described.group_state == "PreparingRebalance"
    (member,) = [m for m in described.members if m.group_instance_id == "i-0"]
    assert member.member_assignment == b"i-0"
    assert member.member_metadata == b""
    await harness.clock.advance(REBALANCE_MS)
    await joining


async def test_empty_group_instance_id_is_invalid_request(harness: Harness) -> None:
    """(kept) The 4.4 broker takes "" as an instance id (only the Java client refuses it);
    we refuse it, as the client does."""
    response = await harness.coordinator.join_group(join_request(instance_id=""))
    assert response.error_code == ErrorCode.INVALID_REQUEST
