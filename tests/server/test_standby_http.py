"""Hot standby over HTTP: the standby's heartbeat (member token), the admin's view and
promote, and the promoted standby's leave key."""

from __future__ import annotations

import asyncio

from coordinator import (
    JoinGroupProtocol,
    JoinGroupRequest,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from coordinator.server.member_keys import MEMBER_KEY_HEADER
from tests.server.conftest import GROUP_A, MEMBER_A_TOKEN, MEMBER_B_TOKEN, Server

STANDBYS = f"/v1/groups/{GROUP_A}/standbys"
PROMOTIONS = f"/v1/groups/{GROUP_A}/promotions"
BEAT = f"/v1/groups/{GROUP_A}/standby-heartbeat"


def beat_body(standby_id: str = "spare-0", group_id: str = GROUP_A) -> dict[str, object]:
    return {"group_id": group_id, "standby_id": standby_id, "session_timeout_ms": 6000}


async def _stable_group(server: Server) -> None:
    """Two static members a-0, a-1, Stable, each assigned its own bytes (in-process)."""

    def join(instance_id: str) -> JoinGroupRequest:
        return JoinGroupRequest(
            GROUP_A, 6000, 5000, "", instance_id, "consumer", [JoinGroupProtocol("range", b"m")]
        )

    joined = await asyncio.gather(*(server.coordinator.join_group(join(i)) for i in ("a-0", "a-1")))
    leader = next(r for r in joined if r.leader == r.member_id)
    assignments = [SyncGroupRequestAssignment(m.member_id, b"x") for m in leader.members]
    syncs = [
        server.coordinator.sync_group(
            SyncGroupRequest(
                GROUP_A,
                r.generation_id,
                r.member_id,
                None,
                "consumer",
                None,
                assignments if r is leader else [],
            )
        )
        for r in joined
    ]
    assert all(s.error_code == 0 for s in await asyncio.gather(*syncs))


async def test_standby_routes_and_their_access(server: Server) -> None:
    reply = await server.call("POST", BEAT, beat_body(), token=MEMBER_A_TOKEN)
    assert reply.status == 200 and reply.body["error_code"] == 0
    assert reply.body["promoted"] is None
    assert (await server.call("GET", STANDBYS)).body["standby_ids"] == ["spare-0"]
    # A member token neither lists nor promotes; another group's token cannot heartbeat.
    assert (await server.call("GET", STANDBYS, token=MEMBER_A_TOKEN)).status == 403
    promote = {"standby_id": "spare-0", "instance_id": "a-0"}
    assert (await server.call("POST", PROMOTIONS, promote, token=MEMBER_A_TOKEN)).status == 403
    assert (await server.call("POST", BEAT, beat_body(), token=MEMBER_B_TOKEN)).status == 403
    mismatch = beat_body(group_id="group-b")
    assert (await server.call("POST", BEAT, mismatch, token=MEMBER_A_TOKEN)).status == 400


async def test_promote_over_http_and_the_promoted_standby_may_leave(server: Server) -> None:
    await _stable_group(server)
    await server.call("POST", BEAT, beat_body(), token=MEMBER_A_TOKEN)
    reply = await server.call("POST", PROMOTIONS, {"standby_id": "spare-0", "instance_id": "a-1"})
    assert reply.status == 200 and reply.body["error_code"] == 0
    member_id = reply.body["promotion"]["member_id"]
    again = await server.call("POST", PROMOTIONS, {"standby_id": "spare-0", "instance_id": "a-1"})
    assert again.body["promotion"] == reply.body["promotion"]
    beat = await server.call("POST", BEAT, beat_body(), token=MEMBER_A_TOKEN)
    promoted = beat.body["promoted"]
    assert promoted["member_id"] == member_id and promoted["instance_id"] == "a-1"
    assert promoted["generation_id"] == server.coordinator.generation_of(GROUP_A)
    listed = (await server.call("GET", STANDBYS)).body
    assert listed["standby_ids"] == [] and [p["standby_id"] for p in listed["promotions"]] == [
        "spare-0"
    ]
    leave = {
        "group_id": GROUP_A,
        "members": [{"member_id": member_id, "group_instance_id": "a-1", "reason": None}],
    }
    key = beat.headers[MEMBER_KEY_HEADER]
    reply = await server.call(
        "POST",
        f"/v1/groups/{GROUP_A}/leave",
        leave,
        token=MEMBER_A_TOKEN,
        headers={MEMBER_KEY_HEADER: key},
    )
    assert reply.status == 200 and reply.body["members"][0]["error_code"] == 0
