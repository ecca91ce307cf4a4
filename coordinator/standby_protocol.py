"""The coordinator's side of hot standby: standby sessions, and `promote`.

Rules (tests/coordinator/test_standby.py names each):
- A standby never joins the group: no assignor sees it, it holds nothing, its arrival and
  its departure change no generation.
- `promote(group, standby, instance_id)` works only in a Stable group, on a static member,
  for a standby heard from within its session. Under the group lock it gives the instance
  id a new member id (KIP-345's static replacement: the old holder's requests are fenced
  from now on), keeps the assignment and the generation, and persists the mapping and the
  promotion record before it answers. Nobody else rejoins.
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
from coordinator.runtime import CoordinatorContext
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
        promotion = await self._standing_promotion(request.group_id, request.standby_id)
        sessions = self.sessions.setdefault(request.group_id, {})
        if promotion is None:
            sessions[request.standby_id] = StandbySession(
                self._ctx.clock.now_ms(), request.session_timeout_ms
            )
            return StandbyHeartbeatResponse(ErrorCode.NONE)
        sessions.pop(request.standby_id, None)  # a member now, no longer a spare
        group = self._ctx.groups[request.group_id]
        return StandbyHeartbeatResponse(
            ErrorCode.NONE,
            Promoted(
                instance_id=promotion.instance_id,
                member_id=promotion.member_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type or "",
                protocol_name=group.protocol_name or "",
                leader=group.leader_id or "",
            ),
        )

    async def _standing_promotion(self, group_id: str, standby_id: str) -> StandbyPromotion | None:
        """The standby's promotion if it still holds; a stale one is dropped."""
        promotion = self.promotions.get(group_id, {}).get(standby_id)
        if promotion is None:
            return None
        group = self._ctx.groups.get(group_id)
        if group is not None and self._holds(group, promotion):
            return promotion
        await self._write_promotion(group_id, standby_id, None)
        return None

    @staticmethod
    def _holds(group: ClassicGroup, promotion: StandbyPromotion) -> bool:
        return not group.is_in(GroupState.DEAD) and (
            group.static_member_id(promotion.instance_id) == promotion.member_id
        )

    async def _write_promotion(
        self, group_id: str, standby_id: str, promotion: StandbyPromotion | None
    ) -> None:
        await self._ctx.store.write_promotion(group_id, standby_id, promotion)
        records = self.promotions.setdefault(group_id, {})
        if promotion is None:
            records.pop(standby_id, None)
        else:
            records[standby_id] = promotion

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
        for standby_id in list(self.promotions.get(group_id, {})):
            await self._write_promotion(group_id, standby_id, None)

    # --- promote -----------------------------------------------------------------------

    async def promote(self, group_id: str, standby_id: str, instance_id: str) -> PromoteResponse:
        if not group_id or not valid_id(group_id):
            return PromoteResponse(ErrorCode.INVALID_GROUP_ID)
        if not all(i and valid_id(i) for i in (standby_id, instance_id)):
            return PromoteResponse(ErrorCode.INVALID_REQUEST, detail="invalid standby/instance id")
        group = self._ctx.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return PromoteResponse(ErrorCode.GROUP_ID_NOT_FOUND)
        async with group.lock:
            standing = await self._standing_promotion(group_id, standby_id)
            if standing is not None:
                if standing.instance_id == instance_id:
                    return PromoteResponse(ErrorCode.NONE, standing)
                return PromoteResponse(
                    ErrorCode.INVALID_REQUEST,
                    detail=f"standby {standby_id} already holds {standing.instance_id}",
                )
            session = self.sessions.get(group_id, {}).get(standby_id)
            if session is None or not session.live(self._ctx.clock.now_ms()):
                return PromoteResponse(
                    ErrorCode.UNKNOWN_MEMBER_ID, detail=f"standby {standby_id} is not heard from"
                )
            if not group.is_in(GroupState.STABLE):
                return PromoteResponse(
                    ErrorCode.REBALANCE_IN_PROGRESS, detail=f"group is {group.state.value}"
                )
            old_member_id = group.static_member_id(instance_id)
            if old_member_id is None:
                return PromoteResponse(
                    ErrorCode.UNKNOWN_MEMBER_ID, detail=f"{instance_id} is not a member"
                )
            return await self._replace_for_standby(group, standby_id, instance_id, old_member_id)

    async def _replace_for_standby(
        self, group: ClassicGroup, standby_id: str, instance_id: str, old_member_id: str
    ) -> PromoteResponse:
        new_member_id = f"{instance_id}-{uuid.uuid4()}"
        promotion = StandbyPromotion(
            standby_id, instance_id, new_member_id, self._ctx.clock.now_ms()
        )
        # The record first: if the group write then fails, the record names a member id that
        # holds nothing and is dropped as stale; the other order could leave the new member
        # id in the group with nobody ever told it.
        await self._write_promotion(group.group_id, standby_id, promotion)
        # The old holder's parked requests (if any) end now: it is fenced. (Before the
        # replacement: it re-keys the same member object the standby takes over.)
        old_member = group.members[old_member_id]
        old_member.complete_join(JoinGroupResponse(ErrorCode.FENCED_INSTANCE_ID, member_id=""))
        old_member.complete_sync(SyncGroupResponse(ErrorCode.FENCED_INSTANCE_ID))
        persisted_before = group.persisted_record
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._membership.move_session_timer(group, old_member_id, new_member_id)
        try:
            self._ctx.journal(
                group,
                JournalKind.MEMBER_REPLACED,
                member,
                old_member_id=old_member_id,
                standby_id=standby_id,
                reason="standby promotion",
            )
            group.needs_persist = True
            await self._ctx.flush(group)
        except StoreError:
            group.replace_static_member(instance_id, new_member_id, old_member_id)
            self._membership.move_session_timer(group, new_member_id, old_member_id)
            group.persisted_record = persisted_before
            group.needs_persist = False
            await self._write_promotion(group.group_id, standby_id, None)
            raise
        member.is_new = False
        # The standby has a session timeout from now to show up (it will within a heartbeat).
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
        return PromoteResponse(ErrorCode.NONE, promotion)
