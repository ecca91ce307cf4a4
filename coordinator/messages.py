"""Request and response shapes, named after Kafka's group messages (snake_case fields).

Bytes fields (protocol metadata, assignments) are opaque to the coordinator, as in Kafka:
only members and their assignors decode them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from coordinator.errors import ErrorCode

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


@dataclass(frozen=True, slots=True)
class IntRange:
    """Bounds of an integer field on the wire (`coordinator.wire` refuses values outside)."""

    minimum: int
    maximum: int
    format: str


# Kafka's INT32 fields (timeouts, generations, partitions): a wider value is a malformed
# request, as it could not even be encoded in Kafka's protocol.
Int32 = Annotated[int, IntRange(-(2**31), 2**31 - 1, "int32")]


@dataclass(frozen=True, slots=True)
class JoinGroupProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[JoinGroupProtocol]
    reason: str | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes
    # Our extension: the assignment this member (by instance id when static) last received
    # from the coordinator, so a leader's static-sticky assignor can give a restarted member
    # that lost its memory its partitions back. Empty when there is none.
    last_assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: ErrorCode
    generation_id: Int32 = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list[JoinGroupResponseMember] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SyncGroupRequestAssignment:
    member_id: str
    assignment: bytes


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: list[SyncGroupRequestAssignment] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: list[MemberIdentity]


@dataclass(frozen=True, slots=True)
class LeaveGroupMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error_code: ErrorCode
    members: list[LeaveGroupMemberResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    topic: str
    partition: Int32
    committed_offset: int
    committed_metadata: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None
    partitions: list[OffsetCommitPartition]


@dataclass(frozen=True, slots=True)
class OffsetCommitPartitionResponse:
    topic: str
    partition: Int32
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    error_code: ErrorCode
    partitions: list[OffsetCommitPartitionResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    # None fetches every committed partition of the group (Kafka's "all partitions").
    partitions: list[tuple[str, Int32]] | None = None
    member_id: str | None = None
    generation_id: Int32 = NO_GENERATION
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetFetchPartition:
    topic: str
    partition: Int32
    committed_offset: int
    metadata: str | None
    error_code: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error_code: ErrorCode
    partitions: list[OffsetFetchPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes
    # Our extension: every protocol name the member offered, in its order of preference.
    supported_protocols: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error_code: ErrorCode
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: list[DescribedGroupMember] = field(default_factory=list)
    generation_id: Int32 = NO_GENERATION
    leader: str = ""


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
