"""Hot standby (issue 15, part 2): which standby takes over which missing active member.

Pure decision rules only; `hot_standby.plan_promotions` feeds them from a pass
and carries their decisions out (docs/operator.md, "Hot standby").

A promotion hands a standby the missing member's instance id as a static replacement (same
assignment, no rebalance). The rules keep the one invariant that matters: an instance id is
never promised to two processes. So a promotion already recorded (write-ahead, in status)
is finished before anything else is decided for its slot or its standby, a slot whose pod is
still running is never taken over, and a standby that is not Ready is never chosen.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from staticfleet_operator.crd import PromotionStatus


class PodHealth(StrEnum):
    RUNNING = "running"  # the member's pod is alive (Ready or starting)
    # Deleted, its container still shutting down: the member may still commit what it
    # processed, so it keeps its slot until the pod is gone (then DELETED).
    TERMINATING = "terminating"
    DELETED = "deleted"  # the pod is gone
    FAILED = "failed"  # phase Failed, or its container crash-looping
    NODE_LOST = "node_lost"  # its node is NotReady/unreachable: the process may still run


@dataclass(frozen=True, slots=True)
class ActiveSlot:
    slot: int
    instance_id: str
    health: PodHealth
    # The coordinator lists the instance id as a member (there is an assignment to take).
    listed: bool


@dataclass(frozen=True, slots=True)
class Standby:
    name: str  # the standby pod
    ready: bool  # joined as a standby and heartbeating


def decide_promotions(
    slots: Sequence[ActiveSlot],
    standbys: Sequence[Standby],
    in_flight: Collection[PromotionStatus],
) -> list[PromotionStatus]:
    """The promotions to make now, lowest slot first, at most one per slot and standby: the
    recorded ones (status.promotions) as they are, then new ones (not yet started).

    Rules (tests/operator/test_promotion.py names each):
    - in_flight_first: a recorded promotion is resumed as it was, and its slot and standby are
      not used for anything else (an operator restart mid-promotion neither repeats it onto
      another standby nor gives its slot a second one).
    - running_is_never_taken: a slot whose pod runs keeps its member (a slow member is the
      session timeout's business, not a takeover's), and so does one whose pod is still
      terminating: its graceful shutdown commits, and a takeover now would give its
      partitions a second owner; it is taken over once the pod is gone.
    - unlisted_needs_no_takeover: a member the coordinator no longer lists has no assignment
      to take over; the group has rebalanced already and a standby would gain nothing.
    - ready_standby_only: only a Ready standby (joined, heartbeating) is promoted, so the
      takeover is answered within one heartbeat interval.
    - fewest_first: standbys are used in name order, one slot each; with fewer standbys than
      missing members the lowest slots are served and the rest restart as plain static
      members.
    - node_lost_too: a member on a lost node is taken over as well; the coordinator fences the
      old holder (its member id stops being valid), so a process only partitioned away cannot
      commit for the instance id any more.
    """
    decisions = list(in_flight)
    busy_slots = {p.slot for p in in_flight}
    busy_standbys = {p.standby for p in in_flight}
    free = sorted(
        (s for s in standbys if s.ready and s.name not in busy_standbys), key=lambda s: s.name
    )
    for slot in sorted(slots, key=lambda s: s.slot):
        if not free:
            break
        alive = slot.health in (PodHealth.RUNNING, PodHealth.TERMINATING)
        if slot.slot in busy_slots or alive or not slot.listed:
            continue
        standby = free.pop(0)
        rule = "node_lost_too" if slot.health is PodHealth.NODE_LOST else f"pod_{slot.health}"
        decisions.append(
            PromotionStatus(
                standby=standby.name, slot=slot.slot, instance_id=slot.instance_id, rule=rule
            )
        )
    return decisions
