"""JSON bodies of the server's own routes (the protocol routes use `coordinator.messages`).

They are dataclasses for the same reason the messages are: `coordinator.wire` encodes and
decodes them, and the OpenAPI document is generated from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from coordinator.errors import ErrorCode
from coordinator.journal import JournalEvent
from coordinator.messages import ListedGroup

# Kafka's limits for partition counts (int32) and topic names.
MAX_PARTITIONS = 2**31 - 1
INT32_MAX = 2**31 - 1
MAX_TOPIC_NAME_LENGTH = 249
TOPIC_NAME_PATTERN = r"^[a-zA-Z0-9._-]+$"
_TOPIC_NAME = re.compile(TOPIC_NAME_PATTERN)


def topic_problem(name: str, count: int) -> str | None:
    """Why `name: count` is not valid topic metadata, or None. Kafka's own name rules, so
    names that work here work with Kafka tooling."""
    if len(name) > MAX_TOPIC_NAME_LENGTH or name in (".", "..") or not _TOPIC_NAME.fullmatch(name):
        return (
            f"invalid topic name {name!r}: 1-{MAX_TOPIC_NAME_LENGTH} characters of "
            "a-z A-Z 0-9 . _ - (not '.' or '..')"
        )
    if not 0 <= count <= MAX_PARTITIONS:
        return f"topic {name!r}: partition count must be 0..{MAX_PARTITIONS}"
    return None


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """Topic name -> partition count. In a PUT, merged into what is there; 0 removes a topic."""

    topics: dict[str, int] = field(
        metadata={
            "json_schema": {
                "propertyNames": {
                    "pattern": TOPIC_NAME_PATTERN,
                    "minLength": 1,
                    "maxLength": MAX_TOPIC_NAME_LENGTH,
                    "not": {"enum": [".", ".."]},
                },
                "additionalProperties": {
                    "type": "integer",
                    "format": "int32",
                    "minimum": 0,
                    "maximum": MAX_PARTITIONS,
                },
            }
        }
    )


@dataclass(frozen=True, slots=True)
class GroupList:
    groups: list[ListedGroup]


@dataclass(frozen=True, slots=True)
class DeleteGroupResult:
    group_id: str
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class ExpectedMembersRequest:
    """Expect the static members a group should have: the group's join
    phase is held until all of them have joined or `timeout_ms` (from now) has passed."""

    instance_ids: list[str] = field(
        metadata={"json_schema": {"minItems": 1, "items": {"type": "string", "minLength": 1}}}
    )
    timeout_ms: int = field(
        metadata={
            "json_schema": {
                "type": "integer",
                "format": "int32",
                "minimum": 1,
                "maximum": INT32_MAX,
            }
        }
    )


@dataclass(frozen=True, slots=True)
class ExpectedMembers:
    """A group's expected members; an empty list when none are expected. `deadline_ms` is
    when the coordinator stops waiting for them (ms since the epoch); `timeout_ms` is the
    one in effect (a longer one is cut to the new-member join timeout)."""

    group_id: str
    instance_ids: list[str]
    timeout_ms: int
    deadline_ms: int
    # INVALID_GROUP_ID or INVALID_REQUEST (e.g. control characters in an id): nothing was set.
    error_code: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class JournalPage:
    """Journal rows in sequence order; ask again with `since=next_since` for the next page."""

    events: list[JournalEvent]
    next_since: int


@dataclass(frozen=True, slots=True)
class LagFigure:
    """A group's lag as the embedding operator last read it (spec.source.kafka: log end
    offsets on the source cluster minus the commits here), for an autoscaler (KEDA's
    metrics-api scaler reads `lag`). `read_at_ms`: when the figure was read as it stands
    (ms since the epoch); it does not move while the source cluster does not answer."""

    group_id: str
    lag: int
    partitions_without_commit: int
    read_at_ms: int


@dataclass(frozen=True, slots=True)
class Status:
    status: str
