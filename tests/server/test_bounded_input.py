"""Input a hostile or buggy client may send: out-of-range integers, a non-ASCII token,
control characters in ids. Each gets a 4xx or a Kafka error code, never a 500 or a stall."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest

from coordinator import ErrorCode
from coordinator.server.metrics import safe_label

from .conftest import ADMIN_TOKEN, GROUP_A, MEMBER_A_TOKEN, Server
from .messages import join_body

INT32_MAX = 2**31 - 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rebalance_timeout_ms", 2**63 - 1),
        ("rebalance_timeout_ms", INT32_MAX + 1),
        ("session_timeout_ms", 2**63 - 1),
        ("session_timeout_ms", -(2**31) - 1),
    ],
)
async def test_int32_fields_beyond_int32_are_400(server: Server, field: str, value: int) -> None:
    body = join_body(GROUP_A, "i-0") | {field: value}
    reply = await server.call("POST", f"/v1/groups/{GROUP_A}/join", body)
    assert reply.status == 400, reply.text
    assert reply.body["error"] == "INVALID_REQUEST"
    assert _names_int32_bound(reply.body["message"]) and field in reply.body["message"]


async def test_rebalance_timeout_over_the_configured_maximum_is_code_42(server: Server) -> None:
    body = join_body(GROUP_A, "i-0") | {"rebalance_timeout_ms": INT32_MAX}
    reply = await server.call("POST", f"/v1/groups/{GROUP_A}/join", body)
    assert reply.status == 200
    assert reply.body["error_code"] == ErrorCode.INVALID_REQUEST
    described = await server.call("GET", f"/v1/groups/{GROUP_A}")
    assert described.body["error"] == "GROUP_ID_NOT_FOUND", "no group is held in a rebalance"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("heartbeat", {"group_id": GROUP_A, "generation_id": 2**31, "member_id": "m"}),
        (
            "offsets/commit",
            {
                "group_id": GROUP_A,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "partitions": [{"topic": "t", "partition": 2**31, "committed_offset": 1}],
            },
        ),
        ("offsets/fetch", {"group_id": GROUP_A, "partitions": [["t", -(2**31) - 1]]}),
    ],
)
async def test_other_int32_fields_are_bounded(server: Server, path: str, body: object) -> None:
    reply = await server.call("POST", f"/v1/groups/{GROUP_A}/{path}", body)
    assert reply.status == 400, reply.text
    assert _names_int32_bound(reply.body["message"])


def _names_int32_bound(message: str) -> bool:
    # msgspec's path-precise text, e.g. "Expected `int` <= 2147483647 - at `$.generation_id`".
    return "Expected `int` <= 2147483647" in message or "Expected `int` >= -2147483648" in message


async def _raw_request(server: Server, head: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.running.port)
    try:
        writer.write(head)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()


@pytest.mark.parametrize("token", ["tökén".encode(), b"\xff\xfe-raw-bytes", "秘密".encode()])
async def test_non_ascii_bearer_token_is_401(server: Server, token: bytes) -> None:
    answer = await _raw_request(
        server,
        b"GET /v1/topics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer "
        + token
        + b"\r\n\r\n",
    )
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 401"), answer[:300]
    assert b"invalid_token" in answer
    assert b"GROUP_AUTHORIZATION_FAILED" in answer
    # The server is fine afterwards.
    assert (await server.call("GET", "/v1/topics", token=MEMBER_A_TOKEN)).status == 200


@pytest.mark.parametrize("group_id", ["orders\n2026-01-01 INFO forged", "nul\x00byte"])
async def test_group_ids_with_control_characters_create_nothing(
    server: Server, group_id: str
) -> None:
    path = f"/v1/groups/{quote(group_id, safe='')}/join"
    reply = await server.call("POST", path, join_body(group_id, "i-0"), token=ADMIN_TOKEN)
    assert reply.status == 200
    assert reply.body["error"] == "INVALID_GROUP_ID"
    listed = await server.call("GET", "/v1/groups")
    assert listed.body["groups"] == []


async def test_instance_ids_with_control_characters_are_refused(server: Server) -> None:
    body = join_body(GROUP_A, "i-0\r\nforged")
    reply = await server.call("POST", f"/v1/groups/{GROUP_A}/join", body)
    assert reply.body["error"] == "INVALID_REQUEST"


def test_metric_label_values_never_carry_control_characters() -> None:
    assert safe_label("a\nb\x00c\x7f") == "a\\x0ab\\x00c\\x7f"
    assert safe_label("orders-ü") == "orders-ü"
