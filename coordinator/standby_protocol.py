"""The coordinator's side of hot standby: standby sessions, and `promote`.

Rules (tests/coordinator/test_standby.py names each):
- A standby never joins the group: no assignor sees it, it holds nothing, its arrival and
  its departure change no generation.
- `promote(group, standby, instance_id)` works only in a Stable group, on a static member,
  for a standby heard from within its session. Under the group lock it gives the instance
  id a new member id (KIP-345's static replacement: the old holder's requests are fenced
  from now on), keeps the assignment and the generation, and persists the mapping and the
  promotion record (one write, through the write path) before it answers. Nobody else
  rejoins.
- Idempotent: repeating a promotion that holds (after an operator or a coordinator
  restart) answers NONE with the same record.
- The standby learns of it in its next standby heartbeat answer (the record is persisted,
  so also after a coordinator restart), then syncs with the given member id in the current
  generation and gets the assignment. A record whose member id no longer holds its
  instance id (replaced or removed since) is stale and dropped.
"""

from __future__ import annotations

import logging
import uuid

from coordinator.errors import ErrorCode
from coordinator.group import ClassicGroup
from coordinator.identifiers import valid_id
from coordinator.journal import JournalKind
from coordinator.membership import MembershipManager
from coordinator.messages import JoinGroupResponse, SyncGroupResponse
from coordinator.records import StoreBatch
from coordinator.runtime import CoordinatorContext, CoordinatorResult
from coordinator.standby import (
    Promoted,
    PromoteResponse,
    StandbyHeartbeatRequest,
    StandbyHeartbeatResponse,
    StandbyList,
    StandbyPromotion,
    StandbySession,
)
from coordinator.state import GroupState
from coordinator.store import StoreError

log = logging.getLogger("coordinator")


class StandbyManager:
    """Standby sessions and promotions, given the coordinator's context; a promotion is a
    static replacement done by membership's rules."""

    def __init__(self, context: CoordinatorContext, membership: MembershipManager) -> None:
        self._ctx = context
        self._membership = membership
        # group id -> standby id -> its session (in memory: standbys heartbeat again after
        # a restart) / its promotion (persisted).
        self.sessions: dict[str, dict[str, StandbySession]] = {}
        self.promotions: dict[str, dict[str, StandbyPromotion]] = {}

    # --- standby sessions --------------------------------------------------------------

    async def heartbeat(self, request: StandbyHeartbeatRequest) -> StandbyHeartbeatResponse:
        if not request.group_id or not valid_id(request.group_id):
            return StandbyHeartbeatResponse(ErrorCode.INVALID_GROUP_ID)
        if not request.standby_id or not valid_id(request.standby_id):
            return StandbyHeartbeatResponse(ErrorCode.INVALID_REQUEST)
        if not (
            self._ctx.config.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= self._ctx.config.group_max_session_timeout_ms
        ):
            return StandbyHeartbeatResponse(ErrorCode.INVALID_SESSION_TIMEOUT)
        group = self._ctx.groups.get(request.group_id)
        return await self._ctx.write(group, self._heartbeat_in_group, group, request)

    def _heartbeat_in_group(
        self, group: ClassicGroup | None, request: StandbyHeartbeatRequest
    ) -> CoordinatorResult[StandbyHeartbeatResponse]:
        """The standby heartbeat operation (under the group's lock, no I/O)."""
        group_id, standby_id = request.group_id, request.standby_id
        promotion = self.promotions.get(group_id, {}).get(standby_id)
        if promotion is not None and group is not None and self._holds(group, promotion):
            self.sessions.get(group_id, {}).pop(standby_id, None)  # a member now, not a spare
            promoted = Promoted(
                instance_id=promotion.instance_id,
                member_id=promotion.member_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type or "",
                protocol_name=group.protocol_name or "",
                leader=group.leader_id or "",
            )
            return CoordinatorResult(StandbyHeartbeatResponse(ErrorCode.NONE, promoted))

        def heard() -> CoordinatorResult[StandbyHeartbeatResponse]:
            self._forget(group_id, [standby_id])
            self.sessions.setdefault(group_id, {})[standby_id] = StandbySession(
                self._ctx.clock.now_ms(), request.session_timeout_ms
            )
            return CoordinatorResult(StandbyHeartbeatResponse(ErrorCode.NONE))

        if promotion is None:
            return heard()
        # Stale: its member id no longer holds the instance id; dropped before the answer.
        return CoordinatorResult(
            StandbyHeartbeatResponse(ErrorCode.NONE),
            StoreBatch(promotions=[(group_id, standby_id, None)]),
            then=heard,
        )

    @staticmethod
    def _holds(group: ClassicGroup, promotion: StandbyPromotion) -> bool:
        return not group.is_in(GroupState.DEAD) and (
            group.static_member_id(promotion.instance_id) == promotion.member_id
        )

    def _forget(self, group_id: str, standby_ids: list[str]) -> None:
        """Drop promotion records from memory (once their deletion is written)."""
        records = self.promotions.get(group_id, {})
        for standby_id in standby_ids:
            records.pop(standby_id, None)

    def standbys(self, group_id: str) -> StandbyList:
        """Standbys heard from within their session, and promotions that still hold."""
        now = self._ctx.clock.now_ms()
        sessions = self.sessions.get(group_id, {})
        group = self._ctx.groups.get(group_id)
        promotions = [
            p
            for p in self.promotions.get(group_id, {}).values()
            if group is not None and self._holds(group, p)
        ]
        return StandbyList(
            group_id=group_id,
            standby_ids=sorted(s for s, session in sessions.items() if session.live(now)),
            promotions=sorted(promotions, key=lambda p: p.standby_id),
        )

    async def forget_standbys(self, group_id: str) -> None:
        """Drop a group's standby sessions and promotion records (the group is deleted)."""
        self.sessions.pop(group_id, None)
        await self._ctx.write(self._ctx.groups.get(group_id), self._forget_all, group_id)

    def _forget_all(self, group_id: str) -> CoordinatorResult[None]:
        standby_ids = list(self.promotions.get(group_id, {}))

        def written() -> CoordinatorResult[None]:
            self._forget(group_id, standby_ids)
            return CoordinatorResult(None)

        records = StoreBatch(promotions=[(group_id, s, None) for s in standby_ids])
        return CoordinatorResult(None, records, then=written)

    # --- promote -----------------------------------------------------------------------

    async def promote(self, group_id: str, standby_id: str, instance_id: str) -> PromoteResponse:
        if not group_id or not valid_id(group_id):
            return PromoteResponse(ErrorCode.INVALID_GROUP_ID)
        if not all(i and valid_id(i) for i in (standby_id, instance_id)):
            return PromoteResponse(ErrorCode.INVALID_REQUEST, detail="invalid standby/instance id")
        group = self._ctx.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return PromoteResponse(ErrorCode.GROUP_ID_NOT_FOUND)
        return await self._ctx.write(group, self._promote_in_group, group, standby_id, instance_id)

    def _promote_in_group(
        self, group: ClassicGroup, standby_id: str, instance_id: str
    ) -> CoordinatorResult[PromoteResponse]:
        """The promote operation (under the group lock, no I/O). A stale promotion record
        of this standby is dropped in the same write."""
        group_id = group.group_id
        standing = self.promotions.get(group_id, {}).get(standby_id)
        stale = standing is not None and not self._holds(group, standing)

        def refuse(response: PromoteResponse) -> CoordinatorResult[PromoteResponse]:
            if not stale:
                return CoordinatorResult(response)

            def written() -> CoordinatorResult[PromoteResponse]:
                self._forget(group_id, [standby_id])
                return CoordinatorResult(response)

            dropped = StoreBatch(promotions=[(group_id, standby_id, None)])
            return CoordinatorResult(response, dropped, then=written)

        if standing is not None and not stale:
            if standing.instance_id == instance_id:
                return CoordinatorResult(PromoteResponse(ErrorCode.NONE, standing))
            return CoordinatorResult(
                PromoteResponse(
                    ErrorCode.INVALID_REQUEST,
                    detail=f"standby {standby_id} already holds {standing.instance_id}",
                )
            )
        session = self.sessions.get(group_id, {}).get(standby_id)
        if session is None or not session.live(self._ctx.clock.now_ms()):
            return refuse(
                PromoteResponse(
                    ErrorCode.UNKNOWN_MEMBER_ID, detail=f"standby {standby_id} is not heard from"
                )
            )
        if not group.is_in(GroupState.STABLE):
            return refuse(
                PromoteResponse(
                    ErrorCode.REBALANCE_IN_PROGRESS, detail=f"group is {group.state.value}"
                )
            )
        old_member_id = group.static_member_id(instance_id)
        if old_member_id is None:
            return refuse(
                PromoteResponse(
                    ErrorCode.UNKNOWN_MEMBER_ID, detail=f"{instance_id} is not a member"
                )
            )
        return self._replace_for_standby(group, standby_id, instance_id, old_member_id)

    def _replace_for_standby(
        self, group: ClassicGroup, standby_id: str, instance_id: str, old_member_id: str
    ) -> CoordinatorResult[PromoteResponse]:
        new_member_id = f"{instance_id}-{uuid.uuid4()}"
        promotion = StandbyPromotion(
            standby_id, instance_id, new_member_id, self._ctx.clock.now_ms()
        )
        # The old holder's parked requests (if any) end now: it is fenced. (Before the
        # replacement: it re-keys the same member object the standby takes over.)
        old_member = group.members[old_member_id]
        old_member.complete_join(JoinGroupResponse(ErrorCode.FENCED_INSTANCE_ID, member_id=""))
        old_member.complete_sync(SyncGroupResponse(ErrorCode.FENCED_INSTANCE_ID))
        persisted_before = group.persisted_record
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._membership.move_session_timer(group, old_member_id, new_member_id)
        self._ctx.journal(
            group,
            JournalKind.MEMBER_REPLACED,
            member,
            old_member_id=old_member_id,
            standby_id=standby_id,
            reason="standby promotion",
        )
        group.needs_persist = True
        response = PromoteResponse(ErrorCode.NONE, promotion)

        def written() -> CoordinatorResult[PromoteResponse]:
            self.promotions.setdefault(group.group_id, {})[standby_id] = promotion
            member.is_new = False
            # The standby has a session timeout from now to show up (it will within a
            # heartbeat).
            self._membership.schedule_session_timeout(group, member)
            self.sessions.get(group.group_id, {}).pop(standby_id, None)
            log.info(
                "group %s: standby %s promoted to %s (member %s replaces %s), generation %d kept",
                group.group_id,
                standby_id,
                instance_id,
                new_member_id,
                old_member_id,
                group.generation_id,
            )
            return CoordinatorResult(response)

        def failed(error: StoreError) -> CoordinatorResult[PromoteResponse]:
            # One transaction: neither the group record nor the promotion was written.
            group.replace_static_member(instance_id, new_member_id, old_member_id)
            self._membership.move_session_timer(group, new_member_id, old_member_id)
            group.persisted_record = persisted_before
            group.needs_persist = False
            raise error

        # The record replaces a stale one of this standby's, if any (same key).
        group.pending_writes.promotions.append((group.group_id, standby_id, promotion))
        return self._ctx.result(group, response, then=written, failed=failed)
