"""Kafka's group-coordination error codes, with the numbers Kafka uses on the wire."""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNSTABLE_OFFSET_COMMIT = 88
    # KIP-848's consumer protocol: what a Kafka broker answers our member on it (the embedded
    # coordinator speaks the classic protocol only, so it never answers these).
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128


# One sentence per code that a user can act on; used in logs, HTTP errors and exceptions.
ERROR_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.NONE: "no error",
    ErrorCode.UNKNOWN_SERVER_ERROR: "the coordinator hit an unexpected error; see its log",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "the topic or partition does not exist on the cluster",
    ErrorCode.REQUEST_TIMED_OUT: "the broker timed the request out; retry",
    ErrorCode.OFFSET_METADATA_TOO_LARGE: (
        "the commit's metadata string is longer than the coordinator's limit "
        "(offset_metadata_max_bytes)"
    ),
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: (
        "the coordinator is still loading the group; retry shortly"
    ),
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: "the offset commit was too large to write",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "the credentials do not allow access to the topic",
    ErrorCode.UNSTABLE_OFFSET_COMMIT: (
        "a transaction on the partition is not yet committed; retry the fetch"
    ),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "the coordinator is not available; retry shortly",
    ErrorCode.NOT_COORDINATOR: "this coordinator does not own the group; look it up again",
    ErrorCode.ILLEGAL_GENERATION: (
        "the generation is not the group's current one; rejoin (keep the member id, "
        "drop owned partitions)"
    ),
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: (
        "the member's protocol type or protocols share nothing with the group's"
    ),
    ErrorCode.INVALID_GROUP_ID: "the group id is empty or invalid",
    ErrorCode.UNKNOWN_MEMBER_ID: "the member id is not known to the group; rejoin with an empty id",
    ErrorCode.INVALID_SESSION_TIMEOUT: (
        "the session timeout is outside the coordinator's configured minimum and maximum"
    ),
    ErrorCode.REBALANCE_IN_PROGRESS: "the group is rebalancing; rejoin",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "the credentials do not allow this operation",
    ErrorCode.UNSUPPORTED_VERSION: "the request version is not supported",
    ErrorCode.INVALID_REQUEST: "the request is malformed",
    ErrorCode.NON_EMPTY_GROUP: "the group still has members",
    ErrorCode.GROUP_ID_NOT_FOUND: "no such group",
    ErrorCode.MEMBER_ID_REQUIRED: "rejoin with the member id given in this response",
    ErrorCode.GROUP_MAX_SIZE_REACHED: "the group has reached its maximum size",
    ErrorCode.FENCED_INSTANCE_ID: (
        "another process has taken over this group.instance.id; this member is fenced and must stop"
    ),
    ErrorCode.FENCED_MEMBER_EPOCH: (
        "the member epoch is behind the group's; rejoin with epoch 0, dropping owned partitions"
    ),
    ErrorCode.UNRELEASED_INSTANCE_ID: (
        "another member still holds this group.instance.id (within its session); the instance "
        "id is released when that member leaves or its session expires"
    ),
    ErrorCode.UNSUPPORTED_ASSIGNOR: "the broker has no server-side assignor of that name",
    ErrorCode.STALE_MEMBER_EPOCH: (
        "the commit's member epoch is not the member's current one; commit again after the "
        "next heartbeat"
    ),
    ErrorCode.INVALID_REGULAR_EXPRESSION: "the subscription's regular expression is invalid",
}


def describe_error(code: ErrorCode | int) -> str:
    try:
        error = ErrorCode(code)
    except ValueError:
        return f"unknown error code {code}"
    return f"{error.name}: {ERROR_MESSAGES[error]}"


class CoordinatorError(Exception):
    """A Kafka error surfaced to a caller as an exception (client side, admin APIs)."""

    def __init__(self, code: ErrorCode, detail: str = "") -> None:
        self.code = code
        self.detail = detail
        message = describe_error(code)
        super().__init__(f"{message} ({detail})" if detail else message)
