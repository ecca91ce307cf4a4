"""Rules for the coordinator's expected members before a scale-up (pure)."""

from __future__ import annotations

from staticfleet_operator.expected_members import (
    expected_on_create,
    seconds_until_expiry,
    should_clear,
)


def test_scale_up_expects_the_whole_fleet() -> None:
    listed = {"o-0", "o-1", "o-2"}
    expected = expected_on_create("o", 6, [3, 4, 5], listed)
    assert expected == ["o-0", "o-1", "o-2", "o-3", "o-4", "o-5"]


def test_a_restarting_listed_member_is_not_a_scale_up() -> None:
    assert expected_on_create("o", 3, [1], {"o-0", "o-1", "o-2"}) is None


def test_a_new_group_expects_every_member() -> None:
    assert expected_on_create("o", 2, [0, 1], set()) == ["o-0", "o-1"]


def test_expected_members_naming_slots_above_replicas_are_cleared_on_scale_down() -> None:
    assert should_clear(["o-0", "o-1", "o-2", "o-3"], "o", 2, {"o-0", "o-1"}, stable=False)


def test_fulfilled_expected_members_are_cleared_once_stable_and_pending_ones_kept() -> None:
    fleet = ["o-0", "o-1", "o-2"]
    everyone = {"o-0", "o-1", "o-2"}
    assert should_clear(fleet, "o", 3, everyone, stable=True)
    # Listed but the held join phase has not ended: clearing now would release it early.
    assert not should_clear(fleet, "o", 3, everyone, stable=False)
    assert not should_clear(fleet, "o", 3, {"o-0", "o-1"}, stable=True)


def test_expired_expected_members_are_cleared_even_with_members_missing() -> None:
    fleet = ["o-0", "o-1", "o-2"]
    assert not should_clear(fleet, "o", 3, {"o-0"}, stable=True, expired=False)
    assert should_clear(fleet, "o", 3, {"o-0"}, stable=True, expired=True)


def test_pending_expected_members_ask_for_one_pass_at_their_deadline() -> None:
    due = seconds_until_expiry(deadline_ms=10_000, now_ms=4_000)
    assert due is not None and 6.0 <= due < 6.5
    assert seconds_until_expiry(deadline_ms=10_000, now_ms=10_000) is None
