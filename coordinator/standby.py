"""Hot standby (KIP-345's "Future Works"): spare members that hold nothing until one is
promoted into a missing member's place, taking its assignment with no rebalance.

A standby is not a group member: it never joins, so no assignor (ours, Java's, librdkafka's)
ever sees it and it cannot count toward balance. It keeps a *standby session* with
`standby_heartbeat`; the answer carries its promotion once the operator has asked for one.
A promotion is a static replacement made by the coordinator on the standby's behalf: the
target instance id gets a new member id (the old holder is fenced), the assignment and the
generation stay, and the standby syncs in that generation with that member id.

Data and answers only; the coordinator's side is `coordinator.standby_protocol`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class StandbyPromotion:
    """A standby that now speaks as `instance_id` with `member_id`. Persisted, so a
    coordinator restart still tells the standby (or its restarted process) who it is."""

    standby_id: str
    instance_id: str
    member_id: str
    promoted_at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "standby_id": self.standby_id,
            "instance_id": self.instance_id,
            "member_id": self.member_id,
            "promoted_at_ms": self.promoted_at_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StandbyPromotion:
        return cls(
            standby_id=str(data["standby_id"]),
            instance_id=str(data["instance_id"]),
            member_id=str(data["member_id"]),
            promoted_at_ms=int(data["promoted_at_ms"]),
        )


@dataclass(frozen=True, slots=True)
class StandbyHeartbeatRequest:
    """A standby's sign of life; `session_timeout_ms` bounds how long it counts as ready."""

    group_id: str
    standby_id: str
    session_timeout_ms: int


@dataclass(frozen=True, slots=True)
class Promoted:
    """What a promoted standby needs to sync at once in the current generation."""

    instance_id: str
    member_id: str
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader: str


@dataclass(frozen=True, slots=True)
class StandbyHeartbeatResponse:
    error_code: ErrorCode
    # Set once this standby has been promoted: from now on it is `promoted.member_id`.
    promoted: Promoted | None = None


@dataclass(frozen=True, slots=True)
class PromoteRequest:
    standby_id: str
    instance_id: str


@dataclass(frozen=True, slots=True)
class PromoteResponse:
    """NONE: the standby holds the instance id now (also for a repeated call).
    UNKNOWN_MEMBER_ID: the standby is not heard from, or the instance id is not a member;
    REBALANCE_IN_PROGRESS: the group is not Stable (try again once it is);
    INVALID_REQUEST: the standby was already promoted to another instance id;
    GROUP_ID_NOT_FOUND / INVALID_GROUP_ID as usual."""

    error_code: ErrorCode
    promotion: StandbyPromotion | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class StandbyList:
    """A group's standbys heard from within their session, and its standing promotions."""

    group_id: str
    standby_ids: list[str]
    promotions: list[StandbyPromotion]


@dataclass(slots=True)
class StandbySession:
    last_heard_ms: int
    session_timeout_ms: int

    def live(self, now_ms: int) -> bool:
        return now_ms - self.last_heard_ms <= self.session_timeout_ms
