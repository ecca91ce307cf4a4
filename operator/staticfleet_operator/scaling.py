"""How many members a managed group runs this pass, from what spec.replicas asked. Pure.

Every step costs a rebalance (a scale-up's join phase, a scale-down's batch LeaveGroup), so
a target that flaps (an autoscaler's metric near a threshold, 4 -> 6 -> 4 -> 6) must not
cost one per flap, and a change that arrives while a step is in flight must join it or
wait for it, not start another. Two rules, after the HorizontalPodAutoscaler's:

- **Stabilization window for scale-down** (`spec.scaleDown.stabilizationWindowSeconds`): the
  target is the highest count asked for within the window (HPA's
  `behavior.scaleDown.stabilizationWindowSeconds`), so a scale-down happens only once the
  lower count has been asked for the whole window. Scale-up is immediate (lag must drain).
  As HPA does, the first pass of a process counts the fleet it finds as asked for now, so
  an operator restart does not scale down on a count it saw for an instant.
- **Coalescing**: a scale-down waits while the group rebalances (a scale-up's join phase, a
  LeaveGroup's rebalance: the step in flight) and then goes straight to the latest count,
  in one step; a group that does not settle within `spec.rollout.memberReadyTimeoutSeconds`
  (a member that keeps crashing, say) is scaled down all the same, since the scale-down may
  be how its user removes the cause. A scale-up is not held: on the embedded coordinator
  its members join the join phase in flight (the expected members are set to the larger
  fleet), and a scale-up during a scale-down's termination brings back static members the
  group still lists, with no rebalance at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from staticfleet_operator.expected_members import EXPIRY_MARGIN_SECONDS


class HoldReason(StrEnum):
    """Why a scale-down waits (status.scaleDownHeld.reason)."""

    STABILIZATION_WINDOW = "StabilizationWindow"
    REBALANCE_IN_PROGRESS = "RebalanceInProgress"


@dataclass(frozen=True, slots=True)
class Recommendation:
    """A count asked for (spec.replicas) as seen by the pass at `at`."""

    at: datetime
    replicas: int


@dataclass(frozen=True, slots=True)
class Hold:
    """A scale-down not made yet: `replicas` asked for, `holding` kept; `until` when the
    window lets it go, or (a rebalance in flight) when it is made even if the group has not
    settled by then (its end is an event of its own, the journal's)."""

    replicas: int
    holding: int
    reason: HoldReason
    until: datetime | None


@dataclass(frozen=True, slots=True)
class ScaleTarget:
    """This pass's count: `replicas` scales the fleet; `stabilized` is the count the window
    allows (what expected members are kept against); `recommendations` and `held_since`
    (when the hold for a rebalance in flight began) to remember."""

    replicas: int
    stabilized: int
    hold: Hold | None
    recommendations: tuple[Recommendation, ...]
    held_since: datetime | None = None

    @property
    def steady(self) -> bool:
        """Every count asked for within the window is this one (a held scale-down's
        Event may be posted again after this: it is another episode)."""
        return self.hold is None and all(r.replicas == self.replicas for r in self.recommendations)


def scale_target(
    desired: int,
    *,
    previous: int | None,
    fleet: int,
    settled: bool,
    recommendations: tuple[Recommendation, ...] | None,
    now: datetime,
    window_seconds: int,
    held_since: datetime | None = None,
    max_hold_seconds: int = 300,
) -> ScaleTarget:
    """The count to scale to now (the rules are in the module docstring).

    `previous`: the count the last pass of this process scaled to (None: its first pass).
    `fleet`: the members the fleet has now (live member pods' slots), the first pass's
    seed. `settled`: no rebalance in progress. `recommendations`, `held_since`: remembered
    from the last pass (None: its first; no hold for a rebalance). `max_hold_seconds`: how
    long a scale-down waits for a rebalance at most."""
    window = timedelta(seconds=window_seconds)
    seen: tuple[Recommendation, ...]
    if recommendations is None:
        seen = (Recommendation(now, fleet),) if window_seconds > 0 else ()
    else:
        seen = tuple(r for r in recommendations if now - r.at < window)
    kept = (*seen, Recommendation(now, desired)) if window_seconds > 0 else ()
    stabilized = max((r.replicas for r in kept), default=desired)
    stabilized = max(stabilized, desired)
    if previous is not None and stabilized < previous and not settled:
        since = held_since or now
        give_up = since + timedelta(seconds=max_hold_seconds)
        if now < give_up:
            in_flight = Hold(desired, previous, HoldReason.REBALANCE_IN_PROGRESS, give_up)
            return ScaleTarget(previous, stabilized, in_flight, kept, since)
    hold: Hold | None = None
    if stabilized > desired:
        # The window lets the count down once the last higher one asked for leaves it.
        last_higher = max(r.at for r in kept if r.replicas > desired)
        hold = Hold(desired, stabilized, HoldReason.STABILIZATION_WINDOW, last_higher + window)
    return ScaleTarget(stabilized, stabilized, hold, kept)


def hold_message(hold: Hold) -> str:
    """The held scale-down's Event (one per episode: it names no time, so flaps do not
    make new ones)."""
    if hold.reason is HoldReason.STABILIZATION_WINDOW:
        return (
            f"scale-down to {hold.replicas} held at {hold.holding} members for the "
            "stabilization window (spec.scaleDown.stabilizationWindowSeconds): a higher "
            "count was asked for within it"
        )
    return (
        f"scale-down to {hold.replicas} held at {hold.holding} members until the rebalance "
        "in progress ends (then one step to the latest count)"
    )


def seconds_until(hold: Hold | None, now: datetime) -> float | None:
    """When the pass that lets a hold go is due (None: no timer needed)."""
    if hold is None or hold.until is None:
        return None
    # A little after it, so that pass sees the window passed.
    return max((hold.until - now).total_seconds(), 0.0) + EXPIRY_MARGIN_SECONDS
