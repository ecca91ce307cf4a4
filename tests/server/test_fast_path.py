"""The heartbeat fast path (coordinator/server/fast_path.py) answers exactly what aiohttp's
full path answers, takes only what it is sure of, and keeps answers in request order.

Each case is sent over a raw socket to two servers over equal coordinators, one with the
fast path and one without; status, headers (but Date) and body must be the same.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from coordinator import GroupCoordinator, MemoryStore
from coordinator.messages import JoinGroupProtocol, JoinGroupRequest, SyncGroupRequest
from coordinator.server import RunningServer, create_app, start_server
from coordinator.server.context import CONTEXT
from coordinator.server.fast_path import FastPath, decode_heartbeat

from .conftest import GROUP_A, GROUP_B, MEMBER_A_TOKEN, MEMBER_B_TOKEN, TEST_AUTH, TEST_CONFIG

BOUND_S = 5.0


@dataclass
class Side:
    running: RunningServer
    coordinator: GroupCoordinator
    member_id: str
    generation: int

    @property
    def fast_path(self) -> FastPath | None:
        app = self.running.runner.app
        return app[CONTEXT].connection_guard.fast_path


async def _side(fast: bool) -> Side:
    coordinator = GroupCoordinator(config=TEST_CONFIG, store=MemoryStore())
    app = create_app(coordinator, TEST_AUTH, fast_path=fast)
    running = await start_server(app, "127.0.0.1", 0, shutdown_timeout=1.0)
    joined = await coordinator.join_group(
        JoinGroupRequest(
            group_id=GROUP_A,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=5_000,
            member_id="",
            group_instance_id="i-1",
            protocol_type="consumer",
            protocols=[JoinGroupProtocol("range", b"")],
        )
    )
    await coordinator.sync_group(
        SyncGroupRequest(
            GROUP_A, joined.generation_id, joined.member_id, "i-1", "consumer", "range"
        )
    )
    return Side(running, coordinator, joined.member_id, joined.generation_id)


@pytest.fixture
async def sides() -> AsyncIterator[tuple[Side, Side]]:
    fast, slow = await _side(True), await _side(False)
    yield fast, slow
    await fast.running.stop()
    await slow.running.stop()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND_S)
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(
        reader.readexactly(int(headers.get("content-length", "0"))), BOUND_S
    )
    headers.pop("date", None)
    return status, headers, body


async def _exchange(side: Side, *requests: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    """Writes all `requests` at once (pipelined) and reads one answer each."""
    reader, writer = await asyncio.open_connection("127.0.0.1", side.running.port)
    try:
        writer.write(b"".join(requests))
        return [await _read_answer(reader) for _ in requests]
    finally:
        writer.close()


def _post(path: str, body: bytes, *, token: str | None = MEMBER_A_TOKEN, extra: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _heartbeat(side: Side, **changes: object) -> bytes:
    body = {
        "group_id": GROUP_A,
        "generation_id": side.generation,
        "member_id": side.member_id,
        "group_instance_id": "i-1",
    }
    body.update(changes)
    return json.dumps(body).encode()


HB_PATH = f"/v1/groups/{GROUP_A}/heartbeat"

# name -> the request, for one side
CASES: dict[str, Callable[[Side], bytes]] = {
    "valid": lambda s: _post(HB_PATH, _heartbeat(s)),
    "without instance id": lambda s: _post(
        HB_PATH,
        json.dumps({"group_id": GROUP_A, "generation_id": 1, "member_id": s.member_id}).encode(),
    ),
    "old generation": lambda s: _post(HB_PATH, _heartbeat(s, generation_id=s.generation + 5)),
    "unknown member": lambda s: _post(HB_PATH, _heartbeat(s, member_id="nobody")),
    "fenced instance": lambda s: _post(HB_PATH, _heartbeat(s, member_id="other")),
    "no token": lambda s: _post(HB_PATH, _heartbeat(s), token=None),
    "unknown token": lambda s: _post(HB_PATH, _heartbeat(s), token="not-a-token"),
    "other group's token": lambda s: _post(HB_PATH, _heartbeat(s), token=MEMBER_B_TOKEN),
    "body group differs": lambda s: _post(
        f"/v1/groups/{GROUP_B}/heartbeat", _heartbeat(s, group_id=GROUP_A), token=MEMBER_B_TOKEN
    ),
    "not json": lambda s: _post(HB_PATH, b"{nope"),
    "trailing garbage": lambda s: _post(HB_PATH, _heartbeat(s) + b"x"),
    "generation beyond int32": lambda s: _post(HB_PATH, _heartbeat(s, generation_id=2**31)),
    "generation 1.0": lambda s: _post(HB_PATH, _heartbeat(s, generation_id=float(s.generation))),
    "generation as text": lambda s: _post(HB_PATH, _heartbeat(s, generation_id="1")),
    "unknown field": lambda s: _post(HB_PATH, _heartbeat(s, extra=1)),
    "error field": lambda s: _post(HB_PATH, _heartbeat(s, error="NONE")),
    "error field past 64 bits": lambda s: _post(HB_PATH, _heartbeat(s, error=2**70)),
    "error field null": lambda s: _post(HB_PATH, _heartbeat(s, error=None)),
    "missing member id": lambda s: _post(
        HB_PATH, json.dumps({"group_id": GROUP_A, "generation_id": 1}).encode()
    ),
    "lone surrogate": lambda s: _post(HB_PATH, _heartbeat(s).replace(b'"i-1"', b'"i-\\ud800"')),
    "invalid utf-8": lambda s: _post(HB_PATH, _heartbeat(s).replace(b'"i-1"', b'"i-\xff"')),
    "duplicate key": lambda s: _post(HB_PATH, _heartbeat(s)[:-1] + b', "member_id": "nobody"}'),
    "empty body": lambda s: _post(HB_PATH, b""),
    "connection close": lambda s: _post(HB_PATH, _heartbeat(s), extra="Connection: close\r\n"),
    "percent-encoded group": lambda s: _post("/v1/groups/group%2Da/heartbeat", _heartbeat(s)),
    "query string": lambda s: _post(HB_PATH + "?x=1", _heartbeat(s)),
    "get": lambda s: f"GET {HB_PATH} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_fast_path_answers_what_the_full_path_answers(
    sides: tuple[Side, Side], case: str
) -> None:
    fast, slow = sides
    (fast_answer,) = await _exchange(fast, CASES[case](fast))
    (slow_answer,) = await _exchange(slow, CASES[case](slow))
    assert fast_answer == slow_answer


async def test_a_valid_heartbeat_takes_the_fast_path(sides: tuple[Side, Side]) -> None:
    fast, slow = sides
    assert fast.fast_path is not None and slow.fast_path is None
    answers = await _exchange(fast, _post(HB_PATH, _heartbeat(fast)))
    assert answers[0][0] == "HTTP/1.1 200 OK"
    assert json.loads(answers[0][2]) == {"error_code": 0, "error": "NONE"}
    # Fails if the fast path is off, e.g. because an aiohttp upgrade removed the request
    # handler state it reads (connections._has_request_state).
    assert fast.fast_path.answered == 1


async def test_a_doubtful_heartbeat_is_left_to_aiohttp(sides: tuple[Side, Side]) -> None:
    fast, _ = sides
    assert fast.fast_path is not None
    await _exchange(fast, _post(HB_PATH, _heartbeat(fast, generation_id=2**31)))
    assert (fast.fast_path.answered, fast.fast_path.fell_back) == (0, 1)


async def test_pipelined_requests_are_answered_in_order(sides: tuple[Side, Side]) -> None:
    fast, _ = sides
    requests = [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        _post(HB_PATH, _heartbeat(fast)),
        _post(HB_PATH, _heartbeat(fast, generation_id=fast.generation + 1)),
        (
            f"GET /v1/topics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {MEMBER_A_TOKEN}\r\n\r\n"
        ).encode(),
        _post(HB_PATH, _heartbeat(fast)),
    ]
    answers = await _exchange(fast, *requests)
    bodies = [json.loads(body) for _, _, body in answers]
    assert bodies[0] == {"status": "ok"}
    assert bodies[1]["error"] == "NONE"
    assert bodies[2]["error"] == "ILLEGAL_GENERATION"
    assert bodies[3] == {"topics": {}}
    assert bodies[4]["error"] == "NONE"


async def test_a_heartbeat_written_in_pieces_is_answered(sides: tuple[Side, Side]) -> None:
    fast, _ = sides
    request = _post(HB_PATH, _heartbeat(fast))
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.running.port)
    try:
        for index in range(0, len(request), 7):
            writer.write(request[index : index + 7])
            await writer.drain()
            await asyncio.sleep(0.001)
        status, _, body = await _read_answer(reader)
    finally:
        writer.close()
    assert status == "HTTP/1.1 200 OK"
    assert json.loads(body)["error"] == "NONE"


def test_the_decoder_refuses_what_the_full_path_refuses() -> None:
    good = b'{"group_id":"g","generation_id":1,"member_id":"m"}'
    assert decode_heartbeat(good) is not None
    for bad in (
        b'{"group_id":"g","generation_id":true,"member_id":"m"}',
        b'{"group_id":"g","generation_id":2147483648,"member_id":"m"}',
        b'{"group_id":"g","generation_id":1,"member_id":"\\udc00"}',
        b'{"group_id":"g","generation_id":1,"member_id":"m","x":1}',
        b"[1]",
    ):
        assert decode_heartbeat(bad) is None, bad


async def test_the_access_log_sees_every_heartbeat() -> None:
    # With --access-log the fast path is off: aiohttp's log would miss what it answers.
    app = create_app(GroupCoordinator(config=TEST_CONFIG, store=MemoryStore()), TEST_AUTH)
    assert app[CONTEXT].connection_guard.fast_path is not None
    running = await start_server(app, "127.0.0.1", 0, shutdown_timeout=1.0, access_log=True)
    try:
        assert app[CONTEXT].connection_guard.fast_path is None
    finally:
        await running.stop()
