"""A request body is parsed once when it is plainly valid (`wire.decode_plain`); the full
path (Python's JSON parser under our number and text policies, then msgspec's strict
conversion) judges everything else. The one-pass decode may only ever answer what the full
path answers: never accept what it refuses, never decode to anything else."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from coordinator.server.bodies import parse_json
from coordinator.server.http_errors import ApiError
from coordinator.server.models import ExpectedMembersRequest, TopicMetadata
from coordinator.standby import PromoteRequest, StandbyHeartbeatRequest
from coordinator.wire import WireError, decode_plain, from_json

MESSAGES: tuple[type[Any], ...] = (
    JoinGroupRequest,
    SyncGroupRequest,
    HeartbeatRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    StandbyHeartbeatRequest,
    PromoteRequest,
    ExpectedMembersRequest,
    TopicMetadata,
)

REFUSED = "refused"

# Values for any field: plausible ones and every kind the policies care about.
SCALARS: list[Any] = [
    "g",
    "",
    "i-1",
    "AAE=",
    "not base64!",
    "\ud800",
    "a\x00b",
    "\u00e9\U0001f600",
    0,
    1,
    -1,
    2**31 - 1,
    2**31,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    3.0,
    1e3,
    1.5,
    True,
    None,
]
NESTED: list[Any] = [
    [],
    [["t", 0], ["u", 3]],
    [["t", 2**31]],
    [{"name": "range", "metadata": "AAE="}],
    [{"name": "range", "metadata": "AAE=", "error": None}],
    [{"name": "range", "metadata": "AAE=", "error": 2**70}],
    [{"member_id": "m", "assignment": "AAE="}],
    [{"member_id": "m", "group_instance_id": None}],
    [{"member_id": "m", "group_instance_id": "i-1", "reason": "bye"}],
    [{"topic": "t", "partition": 0, "committed_offset": 5}],
    [{"topic": "t", "partition": 0, "committed_offset": 5.0, "committed_metadata": "x"}],
    ["i-1", "i-2"],
    {"t": 3},
    {"t": 2**63},
    {"\ud800": 1},
    {"t": 3.0},
]
VALUES = st.sampled_from(SCALARS + NESTED)


# A plainly valid body of each message; the strategy below changes a few of its fields.
VALID: dict[type[Any], dict[str, Any]] = {
    JoinGroupRequest: {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "member_id": "",
        "group_instance_id": "i-1",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": "AAE="}],
        "reason": None,
        "client_id": "c",
        "client_host": "h",
    },
    SyncGroupRequest: {
        "group_id": "g",
        "generation_id": 1,
        "member_id": "m",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": "m", "assignment": "AAE="}],
    },
    HeartbeatRequest: {"group_id": "g", "generation_id": 1, "member_id": "m"},
    LeaveGroupRequest: {
        "group_id": "g",
        "members": [{"member_id": "m", "group_instance_id": None}],
    },
    OffsetCommitRequest: {
        "group_id": "g",
        "generation_id": 1,
        "member_id": "m",
        "group_instance_id": None,
        "partitions": [{"topic": "t", "partition": 0, "committed_offset": 5}],
    },
    OffsetFetchRequest: {"group_id": "g", "partitions": [["t", 0]]},
    StandbyHeartbeatRequest: {"group_id": "g", "standby_id": "s", "session_timeout_ms": 10_000},
    PromoteRequest: {"standby_id": "s", "instance_id": "i-1"},
    ExpectedMembersRequest: {"instance_ids": ["i-1"], "timeout_ms": 1000},
    TopicMetadata: {"topics": {"t": 3}},
}


@st.composite
def bodies(draw: st.DrawFn) -> tuple[type[Any], bytes]:
    cls = draw(st.sampled_from(MESSAGES))
    body = dict(VALID[cls])
    names = [field.name for field in dataclasses.fields(cls)]
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(names))
        if draw(st.integers(0, 9)) == 0:
            body.pop(name, None)  # now and then a field is missing
        else:
            body[name] = draw(VALUES)
    if draw(st.integers(0, 3)) == 0:
        body[draw(st.sampled_from(["error", "extra"]))] = draw(VALUES)
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    raw = text.encode("utf-8", "surrogatepass")
    return cls, raw


def full_path(cls: type[Any], raw: bytes) -> Any:
    try:
        return from_json(cls, parse_json(raw))
    except (ApiError, WireError):
        return REFUSED


@settings(max_examples=3000, deadline=None)
@given(bodies())
def test_the_one_pass_decode_answers_only_what_the_full_path_answers(
    body: tuple[type[Any], bytes],
) -> None:
    cls, raw = body
    once = decode_plain(cls, raw)
    if once is not None:
        assert full_path(cls, raw) == once


def test_plain_bodies_take_the_one_pass_decode() -> None:
    """Fails if the one-pass decode never applies (the tests above would then compare
    nothing)."""
    join = {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "member_id": "",
        "group_instance_id": "i-1",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": "AAE="}],
    }
    raw = json.dumps(join).encode()
    once = decode_plain(JoinGroupRequest, raw)
    assert once is not None and once == full_path(JoinGroupRequest, raw)
    fetch = json.dumps({"group_id": "g", "partitions": [["t", 0]]}).encode()
    assert decode_plain(OffsetFetchRequest, fetch) == OffsetFetchRequest("g", [("t", 0)])


def test_what_only_the_full_path_may_judge_goes_to_it() -> None:
    heartbeat = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    for changed in (
        {"generation_id": 1.0},  # an integer to the policies, a float to msgspec
        {"error": "NONE"},  # accepted and ignored, but its content is the policies' to judge
        {"error": 2**70},
        {"member_id": "\ud800"},
    ):
        raw = json.dumps({**heartbeat, **changed}).encode("utf-8", "surrogatepass")
        assert decode_plain(HeartbeatRequest, raw) is None, changed
    assert full_path(HeartbeatRequest, json.dumps({**heartbeat, "generation_id": 1.0}).encode())
    assert decode_plain(HeartbeatRequest, b'{"group_id": "g\xff"}') is None
    assert decode_plain(HeartbeatRequest, b"\xef\xbb\xbf" + json.dumps(heartbeat).encode()) is None
