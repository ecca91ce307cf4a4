"""The membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the timers
that end join phases, sync phases and sessions.

Kafka's classic group coordinator, including static membership (KIP-345), member-id-required
(KIP-394) and the static leader rejoin with `skip_assignment` (KIP-814). Rules per state are
documented in `coordinator.state`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from coordinator.errors import ErrorCode
from coordinator.group import ClassicGroup, ClassicMember
from coordinator.identifiers import valid_id
from coordinator.journal import JournalKind
from coordinator.messages import (
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator.protocol import ProtocolError, decode_assignment
from coordinator.runtime import CoordinatorContext, CoordinatorResult
from coordinator.state import GroupState
from coordinator.store import StoreError
from coordinator.subscriptions import subscription_changed, topic_counts
from coordinator.timers import heartbeat_key, join_key, sync_key

log = logging.getLogger("coordinator")

# What a JoinGroup / SyncGroup decides: the answer now, or the parked request's future.
JoinOutcome = JoinGroupResponse | asyncio.Future[JoinGroupResponse]
SyncOutcome = SyncGroupResponse | asyncio.Future[SyncGroupResponse]


class MembershipManager:
    """Kafka's classic group membership, given the coordinator's context."""

    def __init__(self, context: CoordinatorContext) -> None:
        self._ctx = context

    # --- JoinGroup ----------------------------------------------------------------------

    def _validate_join(self, request: JoinGroupRequest) -> ErrorCode:
        if not request.group_id or not valid_id(request.group_id):
            return ErrorCode.INVALID_GROUP_ID
        if request.group_instance_id == "":
            return ErrorCode.INVALID_REQUEST
        if not (
            self._ctx.config.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= self._ctx.config.group_max_session_timeout_ms
        ):
            return ErrorCode.INVALID_SESSION_TIMEOUT
        if not 0 < request.rebalance_timeout_ms <= self._ctx.config.group_max_rebalance_timeout_ms:
            return ErrorCode.INVALID_REQUEST
        if not valid_id(request.group_instance_id) or not valid_id(request.member_id):
            return ErrorCode.INVALID_REQUEST
        metadata_bytes = sum(len(protocol.metadata) for protocol in request.protocols)
        if metadata_bytes > self._ctx.config.group_max_member_metadata_bytes:
            return ErrorCode.INVALID_REQUEST
        if not request.protocol_type or not request.protocols:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        names = [protocol.name for protocol in request.protocols]
        if any(not name for name in names) or len(set(names)) != len(names):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        error = self._validate_join(request)
        if error is not ErrorCode.NONE:
            return JoinGroupResponse(error, member_id=request.member_id)
        group = self._ctx.groups.get(request.group_id)
        if group is None:
            if request.member_id != UNKNOWN_MEMBER_ID:
                return JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=request.member_id)
            group = ClassicGroup(request.group_id)
            self._ctx.groups[group.group_id] = group
        outcome = await self._ctx.write(group, self._join_in_group, group, request)
        if isinstance(outcome, JoinGroupResponse):
            return outcome
        # Shield: a caller that goes away must not cancel the group's bookkeeping future.
        return await asyncio.shield(outcome)

    def _join_in_group(
        self, group: ClassicGroup, request: JoinGroupRequest
    ) -> CoordinatorResult[JoinOutcome]:
        """The JoinGroup operation (under the group lock, no I/O)."""
        outcome = self._join_outcome(group, request)
        if isinstance(outcome, CoordinatorResult):
            return outcome
        return self._ctx.result(group, outcome)

    def _join_outcome(
        self, group: ClassicGroup, request: JoinGroupRequest
    ) -> JoinOutcome | CoordinatorResult[JoinOutcome]:
        if group.is_in(GroupState.DEAD):
            # As Kafka: the group's deletion is being written; the member retries and then
            # creates the group afresh (installing a new one now would be dropped with it).
            return JoinGroupResponse(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=request.member_id
            )
        # Kafka checks the size on the request's member id. A known static member rejoining
        # with an empty id is checked as the member it replaces (see docs: where we differ).
        member_id = request.member_id or group.static_member_id(request.group_instance_id) or ""
        if not self._accepts_joining_member(group, member_id):
            self._refuse_over_capacity(group, member_id)
            return JoinGroupResponse(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if request.member_id == UNKNOWN_MEMBER_ID:
            return self._join_new_member(group, request)
        return self._join_existing_member(group, request)

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """Kafka's acceptJoiningMember: pending member ids (KIP-394) never count."""
        limit = self._ctx.config.group_max_size
        if limit is None or group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        member = group.members.get(member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            # Counting the members awaiting join (not the group size, which may exceed a
            # lowered limit) lets the last ones to rejoin be the ones refused.
            if member is not None and member.is_awaiting_join:
                return True
            return group.awaiting_join_count() < limit
        return member is not None or len(group.members) < limit

    def _refuse_over_capacity(self, group: ClassicGroup, member_id: str) -> None:
        """Kafka removes a member refused for size: it must not hold a place it cannot have."""
        if group.remove_pending_member(member_id):
            self._ctx.timers.cancel(heartbeat_key(group.group_id, member_id))
        member = group.members.get(member_id)
        if member is not None:
            self._remove_member(group, member, JournalKind.MEMBER_REMOVED, "group_max_size")

    def _join_new_member(
        self, group: ClassicGroup, request: JoinGroupRequest
    ) -> JoinOutcome | CoordinatorResult[JoinOutcome]:
        protocols = tuple((p.name, p.metadata) for p in request.protocols)
        instance_id = request.group_instance_id
        known_static = group.static_member_id(instance_id)
        if not group.supports_protocols(request.protocol_type, [p.name for p in request.protocols]):
            return JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if instance_id is not None:
            new_member_id = f"{instance_id}-{uuid.uuid4()}"
            if known_static is not None:
                return self._replace_static_member(
                    group, request, instance_id, known_static, new_member_id, protocols
                )
            return self._add_member_and_rebalance(group, request, new_member_id, protocols)
        # KIP-394: a dynamic member first learns its id, then joins with it.
        new_member_id = f"{request.client_id or 'member'}-{uuid.uuid4()}"
        self._add_pending_member(group, new_member_id, request.session_timeout_ms)
        return JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_member_id)

    def _join_existing_member(self, group: ClassicGroup, request: JoinGroupRequest) -> JoinOutcome:
        member_id = request.member_id
        protocols = tuple((p.name, p.metadata) for p in request.protocols)
        # As Kafka: protocols are checked before the member id.
        if not group.supports_protocols(request.protocol_type, [n for n, _ in protocols]):
            return JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if member_id in group.pending_members and request.group_instance_id is None:
            # `add` takes it out of the pending members; its session timer is re-armed.
            return self._add_member_and_rebalance(group, request, member_id, protocols)
        code = self._ctx.validate_member(group, member_id, request.group_instance_id, "join")
        if code is ErrorCode.NONE and group.is_in(GroupState.EMPTY):
            code = ErrorCode.UNKNOWN_MEMBER_ID
        if code is not ErrorCode.NONE:
            return JoinGroupResponse(code, member_id=member_id)
        member = group.members[member_id]
        member.client_id, member.client_host = request.client_id, request.client_host
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return self._update_member_and_rebalance(group, member, request, protocols)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # A retry of a join whose response was lost: same generation again.
                self.touch(group, member)
                return self._current_generation_response(group, member, skip_assignment=False)
            return self._update_member_and_rebalance(group, member, request, protocols)
        # Stable
        if group.is_leader(member_id) or not member.matches(protocols):
            return self._update_member_and_rebalance(group, member, request, protocols)
        self.touch(group, member)
        return self._current_generation_response(group, member, skip_assignment=False)

    def _new_member(
        self, request: JoinGroupRequest, member_id: str, protocols: tuple[tuple[str, bytes], ...]
    ) -> ClassicMember:
        return ClassicMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=protocols,
        )

    def _add_member_and_rebalance(
        self,
        group: ClassicGroup,
        request: JoinGroupRequest,
        member_id: str,
        protocols: tuple[tuple[str, bytes], ...],
    ) -> asyncio.Future[JoinGroupResponse]:
        member = self._new_member(request, member_id, protocols)
        future = self._park_join(member)
        if group.initial_join_in_progress:
            group.new_member_added = True
        group.add(member)
        # Kafka's NewMemberJoinTimeoutMs: a new member's parked JoinGroup is not a sign of
        # life (a client that gave up and retried would leave a defunct member behind).
        member.is_new = True
        member.last_heard_ms = self._ctx.clock.now_ms()
        self._arm_session_timer(group, member, self._ctx.config.group_new_member_join_timeout_ms)
        self._ctx.journal(
            group,
            JournalKind.MEMBER_JOINED,
            member,
            protocols=member.protocol_names,
            reason=request.reason,
        )
        self._maybe_prepare_rebalance(group, f"new member {member_id} joined")
        self.maybe_complete_join(group)
        return future

    def _update_member_and_rebalance(
        self,
        group: ClassicGroup,
        member: ClassicMember,
        request: JoinGroupRequest,
        protocols: tuple[tuple[str, bytes], ...],
    ) -> asyncio.Future[JoinGroupResponse]:
        group.set_member_protocols(member, protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        # A member may rejoin while its previous join is still parked: answer the old one.
        member.complete_join(JoinGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS, member_id=""))
        future = self._park_join(member)
        self._maybe_prepare_rebalance(
            group, request.reason or f"member {member.member_id} rejoined in {group.state}"
        )
        self.maybe_complete_join(group)
        return future

    def _replace_static_member(
        self,
        group: ClassicGroup,
        request: JoinGroupRequest,
        instance_id: str,
        old_member_id: str,
        new_member_id: str,
        protocols: tuple[tuple[str, bytes], ...],
    ) -> JoinOutcome | CoordinatorResult[JoinOutcome]:
        """KIP-345: a static member restarted; its new member id replaces and fences the old."""
        old_member = group.members[old_member_id]
        previous = (
            old_member.protocols,
            old_member.session_timeout_ms,
            old_member.rebalance_timeout_ms,
            old_member.client_id,
            old_member.client_host,
            group.leader_id,
        )
        # The old incarnation's parked requests must not complete as if they were the new one.
        old_member.complete_join(JoinGroupResponse(ErrorCode.FENCED_INSTANCE_ID, member_id=""))
        old_member.complete_sync(SyncGroupResponse(ErrorCode.FENCED_INSTANCE_ID))
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self.move_session_timer(group, old_member_id, new_member_id)
        # As Kafka, the replacing member is not "new": its parked JoinGroup keeps it alive.
        was_new, member.is_new = member.is_new, False
        group.set_member_protocols(member, protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id, member.client_host = request.client_id, request.client_host
        self._ctx.journal(group, JournalKind.MEMBER_REPLACED, member, old_member_id=old_member_id)

        if group.is_in(GroupState.STABLE):
            # Beyond Kafka: a changed topic set rebalances too (coordinator.subscriptions).
            resubscribed = subscription_changed(
                group.protocol_type, group.protocol_name, previous[0], protocols
            )
            if group.select_protocol() != group.protocol_name or resubscribed:
                # The rebalance lives in memory until its sync: the stored generation must
                # name the new member id now, or a restart revives the fenced one.
                group.persist_static_replacement(instance_id, old_member_id)
                future = self._park_join(member)
                change = "different topics" if resubscribed else "a protocol change"
                self._maybe_prepare_rebalance(
                    group, f"static member {instance_id} rejoined with {change}"
                )
                return future
            # No rebalance: persist the new member id, then serve the current generation
            # (Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: the answer completes
            # once the record is written).
            persisted_before = group.persisted_record
            group.needs_persist = True
            answer: asyncio.Future[JoinGroupResponse] = asyncio.get_running_loop().create_future()

            def written() -> CoordinatorResult[JoinOutcome]:
                self.touch(group, member)
                is_leader = group.is_leader(new_member_id)
                self._ctx.journal(
                    group,
                    JournalKind.STATIC_REJOIN,
                    member,
                    old_member_id=old_member_id,
                    leader=is_leader,
                )
                answer.set_result(
                    self._current_generation_response(group, member, skip_assignment=is_leader)
                )
                return self._ctx.result(group, answer)

            def failed(error: StoreError) -> CoordinatorResult[JoinOutcome]:
                log.warning(
                    "group %s: static member %s could not be persisted; kept %s",
                    group.group_id,
                    instance_id,
                    old_member_id,
                    exc_info=error,
                )
                group.replace_static_member(instance_id, new_member_id, old_member_id)
                self.move_session_timer(group, new_member_id, old_member_id)
                group.set_member_protocols(member, previous[0])
                (
                    _,
                    member.session_timeout_ms,
                    member.rebalance_timeout_ms,
                    member.client_id,
                    member.client_host,
                    group.leader_id,
                ) = previous
                member.is_new = was_new
                # Nothing was written: the rolled-back group is what the store holds.
                group.persisted_record = persisted_before
                group.needs_persist = False
                # As Kafka: the error carries the group's generation, leader and protocol.
                answer.set_result(
                    JoinGroupResponse(
                        ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        member_id=UNKNOWN_MEMBER_ID,
                    )
                )
                return self._ctx.result(group, answer)

            return self._ctx.result(group, answer, then=written, failed=failed)
        group.persist_static_replacement(instance_id, old_member_id)
        future = self._park_join(member)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader's assignment would name the fenced member id: start over.
            self.prepare_rebalance(group, f"static member {instance_id} rejoined while syncing")
        else:
            self.maybe_complete_join(group)
        return future

    def _current_generation_response(
        self, group: ClassicGroup, member: ClassicMember, *, skip_assignment: bool
    ) -> JoinGroupResponse:
        is_leader = group.is_leader(member.member_id)
        return JoinGroupResponse(
            ErrorCode.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip_assignment,
            member_id=member.member_id,
            members=group.member_list_for_leader() if is_leader else [],
        )

    def _park_join(self, member: ClassicMember) -> asyncio.Future[JoinGroupResponse]:
        future: asyncio.Future[JoinGroupResponse] = asyncio.get_running_loop().create_future()
        member.join_future = future
        return future

    def _add_pending_member(self, group: ClassicGroup, member_id: str, session_ms: int) -> None:
        group.add_pending_member(member_id)
        # As Kafka: a pending member id's session is the member's heartbeat key.
        self._ctx.timers.schedule(
            heartbeat_key(group.group_id, member_id),
            group,
            session_ms,
            lambda: self._session_expired(group, member_id),
        )

    # --- rebalance ------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # Followers parked in SyncGroup must rejoin; the pending assignment is void.
            for member in group.members.values():
                member.assignment = b""
            self._propagate_sync(
                group, lambda _: SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS)
            )
        self._cancel_sync_timer(group)
        group.pending_sync_members.clear()
        starting_from_empty = group.is_in(GroupState.EMPTY)
        previous_state = group.state
        group.transition_to(GroupState.PREPARING_REBALANCE)
        self._ctx.journal(
            group,
            JournalKind.REBALANCE_STARTED,
            None,
            reason=reason,
            from_state=previous_state.value,
        )
        log.info("group %s: preparing rebalance (%s)", group.group_id, reason)
        self.cancel_join_timer(group)
        if starting_from_empty:
            # Kafka's InitialDelayedJoin: wait for more members before the first generation.
            delay = self._ctx.config.group_initial_rebalance_delay_ms
            group.initial_join_in_progress = True
            group.new_member_added = False
            group.initial_join_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            self.arm_join_timer(group, delay)
        else:
            group.initial_join_in_progress = False
            self.arm_join_timer(group, group.rebalance_timeout_ms())
            # As Kafka's maybeCompleteJoinElseSchedule: if everyone has already joined (a
            # lone static member rejoining), the join phase ends now, not at the deadline.
            self.maybe_complete_join(group)

    def arm_join_timer(self, group: ClassicGroup, delay_ms: int) -> None:
        self._ctx.timers.schedule(
            join_key(group.group_id), group, delay_ms, lambda: self._join_deadline(group)
        )

    def _join_deadline(self, group: ClassicGroup) -> None:
        """The join phase's timer (run under the group lock by the timer write path)."""
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        hold = self.expected_members_hold_ms(group)
        if hold > 0:
            # Expected members are still missing: the join phase waits for them.
            self.arm_join_timer(group, hold)
            return
        if (
            group.initial_join_in_progress
            and group.new_member_added
            and (group.initial_join_remaining_ms > 0)
        ):
            group.new_member_added = False
            delay = min(
                self._ctx.config.group_initial_rebalance_delay_ms,
                group.initial_join_remaining_ms,
            )
            group.initial_join_remaining_ms = max(group.initial_join_remaining_ms - delay, 0)
            self.arm_join_timer(group, delay)
        else:
            self._complete_join(group)

    def maybe_complete_join(self, group: ClassicGroup) -> None:
        # The initial delay does not end early: it exists to let more members arrive (unless
        # every expected member is here: then nobody else is being waited for).
        if not group.is_in(GroupState.PREPARING_REBALANCE) or not group.has_all_members_joined():
            return
        if self.expected_members_hold_ms(group) > 0:
            return
        expected = self._ctx.expected_members.get(group.group_id)
        everyone_expected = expected is not None and not expected.missing(
            self._joined_instance_ids(group)
        )
        if not group.initial_join_in_progress or everyone_expected:
            self._complete_join(group)

    @staticmethod
    def _joined_instance_ids(group: ClassicGroup) -> set[str]:
        return {
            member.group_instance_id
            for member in group.members.values()
            if member.group_instance_id is not None and member.is_awaiting_join
        }

    def expected_members_hold_ms(self, group: ClassicGroup) -> int:
        """How much longer the join phase waits for expected members (0: not at all)."""
        expected = self._ctx.expected_members.get(group.group_id)
        if expected is None:
            return 0
        return expected.hold_ms(self._joined_instance_ids(group), self._ctx.clock.now_ms())

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: a new generation, answers to every parked JoinGroup."""
        self.cancel_join_timer(group)
        group.initial_join_in_progress = False
        for member in list(group.members.values()):
            if not member.is_awaiting_join and not member.is_static:
                # KIP-345: only dynamic members are dropped for missing the join deadline.
                self._remove_member(group, member, JournalKind.MEMBER_REMOVED, "join_timeout")
        if group.members and not group.elect_joined_leader():
            # Only static members that have not rejoined remain: wait another round.
            log.info("group %s: no member rejoined; waiting again", group.group_id)
            self.arm_join_timer(group, group.rebalance_timeout_ms())
            return
        group.generation_id += 1
        if not group.members:
            # As Kafka: an empty group keeps its protocol type (DescribeGroups, ListGroups).
            group.protocol_name = None
            group.leader_id = None
            group.transition_to(GroupState.EMPTY)
            group.needs_persist = True
            self._ctx.journal(group, JournalKind.GROUP_EMPTY, None)
            return
        group.protocol_name = group.select_protocol()
        # The leader reads the metadata after this; a change from here on rebalances again.
        group.assigned_topics = topic_counts(group.consumed_topics(), self._ctx.topics)
        group.transition_to(GroupState.COMPLETING_REBALANCE)
        self._ctx.journal(
            group,
            JournalKind.GENERATION_STARTED,
            None,
            protocol=group.protocol_name,
            leader=group.leader_id,
            members=[
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id}
                for m in group.members.values()
            ],
        )
        log.info(
            "group %s: generation %d with %d member(s), protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        leader_view = group.member_list_for_leader()
        for member in group.members.values():
            is_leader = group.is_leader(member.member_id)
            member.complete_join(
                JoinGroupResponse(
                    ErrorCode.NONE,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=group.leader_id or "",
                    skip_assignment=False,
                    member_id=member.member_id,
                    members=leader_view if is_leader else [],
                )
            )
            # As Kafka's onCompleteJoin: every member's session starts again, including
            # static members kept although they did not rejoin.
            member.is_new = False
            self.touch(group, member)
        group.pending_sync_members = set(group.members)
        self._arm_sync_timer(group)

    def _arm_sync_timer(self, group: ClassicGroup) -> None:
        generation = group.generation_id
        self._ctx.timers.schedule(
            sync_key(group.group_id),
            group,
            group.rebalance_timeout_ms(),
            lambda: self._sync_deadline(group, generation),
        )

    def _sync_deadline(self, group: ClassicGroup, generation: int) -> None:
        """The sync phase's timer (run under the group lock by the timer write path)."""
        if generation != group.generation_id or not group.is_in(
            GroupState.COMPLETING_REBALANCE, GroupState.STABLE
        ):
            return
        late = [group.members[m] for m in group.pending_sync_members if m in group.members]
        if late:
            for member in late:
                self._remove_member(group, member, JournalKind.MEMBER_REMOVED, "sync_timeout")
            self._maybe_prepare_rebalance(group, "members did not sync in time")
            self.maybe_complete_join(group)

    def cancel_join_timer(self, group: ClassicGroup) -> None:
        self._ctx.timers.cancel(join_key(group.group_id))

    def _cancel_sync_timer(self, group: ClassicGroup) -> None:
        self._ctx.timers.cancel(sync_key(group.group_id))

    def cancel_group_timers(self, group: ClassicGroup) -> None:
        self.cancel_join_timer(group)
        self._cancel_sync_timer(group)
        for member_id in group.pending_members:
            self._ctx.timers.cancel(heartbeat_key(group.group_id, member_id))

    # --- members: liveness and removal -----------------------------------------------------

    def touch(self, group: ClassicGroup, member: ClassicMember) -> None:
        """A sign of life: the session timeout starts again."""
        now = self._ctx.clock.now_ms()
        member.last_heard_ms = now
        deadline = now + member.session_timeout_ms
        # Keep the armed timer unless it would fire after the new deadline (a shorter
        # session timeout); firing early is fine: it re-arms for the rest.
        due_ms = self._ctx.timers.due_ms(heartbeat_key(group.group_id, member.member_id))
        if due_ms is None or due_ms > deadline:
            self._arm_session_timer(group, member, member.session_timeout_ms)

    def schedule_session_timeout(self, group: ClassicGroup, member: ClassicMember) -> None:
        """Start the session from now (a loaded member must heartbeat within a timeout)."""
        member.last_heard_ms = self._ctx.clock.now_ms()
        self._arm_session_timer(group, member, member.session_timeout_ms)

    def _arm_session_timer(self, group: ClassicGroup, member: ClassicMember, delay_ms: int) -> None:
        member_id = member.member_id
        # A partial, not a lambda: every member holds one (memory per member counts).
        expire = functools.partial(self._session_expired, group, member_id)
        self._ctx.timers.schedule(heartbeat_key(group.group_id, member_id), group, delay_ms, expire)

    def move_session_timer(
        self, group: ClassicGroup, old_member_id: str, new_member_id: str
    ) -> None:
        """A static replacement re-keys the member: its session timer moves with it, due as
        before (the member object and its session are the same)."""
        old_key = heartbeat_key(group.group_id, old_member_id)
        due_ms = self._ctx.timers.due_ms(old_key)
        self._ctx.timers.cancel(old_key)
        if due_ms is not None:
            expire = functools.partial(self._session_expired, group, new_member_id)
            self._ctx.timers.schedule_at(
                heartbeat_key(group.group_id, new_member_id), group, due_ms, expire
            )

    def _session_expired(self, group: ClassicGroup, member_id: str) -> None:
        """`heartbeat-<group>-<member>` fell due (run under the group lock by the timer
        write path): a pending member id (KIP-394) or a member's session."""
        if group.remove_pending_member(member_id):
            log.info("pending member %s of %s never rejoined", member_id, group.group_id)
            self.maybe_complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        if member.is_new:
            # Kafka's hasSatisfiedHeartbeat: a new member waiting in JoinGroup has not
            # shown it is alive; it expires (its JoinGroup gets UNKNOWN_MEMBER_ID).
            log.info(
                "group %s: new member %s did not complete its join in time",
                group.group_id,
                member_id,
            )
            self._remove_member(
                group, member, JournalKind.MEMBER_REMOVED, "new_member_join_timeout"
            )
            self._after_removal(group, f"new member {member_id} timed out")
            return
        if member.is_awaiting_join or member.is_awaiting_sync:
            # A parked request is a sign of life (Kafka's shouldKeepAlive).
            self.touch(group, member)
            return
        remaining = member.last_heard_ms + member.session_timeout_ms - self._ctx.clock.now_ms()
        if remaining > 0:
            self._arm_session_timer(group, member, remaining)
            return
        log.info(
            "group %s: member %s (%s) session timed out",
            group.group_id,
            member_id,
            member.group_instance_id,
        )
        self._remove_member(group, member, JournalKind.MEMBER_REMOVED, "session_timeout")
        self._after_removal(group, f"member {member_id} session timed out")

    def _remove_member(
        self, group: ClassicGroup, member: ClassicMember, kind: JournalKind, reason: str
    ) -> None:
        self._ctx.timers.cancel(heartbeat_key(group.group_id, member.member_id))
        # As Kafka's removeMemberAndUpdateClassicGroup: the member id is no longer valid.
        member.complete_join(
            JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID)
        )
        member.complete_sync(SyncGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID))
        if member.group_instance_id is not None and member.assignment:
            group.last_assignment_by_instance[member.group_instance_id] = member.assignment
        self._ctx.journal(group, kind, member, reason=reason)
        group.remove(member.member_id)

    def _after_removal(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, reason)
        self.maybe_complete_join(group)

    # --- SyncGroup -------------------------------------------------------------------------

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        if not request.group_id:
            return SyncGroupResponse(ErrorCode.INVALID_GROUP_ID)
        group = self._ctx.groups.get(request.group_id)
        if group is None:
            return SyncGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID)
        outcome = await self._ctx.write(group, self._sync_in_group, group, request)
        if isinstance(outcome, SyncGroupResponse):
            return outcome
        return await asyncio.shield(outcome)

    def _sync_in_group(
        self, group: ClassicGroup, request: SyncGroupRequest
    ) -> CoordinatorResult[SyncOutcome]:
        """The SyncGroup operation (under the group lock, no I/O)."""
        outcome = self._sync_outcome(group, request)
        if isinstance(outcome, CoordinatorResult):
            return outcome
        return self._ctx.result(group, outcome)

    def _sync_outcome(
        self, group: ClassicGroup, request: SyncGroupRequest
    ) -> SyncOutcome | CoordinatorResult[SyncOutcome]:
        member_id = request.member_id
        if group.is_in(GroupState.DEAD):
            return SyncGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        code = self._ctx.validate_member(group, member_id, request.group_instance_id, "sync")
        if code is ErrorCode.NONE and group.is_in(GroupState.EMPTY):
            code = ErrorCode.UNKNOWN_MEMBER_ID
        if code is not ErrorCode.NONE:
            return SyncGroupResponse(code)
        member = group.members[member_id]
        if request.generation_id != group.generation_id:
            return SyncGroupResponse(ErrorCode.ILLEGAL_GENERATION)
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
            request.protocol_name is not None and request.protocol_name != group.protocol_name
        ):
            return SyncGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS)
        group.remove_pending_sync_member(member_id)
        if not group.pending_sync_members:
            # As Kafka's removePendingSyncMember: everyone has synced, nobody to time out.
            self._cancel_sync_timer(group)
        self.touch(group, member)
        if group.is_in(GroupState.STABLE):
            return self._sync_response(group, member.assignment)
        # CompletingRebalance: park until the leader's assignment is stored.
        member.complete_sync(SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS))
        future: asyncio.Future[SyncGroupResponse] = asyncio.get_running_loop().create_future()
        member.sync_future = future
        if group.is_leader(member_id):
            return self._store_assignment(group, request, future)
        return future

    def _store_assignment(
        self,
        group: ClassicGroup,
        request: SyncGroupRequest,
        future: asyncio.Future[SyncGroupResponse],
    ) -> CoordinatorResult[SyncOutcome]:
        """The leader's assignment: written first, then every parked SyncGroup is answered
        (Kafka's appendFuture of the group metadata record)."""
        assignments = {a.member_id: a.assignment for a in request.assignments}
        unknown = set(assignments) - set(group.members)
        if unknown:
            log.warning(
                "group %s: leader assigned unknown member(s) %s; ignored",
                group.group_id,
                sorted(unknown),
            )
        previous = {m.member_id: m.assignment for m in group.members.values()}
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        group.needs_persist = True
        for member in group.members.values():
            if member.group_instance_id is not None:
                group.last_assignment_by_instance[member.group_instance_id] = member.assignment
            self._ctx.journal(
                group,
                JournalKind.ASSIGNMENT,
                member,
                **self._assignment_detail(group, member.assignment),
            )
        self._ctx.journal(group, JournalKind.STABLE, None, members=len(group.members))

        def written() -> CoordinatorResult[SyncOutcome]:
            group.transition_to(GroupState.STABLE)
            self._propagate_sync(
                group, lambda member: self._sync_response(group, member.assignment)
            )
            return self._ctx.result(group, future)

        def failed(error: StoreError) -> CoordinatorResult[SyncOutcome]:
            for member in group.members.values():
                member.assignment = previous.get(member.member_id, b"")
            # As Kafka does when the group record cannot be written: everyone rejoins.
            self._propagate_sync(
                group, lambda _: SyncGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            )
            self.prepare_rebalance(group, "assignment could not be stored")
            raise error

        return self._ctx.result(group, future, then=written, failed=failed)

    def _propagate_sync(
        self, group: ClassicGroup, response: Callable[[ClassicMember], SyncGroupResponse]
    ) -> None:
        """Answer every parked SyncGroup; as Kafka's propagateAssignment, each member
        answered starts its session again (it may have waited long for a slow leader)."""
        for member in group.members.values():
            if member.complete_sync(response(member)):
                self.touch(group, member)

    def _sync_response(self, group: ClassicGroup, assignment: bytes) -> SyncGroupResponse:
        return SyncGroupResponse(
            ErrorCode.NONE,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=assignment,
        )

    def _assignment_detail(self, group: ClassicGroup, assignment: bytes) -> dict[str, Any]:
        if group.protocol_type != "consumer":
            return {"bytes": len(assignment)}
        if not assignment:
            return {"partitions": []}
        try:
            decoded = decode_assignment(assignment)
        except ProtocolError as error:
            return {"bytes": len(assignment), "undecodable": str(error)}
        return {"partitions": [[tp.topic, tp.partition] for tp in decoded.partitions]}

    # --- Heartbeat -------------------------------------------------------------------------

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        if not request.group_id:
            return HeartbeatResponse(ErrorCode.INVALID_GROUP_ID)
        group = self._ctx.groups.get(request.group_id)
        if group is None:
            return HeartbeatResponse(ErrorCode.UNKNOWN_MEMBER_ID)
        code = await self._ctx.write(group, self._heartbeat_in_group, group, request)
        return HeartbeatResponse(code)

    def _heartbeat_in_group(
        self, group: ClassicGroup, request: HeartbeatRequest
    ) -> CoordinatorResult[ErrorCode]:
        """The Heartbeat operation (under the group lock, no I/O)."""
        return self._ctx.result(group, self._heartbeat_code(group, request))

    def _heartbeat_code(self, group: ClassicGroup, request: HeartbeatRequest) -> ErrorCode:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        code = self._ctx.validate_member(
            group, request.member_id, request.group_instance_id, "heartbeat"
        )
        if code is ErrorCode.NONE and group.is_in(GroupState.EMPTY):
            code = ErrorCode.UNKNOWN_MEMBER_ID
        if code is not ErrorCode.NONE:
            return code
        member = group.members[request.member_id]
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self.touch(group, member)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # --- LeaveGroup ------------------------------------------------------------------------

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        if not request.group_id:
            return LeaveGroupResponse(ErrorCode.INVALID_GROUP_ID)
        group = self._ctx.groups.get(request.group_id)
        if group is None:
            # Kafka: no group → each member is unknown, the request itself is fine.
            return LeaveGroupResponse(
                ErrorCode.NONE,
                [
                    LeaveGroupMemberResponse(
                        identity.member_id,
                        identity.group_instance_id,
                        ErrorCode.UNKNOWN_MEMBER_ID,
                    )
                    for identity in request.members
                ],
            )
        return await self._ctx.write(group, self._leave_in_group, group, request)

    def _leave_in_group(
        self, group: ClassicGroup, request: LeaveGroupRequest
    ) -> CoordinatorResult[LeaveGroupResponse]:
        """The LeaveGroup operation (under the group lock, no I/O)."""
        return self._ctx.result(group, self._leave_response(group, request))

    def _leave_response(
        self, group: ClassicGroup, request: LeaveGroupRequest
    ) -> LeaveGroupResponse:
        if group.is_in(GroupState.DEAD):
            return LeaveGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        # An empty member list is answered NONE with no results, as Kafka's coordinator.
        left = [self._leave_one(group, identity) for identity in request.members]
        results = [result for result, _ in left]
        removed = sum(1 for _, was_member in left if was_member)
        if removed:
            # One rebalance for the whole batch: that is what batch leave is for. A
            # pending member id (KIP-394) leaving counts too: the Kafka 4.4 broker
            # rebalances a Stable group for it (the conformance runner measures it).
            self._after_removal(group, f"{removed} member(s) left the group")
        return LeaveGroupResponse(ErrorCode.NONE, results)

    def _leave_one(
        self, group: ClassicGroup, identity: MemberIdentity
    ) -> tuple[LeaveGroupMemberResponse, bool]:
        """The result for one member (its ids echoed as sent, as Kafka) and whether a
        member or a pending member id (KIP-394) was removed."""

        def result(code: ErrorCode, removed: bool = False) -> tuple[LeaveGroupMemberResponse, bool]:
            response = LeaveGroupMemberResponse(
                identity.member_id, identity.group_instance_id, code
            )
            return response, removed

        instance_id = identity.group_instance_id
        if instance_id is not None:
            mapped = group.static_member_id(instance_id)
            if mapped is None:
                return result(ErrorCode.UNKNOWN_MEMBER_ID)
            if identity.member_id not in (UNKNOWN_MEMBER_ID, mapped):
                self._ctx.journal_fenced(group, instance_id, identity.member_id, "leave")
                return result(ErrorCode.FENCED_INSTANCE_ID)
            member_id = mapped
        else:
            member_id = identity.member_id
            if group.remove_pending_member(member_id):
                self._ctx.timers.cancel(heartbeat_key(group.group_id, member_id))
                return result(ErrorCode.NONE, removed=True)
        member = group.members.get(member_id)
        if member is None:
            return result(ErrorCode.UNKNOWN_MEMBER_ID)
        self._remove_member(
            group, member, JournalKind.MEMBER_LEFT, identity.reason or "the member left the group"
        )
        return result(ErrorCode.NONE, removed=True)
