"""The consumer group protocol (KIP-848) as our member speaks it: pure decisions, no I/O.

On this protocol the broker assigns; the member only heartbeats (ConsumerGroupHeartbeat)
and reconciles. Each answer may carry the member's new assignment: the partitions it may
use now (the broker leaves out a partition until its previous owner has acknowledged
releasing it). Reconciling, as Kafka's AsyncKafkaConsumer does: revoke what is no longer
assigned first (the listener commits), then take the new partitions, and only then tell
the broker, by sending the owned partitions in the next heartbeat; the broker moves a
revoked partition on only after that acknowledgement.

consumer_protocol_member.py runs these decisions against the broker.
"""

from __future__ import annotations

import base64
import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from coordinator.errors import ErrorCode
from coordinator.protocol import TopicPartition

Partitions = frozenset[TopicPartition]

# Member epochs with a meaning of their own (ConsumerGroupHeartbeatRequest.json).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
# A static member leaving for a restart: the broker keeps its instance id and assignment
# for the session timeout (group.consumer.session.timeout.ms).
STATIC_LEAVE_EPOCH = -2

# Kafka's error codes the heartbeat answers (Errors.java), as coordinator.errors names them.
NONE = ErrorCode.NONE
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
GROUP_ID_NOT_FOUND = ErrorCode.GROUP_ID_NOT_FOUND
GROUP_MAX_SIZE_REACHED = ErrorCode.GROUP_MAX_SIZE_REACHED
FENCED_MEMBER_EPOCH = ErrorCode.FENCED_MEMBER_EPOCH
UNRELEASED_INSTANCE_ID = ErrorCode.UNRELEASED_INSTANCE_ID
UNSUPPORTED_ASSIGNOR = ErrorCode.UNSUPPORTED_ASSIGNOR
STALE_MEMBER_EPOCH = ErrorCode.STALE_MEMBER_EPOCH
INVALID_REGULAR_EXPRESSION = ErrorCode.INVALID_REGULAR_EXPRESSION

# Rejoin with epoch 0, losing the partitions (they may be someone else's already).
REJOIN_CODES = frozenset({UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH})
# A retry cannot fix these: the member stops with the broker's reason.
FATAL_CODES = frozenset(
    {
        INVALID_REQUEST,
        GROUP_ID_NOT_FOUND,
        GROUP_MAX_SIZE_REACHED,
        UNRELEASED_INSTANCE_ID,
        UNSUPPORTED_ASSIGNOR,
        INVALID_REGULAR_EXPRESSION,
    }
)


class Outcome(enum.Enum):
    OK = "ok"
    REJOIN = "rejoin"  # lose the partitions, join again with epoch 0
    RETRY = "retry"  # send the same heartbeat again after a backoff
    # A standby's join refused while the instance id is still held: join again shortly.
    WAIT = "wait"
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class InstanceIdWait:
    """A standby for a static member on the consumer protocol: started beside the member it
    may replace, it joins with that member's instance id and, while the broker still holds
    it (UNRELEASED_INSTANCE_ID), joins again every `retry_ms` for up to `limit_ms`. So it is
    in the group within one retry of the old member's removal (a LeaveGroup by instance id),
    before a survivor's heartbeat can have the assignor hand its partitions to others
    (docs/kafka.md, "Hot standby")."""

    limit_ms: int
    retry_ms: int = 150


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """A ConsumerGroupHeartbeat response, decoded (topics still by id)."""

    error_code: int
    error_message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    # None: unchanged since the last answer; else every partition the member may own now.
    assignment: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    detail: str = ""


def decide(answer: HeartbeatAnswer, wait_left_ms: int | None = None) -> Decision:
    """What one heartbeat answer means for the member. `wait_left_ms`: a standby's
    (InstanceIdWait) time left to wait for its instance id; None: not a standby."""
    code = answer.error_code
    if code == NONE:
        return Decision(Outcome.OK)
    reason = answer.error_message or f"Kafka error {code}"
    if code in REJOIN_CODES:
        return Decision(Outcome.REJOIN, reason)
    if code == UNRELEASED_INSTANCE_ID and wait_left_ms is not None and wait_left_ms > 0:
        return Decision(Outcome.WAIT, reason)
    if code == UNRELEASED_INSTANCE_ID:
        waited = " (a standby that waited its limit for it)" if wait_left_ms is not None else ""
        return Decision(
            Outcome.FATAL,
            f"the broker still holds this group.instance.id for another member ({reason}){waited}: "
            "two processes with one identity, or a restart of a member that did not leave "
            "(it is released when that member leaves or its session times out)",
        )
    if code in FATAL_CODES:
        return Decision(Outcome.FATAL, reason)
    return Decision(Outcome.RETRY, reason)


def assigned_partitions(
    assignment: Iterable[tuple[uuid.UUID, Iterable[int]]], names: Mapping[uuid.UUID, str]
) -> Partitions | None:
    """An answer's assignment by topic name; None when a topic id is not in `names` (the
    caller refreshes its metadata and reconciles again)."""
    found: set[TopicPartition] = set()
    for topic_id, partitions in assignment:
        name = names.get(topic_id)
        if name is None:
            return None
        found.update(TopicPartition(name, p) for p in partitions)
    return frozenset(found)


def owned_by_id(
    owned: Partitions, ids: Mapping[str, uuid.UUID]
) -> list[tuple[uuid.UUID, list[int]]]:
    """The owned partitions as the heartbeat's TopicPartitions field (topics by id)."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(owned):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [(ids[topic], partitions) for topic, partitions in by_topic.items()]


class StepKind(enum.Enum):
    REVOKE = "revoke"  # commit, then on_partitions_revoked
    ASSIGN = "assign"  # on_partitions_assigned
    ACK = "ack"  # heartbeat now with the owned partitions


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    partitions: Partitions


def reconcile(owned: Partitions, target: Partitions) -> list[Step]:
    """The steps from `owned` to `target`, in the order KIP-848 prescribes: revoke what is
    no longer assigned, then take what is new, then acknowledge `target` (an empty list:
    nothing to do). Callbacks see only the changes, as a cooperative member's do."""
    if owned == target:
        return []
    steps: list[Step] = []
    revoked = owned - target
    if revoked:
        steps.append(Step(StepKind.REVOKE, revoked))
    added = target - owned
    if added:
        steps.append(Step(StepKind.ASSIGN, added))
    steps.append(Step(StepKind.ACK, target))
    return steps


def close_epoch(static: bool, leave: bool | None) -> int | None:
    """The epoch of the closing heartbeat: -2 for a static member that stays in the group
    for its restart (KIP-345's default, `leave` None or False), -1 for a leave; None: a
    dynamic member told not to leave sends nothing (its session expires)."""
    if static:
        return LEAVE_EPOCH if leave else STATIC_LEAVE_EPOCH
    return None if leave is False else LEAVE_EPOCH


def leave_fields(member_id: str, instance_id: str | None, epoch: int) -> dict[str, object]:
    """A closing ConsumerGroupHeartbeat's fields: `epoch` -1 (leave) or -2 (a static
    member's leave that keeps its instance id and partitions for its return). The broker
    checks only that `member_id` holds `instance_id`, so the operator sends -2 for a member
    whose process died (docs/kafka.md, "Hot standby"): a waiting standby then rejoins under
    the id as a static restart."""
    return {
        "member_id": member_id,
        "member_epoch": epoch,
        "instance_id": instance_id,
        "rack_id": None,
        "rebalance_timeout_ms": -1,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": None,
    }


def new_member_id() -> str:
    """A member id as KIP-1082 wants it, made by the client and kept for the process's
    life: a random Uuid in Kafka's text form (url-safe base64, no padding), as Java's."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
