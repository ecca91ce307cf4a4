"""`GroupCoordinator`: the embedded group coordinator's public face.

Behaviour is Kafka's classic group coordinator. The work is split one job per module:
`runtime` (settings, store writes, journal, error guard) → `membership` (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup and their timers) → `offsets` (commit/fetch) → this module
(lifecycle, the request API, admin calls). Rules per state are in `coordinator.state`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from coordinator.errors import ErrorCode
from coordinator.group import ClassicGroup
from coordinator.journal import JournalEvent, JournalKind
from coordinator.messages import (
    NO_GENERATION,
    DescribedGroup,
    DescribedGroupMember,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator.offsets import OffsetProtocol
from coordinator.records import StoreBatch
from coordinator.state import GroupState
from coordinator.store import StoreError

log = logging.getLogger("coordinator")


class GroupCoordinator(OffsetProtocol):
    """The public face: lifecycle, the request API, admin calls (describe, list, delete,
    topic metadata, journal). Handlers live in the base classes, one job per module."""

    async def start(self) -> None:
        """Open the store and load every group as it was last persisted."""
        if self._started:
            return
        await self.store.open()
        snapshot = await self.store.load()
        self._journal_seq = snapshot.last_journal_seq
        self._topics = dict(snapshot.topics)
        self._offsets = snapshot.offsets
        for record in snapshot.groups:
            group = ClassicGroup.from_record(record)
            group.persisted_record = record
            self._groups[group.group_id] = group
            # Members must heartbeat within a session timeout of the restart, as in Kafka.
            for member in group.members.values():
                self._schedule_session_timeout(group, member)
            limit = self.config.group_max_size
            if limit is not None and len(group.members) > limit:
                # As Kafka's onLoaded: the limit was lowered; rebalance so the last members
                # to rejoin are refused (after they had a chance to commit offsets).
                self._prepare_rebalance(
                    group,
                    f"loaded with {len(group.members)} members, over group_max_size {limit}",
                )
                await self._flush(group)
        self._started = True
        log.info("coordinator started with %d group(s)", len(self._groups))

    async def close(self) -> None:
        """Stop every timer, answer parked requests, flush and close the store."""
        if self._closed:
            return
        self._closed = True
        for group in self._groups.values():
            async with group.lock:
                self._cancel_group_timers(group)
                for member in group.members.values():
                    member.cancel_session_timer()
                    member.complete_join(
                        JoinGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id="")
                    )
                    member.complete_sync(SyncGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE))
                await self._flush(group)
        await self.store.close()

    # --- requests -----------------------------------------------------------------------

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        def failed(code: ErrorCode) -> JoinGroupResponse:
            return JoinGroupResponse(code, member_id=request.member_id)

        return await self._guard(self._join_group(request), failed)

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        return await self._guard(self._sync_group(request), SyncGroupResponse)

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self._guard(self._heartbeat(request), HeartbeatResponse)

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        return await self._guard(self._leave_group(request), LeaveGroupResponse)

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        def failed(code: ErrorCode) -> OffsetCommitResponse:
            return OffsetCommitResponse(
                code,
                [
                    OffsetCommitPartitionResponse(p.topic, p.partition, code)
                    for p in request.partitions
                ],
            )

        return await self._guard(self._commit_offsets(request), failed)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        return await self._guard(self._fetch_offsets(request), OffsetFetchResponse)

    async def describe_groups(self, group_ids: Sequence[str]) -> list[DescribedGroup]:
        described = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None:
                described.append(self._describe(group_id))
                continue
            # Under the group lock, as Kafka: a change is described only once its write is
            # done, so a caller that acts on a description never acts on unpersisted state.
            async with group.lock:
                described.append(self._describe(group_id))
        return described

    async def list_groups(self) -> list[ListedGroup]:
        return [
            ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
            for group in self._groups.values()
            if not group.is_in(GroupState.DEAD)
        ]

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            results[group_id] = await self._delete_group(group_id)
        return results

    def topic_metadata(self) -> dict[str, int]:
        return dict(self._topics)

    async def set_topic_metadata(self, partitions_per_topic: Mapping[str, int]) -> None:
        """Merge topic partition counts; a count of 0 removes the topic."""
        for topic, count in partitions_per_topic.items():
            if not topic or count < 0:
                raise ValueError(f"invalid topic metadata {topic!r}: {count}")
        async with self._topics_lock:
            topics = dict(self._topics)
            for topic, count in partitions_per_topic.items():
                if count == 0:
                    topics.pop(topic, None)
                else:
                    topics[topic] = count
            await self.store.write(StoreBatch(topics=topics))
            self._topics = topics

    async def journal_rows(
        self, group_id: str | None = None, since_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        return await self.store.journal_rows(group_id, since_seq, limit)

    def group_state(self, group_id: str) -> GroupState | None:
        group = self._groups.get(group_id)
        return None if group is None else group.state

    def generation_of(self, group_id: str) -> int:
        group = self._groups.get(group_id)
        return NO_GENERATION if group is None else group.generation_id

    # --- admin -------------------------------------------------------------------------------

    def _describe(self, group_id: str) -> DescribedGroup:
        group = self._groups.get(group_id)
        if not group_id:
            return DescribedGroup(
                ErrorCode.INVALID_GROUP_ID, group_id, GroupState.DEAD.value, "", ""
            )
        if group is None or group.is_in(GroupState.DEAD):
            return DescribedGroup(
                ErrorCode.GROUP_ID_NOT_FOUND, group_id, GroupState.DEAD.value, "", ""
            )
        stable = group.is_in(GroupState.STABLE)
        members = [
            DescribedGroupMember(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                # As Kafka: metadata only once Stable; the assignment in every state (during
                # a rebalance it is the previous generation's, empty once a sync failed).
                member_metadata=(
                    member.metadata_for(group.protocol_name)
                    if stable and group.protocol_name
                    else b""
                ),
                member_assignment=member.assignment,
                supported_protocols=member.protocol_names,
            )
            for member in group.members.values()
        ]
        return DescribedGroup(
            error_code=ErrorCode.NONE,
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=members,
            generation_id=group.generation_id,
            leader=group.leader_id or "",
        )

    async def _delete_group(self, group_id: str) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND
        async with group.lock:
            if group.members or group.pending_members:
                return ErrorCode.NON_EMPTY_GROUP
            self._cancel_group_timers(group)
            group.transition_to(GroupState.DEAD)
            self._journal(group, JournalKind.GROUP_DELETED, None)
            group.pending_writes.deleted_groups.append(group_id)
            try:
                await self._flush(group)
            except StoreError:
                group.state = GroupState.EMPTY  # nothing was deleted; not a protocol transition
                raise
            self._offsets.pop(group_id, None)
            if self._groups.get(group_id) is group:
                del self._groups[group_id]
        return ErrorCode.NONE
