"""Offset commit and fetch, validated against the group's members as Kafka does."""

from __future__ import annotations

from coordinator.errors import ErrorCode
from coordinator.group import ClassicGroup
from coordinator.identifiers import valid_id
from coordinator.membership import MembershipManager
from coordinator.messages import (
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from coordinator.records import OffsetRecord
from coordinator.runtime import CoordinatorContext, CoordinatorResult
from coordinator.state import GroupState


class OffsetManager:
    """Committed offsets by group; a commit from a member is a sign of life (membership)."""

    def __init__(self, context: CoordinatorContext, membership: MembershipManager) -> None:
        self._ctx = context
        self._membership = membership
        self.committed: dict[str, dict[tuple[str, int], OffsetRecord]] = {}

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        if not request.group_id or not valid_id(request.group_id):
            return _everywhere(request, ErrorCode.INVALID_GROUP_ID)
        group = self._ctx.groups.get(request.group_id)
        if group is None:
            if request.generation_id >= 0:
                # A commit from an older generation of a group that no longer exists.
                return _everywhere(request, ErrorCode.ILLEGAL_GENERATION)
            # A group not using group management commits offsets only.
            group = ClassicGroup(request.group_id)
            group.needs_persist = True
            self._ctx.groups[group.group_id] = group
        return await self._ctx.write(group, self._commit_in_group, group, request)

    def _commit_in_group(
        self, group: ClassicGroup, request: OffsetCommitRequest
    ) -> CoordinatorResult[OffsetCommitResponse]:
        """The OffsetCommit operation (under the group lock, no I/O): the answer, and the
        accepted offsets as records; they are served from memory only once written."""
        code = self._validate_commit(group, request)
        if code is not ErrorCode.NONE:
            return self._ctx.result(group, _everywhere(request, code))
        member = group.members.get(request.member_id)
        if member is not None:
            self._membership.touch(group, member)
        now = self._ctx.clock.now_ms()
        results: list[OffsetCommitPartitionResponse] = []
        accepted: list[OffsetRecord] = []
        for partition in request.partitions:
            if not partition.topic or partition.partition < 0 or (partition.committed_offset < -1):
                results.append(
                    OffsetCommitPartitionResponse(
                        partition.topic, partition.partition, ErrorCode.INVALID_REQUEST
                    )
                )
                continue
            if _metadata_bytes(partition.committed_metadata) > (
                self._ctx.config.offset_metadata_max_bytes
            ):
                results.append(
                    OffsetCommitPartitionResponse(
                        partition.topic,
                        partition.partition,
                        ErrorCode.OFFSET_METADATA_TOO_LARGE,
                    )
                )
                continue
            accepted.append(
                OffsetRecord(
                    partition.topic,
                    partition.partition,
                    partition.committed_offset,
                    partition.committed_metadata,
                    now,
                )
            )
            results.append(
                OffsetCommitPartitionResponse(partition.topic, partition.partition, ErrorCode.NONE)
            )
        response = OffsetCommitResponse(ErrorCode.NONE, results)
        if not accepted:
            return self._ctx.result(group, response)
        group.pending_writes.offsets.extend((group.group_id, record) for record in accepted)

        def written() -> CoordinatorResult[OffsetCommitResponse]:
            offsets = self.committed.setdefault(group.group_id, {})
            for record in accepted:
                offsets[(record.topic, record.partition)] = record
            return CoordinatorResult(response)

        return self._ctx.result(group, response, then=written)

    def _validate_commit(self, group: ClassicGroup, request: OffsetCommitRequest) -> ErrorCode:
        """Kafka's ClassicGroup.validateOffsetCommit, in its order: the member and its
        generation first, and only then REBALANCE_IN_PROGRESS while syncing."""
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if request.generation_id < 0 and group.is_in(GroupState.EMPTY):
            # A consumer not using group management (or an admin) commits to an empty group.
            return ErrorCode.NONE
        if (
            request.generation_id >= 0
            or request.member_id
            or (request.group_instance_id is not None)
        ):
            code = self._ctx.validate_member(
                group, request.member_id, request.group_instance_id, "commit"
            )
            if code is not ErrorCode.NONE:
                return code
            if request.generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not group.is_in(GroupState.EMPTY):
            # No member id and no generation: only an empty group takes such a commit.
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        """As Kafka's broker for classic groups: member id and generation are not checked
        (the request carries them for the consumer protocol of KIP-848 only)."""
        if not request.group_id:
            return OffsetFetchResponse(ErrorCode.INVALID_GROUP_ID)
        group = self._ctx.groups.get(request.group_id)
        deleting = group is not None and group.is_in(GroupState.DEAD)
        offsets = {} if deleting else self.committed.get(request.group_id, {})
        if request.partitions is None:
            wanted = sorted(offsets)
        else:
            wanted = [(topic, partition) for topic, partition in request.partitions]
        partitions = []
        for topic, partition in wanted:
            record = offsets.get((topic, partition))
            partitions.append(
                OffsetFetchPartition(
                    topic,
                    partition,
                    record.committed_offset if record else -1,
                    record.metadata if record else None,
                )
            )
        return OffsetFetchResponse(ErrorCode.NONE, partitions)


def _everywhere(request: OffsetCommitRequest, code: ErrorCode) -> OffsetCommitResponse:
    partitions = [
        OffsetCommitPartitionResponse(p.topic, p.partition, code) for p in request.partitions
    ]
    return OffsetCommitResponse(code, partitions)


def _metadata_bytes(metadata: str | None) -> int:
    # Kafka measures the string's length; we measure what the store keeps: UTF-8 bytes.
    return 0 if metadata is None else len(metadata.encode("utf-8", "surrogatepass"))
