"""A transport that calls a `GroupCoordinator` on the same event loop (tests, embedding)."""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from coordinator.coordinator import GroupCoordinator


class InProcessTransport:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self._coordinator = coordinator

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        return await self._coordinator.join_group(request)

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        return await self._coordinator.sync_group(request)

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self._coordinator.heartbeat(request)

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        return await self._coordinator.leave_group(request)

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        return await self._coordinator.commit_offsets(request)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        return await self._coordinator.fetch_offsets(request)

    async def standby_heartbeat(self, request: StandbyHeartbeatRequest) -> StandbyHeartbeatResponse:
        return await self._coordinator.standby_heartbeat(request)

    async def topic_metadata(self) -> dict[str, int]:
        return await self._coordinator.topic_metadata()

    async def close(self) -> None:
        # The coordinator belongs to whoever created it; nothing of ours to release.
        return None
