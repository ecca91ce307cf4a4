"""The member's health: is its run loop making progress (liveness), does it hold its share of
the group (readiness). Pure decisions over an `Observation`; the HTTP edge is
`staticfleet.member.health_server`.

- **Liveness** (`/livez`): the run loop ticked within `stall_limit_ms`. A loop blocked in a
  source, a write to a stalled pipe or a deadlock stops ticking; a member cut off from its
  coordinator does not (the loop keeps polling): restarting it would not help, so that is a
  readiness matter only.
- **Readiness** (`/readyz`): stable in its current generation (epoch on the consumer
  protocol) and heard by the coordinator within its session, or a standby whose heartbeats
  are answered (on the consumer protocol: whose joins the broker refuses while the slot's
  member holds the instance id, `--standby-wait-ms`).
  Joining, rebalancing and lost (no answer for a session) are not ready.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Any

from coordinator.client.consumer_protocol_member import ConsumerProtocolMember
from coordinator.client.member_state import MemberState
from coordinator.clock import Clock
from staticfleet.member.events import Member

# Beyond the longest wait a healthy loop makes (a commit, bounded by the session or by the
# request timeout, then a poll interval): a loaded machine's scheduling delay.
STALL_MARGIN_MS = 5_000


class Phase(StrEnum):
    STARTING = "starting"  # the process runs; the member is not created yet
    STANDBY = "standby"  # a hot standby waiting for a promotion
    JOINING = "joining"  # never stable in this incarnation yet
    REBALANCING = "rebalancing"  # was stable; a rebalance (or a rejoin) is under way
    STABLE = "stable"  # holds its assignment of the current generation
    FATAL = "fatal"
    CLOSING = "closing"


@dataclasses.dataclass(frozen=True, slots=True)
class Observation:
    """What the endpoints decide from: the member as seen at `now_ms` (its own clock)."""

    now_ms: int
    last_tick_ms: int
    stall_limit_ms: int
    phase: Phase
    session_timeout_ms: int
    # The coordinator's (or, for a standby, the standby heartbeat's) last answer; None: never.
    last_contact_ms: int | None
    # Stable at least once in this incarnation: a stale contact then means "lost".
    was_stable: bool = False
    generation_id: int = -1
    partitions: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str
    detail: str

    def body(self, seen: Observation) -> dict[str, Any]:
        """The JSON an endpoint answers: the verdict and what it was decided from."""
        contact = None if seen.last_contact_ms is None else seen.now_ms - seen.last_contact_ms
        return {
            "status": "ok" if self.ok else "unavailable",
            "reason": self.reason,
            "detail": self.detail,
            "phase": seen.phase.value,
            "generation_id": seen.generation_id,
            "partitions": seen.partitions,
            "last_tick_ms_ago": seen.now_ms - seen.last_tick_ms,
            "last_contact_ms_ago": contact,
        }


def stall_limit_ms(
    session_timeout_ms: int, poll_interval_ms: int, commit_timeout_ms: int | None = None
) -> int:
    """How long the run loop may go without a tick and still count as alive: its longest
    legitimate wait, a commit (bounded by the session, or by `commit_timeout_ms` where the
    member does not bound it by the session: the consumer protocol's request timeout), plus
    one poll interval and `STALL_MARGIN_MS`."""
    commit_ms = max(session_timeout_ms, commit_timeout_ms or 0)
    return commit_ms + poll_interval_ms + STALL_MARGIN_MS


def liveness(seen: Observation) -> Verdict:
    silent_ms = seen.now_ms - seen.last_tick_ms
    if silent_ms > seen.stall_limit_ms:
        return Verdict(
            False,
            "stuck",
            f"the run loop has not ticked for {silent_ms} ms (limit {seen.stall_limit_ms} ms)",
        )
    return Verdict(True, "alive", f"the run loop ticked {silent_ms} ms ago")


def readiness(seen: Observation) -> Verdict:
    phase = seen.phase
    if phase in (Phase.FATAL, Phase.CLOSING):
        return Verdict(False, phase.value, f"the member is {phase.value}")
    if phase is Phase.STARTING:
        return Verdict(False, "joining", "the member is starting")
    contact_ms = None if seen.last_contact_ms is None else seen.now_ms - seen.last_contact_ms
    stale = contact_ms is not None and contact_ms > seen.session_timeout_ms
    if phase is Phase.STANDBY:
        if contact_ms is None or stale:
            return Verdict(False, "lost", _unheard("standby heartbeats", contact_ms, seen))
        return Verdict(True, "standby", f"a standby heartbeating ({contact_ms} ms ago)")
    if stale and (seen.was_stable or phase is Phase.STABLE):
        return Verdict(False, "lost", _unheard("the coordinator", contact_ms, seen))
    if phase is Phase.JOINING:
        return Verdict(False, "joining", "not yet stable in this incarnation")
    if phase is Phase.REBALANCING:
        return Verdict(False, "rebalancing", f"rebalancing after generation {seen.generation_id}")
    return Verdict(
        True,
        "stable",
        f"{seen.partitions} partition(s) in generation {seen.generation_id}",
    )


def _unheard(what: str, contact_ms: int | None, seen: Observation) -> str:
    if contact_ms is None:
        return f"no answer from {what} yet"
    return f"no answer from {what} for {contact_ms} ms (session {seen.session_timeout_ms} ms)"


def member_phase(member: Member, was_stable: bool) -> Phase:
    """The phase of a created member, from its own state."""
    if isinstance(member, ConsumerProtocolMember):
        if member.error is not None:
            return Phase.FATAL
        if member.closing:
            return Phase.CLOSING
        if member.waiting_for_instance_id:  # a standby refused while the id is held
            return Phase.STANDBY
        if member.generation_id <= 0 or member.reconciling:
            return Phase.REBALANCING if was_stable else Phase.JOINING
        return Phase.STABLE
    state = member.state
    if state is MemberState.STABLE:
        return Phase.STABLE
    if state is MemberState.FATAL:
        return Phase.FATAL
    if state in (MemberState.LEAVING, MemberState.CLOSED):
        return Phase.CLOSING
    return Phase.REBALANCING if was_stable else Phase.JOINING


class HealthState:
    """What the run loop reports (ticks, the member, standby answers), read by the health
    server's thread. Plain attribute writes and reads: each is atomic in CPython, and a
    snapshot a few milliseconds inconsistent decides nothing wrongly for a probe."""

    def __init__(self, clock: Clock, *, stall_limit_ms: int, session_timeout_ms: int) -> None:
        self.clock = clock
        self.stall_limit_ms = stall_limit_ms
        self.session_timeout_ms = session_timeout_ms
        self.last_tick_ms = clock.now_ms()
        self.member: Member | None = None
        self.standby = False
        self.standby_contact_ms: int | None = None
        self.was_stable = False

    def tick(self) -> None:
        """The run loop made a pass."""
        self.last_tick_ms = self.clock.now_ms()
        member = self.member
        if member is not None and member_phase(member, self.was_stable) is Phase.STABLE:
            self.was_stable = True

    def standby_answered(self) -> None:
        self.standby_contact_ms = self.clock.now_ms()
        self.tick()

    def observe(self) -> Observation:
        member = self.member
        now_ms = self.clock.now_ms()
        if member is None:
            return Observation(
                now_ms=now_ms,
                last_tick_ms=self.last_tick_ms,
                stall_limit_ms=self.stall_limit_ms,
                phase=Phase.STANDBY if self.standby else Phase.STARTING,
                session_timeout_ms=self.session_timeout_ms,
                last_contact_ms=self.standby_contact_ms,
            )
        return Observation(
            now_ms=now_ms,
            last_tick_ms=self.last_tick_ms,
            stall_limit_ms=self.stall_limit_ms,
            phase=member_phase(member, self.was_stable),
            session_timeout_ms=self.session_timeout_ms,
            last_contact_ms=member.last_contact_ms,
            was_stable=self.was_stable,
            generation_id=member.generation_id,
            partitions=len(member.assignment),
        )
