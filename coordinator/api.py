"""`GroupApi`: the eight operations the coordinator serves to members, one signature each.

The coordinator implements it, and so does every way of reaching one: the HTTP transport,
the in-process transport, the Kafka wire transport, and the tests' fakes (mypy checks each,
tests/test_group_api.py). The route table serves each operation (its member-protocol
routes are exactly these, each handled by a function of the method's name). A member's
`Transport` is a `GroupApi` plus what only a client needs (close).
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
from coordinator.standby import StandbyHeartbeatRequest, StandbyHeartbeatResponse


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

    async def standby_heartbeat(self, request: StandbyHeartbeatRequest) -> StandbyHeartbeatResponse:
        """A hot standby's sign of life; the answer names its promotion once there is one."""
        ...

    async def topic_metadata(self) -> dict[str, int]:
        """Topic name -> partition count, as the leader needs it to assign."""
        ...


# The route table's operation id of each GroupApi method.
OPERATION_IDS: Final = {
    "join_group": "joinGroup",
    "sync_group": "syncGroup",
    "heartbeat": "heartbeat",
    "leave_group": "leaveGroup",
    "commit_offsets": "commitOffsets",
    "fetch_offsets": "fetchOffsets",
    "standby_heartbeat": "standbyHeartbeat",
    "topic_metadata": "getTopics",
}
