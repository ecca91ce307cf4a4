"""`GroupApi`: the member protocol's six operations, one signature each.

The coordinator implements it, and so does every way of reaching one: the HTTP transport,
the in-process transport, the Kafka wire transport, and the tests' fakes (mypy checks each,
tests/test_group_api.py). The route table has one route per operation. A member's
`Transport` is a `GroupApi` plus what only a client needs (topic metadata, close).
"""

from __future__ import annotations

from typing import Final, Protocol

from coordinator.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)


class GroupApi(Protocol):
    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        """Long-poll: returns when the group's join phase completes."""
        ...

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        """Followers wait here until the leader's assignment arrives."""
        ...

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse: ...

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse: ...

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse: ...

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse: ...


# The route table's operation id of each GroupApi method.
OPERATION_IDS: Final = {
    "join_group": "joinGroup",
    "sync_group": "syncGroup",
    "heartbeat": "heartbeat",
    "leave_group": "leaveGroup",
    "commit_offsets": "commitOffsets",
    "fetch_offsets": "fetchOffsets",
}
