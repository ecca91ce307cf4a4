"""scaling.scale_target: the stabilization window and coalescing, with an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from staticfleet_operator.scaling import (
    Hold,
    HoldReason,
    Recommendation,
    ScaleTarget,
    hold_message,
    scale_target,
    seconds_until,
)

T0 = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
WINDOW = 30
MAX_HOLD = 300


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Passes:
    """Passes of one process over one group: what each remembers feeds the next."""

    def __init__(self, fleet: int, window: int = WINDOW) -> None:
        self.fleet = fleet
        self.window = window
        self.previous: int | None = None
        self.recommendations: tuple[Recommendation, ...] | None = None
        self.held_since: datetime | None = None

    def run(self, desired: int, seconds: float, settled: bool = True) -> ScaleTarget:
        target = scale_target(
            desired,
            previous=self.previous,
            fleet=self.fleet,
            settled=settled,
            recommendations=self.recommendations,
            now=at(seconds),
            window_seconds=self.window,
            held_since=self.held_since,
            max_hold_seconds=MAX_HOLD,
        )
        self.previous, self.recommendations = target.replicas, target.recommendations
        self.held_since = target.held_since
        self.fleet = target.replicas  # the step is made
        return target


def test_a_scale_up_is_immediate() -> None:
    passes = Passes(fleet=4)
    assert passes.run(4, 0).replicas == 4
    up = passes.run(6, 1)
    assert (up.replicas, up.hold) == (6, None)


def test_a_scale_down_waits_for_the_window_then_goes() -> None:
    passes = Passes(fleet=6)
    passes.run(6, 0)
    held = passes.run(4, 10)
    assert held.replicas == 6
    assert held.hold == Hold(4, 6, HoldReason.STABILIZATION_WINDOW, at(WINDOW))
    assert passes.run(4, 29.9).replicas == 6
    gone = passes.run(4, 30)
    assert (gone.replicas, gone.hold) == (4, None)


def test_a_flapping_target_costs_one_scale_up_and_one_scale_down() -> None:
    """20 flaps 4 <-> 6 over 60 s (one every 3 s, a pass at each): the fleet steps up once
    and down once, WINDOW after the last 6."""
    passes = Passes(fleet=4)
    passes.run(4, 0)
    counts = [passes.run(6 if flap % 2 == 0 else 4, 3 * (flap + 1)).replicas for flap in range(20)]
    last_six = 3 * 19  # flap 18 asks for 6 at 57 s
    assert counts == [6] * 20
    assert passes.run(4, last_six + WINDOW - 1).replicas == 6
    assert passes.run(4, last_six + WINDOW).replicas == 4


def test_with_no_window_every_flap_is_a_step() -> None:
    passes = Passes(fleet=4, window=0)
    counts = [passes.run(6 if flap % 2 == 0 else 4, flap).replicas for flap in range(6)]
    assert counts == [6, 4, 6, 4, 6, 4]
    assert passes.recommendations == ()  # nothing to remember


def test_the_window_goes_to_the_highest_count_within_it() -> None:
    passes = Passes(fleet=8)
    passes.run(8, 0)
    assert passes.run(6, 5).replicas == 8
    assert passes.run(3, 20).replicas == 8
    # 8 leaves the window at 30 s; 6 (asked at 5 s) is still in it until 35 s.
    step = passes.run(3, 31)
    assert step.replicas == 6
    assert step.hold == Hold(3, 6, HoldReason.STABILIZATION_WINDOW, at(35))
    assert passes.run(3, 35).replicas == 3


def test_a_first_pass_counts_the_fleet_it_finds_as_asked_for() -> None:
    """As an HPA does: an operator that starts while spec.replicas is below the fleet holds
    the scale-down for a window rather than acting on a count it saw for an instant."""
    passes = Passes(fleet=6)
    first = passes.run(4, 0)
    assert first.replicas == 6 and first.hold is not None
    assert passes.run(4, WINDOW).replicas == 4


def test_a_scale_down_waits_for_the_rebalance_in_flight_then_goes_to_the_latest_count() -> None:
    passes = Passes(fleet=6, window=0)
    passes.run(6, 0)
    assert passes.run(5, 1, settled=False).hold == Hold(
        5, 6, HoldReason.REBALANCE_IN_PROGRESS, at(1 + MAX_HOLD)
    )
    held = passes.run(4, 2, settled=False)
    assert held.replicas == 6
    # The count that clears expected members is the latest one, not the held one.
    assert held.stabilized == 4
    step = passes.run(3, 3, settled=True)
    assert (step.replicas, step.hold) == (3, None)  # straight there: one step, not three


def test_a_group_that_never_settles_is_scaled_down_after_the_longest_hold() -> None:
    """A member that keeps crashing keeps the group rebalancing; scaling it away may be the
    user's remedy, so the wait for a settled group ends (rollout.memberReadyTimeoutSeconds)."""
    passes = Passes(fleet=6, window=0)
    passes.run(6, 0)
    assert passes.run(4, 10, settled=False).replicas == 6
    assert passes.run(4, 10 + MAX_HOLD - 1, settled=False).replicas == 6
    gone = passes.run(4, 10 + MAX_HOLD, settled=False)
    assert (gone.replicas, gone.hold, gone.held_since) == (4, None, None)
    # A later scale-down during a rebalance waits again, from its own start.
    assert passes.run(4, 400, settled=True).replicas == 4
    assert passes.run(3, 500, settled=False).hold == Hold(
        3, 4, HoldReason.REBALANCE_IN_PROGRESS, at(500 + MAX_HOLD)
    )


def test_a_scale_up_is_not_held_by_a_rebalance_in_flight() -> None:
    """Its members join the join phase in flight (expected members re-set to the fleet)."""
    passes = Passes(fleet=3, window=0)
    passes.run(5, 0)
    assert passes.run(7, 1, settled=False).replicas == 7


def test_a_first_pass_holds_nothing_for_a_rebalance() -> None:
    """No count scaled to yet in this process: nothing is in flight that it decided."""
    passes = Passes(fleet=6, window=0)
    assert passes.run(4, 0, settled=False).replicas == 4


def test_the_pass_at_the_end_of_the_window_is_due_then() -> None:
    hold = Hold(4, 6, HoldReason.STABILIZATION_WINDOW, at(30))
    assert seconds_until(hold, at(10)) == pytest.approx(20.05)
    assert seconds_until(hold, at(31)) == pytest.approx(0.05)
    give_up = Hold(4, 6, HoldReason.REBALANCE_IN_PROGRESS, at(300))
    assert seconds_until(give_up, at(0)) == pytest.approx(300.05)
    assert seconds_until(None, at(0)) is None


def test_the_message_names_no_time_so_flaps_post_no_new_event() -> None:
    first = Hold(4, 6, HoldReason.STABILIZATION_WINDOW, at(30))
    later = Hold(4, 6, HoldReason.STABILIZATION_WINDOW, at(57))
    assert hold_message(first) == hold_message(later)
    assert "stabilizationWindowSeconds" in hold_message(first)


def test_steady_once_every_count_in_the_window_is_the_target() -> None:
    passes = Passes(fleet=6)
    passes.run(6, 0)
    assert not passes.run(4, 1).steady
    assert not passes.run(4, 20).steady  # 6 (at 0 s) is still within the window
    assert passes.run(4, 40).steady


@given(
    st.lists(
        st.tuples(st.integers(0, 12), st.floats(0, 20), st.booleans()), min_size=1, max_size=40
    ),
    st.integers(0, 60),
)
def test_the_target_never_goes_below_what_the_window_saw_nor_up_past_the_latest(
    steps: list[tuple[int, float, bool]], window: int
) -> None:
    """Properties: a scale-up is never delayed (the target is at least the count asked
    for); the target is never above the highest count asked for in the window (or the count
    held while a rebalance is in flight); and a held scale-down says why."""
    passes = Passes(fleet=0, window=window)
    now = 0.0
    for desired, gap, settled in steps:
        now += gap
        previous = passes.previous
        seen = [
            r.replicas
            for r in (passes.recommendations or ())
            if at(now) - r.at < timedelta(seconds=window)
        ]
        target = passes.run(desired, now, settled)
        assert target.replicas >= desired
        ceiling = max([desired, *seen])
        if target.hold is not None and target.hold.reason is HoldReason.REBALANCE_IN_PROGRESS:
            assert not settled and target.replicas == previous
            assert target.hold.until is not None and at(now) < target.hold.until
        else:
            assert target.replicas <= ceiling
        assert (target.hold is None) == (target.replicas == desired)
