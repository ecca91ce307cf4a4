"""The member fast path (coordinator/server/fast_path.py) answers exactly what aiohttp's
full path answers for heartbeats, JoinGroups and SyncGroups, takes only what it is sure of,
keeps answers in request order, and holds a parked JoinGroup's connection as aiohttp does.

Each case is sent over a raw socket to two servers over equal coordinators, one with the
fast path and one without; status, headers (but Date) and body must be the same.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from coordinator import GroupCoordinator, MemoryStore
from coordinator.messages import JoinGroupProtocol, JoinGroupRequest, SyncGroupRequest
from coordinator.server import RunningServer, create_app, start_server
from coordinator.server import fast_path as fast_path_module
from coordinator.server.connections import ConnectionLimits
from coordinator.server.context import CONTEXT
from coordinator.server.fast_path import FastPath, RequestSplitter, decode_heartbeat
from coordinator.wire import MEMBER_KEY_HEADER
from tests.client.helpers import wait_until

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


def _join_request(member_id: str = "", instance_id: str = "i-1") -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=GROUP_A,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=5_000,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=[JoinGroupProtocol("range", b"")],
    )


async def _side(fast: bool, limits: ConnectionLimits | None = None) -> Side:
    coordinator = GroupCoordinator(config=TEST_CONFIG, store=MemoryStore())
    app = create_app(coordinator, TEST_AUTH, fast_path=fast, connection_limits=limits)
    running = await start_server(app, "127.0.0.1", 0, shutdown_timeout=1.0)
    joined = await coordinator.join_group(_join_request())
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


def _join(side: Side, **changes: object) -> bytes:
    body: dict[str, object] = {
        "group_id": GROUP_A,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 5_000,
        "member_id": side.member_id,
        "group_instance_id": "i-1",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": ""}],
    }
    body.update(changes)
    return json.dumps(body).encode()


def _sync(side: Side, **changes: object) -> bytes:
    body: dict[str, object] = {
        "group_id": GROUP_A,
        "generation_id": side.generation,
        "member_id": side.member_id,
        "group_instance_id": "i-1",
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [],
    }
    body.update(changes)
    return json.dumps(body).encode()


JOIN_PATH = f"/v1/groups/{GROUP_A}/join"
SYNC_PATH = f"/v1/groups/{GROUP_A}/sync"

# Answers that do not park: a rejoin of the stable group's static member, refusals, and
# bodies the full path must judge.
MEMBER_CASES: dict[str, Callable[[Side], bytes]] = {
    "join: static rejoin": lambda s: _post(JOIN_PATH, _join(s)),
    "join: fenced instance": lambda s: _post(JOIN_PATH, _join(s, member_id="other")),
    "join: no token": lambda s: _post(JOIN_PATH, _join(s), token=None),
    "join: other group's token": lambda s: _post(JOIN_PATH, _join(s), token=MEMBER_B_TOKEN),
    "join: body group differs": lambda s: _post(
        f"/v1/groups/{GROUP_B}/join", _join(s), token=MEMBER_B_TOKEN
    ),
    "join: unknown field": lambda s: _post(JOIN_PATH, _join(s, extra=1)),
    "join: timeout as text": lambda s: _post(JOIN_PATH, _join(s, rebalance_timeout_ms="5")),
    "join: metadata not base64": lambda s: _post(
        JOIN_PATH, _join(s, protocols=[{"name": "range", "metadata": "%%"}])
    ),
    "join: no protocols field": lambda s: _post(
        JOIN_PATH, json.dumps({"group_id": GROUP_A, "member_id": ""}).encode()
    ),
    "join: error field": lambda s: _post(JOIN_PATH, _join(s, error="NONE")),
    "join: get": lambda s: f"GET {JOIN_PATH} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
    "sync: member": lambda s: _post(SYNC_PATH, _sync(s)),
    "sync: old generation": lambda s: _post(SYNC_PATH, _sync(s, generation_id=s.generation + 3)),
    "sync: unknown member": lambda s: _post(SYNC_PATH, _sync(s, member_id="nobody")),
    "sync: generation beyond int32": lambda s: _post(SYNC_PATH, _sync(s, generation_id=2**31)),
    "sync: assignment not base64": lambda s: _post(
        SYNC_PATH, _sync(s, assignments=[{"member_id": s.member_id, "assignment": "%%"}])
    ),
    "sync: query string": lambda s: _post(SYNC_PATH + "?x=1", _sync(s)),
}


def _same_apart_from_ids(
    side: Side, answer: tuple[str, dict[str, str], bytes]
) -> tuple[str, dict[str, str], object]:
    """The two sides' coordinators name their members differently, and their leave keys
    come from each store's own secret: those values are compared by what they stand for."""
    status, headers, body = answer
    headers = dict(headers)
    if MEMBER_KEY_HEADER.lower() in headers:
        keys = side.running.runner.app[CONTEXT].member_keys
        assert keys is not None
        assert headers[MEMBER_KEY_HEADER.lower()] == keys.key_for(GROUP_A, side.member_id)
        headers[MEMBER_KEY_HEADER.lower()] = "<the member's key>"
    headers["content-length"] = "<length>"  # ids of different lengths
    text = body.decode().replace(side.member_id, "<the member>")
    return status, headers, json.loads(text)


@pytest.mark.parametrize("case", sorted(MEMBER_CASES))
async def test_join_and_sync_answer_what_the_full_path_answers(
    sides: tuple[Side, Side], case: str
) -> None:
    fast, slow = sides
    assert fast.fast_path is not None
    (fast_answer,) = await _exchange(fast, MEMBER_CASES[case](fast))
    (slow_answer,) = await _exchange(slow, MEMBER_CASES[case](slow))
    assert _same_apart_from_ids(fast, fast_answer) == _same_apart_from_ids(slow, slow_answer)


async def test_a_member_s_join_and_sync_take_the_fast_path(sides: tuple[Side, Side]) -> None:
    fast, _ = sides
    assert fast.fast_path is not None
    ((_, headers, body),) = await _exchange(fast, _post(JOIN_PATH, _join(fast)))
    joined = json.loads(body)
    assert joined["error"] == "NONE" and joined["member_id"] == fast.member_id
    assert headers[MEMBER_KEY_HEADER.lower()]
    # The leader's rejoin is a rebalance (as on Kafka): its sync names the new generation.
    assert joined["generation_id"] == fast.generation + 1
    generation = joined["generation_id"]
    ((_, _, body),) = await _exchange(fast, _post(SYNC_PATH, _sync(fast, generation_id=generation)))
    assert json.loads(body)["error"] == "NONE"
    # Fails if join or sync went to aiohttp.
    assert (fast.fast_path.answered, fast.fast_path.fell_back) == (2, 0)


async def _park_a_join(side: Side) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A second static member's JoinGroup, parked until i-1 rejoins (the rebalance)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", side.running.port)
    writer.write(_post(JOIN_PATH, _join(side, member_id="", group_instance_id="i-2")))
    await writer.drain()
    await wait_until(lambda: side.coordinator.group_size(GROUP_A) == 2, BOUND_S)
    return reader, writer


async def test_a_parked_join_outlives_the_keep_alive_timeout() -> None:
    # aiohttp sees nothing in progress while the fast path holds a parked join: its
    # keep-alive check (0.3 s here) must not close the connection under it.
    side = await _side(True, ConnectionLimits(keepalive_timeout_s=0.3))
    try:
        reader, writer = await _park_a_join(side)
        await asyncio.sleep(1.0)  # three keep-alive timeouts; the join stays parked
        rejoined = await side.coordinator.join_group(_join_request(side.member_id))
        status, _, body = await _read_answer(reader)
        assert status == "HTTP/1.1 200 OK"
        answer = json.loads(body)
        assert answer["error"] == "NONE"
        assert answer["generation_id"] == rejoined.generation_id == side.generation + 1
        # Answered: the connection is kept alive again, and closed once idle for the timeout.
        assert await asyncio.wait_for(reader.read(), BOUND_S) == b""
        writer.close()
    finally:
        await side.running.stop()


async def test_a_parked_join_whose_client_left_still_completes() -> None:
    # As aiohttp's handler would: the coordinator's call runs to its end, the answer is
    # dropped, nothing is cancelled half-way.
    side = await _side(True)
    try:
        _, writer = await _park_a_join(side)
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(0.1)
        rejoined = await side.coordinator.join_group(_join_request(side.member_id))
        assert rejoined.error_code == 0 and len(rejoined.members) == 2
        fast_path = side.fast_path
        assert fast_path is not None
        await wait_until(lambda: fast_path.answered == 1, BOUND_S)
    finally:
        await side.running.stop()


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


async def _leader_sync_in_pieces(
    side: Side, assignment: bytes, piece: int
) -> tuple[str, dict[str, str], bytes]:
    """The leader's SyncGroup of a new generation with `assignment`, its request written
    `piece` bytes at a time (each read by the server before the next: one data_received
    each); returns the answer, for `_same_apart_from_ids`."""
    ((_, _, body),) = await _exchange(side, _post(JOIN_PATH, _join(side)))
    generation = json.loads(body)["generation_id"]
    encoded = base64.b64encode(assignment).decode()
    body = _sync(
        side,
        generation_id=generation,
        assignments=[{"member_id": side.member_id, "assignment": encoded}],
    )
    request = _post(SYNC_PATH, body)
    reader, writer = await asyncio.open_connection("127.0.0.1", side.running.port)
    try:
        for index in range(0, len(request), piece):
            writer.write(request[index : index + piece])
            await writer.drain()
            await asyncio.sleep(0)  # the server reads this piece
        return await _read_answer(reader)
    finally:
        writer.close()


async def test_a_large_leader_sync_in_pieces_takes_the_fast_path(
    sides: tuple[Side, Side], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 1,000-member leader's SyncGroup is ~120 KB: past the 16 KiB the fast path once
    # took, it went to aiohttp (issue 26). Here ~140 KB, written 2 KiB at a time.
    fast, slow = sides
    assert fast.fast_path is not None
    pieces: list[int] = []
    feed = RequestSplitter.feed

    def counting_feed(self: RequestSplitter, data: bytes) -> None:
        pieces.append(len(data))
        feed(self, data)

    monkeypatch.setattr(RequestSplitter, "feed", counting_feed)
    assignment = bytes(range(256)) * 400
    fast_answer = await _leader_sync_in_pieces(fast, assignment, 2048)
    slow_answer = await _leader_sync_in_pieces(slow, assignment, 2048)
    assert _same_apart_from_ids(fast, fast_answer) == _same_apart_from_ids(slow, slow_answer)
    assert json.loads(fast_answer[2])["assignment"] == base64.b64encode(assignment).decode()
    assert len(pieces) > 20  # the request came in many pieces (the join in one)
    # Fails if the join or the large sync went to aiohttp.
    assert (fast.fast_path.answered, fast.fast_path.fell_back) == (2, 0)


async def test_a_body_over_the_fast_path_cap_is_left_to_aiohttp(
    sides: tuple[Side, Side], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, slow = sides
    assert fast.fast_path is not None
    monkeypatch.setattr(fast_path_module, "MAX_FAST_BODY_BYTES", 1024)
    assignment = bytes(2048)
    fast_answer = await _leader_sync_in_pieces(fast, assignment, 512)
    slow_answer = await _leader_sync_in_pieces(slow, assignment, 512)
    assert _same_apart_from_ids(fast, fast_answer) == _same_apart_from_ids(slow, slow_answer)
    assert json.loads(fast_answer[2])["error"] == "NONE"
    assert fast.fast_path.answered == 1  # the join; aiohttp answered the sync


async def test_a_large_body_without_a_known_token_is_not_buffered(
    sides: tuple[Side, Side], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past 16 KiB the fast path waits for a body only for a caller it knows: anyone else's
    # head goes to aiohttp at once, which refuses it without reading the body. (With the
    # wait this long, a buffered body would never be answered here.)
    monkeypatch.setattr(fast_path_module, "BODY_WAIT_S", 3600.0)
    answers = []
    for side in sides:
        request = _post(SYNC_PATH, _sync(side) + b" " * 100_000, token="unknown")
        reader, writer = await asyncio.open_connection("127.0.0.1", side.running.port)
        try:
            writer.write(request[:20_000])  # and no more
            answers.append(await _read_answer(reader))
        finally:
            writer.close()
    fast_answer, slow_answer = answers
    assert fast_answer == slow_answer
    assert fast_answer[0] == "HTTP/1.1 403 Forbidden"


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
