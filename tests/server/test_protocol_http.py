"""Two static members through a whole generation over HTTP: join, sync, heartbeat, offsets."""

from __future__ import annotations

import asyncio
import base64

from coordinator import (
    ErrorCode,
    HeartbeatRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from coordinator.messages import DescribedGroup, LeaveGroupResponse
from coordinator.wire import MEMBER_KEY_HEADER, from_json, to_json

from .conftest import GROUP_A, MEMBER_A_TOKEN, Server
from .messages import join_body

# Each member's leave key, from the header of its join answer (docs/server.md).
_LEAVE_KEYS: dict[str, str] = {}


async def _join_two(server: Server) -> list[JoinGroupResponse]:
    replies = await asyncio.gather(
        server.call(
            "POST", f"/v1/groups/{GROUP_A}/join", join_body(GROUP_A, "a-0"), token=MEMBER_A_TOKEN
        ),
        server.call(
            "POST", f"/v1/groups/{GROUP_A}/join", join_body(GROUP_A, "a-1"), token=MEMBER_A_TOKEN
        ),
    )
    assert [reply.status for reply in replies] == [200, 200]
    for reply in replies:
        _LEAVE_KEYS[reply.body["member_id"]] = reply.headers[MEMBER_KEY_HEADER]
    return [from_json(JoinGroupResponse, reply.body) for reply in replies]


async def test_two_members_through_a_generation(server: Server) -> None:
    joined = await _join_two(server)
    assert {response.error_code for response in joined} == {ErrorCode.NONE}
    assert joined[0].generation_id == joined[1].generation_id == 1
    leader = next(response for response in joined if response.member_id == response.leader)
    follower = next(response for response in joined if response.member_id != response.leader)
    assert {member.group_instance_id for member in leader.members} == {"a-0", "a-1"}
    assert follower.members == []

    assignments = {leader.member_id: b"\x00\x00leader-part", follower.member_id: b"\x00\x00other"}
    leader_sync = SyncGroupRequest(
        group_id=GROUP_A,
        generation_id=1,
        member_id=leader.member_id,
        group_instance_id=_instance(leader, leader.member_id),
        protocol_type="consumer",
        protocol_name="range",
        assignments=[SyncGroupRequestAssignment(m, a) for m, a in assignments.items()],
    )
    follower_sync = SyncGroupRequest(
        group_id=GROUP_A,
        generation_id=1,
        member_id=follower.member_id,
        group_instance_id=_instance(leader, follower.member_id),
        protocol_type="consumer",
        protocol_name="range",
    )
    # The follower's sync is a long poll answered when the leader's assignment arrives.
    follower_task = asyncio.create_task(
        server.call(
            "POST", f"/v1/groups/{GROUP_A}/sync", to_json(follower_sync), token=MEMBER_A_TOKEN
        )
    )
    await asyncio.sleep(0.05)
    assert not follower_task.done()
    leader_reply = await server.call(
        "POST", f"/v1/groups/{GROUP_A}/sync", to_json(leader_sync), token=MEMBER_A_TOKEN
    )
    follower_reply = await follower_task
    leader_synced = from_json(SyncGroupResponse, leader_reply.body)
    follower_synced = from_json(SyncGroupResponse, follower_reply.body)
    assert leader_synced.error_code is ErrorCode.NONE
    assert leader_synced.assignment == assignments[leader.member_id]
    assert follower_synced.assignment == assignments[follower.member_id]
    # Bytes travel as base64 strings on the wire.
    assert follower_reply.body["assignment"] == base64.b64encode(b"\x00\x00other").decode()
    assert follower_reply.body["error"] == "NONE"

    for response in joined:
        heartbeat = HeartbeatRequest(
            GROUP_A, 1, response.member_id, _instance(leader, response.member_id)
        )
        reply = await server.call(
            "POST", f"/v1/groups/{GROUP_A}/heartbeat", to_json(heartbeat), token=MEMBER_A_TOKEN
        )
        assert reply.status == 200
        assert reply.body == {"error_code": 0, "error": "NONE"}

    commit = OffsetCommitRequest(
        group_id=GROUP_A,
        generation_id=1,
        member_id=follower.member_id,
        group_instance_id=_instance(leader, follower.member_id),
        partitions=[
            OffsetCommitPartition("orders", 3, 42, "meta"),
            OffsetCommitPartition("orders", 4, 7),
        ],
    )
    reply = await server.call(
        "POST", f"/v1/groups/{GROUP_A}/offsets/commit", to_json(commit), token=MEMBER_A_TOKEN
    )
    committed = from_json(OffsetCommitResponse, reply.body)
    assert committed.error_code is ErrorCode.NONE
    assert {p.error_code for p in committed.partitions} == {ErrorCode.NONE}

    fetch = OffsetFetchRequest(group_id=GROUP_A, partitions=[("orders", 3), ("orders", 4)])
    reply = await server.call(
        "POST", f"/v1/groups/{GROUP_A}/offsets/fetch", to_json(fetch), token=MEMBER_A_TOKEN
    )
    fetched = from_json(OffsetFetchResponse, reply.body)
    assert fetched.error_code is ErrorCode.NONE
    assert {(p.topic, p.partition): p.committed_offset for p in fetched.partitions} == {
        ("orders", 3): 42,
        ("orders", 4): 7,
    }

    reply = await server.call("GET", f"/v1/groups/{GROUP_A}")
    described = from_json(DescribedGroup, reply.body)
    assert described.group_state == "Stable"
    assert {m.group_instance_id for m in described.members} == {"a-0", "a-1"}

    # A member leaves itself with its member token and the key of its join answer.
    leave = LeaveGroupRequest(
        GROUP_A, [MemberIdentity(follower.member_id, _instance(leader, follower.member_id))]
    )
    reply = await server.call(
        "POST",
        f"/v1/groups/{GROUP_A}/leave",
        to_json(leave),
        token=MEMBER_A_TOKEN,
        headers={MEMBER_KEY_HEADER: _LEAVE_KEYS[follower.member_id]},
    )
    left = from_json(LeaveGroupResponse, reply.body)
    assert left.error_code is ErrorCode.NONE
    assert [m.error_code for m in left.members] == [ErrorCode.NONE]


async def test_topic_metadata_set_by_admin_read_by_member(server: Server) -> None:
    reply = await server.call("PUT", "/v1/topics", {"topics": {"orders": 48, "payments": 6}})
    assert reply.status == 200
    assert reply.body == {"topics": {"orders": 48, "payments": 6}}
    reply = await server.call("PUT", "/v1/topics", {"topics": {"payments": 0, "audit": 2}})
    assert reply.body == {"topics": {"orders": 48, "audit": 2}}
    reply = await server.call("GET", "/v1/topics", token=MEMBER_A_TOKEN)
    assert reply.status == 200
    assert reply.body == {"topics": {"orders": 48, "audit": 2}}


async def test_expected_members_set_read_and_cleared_by_admin(server: Server) -> None:
    path = f"/v1/groups/{GROUP_A}/expected-members"
    reply = await server.call("GET", path)
    assert reply.status == 200 and reply.body["instance_ids"] == []
    body = {"instance_ids": ["i-1", "i-0"], "timeout_ms": 60_000}
    reply = await server.call("PUT", path, body)
    assert reply.status == 200
    assert reply.body["instance_ids"] == ["i-0", "i-1"] and reply.body["timeout_ms"] == 60_000
    assert (await server.call("GET", path)).body == reply.body
    assert (await server.call("PUT", path, body, token=MEMBER_A_TOKEN)).status == 403
    too_long = {"instance_ids": ["i-0"], "timeout_ms": 10**9}
    limit = server.coordinator.config.group_new_member_join_timeout_ms
    assert (await server.call("PUT", path, too_long)).body["timeout_ms"] == limit
    assert (await server.call("PUT", path, {"instance_ids": [], "timeout_ms": 1})).status == 400
    control = {"instance_ids": ["i-\x01"], "timeout_ms": 1}
    assert (await server.call("PUT", path, control)).body["error_code"] == ErrorCode.INVALID_REQUEST
    reply = await server.call("DELETE", path)
    assert reply.status == 200 and reply.body["instance_ids"] == []
    assert server.coordinator.expected_members(GROUP_A) is None


async def test_journal_pages(server: Server) -> None:
    await _join_two(server)
    reply = await server.call("GET", f"/v1/journal?group_id={GROUP_A}&limit=2")
    assert reply.status == 200
    first = reply.body
    assert len(first["events"]) == 2
    assert {event["group_id"] for event in first["events"]} == {GROUP_A}
    reply = await server.call("GET", f"/v1/journal?since={first['next_since']}")
    rest = reply.body["events"]
    assert rest and rest[0]["seq"] > first["events"][-1]["seq"]
    kinds = {event["kind"] for event in first["events"] + rest}
    assert "generation_started" in kinds


async def test_unknown_group_is_a_kafka_code_in_a_200_body(server: Server) -> None:
    heartbeat = HeartbeatRequest("nobody-here", 1, "ghost", None)
    reply = await server.call("POST", "/v1/groups/nobody-here/heartbeat", to_json(heartbeat))
    assert reply.status == 200
    assert reply.body["error"] == "UNKNOWN_MEMBER_ID"
    reply = await server.call("GET", "/v1/groups/nobody-here")
    assert reply.status == 200
    assert reply.body["group_id"] == "nobody-here"
    assert reply.body["group_state"] == "Dead" or reply.body["error_code"] != 0
    reply = await server.call("DELETE", "/v1/groups/nobody-here")
    assert reply.status == 200
    assert reply.body["error"] == "GROUP_ID_NOT_FOUND"


async def test_group_ids_with_reserved_characters_round_trip(server: Server) -> None:
    group_id = "team/a b?c%d"
    from urllib.parse import quote

    path = f"/v1/groups/{quote(group_id, safe='')}/join"
    reply = await server.call("POST", path, join_body(group_id, "x-0"))
    assert reply.status == 200, reply.text
    assert reply.body["error"] == "NONE"
    reply = await server.call("GET", f"/v1/groups/{quote(group_id, safe='')}")
    assert reply.body["group_id"] == group_id


async def test_delete_group(server: Server) -> None:
    joined = await _join_two(server)
    reply = await server.call("DELETE", f"/v1/groups/{GROUP_A}")
    assert reply.body == {"group_id": GROUP_A, "error_code": 68, "error": "NON_EMPTY_GROUP"}
    leave = LeaveGroupRequest(GROUP_A, [MemberIdentity(r.member_id, None) for r in joined])
    reply = await server.call("POST", f"/v1/groups/{GROUP_A}/leave", to_json(leave))
    assert reply.body["error"] == "NONE"
    reply = await server.call("DELETE", f"/v1/groups/{GROUP_A}")
    assert reply.body["error"] == "NONE"
    reply = await server.call("GET", "/v1/groups")
    assert GROUP_A not in {group["group_id"] for group in reply.body["groups"]}


def _instance(leader: JoinGroupResponse, member_id: str) -> str | None:
    return next(m.group_instance_id for m in leader.members if m.member_id == member_id)
