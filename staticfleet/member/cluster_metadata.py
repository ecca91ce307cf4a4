"""A transport whose topic metadata comes from the Kafka cluster the member reads."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
from coordinator.client.transport import Transport
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


class ClusterTopicMetadata:
    """A transport whose topic metadata comes from the Kafka cluster the member reads.

    The group's leader assigns the partitions the cluster has (as a Kafka consumer's leader
    does from its own metadata), so partition counts need not be repeated by hand.
    """

    def __init__(
        self,
        transport: Transport,
        bootstrap: str,
        topics: Sequence[str],
        settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
    ) -> None:
        self._transport = transport
        self._bootstrap = bootstrap
        self._topics = tuple(topics)
        self._settings = settings

    async def topic_metadata(self) -> dict[str, int]:
        from staticfleet.kafka.source import partition_counts

        return await asyncio.to_thread(
            partition_counts, self._bootstrap, self._topics, settings=self._settings
        )

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        return await self._transport.join_group(request)

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        return await self._transport.sync_group(request)

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self._transport.heartbeat(request)

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        return await self._transport.leave_group(request)

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        return await self._transport.commit_offsets(request)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        return await self._transport.fetch_offsets(request)

    async def standby_heartbeat(self, request: StandbyHeartbeatRequest) -> StandbyHeartbeatResponse:
        return await self._transport.standby_heartbeat(request)

    async def close(self) -> None:
        await self._transport.close()
