"""staticfleet's embedded group coordinator: Kafka's consumer-group protocol semantics.

No Kubernetes here. The public names below are the contract the operator, the member
clients and the server build on (see docs/coordinator.md).
"""

from typing import TYPE_CHECKING

from coordinator.lazy_exports import lazy_exports

# Each name below is imported from its module when first used (coordinator/lazy_exports.py),
# so a process imports only the modules it uses. mypy reads the imports; tests/cli/
# test_start_imports.py checks that they, `_EXPORTS` and `__all__` name the same.
if TYPE_CHECKING:
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

_EXPORTS: dict[str, tuple[str, ...]] = {
    "coordinator.clock": ("Clock", "ManualClock", "SystemClock"),
    "coordinator.config": ("CoordinatorConfig",),
    "coordinator.coordinator": ("GroupCoordinator",),
    "coordinator.errors": ("CoordinatorError", "ErrorCode", "describe_error"),
    "coordinator.journal": ("JournalEvent", "JournalKind"),
    "coordinator.messages": (
        "DescribedGroup",
        "DescribedGroupMember",
        "HeartbeatRequest",
        "HeartbeatResponse",
        "JoinGroupProtocol",
        "JoinGroupRequest",
        "JoinGroupResponse",
        "JoinGroupResponseMember",
        "LeaveGroupMemberResponse",
        "LeaveGroupRequest",
        "LeaveGroupResponse",
        "ListedGroup",
        "MemberIdentity",
        "OffsetCommitPartition",
        "OffsetCommitPartitionResponse",
        "OffsetCommitRequest",
        "OffsetCommitResponse",
        "OffsetFetchPartition",
        "OffsetFetchRequest",
        "OffsetFetchResponse",
        "SyncGroupRequest",
        "SyncGroupRequestAssignment",
        "SyncGroupResponse",
    ),
    "coordinator.state": ("GroupState",),
    "coordinator.store": ("MemoryStore", "SqliteStore", "Store", "StoreError", "open_store"),
}
__getattr__ = lazy_exports(__name__, _EXPORTS)

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
