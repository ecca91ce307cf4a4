"""A rollout's persisted progress (`status.rollout`), and its dict form.

The orchestrator returns a new `RolloutState` with every decision; the caller persists it
*before* acting (write-ahead), so a restarted operator knows which member was in flight.
Even a lost state is recoverable: the plan is re-derived from the pods' recorded protocol
and template hash (see plan.py), so the state adds precision, never the only truth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from coordinator.client.config import RebalanceProtocolSetting


class RolloutPhase(StrEnum):
    IDLE = "Idle"
    """No rollout: every pod was created with the desired protocol and template."""

    ROLLING = "Rolling"
    """A rolling bounce is under way (which one: `bounce_index` into `bounces`)."""

    PAUSED = "Paused"
    """A wait outlasted memberReadyTimeoutSeconds. Nothing is skipped: the rollout goes on
    by itself once what blocked it clears, or re-plans when the spec changes."""


@dataclass(frozen=True, slots=True)
class RolloutState:
    phase: RolloutPhase = RolloutPhase.IDLE
    # The fleet's protocol when the rollout was planned; None when pods disagreed.
    from_protocol: RebalanceProtocolSetting | None = None
    # What the spec asked for when the rollout was planned (eager or cooperative).
    to_protocol: RebalanceProtocolSetting | None = None
    # The pod template hash this rollout recreates members with.
    template_hash: str | None = None
    # One protocol per rolling bounce, e.g. (compatible, cooperative) for an upgrade.
    bounces: tuple[RebalanceProtocolSetting, ...] = ()
    bounce_index: int = 0
    # Slots this bounce has recreated, in order (the one in flight included).
    bounced_slots: tuple[int, ...] = ()
    # Slots whose pods still carry other settings, in bounce order (the leader last), as
    # last observed. For status only: the pods decide what remains.
    pending_slots: tuple[int, ...] = ()
    current_slot: int | None = None
    current_pod: str | None = None
    # The member id of the incarnation that was replaced: the same id listed again means
    # the new pod has not rejoined yet (a same-protocol bounce changes nothing else).
    current_member_id: str | None = None
    # The pod that was replaced: a live pod with old settings and this uid means the
    # bounce never reached it; with another uid, something recreated it wrongly.
    current_pod_uid: str | None = None
    current_bounced_at: datetime | None = None
    started_at: datetime | None = None
    # When the rollout last made progress; a wait longer than the timeout pauses it.
    waiting_since: datetime | None = None
    # Idle after a rollout keeps its record (from/to, bounces, times) until the next one.
    completed_at: datetime | None = None
    message: str = ""

    def __post_init__(self) -> None:
        if self.bounces and not 0 <= self.bounce_index < len(self.bounces):
            raise ValueError(f"bounce index {self.bounce_index} outside {len(self.bounces)}")
        if self.phase is not RolloutPhase.IDLE and not self.bounces:
            raise ValueError(f"a {self.phase.value} rollout needs at least one bounce")
        moments = (self.current_bounced_at, self.started_at, self.waiting_since, self.completed_at)
        for moment in moments:
            if moment is not None and moment.tzinfo is None:
                raise ValueError("rollout timestamps must be timezone-aware")

    @property
    def active(self) -> bool:
        return self.phase is not RolloutPhase.IDLE

    @property
    def bounce_protocol(self) -> RebalanceProtocolSetting | None:
        """The protocol the current bounce recreates members with (status targetProtocol)."""
        return self.bounces[self.bounce_index] if self.active else None

    @property
    def bounce_label(self) -> str:
        if not self.active:
            return "no bounce"
        protocol = self.bounces[self.bounce_index].value
        return f"bounce {self.bounce_index + 1} of {len(self.bounces)} ({protocol})"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready, camelCase keys matching `status.rollout` where the CRD has the field."""
        return {
            "phase": self.phase.value,
            "fromProtocol": _protocol_out(self.from_protocol),
            "toProtocol": _protocol_out(self.to_protocol),
            "targetProtocol": _protocol_out(self.bounce_protocol),
            "templateHash": self.template_hash,
            "bounces": [protocol.value for protocol in self.bounces],
            "bounceIndex": self.bounce_index,
            "bouncedSlots": list(self.bounced_slots),
            "pendingSlots": list(self.pending_slots),
            "currentSlot": self.current_slot,
            "currentPod": self.current_pod,
            "currentMemberId": self.current_member_id,
            "currentPodUid": self.current_pod_uid,
            "currentSlotBouncedAt": _time_out(self.current_bounced_at),
            "startedAt": _time_out(self.started_at),
            "waitingSince": _time_out(self.waiting_since),
            "completedAt": _time_out(self.completed_at),
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> RolloutState:
        """Inverse of `to_dict`. Missing keys take defaults; malformed values raise ValueError
        (the caller then starts from `RolloutState()` and the pods tell the rest)."""
        try:
            return cls(
                phase=RolloutPhase(str(data.get("phase", RolloutPhase.IDLE.value))),
                from_protocol=_protocol_in(data.get("fromProtocol")),
                to_protocol=_protocol_in(data.get("toProtocol")),
                template_hash=_optional_str(data.get("templateHash")),
                bounces=tuple(RebalanceProtocolSetting(str(p)) for p in _list(data.get("bounces"))),
                bounce_index=_int(data.get("bounceIndex", 0)),
                bounced_slots=tuple(_int(s) for s in _list(data.get("bouncedSlots"))),
                pending_slots=tuple(_int(s) for s in _list(data.get("pendingSlots"))),
                current_slot=_optional_int(data.get("currentSlot")),
                current_pod=_optional_str(data.get("currentPod")),
                current_member_id=_optional_str(data.get("currentMemberId")),
                current_pod_uid=_optional_str(data.get("currentPodUid")),
                current_bounced_at=_time_in(data.get("currentSlotBouncedAt")),
                started_at=_time_in(data.get("startedAt")),
                waiting_since=_time_in(data.get("waitingSince")),
                completed_at=_time_in(data.get("completedAt")),
                message=str(data.get("message") or ""),
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"unreadable status.rollout: {error}") from error


def _protocol_out(protocol: RebalanceProtocolSetting | None) -> str | None:
    return protocol.value if protocol is not None else None


def _protocol_in(value: object) -> RebalanceProtocolSetting | None:
    return RebalanceProtocolSetting(str(value)) if value is not None else None


def _time_out(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment is not None else None


def _time_in(value: object) -> datetime | None:
    return datetime.fromisoformat(str(value)) if value is not None else None


def _list(value: object) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise TypeError(f"expected a list, got {value!r}")
    return list(value)


def _int(value: object) -> int:
    # bool is an int in Python; a slot of True is garbage, not slot 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _optional_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)
