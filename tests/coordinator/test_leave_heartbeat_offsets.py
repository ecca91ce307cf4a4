"""LeaveGroup, Heartbeat, offsets, describe/list/delete (docs/coordinator.md, "Rules")."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from coordinator import (
    ErrorCode,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from coordinator.clock import ManualClock, settle
from tests.coordinator.harness import GROUP, Harness, join_request


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = await Harness().start()
    yield h
    await h.coordinator.close()


def instance_of(member_id: str) -> str:
    return member_id.split("-")[0] + "-" + member_id.split("-")[1]


async def test_batch_leave_per_member_results_and_one_rebalance(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1", "i-2", "i-3"])
    by_instance = {instance_of(r.member_id): r.member_id for r in responses}
    result = await harness.coordinator.leave_group(
        LeaveGroupRequest(
            GROUP,
            [
                MemberIdentity("", "i-2", reason="scale-down"),
                MemberIdentity(by_instance["i-3"], "i-3"),
                MemberIdentity("", "i-9"),  # unknown instance
                MemberIdentity("stale-member-id", "i-1"),  # instance owned by another id
            ],
        )
    )
    assert result.error_code == ErrorCode.NONE
    codes = {m.group_instance_id: m.error_code for m in result.members}
    assert codes == {
        "i-2": ErrorCode.NONE,
        "i-3": ErrorCode.NONE,
        "i-9": ErrorCode.UNKNOWN_MEMBER_ID,
        "i-1": ErrorCode.FENCED_INSTANCE_ID,
    }
    left = next(m for m in result.members if m.group_instance_id == "i-2")
    assert left.member_id == "", "as Kafka, the member id is echoed as sent"
    rows = await harness.coordinator.journal_rows(GROUP)
    assert [r.kind for r in rows].count("rebalance_started") == 2, "initial + one for the batch"
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert described.group_state == "PreparingRebalance"
    assert sorted(m.group_instance_id or "" for m in described.members) == ["i-0", "i-1"]


async def test_remaining_members_rejoin_right_after_batch_leave(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1", "i-2"])
    by_instance = {instance_of(r.member_id): r.member_id for r in responses}
    await harness.coordinator.leave_group(LeaveGroupRequest(GROUP, [MemberIdentity("", "i-2")]))
    start = harness.clock.now_ms()
    rejoins = [harness.join(join_request(by_instance[i], i)) for i in ("i-0", "i-1")]
    await settle()
    results = [task.result() for task in rejoins]
    assert {r.generation_id for r in results} == {2}
    assert harness.clock.now_ms() == start, "no waiting for a session timeout"


async def test_leave_unknown_group_and_dynamic_member(harness: Harness) -> None:
    result = await harness.coordinator.leave_group(
        LeaveGroupRequest("nope", [MemberIdentity("m", None)])
    )
    assert result.error_code == ErrorCode.NONE
    assert result.members[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    responses = await harness.form_group([None, "i-1"])
    dynamic = next(r for r in responses if not r.member_id.startswith("i-1"))
    left = await harness.coordinator.leave_group(
        LeaveGroupRequest(GROUP, [MemberIdentity(dynamic.member_id, None)])
    )
    assert left.members[0].error_code == ErrorCode.NONE
    empty = await harness.coordinator.leave_group(LeaveGroupRequest(GROUP, []))
    assert (empty.error_code, empty.members) == (ErrorCode.NONE, []), "as Kafka's coordinator"


async def test_last_member_leaving_empties_group(harness: Harness) -> None:
    await harness.form_group(["i-0"])
    await harness.coordinator.leave_group(LeaveGroupRequest(GROUP, [MemberIdentity("", "i-0")]))
    await settle()
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert described.group_state == "Empty"
    assert described.generation_id == 2


async def test_heartbeat_answers_per_state(harness: Harness) -> None:
    assert await harness.heartbeat("x", 1) == ErrorCode.UNKNOWN_MEMBER_ID  # no group
    tasks = [harness.join(join_request(instance_id=f"i-{n}")) for n in range(2)]
    await settle()
    # PreparingRebalance (generation 0 still current)
    member_id = next(
        iter((await harness.coordinator.describe_groups([GROUP]))[0].members)
    ).member_id
    assert await harness.heartbeat(member_id, 0) == ErrorCode.REBALANCE_IN_PROGRESS
    responses = await harness.finish_join(tasks)
    leader = next(r for r in responses if r.leader == r.member_id)
    follower = next(r for r in responses if r is not leader)
    # CompletingRebalance
    assert await harness.heartbeat(follower.member_id, 1) == ErrorCode.NONE
    assert await harness.heartbeat(follower.member_id, 0) == ErrorCode.ILLEGAL_GENERATION
    await harness.complete_sync(responses)
    # Stable
    assert await harness.heartbeat(follower.member_id, 1) == ErrorCode.NONE
    assert await harness.heartbeat("ghost", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    instance = instance_of(follower.member_id)
    assert await harness.heartbeat("ghost", 1, instance) == ErrorCode.FENCED_INSTANCE_ID
    assert await harness.heartbeat(follower.member_id, 1, "i-77") == ErrorCode.UNKNOWN_MEMBER_ID


def commit(member_id: str, generation: int, instance: str | None, offset: int = 10):
    return OffsetCommitRequest(
        GROUP, generation, member_id, instance, [OffsetCommitPartition("t", 0, offset, "meta")]
    )


async def test_offsets_commit_and_fetch_with_validation(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1"])
    member = responses[0]
    instance = instance_of(member.member_id)
    ok = await harness.coordinator.commit_offsets(commit(member.member_id, 1, instance, 42))
    assert ok.partitions[0].error_code == ErrorCode.NONE
    stale = await harness.coordinator.commit_offsets(commit(member.member_id, 0, instance))
    assert stale.partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
    unknown = await harness.coordinator.commit_offsets(commit("ghost", 1, None))
    assert unknown.partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # A restarted instance fences the old member id, commits included.
    await harness.coordinator.join_group(join_request(instance_id=instance))
    fenced = await harness.coordinator.commit_offsets(commit(member.member_id, 1, instance, 99))
    assert fenced.partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    fetched = await harness.coordinator.fetch_offsets(
        OffsetFetchRequest(GROUP, [("t", 0), ("t", 1)])
    )
    assert [(p.partition, p.committed_offset, p.metadata) for p in fetched.partitions] == [
        (0, 42, "meta"),
        (1, -1, None),
    ]
    fetch_fenced = await harness.coordinator.fetch_offsets(
        OffsetFetchRequest(GROUP, None, member.member_id, 1, instance)
    )
    # As the broker for classic groups: member id and generation are not checked on fetch.
    assert fetch_fenced.error_code == ErrorCode.NONE
    assert [p.committed_offset for p in fetch_fenced.partitions] == [42]


async def test_commit_during_completing_rebalance_and_admin_commit(harness: Harness) -> None:
    simple = await harness.coordinator.commit_offsets(commit("", -1, None, 5))
    assert simple.partitions[0].error_code == ErrorCode.NONE, "groups without management commit"
    other_group = await harness.coordinator.commit_offsets(
        OffsetCommitRequest("fresh", 3, "m", None, [OffsetCommitPartition("t", 0, 1)])
    )
    assert other_group.partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
    tasks = [harness.join(join_request(instance_id=f"i-{n}")) for n in range(2)]
    responses = await harness.finish_join(tasks)
    during = await harness.coordinator.commit_offsets(commit(responses[0].member_id, 1, None))
    assert during.partitions[0].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    bad = await harness.coordinator.commit_offsets(
        OffsetCommitRequest("", -1, "", None, [OffsetCommitPartition("t", 0, 1)])
    )
    assert bad.partitions[0].error_code == ErrorCode.INVALID_GROUP_ID


async def test_describe_shows_instance_ids_and_offered_protocols(harness: Harness) -> None:
    await harness.form_group(["i-0", "i-1"], names=("cooperative-sticky", "range"))
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert described.group_state == "Stable"
    assert described.protocol_data == "cooperative-sticky"
    assert {m.group_instance_id for m in described.members} == {"i-0", "i-1"}
    assert all(m.supported_protocols == ["cooperative-sticky", "range"] for m in described.members)
    assert {m.member_assignment for m in described.members} == {b"i-0", b"i-1"}
    (missing,) = await harness.coordinator.describe_groups(["nope"])
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    listed = await harness.coordinator.list_groups()
    assert [(g.group_id, g.group_state) for g in listed] == [(GROUP, "Stable")]


async def test_delete_group_only_when_empty(harness: Harness) -> None:
    await harness.form_group(["i-0"])
    assert await harness.coordinator.delete_groups([GROUP, "nope"]) == {
        GROUP: ErrorCode.NON_EMPTY_GROUP,
        "nope": ErrorCode.GROUP_ID_NOT_FOUND,
    }
    await harness.coordinator.leave_group(LeaveGroupRequest(GROUP, [MemberIdentity("", "i-0")]))
    await settle()
    assert await harness.coordinator.delete_groups([GROUP]) == {GROUP: ErrorCode.NONE}
    assert await harness.coordinator.list_groups() == []
    rows = await harness.coordinator.journal_rows(GROUP)
    assert rows[-1].kind == "group_deleted"


async def test_journal_records_every_change_in_order(harness: Harness) -> None:
    await harness.form_group(["i-0", "i-1"])
    rows = await harness.coordinator.journal_rows(GROUP)
    kinds = [r.kind for r in rows]
    assert kinds[:2] == ["member_joined", "rebalance_started"]
    assert kinds.count("member_joined") == 2
    assert kinds.index("generation_started") < kinds.index("assignment") < kinds.index("stable")
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    assert len({r.seq for r in rows}) == len(rows)
    since = await harness.coordinator.journal_rows(GROUP, since_seq=rows[2].seq)
    assert since == rows[3:]


class _TickingClock(ManualClock):
    """Every reading is a millisecond later: rows stamped one by one would all differ."""

    def now_ms(self) -> int:
        self._now_ms += 1
        return super().now_ms()


async def test_the_rows_of_one_batch_leave_share_one_timestamp() -> None:
    harness = await Harness(clock=_TickingClock()).start()
    try:
        await harness.form_group(["i-0", "i-1", "i-2", "i-3"])
        before = len(await harness.coordinator.journal_rows(GROUP))
        await harness.coordinator.leave_group(
            LeaveGroupRequest(GROUP, [MemberIdentity("", "i-2"), MemberIdentity("", "i-3")])
        )
        rows = (await harness.coordinator.journal_rows(GROUP))[before:]
        left = [r for r in rows if r.kind == "member_left"]
        assert sorted(r.group_instance_id or "" for r in left) == ["i-2", "i-3"]
        # One request, one write: every row it journaled (both leaves and the rebalance they
        # started) carries one timestamp, as the records of one batch do in Kafka.
        assert "rebalance_started" in [r.kind for r in rows]
        assert len({r.ts_ms for r in rows}) == 1, rows
    finally:
        await harness.coordinator.close()
