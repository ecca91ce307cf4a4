"""staticfleet's embedded group coordinator: Kafka's consumer-group protocol semantics.

No Kubernetes here. The public names below are the contract the operator, the member
clients and the server build on (see docs/coordinator.md).
"""

from coordinator.clock import Clock, ManualClock, SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.coordinator import GroupCoordinator
from coordinator.errors import CoordinatorError, ErrorCode, describe_error
from coordinator.journal import JournalEvent, JournalKind
from coordinator.messages import (
    DescribedGroup,
    DescribedGroupMember,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from coordinator.state import GroupState
from coordinator.store import MemoryStore, SqliteStore, Store, StoreError, open_store

__all__ = [
    "Clock",
    "CoordinatorConfig",
    "CoordinatorError",
    "DescribedGroup",
    "DescribedGroupMember",
    "ErrorCode",
    "GroupCoordinator",
    "GroupState",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupProtocol",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "JoinGroupResponseMember",
    "JournalEvent",
    "JournalKind",
    "LeaveGroupMemberResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListedGroup",
    "ManualClock",
    "MemberIdentity",
    "MemoryStore",
    "OffsetCommitPartition",
    "OffsetCommitPartitionResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchPartition",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "SqliteStore",
    "Store",
    "StoreError",
    "SyncGroupRequest",
    "SyncGroupRequestAssignment",
    "SyncGroupResponse",
    "SystemClock",
    "describe_error",
    "open_store",
]
