"""Bad input gets a clear 4xx in the error shape, reaches nothing, and the server keeps serving."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from coordinator import ErrorCode, HeartbeatRequest
from coordinator.server.limits import MAX_DERIVED_BODY_BYTES, group_body_limit
from coordinator.wire import to_json

from .conftest import ADMIN_TOKEN, GROUP_A, MEMBER_A_TOKEN, Server, start_test_server
from .messages import join_body

JOIN = f"/v1/groups/{GROUP_A}/join"


def _assert_error(reply: Any, status: int, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
    assert reply.status == status, reply.text
    body = reply.body
    assert set(body) == {"error_code", "error", "message"}
    assert body["error_code"] == int(code)
    assert body["error"] == code.name
    assert body["message"]


def _join_with(**changes: Any) -> dict[str, Any]:
    body = join_body(GROUP_A, "a-0")
    body.update(changes)
    return body


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "empty"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b'{"group_id": NaN}', "NaN"),
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
        (b"[]", "Expected `object`, got `array`"),
    ],
)
async def test_malformed_json(server: Server, raw: bytes, fragment: str) -> None:
    reply = await server.call("POST", JOIN, data=raw, token=MEMBER_A_TOKEN)
    _assert_error(reply, 400)
    assert fragment in reply.body["message"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (_join_with(session_timeout_ms="10000"), "session_timeout_ms"),
        (_join_with(session_timeout_ms=10000.5), "session_timeout_ms"),
        (_join_with(session_timeout_ms=True), "session_timeout_ms"),
        (_join_with(protocols={"name": "range"}), "protocols"),
        (_join_with(protocols=[{"name": "range", "metadata": "%%%"}]), "base64"),
        (_join_with(surprise=1), "unknown field"),
        ({k: v for k, v in join_body(GROUP_A, "a").items() if k != "member_id"}, "member_id"),
        (_join_with(group_id="another-group"), "differs from the path"),
        (_join_with(session_timeout_ms=2**64), "64-bit"),
        (_join_with(client_id="\ud800"), "surrogate"),
    ],
)
async def test_wrong_shapes(server: Server, body: dict[str, Any], fragment: str) -> None:
    raw = json.dumps(body).encode()
    reply = await server.call("POST", JOIN, data=raw, token=MEMBER_A_TOKEN)
    _assert_error(reply, 400)
    assert fragment in reply.body["message"]
    # Nothing reached the coordinator.
    assert server.coordinator.group_state(GROUP_A) is None


async def test_bad_admin_inputs(server: Server) -> None:
    bodies: list[dict[str, Any]] = [
        {"topics": {"orders": -1}},
        {"topics": {"orders": 2**31}},
        {"topics": {"bad name": 1}},
        {"topics": {"..": 1}},
        {"topics": {"x" * 250: 1}},
        {"topics": []},
        {},
    ]
    for body in bodies:
        _assert_error(await server.call("PUT", "/v1/topics", body), 400)
    assert await server.coordinator.topic_metadata() == {}
    for query in ("since=-1", "since=abc", "limit=0", "limit=100000", "since=1_0", "since=%201"):
        _assert_error(await server.call("GET", f"/v1/journal?{query}"), 400)


async def test_integral_numbers_count_as_integers(server: Server) -> None:
    # JSON Schema calls 5.0 an integer, and the OpenAPI document says "integer".
    raw = json.dumps(_join_with(session_timeout_ms=10000.0, rebalance_timeout_ms=5e3)).encode()
    reply = await server.call("POST", JOIN, data=raw, token=MEMBER_A_TOKEN)
    assert reply.status == 200, reply.text
    assert reply.body["error"] == "NONE"


async def test_oversized_body_is_413(tmp_path: Path) -> None:
    running, coordinator = await start_test_server(tmp_path / "c.db", max_body_bytes=2048)
    try:
        big = _join_with(reason="x" * 4096)
        async with aiohttp.ClientSession() as http:
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with http.post(running.url + JOIN, json=big, headers=headers) as response:
                assert response.status == 413
                body = await response.json()
                assert body["error"] == "INVALID_REQUEST"
                assert "2048" in body["message"]

            # Chunked (no Content-Length): refused while reading.
            async def chunks() -> Any:
                for _ in range(8):
                    yield b" " * 1024

            async with http.post(running.url + JOIN, data=chunks(), headers=headers) as response:
                assert response.status == 413
                assert (await response.json())["error_code"] == 42
            # And the server still serves.
            async with http.post(
                running.url + JOIN, json=join_body(GROUP_A, "a-0"), headers=headers
            ) as response:
                assert response.status == 200
        assert coordinator.group_state(GROUP_A) is not None
    finally:
        await running.stop()


async def test_unknown_route_and_method(server: Server) -> None:
    reply = await server.call("GET", "/v2/nothing")
    _assert_error(reply, 404)
    reply = await server.call("GET", "/v1/groups/g/join")
    _assert_error(reply, 405)
    assert "POST" in reply.headers["Allow"]
    reply = await server.call("POST", "/v1/groups//join", join_body("", "x"))
    _assert_error(reply, 404)


async def test_coordinator_failure_is_500_and_the_server_keeps_serving(
    server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(request: object) -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(server.coordinator, "heartbeat", broken)
    path = f"/v1/groups/{GROUP_A}/heartbeat"
    body = to_json(HeartbeatRequest(GROUP_A, 1, "m", None))
    reply = await server.call("POST", path, body)
    _assert_error(reply, 500, ErrorCode.UNKNOWN_SERVER_ERROR)
    assert "boom" not in reply.text  # internals stay in the log
    assert any("boom" in (record.exc_text or "") or record.exc_info for record in caplog.records)
    monkeypatch.undo()
    reply = await server.call("POST", path, body)
    assert reply.status == 200
    assert (await server.call("GET", "/readyz")).status == 200


async def test_bad_input_does_not_disturb_a_live_group(server: Server) -> None:
    first = await server.call("POST", JOIN, join_body(GROUP_A, "a-0"), token=MEMBER_A_TOKEN)
    assert first.body["error"] == "NONE"
    before = (await server.call("GET", f"/v1/groups/{GROUP_A}")).body
    bad = [
        b"{",
        json.dumps(_join_with(member_id=first.body["member_id"], protocols=7)).encode(),
        json.dumps(_join_with(group_instance_id=["a-0"])).encode(),
    ]
    replies = await asyncio.gather(
        *(server.call("POST", JOIN, data=raw, token=MEMBER_A_TOKEN) for raw in bad)
    )
    assert {reply.status for reply in replies} == {400}
    after = (await server.call("GET", f"/v1/groups/{GROUP_A}")).body
    assert after == before


async def test_journal_query_integers_must_be_integers(server: Server) -> None:
    """Found by schemathesis: `?since=&limit=` used to mean "defaults"; the schema says
    integer, so an empty or repeated value is a 400 like any other non-integer."""
    for query in ("since=&limit=", "since=", "limit=", "limit=1&limit=2"):
        _assert_error(await server.call("GET", f"/v1/journal?{query}"), 400)
    assert (await server.call("GET", "/v1/journal?since=0&limit=5")).status == 200


async def test_the_body_limit_grows_with_the_groups_size(tmp_path: Path) -> None:
    """A leader's SyncGroup for a large group carries every member's assignment: it may be
    larger than the configured limit, as long as the group's topics and members need it."""
    running, _ = await start_test_server(tmp_path / "c.db", max_body_bytes=4096)
    try:
        async with aiohttp.ClientSession() as http:
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            group_path = f"/v1/groups/{GROUP_A}"
            # 5,000 partitions: a group on them may send about 5000 x 120 bytes.
            async with http.put(
                running.url + "/v1/topics", json={"topics": {"big": 5000}}, headers=headers
            ) as response:
                assert response.status == 200
            async with http.post(
                running.url + group_path + "/join", json=join_body(GROUP_A, "a-0"), headers=headers
            ) as response:
                joined = await response.json()
            assert joined["error"] == "NONE"
            sync = {
                "group_id": GROUP_A,
                "generation_id": joined["generation_id"],
                "member_id": joined["member_id"],
                "group_instance_id": "a-0",
                "protocol_type": "consumer",
                "protocol_name": "range",
                # 4 bytes per partition, as the consumer protocol's assignment encodes them.
                "assignments": [
                    {
                        "member_id": joined["member_id"],
                        "assignment": base64.b64encode(bytes(4 * 5000)).decode(),
                    }
                ],
            }
            async with http.post(
                running.url + group_path + "/sync", json=sync, headers=headers
            ) as response:
                assert response.status == 200, await response.text()
                assert (await response.json())["error"] == "NONE"
            # What no group of this size needs is still refused.
            huge = dict(
                sync, assignments=[dict(sync["assignments"][0], assignment="A" * 2_000_000)]
            )
            async with http.post(
                running.url + group_path + "/sync", json=huge, headers=headers
            ) as response:
                assert response.status == 413
    finally:
        await running.stop()


def test_group_body_limit_arithmetic() -> None:
    assert group_body_limit(4096, 0, {}) == 4096
    # 100,000 partitions of a 10-character topic, 100 members.
    limit = group_body_limit(4 * 1024 * 1024, 100, {"t" * 10: 100_000})
    assert limit == 100 * 400 + 100_000 * 130 + 100 * 3 * 16
    assert group_body_limit(1, 10**6, {"t": 2**31 - 1}) == MAX_DERIVED_BODY_BYTES
