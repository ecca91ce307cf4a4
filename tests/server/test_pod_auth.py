"""Members known by their pod, wired into a real server: a pod's ServiceAccount token is
reviewed (a fake reviewer here: the API server's side is tests/operator/test_token_review.py)
and acts only as its pod's instance id; group tokens keep working beside it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from coordinator import GroupCoordinator, HeartbeatRequest, JoinGroupRequest, SqliteStore
from coordinator.client.http import HttpTransport
from coordinator.client.token_file import TokenFile
from coordinator.errors import ErrorCode
from coordinator.server import create_app, start_server
from coordinator.server.context import CONTEXT
from coordinator.server.pod_identity import (
    POD_NAME_EXTRA,
    POD_UID_EXTRA,
    Binding,
    PodAuth,
    ReviewCache,
)
from coordinator.wire import from_json

from .conftest import GROUP_A, GROUP_B, MEMBER_A_TOKEN, TEST_AUTH, TEST_CONFIG, Server
from .messages import join_body

AUDIENCE = "staticfleet-coordinator"
# JWT-shaped (three dot-separated parts), as a projected token is.
TOKEN_0 = "eyJhbGciOiJSUzI1NiJ9.cG9kLTA.c2ln"
TOKEN_1 = "eyJhbGciOiJSUzI1NiJ9.cG9kLTE.c2ln"
TOKEN_OLD = "eyJhbGciOiJSUzI1NiJ9.b2xk.c2ln"  # issued to an earlier orders-0 (another uid)
FORGED = "eyJhbGciOiJSUzI1NiJ9.Zm9yZ2Vk.c2ln"
ROTATED_0 = "eyJhbGciOiJSUzI1NiJ9.cm90YXRlZA.c2ln"  # orders-0's token after the kubelet's rotation
PODS = {
    ROTATED_0: ("orders-0", "uid-0"),
    TOKEN_0: ("orders-0", "uid-0"),
    TOKEN_1: ("orders-1", "uid-1"),
    TOKEN_OLD: ("orders-0", "uid-old"),
}


class FakeApiServer:
    """Answers TokenReviews as kube-apiserver does for pod-bound tokens, and counts them."""

    def __init__(self) -> None:
        self.reviews: list[str] = []

    async def review(self, token: str, audiences: tuple[str, ...]) -> Mapping[str, Any]:
        self.reviews.append(token)
        pod = PODS.get(token)
        if pod is None or AUDIENCE not in audiences:
            return {"authenticated": False}
        return {
            "authenticated": True,
            "audiences": [AUDIENCE],
            "user": {
                "username": "system:serviceaccount:team:orders",
                "extra": {POD_NAME_EXTRA: [pod[0]], POD_UID_EXTRA: [pod[1]]},
            },
        }


@pytest.fixture
async def pod_server(tmp_path: Path) -> AsyncIterator[tuple[Server, FakeApiServer]]:
    api = FakeApiServer()
    bindings = {
        ("team", "orders-0"): Binding(GROUP_A, "orders-0", "uid-0"),
        ("team", "orders-1"): Binding(GROUP_A, "orders-1", "uid-1"),
    }
    now = [0.0]
    pod_auth = PodAuth(ReviewCache(api.review, AUDIENCE, lambda: now[0]), bindings)
    coordinator = GroupCoordinator(config=TEST_CONFIG, store=SqliteStore(tmp_path / "c.db"))
    app = create_app(coordinator, TEST_AUTH, pod_auth=pod_auth)
    running = await start_server(app, "127.0.0.1", 0, shutdown_timeout=2.0)
    async with aiohttp.ClientSession() as http:
        yield Server(running, coordinator, tmp_path / "c.db", http), api
    await running.stop()


async def test_a_pod_token_joins_as_its_instance_and_heartbeats_review_once(
    pod_server: tuple[Server, FakeApiServer],
) -> None:
    server, api = pod_server
    path = f"/v1/groups/{GROUP_A}"
    joined = await server.call(
        "POST", f"{path}/join", join_body(GROUP_A, "orders-0"), token=TOKEN_0
    )
    assert joined.status == 200, joined.text
    member_id = joined.body["member_id"]
    assert member_id
    for _ in range(5):
        beat = await server.call(
            "POST",
            f"{path}/heartbeat",
            {
                "group_id": GROUP_A,
                "generation_id": joined.body["generation_id"],
                "member_id": member_id,
                "group_instance_id": "orders-0",
            },
            token=TOKEN_0,
        )
        assert beat.status == 200, beat.text
    assert api.reviews == [TOKEN_0]  # one review for a join and five heartbeats
    fast_path = server.running.runner.app[CONTEXT].connection_guard.fast_path
    assert fast_path is not None and fast_path.answered == 5  # the cached pod token is fast


async def test_the_fast_path_leaves_another_instance_id_to_aiohttps_403(
    pod_server: tuple[Server, FakeApiServer],
) -> None:
    server, _ = pod_server
    path = f"/v1/groups/{GROUP_A}"
    joined = await server.call(
        "POST", f"{path}/join", join_body(GROUP_A, "orders-1"), token=TOKEN_1
    )
    assert joined.status == 200, joined.text
    # TOKEN_0's review is cached by its own join; it may still not heartbeat as orders-1.
    own = await server.call("POST", f"{path}/join", join_body(GROUP_A, "orders-0"), token=TOKEN_0)
    assert own.status == 200, own.text
    beat = {
        "group_id": GROUP_A,
        "generation_id": joined.body["generation_id"],
        "member_id": joined.body["member_id"],
        "group_instance_id": "orders-1",
    }
    stolen = await server.call("POST", f"{path}/heartbeat", beat, token=TOKEN_0)
    assert stolen.status == 403 and "holds instance id 'orders-0'" in stolen.body["message"]
    fast_path = server.running.runner.app[CONTEXT].connection_guard.fast_path
    # Both joins came with a token not reviewed yet (aiohttp's path reviews it), and the
    # stolen heartbeat is aiohttp's 403: nothing answered fast, three left to aiohttp.
    assert fast_path is not None and fast_path.answered == 0 and fast_path.fell_back == 3


async def test_another_pods_token_is_refused_the_instance_id(
    pod_server: tuple[Server, FakeApiServer],
) -> None:
    server, _ = pod_server
    path = f"/v1/groups/{GROUP_A}/join"
    stolen = await server.call("POST", path, join_body(GROUP_A, "orders-0"), token=TOKEN_1)
    assert stolen.status == 403
    assert stolen.body["error"] == "GROUP_AUTHORIZATION_FAILED"
    assert "orders-1" in stolen.body["message"] and "'orders-0'" in stolen.body["message"]
    dynamic = await server.call("POST", path, join_body(GROUP_A, None), token=TOKEN_1)
    assert dynamic.status == 403
    other_group = await server.call(
        "POST", f"/v1/groups/{GROUP_B}/join", join_body(GROUP_B, "orders-1"), token=TOKEN_1
    )
    assert other_group.status == 403
    assert "is a member of group" in other_group.body["message"]
    earlier = await server.call("POST", path, join_body(GROUP_A, "orders-0"), token=TOKEN_OLD)
    assert earlier.status == 403 and "earlier pod" in earlier.body["message"]


async def test_a_token_the_api_server_refuses_is_a_401_with_the_reason(
    pod_server: tuple[Server, FakeApiServer],
) -> None:
    server, _ = pod_server
    refused = await server.call(
        "POST", f"/v1/groups/{GROUP_A}/join", join_body(GROUP_A, "orders-0"), token=FORGED
    )
    assert refused.status == 401
    assert "does not accept the token" in refused.body["message"]
    assert 'error="invalid_token"' in refused.headers["WWW-Authenticate"]


async def test_group_tokens_still_join_as_any_instance_beside_pod_identity(
    pod_server: tuple[Server, FakeApiServer],
) -> None:
    server, api = pod_server
    joined = await server.call(
        "POST",
        f"/v1/groups/{GROUP_A}/join",
        join_body(GROUP_A, "outside-k8s"),
        token=MEMBER_A_TOKEN,
    )
    assert joined.status == 200, joined.text
    assert api.reviews == []  # a configured token is never sent to TokenReview


async def test_a_member_reads_its_rotated_token_file_and_stays_in_the_group(
    pod_server: tuple[Server, FakeApiServer], tmp_path: Path
) -> None:
    server, api = pod_server
    token_path = tmp_path / "token"
    token_path.write_text(TOKEN_0)
    transport = HttpTransport(server.url, TokenFile(token_path))
    try:
        request = from_json(JoinGroupRequest, join_body(GROUP_A, "orders-0"))
        joined = await transport.join_group(request)
        assert joined.error_code == ErrorCode.NONE
        token_path.write_text(ROTATED_0 + "\n")  # the kubelet's rotation: same pod, new token
        beat = await transport.heartbeat(
            HeartbeatRequest(GROUP_A, joined.generation_id, joined.member_id, "orders-0")
        )
        assert beat.error_code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
        assert api.reviews == [TOKEN_0, ROTATED_0]
    finally:
        await transport.close()
