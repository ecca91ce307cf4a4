"""`GroupCoordinator`: the embedded group coordinator's public face.

Behaviour is Kafka's classic group coordinator. Composition, as Kafka's group-coordinator
module: this class owns a membership manager (JoinGroup, SyncGroup, Heartbeat, LeaveGroup
and their timers), an offsets manager (commit/fetch) and a standby manager, each given one
`CoordinatorContext` (`runtime`: settings, clock, keyed timers, store, journal, the groups
map, the one write path). This module keeps lifecycle, the error guard, the request API
and the admin calls; each admin call that changes something is an operation on the same
write path as the requests (`CoordinatorContext.write`). Rules per state are in
`coordinator.state`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from coordinator.clock import Clock, SystemClock, TimerHandle
from coordinator.config import CoordinatorConfig
from coordinator.errors import ErrorCode
from coordinator.expected_members import ExpectedMembers
from coordinator.group import ClassicGroup
from coordinator.identifiers import valid_id
from coordinator.journal import JournalEvent, JournalKind
from coordinator.membership import MembershipManager
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
from coordinator.offsets import OffsetManager
from coordinator.records import StoreBatch
from coordinator.runtime import CoordinatorContext, CoordinatorResult, JournalListener
from coordinator.standby import (
    PromoteResponse,
    StandbyHeartbeatRequest,
    StandbyHeartbeatResponse,
    StandbyList,
)
from coordinator.standby_protocol import StandbyManager
from coordinator.state import GroupState
from coordinator.store import MemoryStore, Store, StoreError
from coordinator.subscriptions import (
    changed_topics,
    topic_counts,
    unowned_partitions,
)
from coordinator.timers import Timers

log = logging.getLogger("coordinator")
R = TypeVar("R")


class GroupCoordinator:
    """The public face: lifecycle, the request API, admin calls (describe, list, delete,
    topic metadata, journal). It owns the managers that do the work, each given the same
    `CoordinatorContext`: membership (`coordinator.membership`), offsets
    (`coordinator.offsets`) and hot standby (`coordinator.standby_protocol`)."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        clock: Clock | None = None,
        store: Store | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.clock: Clock = clock or SystemClock()
        self.store: Store = store or MemoryStore()
        self._use_state(CoordinatorContext(self.config, self.clock, self.store))
        self._topics_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        self._journal_prune_timer: TimerHandle | None = None
        self._holder: str | None = None  # the mark this coordinator put on the store

    def _use_state(self, ctx: CoordinatorContext) -> None:
        """`ctx` and the managers over it become the coordinator's in-memory state."""
        self._ctx = ctx
        self._membership = MembershipManager(ctx)
        self._offsets = OffsetManager(ctx, self._membership)
        self._standby = StandbyManager(ctx, self._membership)

    def _drop_state(self) -> None:
        """A fresh, empty in-memory state over the same settings, clock and store; the
        journal listeners and the store-failure counts are the embedder's and carry over."""
        fresh = CoordinatorContext(self.config, self.clock, self.store)
        fresh.journal_listeners = self._ctx.journal_listeners
        fresh.store_failures = self._ctx.store_failures
        self._use_state(fresh)

    @property
    def timers(self) -> Timers[ClassicGroup]:
        """The keyed group timers (tests assert which are armed)."""
        return self._ctx.timers

    @property
    def _groups(self) -> dict[str, ClassicGroup]:
        # Tests inspect groups through this name.
        return self._ctx.groups

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def is_ready(self) -> bool:
        return self._started and not self._closed

    def add_journal_listener(self, callback: JournalListener) -> None:
        self._ctx.journal_listeners.append(callback)

    async def _guard(self, handler: Awaitable[R], failed: Callable[[ErrorCode], R]) -> R:
        """Never let an exception out of the coordinator: answer with a Kafka error."""
        if not self.is_ready:
            if asyncio.iscoroutine(handler):
                handler.close()
            return failed(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        try:
            return await handler
        except StoreError as error:
            self._ctx.store_failures.failed(error)
            return failed(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        except Exception:
            log.exception("unexpected error while handling a request")
            return failed(ErrorCode.UNKNOWN_SERVER_ERROR)

    async def start(self, holder: str | None = None) -> None:
        """Open the store and load every group as it was last persisted (again after
        `suspend()`). `holder`: mark the store held by this name first, released again by
        `suspend()` and `close()` (operator replicas hand it over; docs/operator.md,
        "Replicas and the store")."""
        if self._started or self._closed:
            return
        ctx = self._ctx
        await ctx.store.open()
        if holder is not None:
            await ctx.store.set_holder(holder)
            self._holder = holder
        snapshot = await ctx.store.load()
        ctx.journal_seq = snapshot.last_journal_seq
        ctx.topics = dict(snapshot.topics)
        self._offsets.committed = snapshot.offsets
        # Before the groups' timers: a group reloaded mid-scale-up waits for the same set.
        ctx.expected_members = await ctx.store.expected_members()
        self._standby.promotions = await ctx.store.promotions()
        for record in snapshot.groups:
            group = ClassicGroup.from_record(record)
            group.persisted_record = record
            ctx.groups[group.group_id] = group
            # Members must heartbeat within a session timeout of the restart, as in Kafka.
            for member in group.members.values():
                self._membership.schedule_session_timeout(group, member)
        await self._rebalance_stale_groups()
        self._started = True
        self._schedule_journal_prune()
        log.info("coordinator started with %d group(s)", len(ctx.groups))

    async def close(self) -> None:
        """Stop every timer, answer parked requests, flush and close the store."""
        if self._closed:
            return
        self._closed = True
        await self._stop_serving()
        await self._ctx.store.close()

    async def suspend(self) -> None:
        """Give the store up until `start()` is called again: the operator's replica that
        is no longer the active one, while another replica writes the same store
        (docs/operator.md, "Replicas and the store"). Requests are refused from now on
        (COORDINATOR_NOT_AVAILABLE), parked ones answered so, timers stopped, the
        in-memory state dropped and the store marked released (it stays open, for
        `store_holder`), so that no session of the state it held expires into the store
        behind the active replica's back, and `start()` loads the store as it is then."""
        if self._closed:
            return
        if not self._started:
            await self._release()  # a start that marked the store, then failed to load it
            return
        self._started = False
        await self._stop_serving()
        self._drop_state()
        log.info("coordinator suspended: the store is released, its state dropped")

    async def store_holder(self) -> str | None:
        """Who holds the store, by its mark (`start(holder=...)`); None: released."""
        return await self._ctx.store.holder()

    async def _stop_serving(self) -> None:
        if self._journal_prune_timer is not None:
            self._journal_prune_timer.cancel()
            self._journal_prune_timer = None
        self._ctx.timers.cancel_all()
        for group in list(self._ctx.groups.values()):
            await self._ctx.write(group, self._close_group, group)
        await self._release()

    async def _release(self) -> None:
        """Clear the store's mark, only once nothing of ours can write any more, and only
        our own (a replica that took the store over meanwhile has put its own)."""
        if self._holder is None:
            return
        holder, self._holder = self._holder, None
        try:
            if await self._ctx.store.holder() == holder:
                await self._ctx.store.set_holder(None)
        except StoreError:
            log.exception("could not mark the store released; the next holder waits")

    def _close_group(self, group: ClassicGroup) -> CoordinatorResult[None]:
        for member in group.members.values():
            member.complete_join(
                JoinGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id="")
            )
            member.complete_sync(SyncGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        return self._ctx.result(group, None)

    # --- requests -----------------------------------------------------------------------

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        def failed(code: ErrorCode) -> JoinGroupResponse:
            return JoinGroupResponse(code, member_id=request.member_id)

        return await self._guard(self._membership.join_group(request), failed)

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        return await self._guard(self._membership.sync_group(request), SyncGroupResponse)

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self._guard(self._membership.heartbeat(request), HeartbeatResponse)

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        return await self._guard(self._membership.leave_group(request), LeaveGroupResponse)

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        def failed(code: ErrorCode) -> OffsetCommitResponse:
            return OffsetCommitResponse(
                code,
                [
                    OffsetCommitPartitionResponse(p.topic, p.partition, code)
                    for p in request.partitions
                ],
            )

        return await self._guard(self._offsets.commit_offsets(request), failed)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        return await self._guard(self._offsets.fetch_offsets(request), OffsetFetchResponse)

    # --- hot standby (`coordinator.standby_protocol`) ------------------------------------

    async def standby_heartbeat(self, request: StandbyHeartbeatRequest) -> StandbyHeartbeatResponse:
        return await self._guard(self._standby.heartbeat(request), StandbyHeartbeatResponse)

    async def promote(self, group_id: str, standby_id: str, instance_id: str) -> PromoteResponse:
        def failed(code: ErrorCode) -> PromoteResponse:
            return PromoteResponse(code, detail="the coordinator could not promote")

        return await self._guard(self._standby.promote(group_id, standby_id, instance_id), failed)

    def standbys(self, group_id: str) -> StandbyList:
        """Standbys heard from within their session, and promotions that still hold."""
        return self._standby.standbys(group_id)

    async def forget_standbys(self, group_id: str) -> None:
        """Drop a group's standby sessions and promotion records (the group is deleted)."""
        await self._standby.forget_standbys(group_id)

    # --- groups, topics, journal -------------------------------------------------------

    async def describe_groups(self, group_ids: Sequence[str]) -> list[DescribedGroup]:
        described = []
        for group_id in group_ids:
            group = self._ctx.groups.get(group_id)
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
            for group in self._ctx.groups.values()
            if not group.is_in(GroupState.DEAD)
        ]

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            results[group_id] = await self._delete_group(group_id)
        return results

    async def topic_metadata(self) -> dict[str, int]:
        """Topic name -> partition count (a copy), as a leader needs it to assign."""
        return dict(self._ctx.topics)

    async def set_topic_metadata(self, partitions_per_topic: Mapping[str, int]) -> None:
        """Merge topic partition counts; a count of 0 removes the topic."""
        for topic, count in partitions_per_topic.items():
            if not topic or count < 0:
                raise ValueError(f"invalid topic metadata {topic!r}: {count}")
        async with self._topics_lock:
            changes = await self._ctx.write(None, self._merge_topics, partitions_per_topic)
            if changes:
                # Under the topics lock: two metadata changes start their rebalances in order.
                await self._rebalance_groups_consuming(changes)

    def _merge_topics(
        self, partitions_per_topic: Mapping[str, int]
    ) -> CoordinatorResult[dict[str, tuple[int, int]]]:
        topics = dict(self._ctx.topics)
        for topic, count in partitions_per_topic.items():
            if count == 0:
                topics.pop(topic, None)
            else:
                topics[topic] = count

        def written() -> CoordinatorResult[dict[str, tuple[int, int]]]:
            changes = changed_topics(self._ctx.topics, topics)
            self._ctx.topics = topics
            return CoordinatorResult(changes)

        return CoordinatorResult({}, StoreBatch(topics=topics), then=written)

    async def _rebalance_groups_consuming(self, changes: Mapping[str, tuple[int, int]]) -> None:
        """Kafka's consumer leader rejoins when a subscribed topic's partition count changes;
        here the metadata lives in the coordinator, so it starts that rebalance itself. Only
        Stable and CompletingRebalance groups: in PreparingRebalance the leader reads the
        metadata after the join phase anyway, and an Empty group has nobody to assign to."""
        for group in list(self._ctx.groups.values()):
            await self._ctx.write(group, self._rebalance_if_consuming, group, changes)

    def _rebalance_if_consuming(
        self, group: ClassicGroup, changes: Mapping[str, tuple[int, int]]
    ) -> CoordinatorResult[None]:
        if not group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return CoordinatorResult(None)
        consumed = group.consumed_topics()
        affected = {t: change for t, change in changes.items() if t in consumed}
        if not affected:
            return CoordinatorResult(None)
        return self._rebalance_for_metadata(group, affected)

    async def _rebalance_stale_groups(self) -> None:
        """After a restart, a loaded group that cannot stay as it was rebalances now instead
        of never:
        - it has more members than group_max_size (the limit was lowered; Kafka's onLoaded:
          the last members to rejoin are refused, after they had a chance to commit);
        - it is Stable with an assignment made with other partition counts than the stored
          metadata (the change was written, the coordinator stopped before the group's new
          generation);
        - it is Stable with subscribed partitions nobody owns: a cooperative rebalance holds
          revoked partitions back for its follow-up rebalance, which lived in memory only;
          restarted members rejoin statically with their cached assignments and nobody would
          ever ask for that follow-up again."""
        limit = self._ctx.config.group_max_size
        for group in list(self._ctx.groups.values()):
            await self._ctx.write(group, self._rebalance_if_stale, group, limit)

    def _rebalance_if_stale(
        self, group: ClassicGroup, limit: int | None
    ) -> CoordinatorResult[None]:
        if limit is not None and len(group.members) > limit:
            self._membership.prepare_rebalance(
                group,
                f"loaded with {len(group.members)} members, over group_max_size {limit}",
            )
            return self._ctx.result(group, None)
        if not group.is_in(GroupState.STABLE):
            return CoordinatorResult(None)
        if group.assigned_topics:
            current = topic_counts(group.assigned_topics, self._ctx.topics)
            affected = {
                t: (count, current[t])
                for t, count in group.assigned_topics.items()
                if count != current[t]
            }
            if affected:
                return self._rebalance_for_metadata(group, affected)
        unowned = unowned_partitions(
            topic_counts(group.consumed_topics(), self._ctx.topics),
            (member.assignment for member in group.members.values()),
        )
        if not unowned:
            return CoordinatorResult(None)
        self._membership.prepare_rebalance(
            group, f"loaded with {unowned} subscribed partition(s) unowned"
        )
        return self._ctx.result(group, None)

    def _rebalance_for_metadata(
        self, group: ClassicGroup, affected: Mapping[str, tuple[int, int]]
    ) -> CoordinatorResult[None]:
        self._ctx.journal(
            group,
            JournalKind.TOPIC_METADATA_CHANGED,
            None,
            topics={t: list(change) for t, change in affected.items()},
        )
        described = ", ".join(f"{t} {old}->{new}" for t, (old, new) in affected.items())
        self._membership.prepare_rebalance(group, f"topic metadata changed: {described}")

        def failed(error: StoreError) -> CoordinatorResult[None]:
            # The rebalance has started in memory; members learn of it regardless.
            log.error(
                "group %s: cannot write the metadata rebalance", group.group_id, exc_info=error
            )
            return CoordinatorResult(None)

        return self._ctx.result(group, None, failed=failed)

    async def journal_rows(
        self, group_id: str | None = None, since_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        return await self._ctx.store.journal_rows(group_id, since_seq, limit)

    async def prune_journal(self) -> int:
        """Apply the journal retention now (it also runs every journal_prune_interval_ms);
        returns how many rows were deleted."""
        config = self._ctx.config
        older_than = (
            None
            if config.journal_retention_ms is None
            else self._ctx.clock.now_ms() - config.journal_retention_ms
        )
        if older_than is None and config.journal_retention_rows is None:
            return 0
        deleted = await self._ctx.store.prune_journal(older_than, config.journal_retention_rows)
        if deleted:
            log.info("journal retention: deleted %d row(s)", deleted)
        return deleted

    def _schedule_journal_prune(self) -> None:
        async def prune_and_reschedule() -> None:
            if not self.is_ready:
                return
            try:
                await self.prune_journal()
            except StoreError:
                log.exception("journal retention failed; trying again next interval")
            if self.is_ready:  # not closed or suspended meanwhile
                self._schedule_journal_prune()

        self._journal_prune_timer = self._ctx.clock.call_later(
            self._ctx.config.journal_prune_interval_ms, prune_and_reschedule
        )

    def group_state(self, group_id: str) -> GroupState | None:
        group = self._ctx.groups.get(group_id)
        return None if group is None else group.state

    def group_size(self, group_id: str) -> int:
        """Members plus members still joining (0 for an unknown group)."""
        group = self._ctx.groups.get(group_id)
        return 0 if group is None else len(group.members) + len(group.pending_members)

    def generation_of(self, group_id: str) -> int:
        group = self._ctx.groups.get(group_id)
        return NO_GENERATION if group is None else group.generation_id

    # --- admin -------------------------------------------------------------------------------

    def _describe(self, group_id: str) -> DescribedGroup:
        group = self._ctx.groups.get(group_id)
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

    # --- expected members ---------------------------------------------------------------

    def expected_members(self, group_id: str) -> ExpectedMembers | None:
        return self._ctx.expected_members.get(group_id)

    async def set_expected_members(
        self, group_id: str, instance_ids: Sequence[str], timeout_ms: int
    ) -> ExpectedMembers:
        """Expect the static members a group should have: a join phase is held until all
        of them have joined or `timeout_ms` (from now, at most the new-member join timeout)
        has passed, so a scale-up is one rebalance. Replaces the group's earlier expected members.
        Raises ValueError for invalid input."""
        if not group_id or not valid_id(group_id):
            raise ValueError(f"invalid group id {group_id!r}")
        if not instance_ids:
            raise ValueError("expected instance ids must not be empty (clear instead)")
        for instance_id in instance_ids:
            if not instance_id or not valid_id(instance_id):
                raise ValueError(f"invalid group instance id {instance_id!r}")
        if timeout_ms <= 0:
            raise ValueError(f"expected members timeout must be positive, got {timeout_ms}")
        # Capped: a new member parked longer than the new-member join timeout is dropped, so
        # waiting longer for the others would lose the ones already here.
        timeout_ms = min(timeout_ms, self._ctx.config.group_new_member_join_timeout_ms)
        expected = ExpectedMembers(
            instance_ids=frozenset(instance_ids),
            timeout_ms=timeout_ms,
            deadline_ms=self._ctx.clock.now_ms() + timeout_ms,
        )
        await self._apply_expected_members(group_id, expected)
        log.info(
            "group %s: expecting %d member(s) for up to %d ms",
            group_id,
            len(expected.instance_ids),
            timeout_ms,
        )
        return expected

    async def clear_expected_members(self, group_id: str) -> None:
        """Forget a group's expected members; a held join phase ends as it would have."""
        if not group_id or not valid_id(group_id):
            raise ValueError(f"invalid group id {group_id!r}")
        await self._apply_expected_members(group_id, None)

    async def _apply_expected_members(
        self, group_id: str, expected: ExpectedMembers | None
    ) -> None:
        group = self._ctx.groups.get(group_id)
        await self._ctx.write(group, self._expected_members_in_group, group_id, group, expected)

    def _expected_members_in_group(
        self, group_id: str, group: ClassicGroup | None, expected: ExpectedMembers | None
    ) -> CoordinatorResult[None]:
        """Written first: the coordinator never holds a join phase it would forget."""

        def written() -> CoordinatorResult[None]:
            if group is None:
                self._set_expected_members(group_id, expected)
                return CoordinatorResult(None)
            held = self._membership.expected_members_hold_ms(group) > 0
            self._set_expected_members(group_id, expected)
            if (
                held
                and group.is_in(GroupState.PREPARING_REBALANCE)
                and self._membership.expected_members_hold_ms(group) == 0
            ):
                # The join timer was armed for the hold: give the members a rebalance
                # timeout from now, then end the phase now if everyone is here.
                self._membership.cancel_join_timer(group)
                self._membership.arm_join_timer(group, group.rebalance_timeout_ms())
            self._membership.maybe_complete_join(group)
            return self._ctx.result(group, None)

        return CoordinatorResult(
            None, StoreBatch(expected_members=[(group_id, expected)]), then=written
        )

    def _set_expected_members(self, group_id: str, expected: ExpectedMembers | None) -> None:
        if expected is None:
            self._ctx.expected_members.pop(group_id, None)
        else:
            self._ctx.expected_members[group_id] = expected

    async def _delete_group(self, group_id: str) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._ctx.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND
        return await self._ctx.write(group, self._delete_in_group, group)

    def _delete_in_group(self, group: ClassicGroup) -> CoordinatorResult[ErrorCode]:
        if group.members or group.pending_members:
            return CoordinatorResult(ErrorCode.NON_EMPTY_GROUP)
        group_id = group.group_id
        self._membership.cancel_group_timers(group)
        group.transition_to(GroupState.DEAD)
        self._ctx.journal(group, JournalKind.GROUP_DELETED, None)
        group.pending_writes.deleted_groups.append(group_id)

        def written() -> CoordinatorResult[ErrorCode]:
            self._offsets.committed.pop(group_id, None)
            if self._ctx.groups.get(group_id) is group:
                del self._ctx.groups[group_id]
            return CoordinatorResult(ErrorCode.NONE)

        def failed(error: StoreError) -> CoordinatorResult[ErrorCode]:
            group.state = GroupState.EMPTY  # nothing was deleted; not a protocol transition
            raise error

        return self._ctx.result(group, ErrorCode.NONE, then=written, failed=failed)
