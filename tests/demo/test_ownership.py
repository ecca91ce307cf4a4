"""Ownership figures from member event logs: the safety check and the no-owner arithmetic."""

from __future__ import annotations

import pytest

from staticfleet.demo import ownership as om
from tests.demo.rows import commit, event, log, partitions

T = "t"


def test_holdings_open_on_assign_and_close_on_revoke_lost_and_stop():
    member = log(
        "a",
        event(0, "started"),
        event(100, "assigned", 0, 1, 2),
        event(200, "revoked", 0),
        event(250, "lost", 1),
        event(300, "assigned", 3),
        event(400, "stopped"),
    )
    held = sorted(om.holdings(member), key=lambda h: h.partition)
    assert [(h.partition[1], h.start_ms, h.end_ms) for h in held] == [
        (0, 100, 200),
        (1, 100, 250),
        (2, 100, 400),
        (3, 300, 400),
    ]
    assert {h.process for h in held} == {"a#1"}


def test_a_log_cut_short_leaves_holdings_open():
    held = om.holdings(log("a", event(100, "assigned", 0)))
    assert [(h.start_ms, h.end_ms) for h in held] == [(100, None)]


def test_an_eager_reassignment_of_a_held_partition_keeps_the_first_start():
    held = om.holdings(log("a", event(100, "assigned", 0), event(200, "assigned", 0, 1)))
    assert sorted((h.partition[1], h.start_ms) for h in held) == [(0, 100), (1, 200)]


def test_the_safety_check_flags_two_owners_of_one_partition():
    a = log("member-0", event(100, "assigned", 0, 1), event(300, "revoked", 0, 1))
    b = log("member-1", event(250, "assigned", 0), event(500, "stopped"))
    held = om.all_holdings([a, b])
    overlaps = om.ownership_overlaps(held, end_ms=1000)
    assert overlaps == [om.Overlap((T, 0), ("member-0#1", "member-1#1"), 250, 300)]
    assert om.max_simultaneous_owners(held, end_ms=1000) == 2


def test_a_hand_over_in_the_same_millisecond_is_not_an_overlap():
    a = log("member-0", event(100, "assigned", 0), event(300, "revoked", 0))
    b = log("member-1", event(300, "assigned", 0))
    held = om.all_holdings([a, b])
    assert om.ownership_overlaps(held, end_ms=1000) == []
    assert om.max_simultaneous_owners(held, end_ms=1000) == 1


def test_two_processes_of_one_slot_are_two_owners():
    # A zombie: the old process of member-1 never let go when the new one started.
    old = log("member-1", event(100, "assigned", 0), incarnation=1)
    new = log("member-1", event(400, "assigned", 0), event(600, "stopped"), incarnation=2)
    held = om.all_holdings([old, new])
    (overlap,) = om.ownership_overlaps(held, end_ms=1000)
    assert overlap.processes == ("member-1#1", "member-1#2")
    assert (overlap.start_ms, overlap.end_ms) == (400, 600)


def test_three_owners_at_once_are_counted():
    logs = [log(f"m{i}", event(100 * i, "assigned", 0)) for i in range(1, 4)]
    assert om.max_simultaneous_owners(om.all_holdings(logs), end_ms=1000) == 3


def test_no_holdings_means_no_owners():
    assert om.max_simultaneous_owners([], end_ms=10) == 0


def test_partition_seconds_without_owner():
    # p0: held 100-400 and from 600 on: a 200 ms gap. p1: held throughout. p2: never held.
    a = log("a", event(100, "assigned", 0), event(400, "revoked", 0))
    b = log("b", event(0, "assigned", 1), event(600, "assigned", 0))
    held = om.all_holdings([a, b])
    per_partition = om.unowned_ms(held, partitions(3), 0, 1000)
    assert per_partition == {(T, 0): 200, (T, 1): 0, (T, 2): 1000}
    assert om.unowned_partition_seconds(held, partitions(3), 0, 1000) == pytest.approx(1.2)


def test_no_owner_time_counts_from_the_first_assignment_or_the_window_start():
    a = log("a", event(100, "assigned", 0), event(400, "revoked", 0))
    b = log("b", event(600, "assigned", 0))
    held = om.all_holdings([a, b])
    # Before 100 nobody was expected to hold it yet.
    assert om.unowned_ms(held, partitions(1), 0, 1000) == {(T, 0): 200}
    # A window starting inside the gap counts only its part.
    assert om.unowned_ms(held, partitions(1), 500, 1000) == {(T, 0): 100}
    # Overlapping holders do not make the covered time count twice.
    c = log("c", event(100, "assigned", 0), event(700, "stopped"))
    assert om.unowned_ms(om.all_holdings([a, b, c]), partitions(1), 0, 1000) == {(T, 0): 0}


def test_all_owned_again_at():
    a = log("a", event(0, "assigned", 0, 1), event(200, "revoked", 0, 1))
    b = log("b", event(350, "assigned", 0))
    c = log("c", event(500, "assigned", 1))
    held = om.all_holdings([a, b, c])
    assert om.all_owned_again_at(held, partitions(2), 100, 1000) == 500
    # Nothing without an owner in the window: owned "again" at once.
    assert om.all_owned_again_at(held, partitions(2), 600, 1000) == 600
    # Still without an owner at the end: never.
    assert om.all_owned_again_at(om.all_holdings([a, b]), partitions(2), 100, 1000) is None


def test_revocations_split_rebalance_revokes_from_releases_at_shutdown():
    member = log(
        "a",
        event(100, "assigned", 0, 1, 2),
        event(200, "revoked", 0, 1, 2),  # eager rebalance: followed by a new assignment
        event(300, "assigned", 0, 1),
        event(350, "lost", 1),
        event(360, "assigned", 1),
        event(400, "revoked", 0, 1),  # at shutdown: only commits until `stopped`
        commit(400, {0: 5, 1: 6}),
        event(401, "stopped"),
    )
    assert om.revocations([member], 0, 1000) == om.RevocationCounts(revoked=3, released=2, lost=1)
    # Outside the window nothing counts.
    assert om.revocations([member], 250, 380) == om.RevocationCounts(0, 0, 1)


def test_acknowledged_offsets_and_offsets_lost():
    a = log("a", commit(100, {0: 10, 1: 20}), commit(200, {0: 15}), commit(900, {0: 99}))
    b = log("b", commit(150, {2: 7}))
    acknowledged = om.acknowledged_offsets([a, b], before_ms=500)
    assert acknowledged == {(T, 0): 15, (T, 1): 20, (T, 2): 7}
    stored = {(T, 0): 15, (T, 1): 18}
    assert om.offsets_lost(acknowledged, stored) == {(T, 1): (20, 18), (T, 2): (7, None)}
    assert om.offsets_lost(acknowledged, {(T, 0): 16, (T, 1): 20, (T, 2): 7}) == {}


def test_commit_regressions_across_members():
    a = log("a", commit(100, {0: 10}), commit(200, {0: 12}))
    b = log("b", commit(300, {0: 3}), commit(400, {0: 13}))
    assert om.commit_regressions([a, b]) == [((T, 0), 300, 12, 3)]
    assert om.commit_regressions([a]) == []


def test_member_aliases_map_every_member_id_to_its_slot():
    a1 = log(
        "member-0", event(0, "started", member_id=""), event(5, "assigned", 0, member_id="x-1")
    )
    a2 = log("member-0", event(9, "assigned", 0, member_id="x-2"), incarnation=2)
    assert om.member_aliases([a1, a2]) == {"x-1": "member-0", "x-2": "member-0"}


def test_step_functions_for_the_timeline():
    a = log("a", event(0, "assigned", 0, 1), event(100, "revoked", 1), event(300, "stopped"))
    held = om.all_holdings([a])
    assert om.count_steps(held, end_ms=1000) == [(0, 100, 2), (100, 300, 1)]
    assert om.unowned_steps(held, partitions(2), 0, 400) == [(100, 300, 1), (300, 400, 2)]
    assert om.process_lifetimes(a, end_ms=1000) == (0, 300)
    assert om.process_lifetimes(log("b"), end_ms=1000) is None


def test_held_at_an_instant():
    a = log("a", event(0, "assigned", 0), event(100, "revoked", 0))
    b = log("b", event(100, "assigned", 0))
    held = om.all_holdings([a, b])
    assert om.held_at(held, 50) == {(T, 0): {"a#1"}}
    assert om.held_at(held, 100) == {(T, 0): {"b#1"}}


def test_assignment_rounds_count_each_rebalance_once():
    # a holds both; an eager round at 200-260 hands p1 to b (b's assign 5 ms after a's);
    # at 500 b leaves and a takes p1 back (a gap: one more round).
    a = log(
        "a",
        event(0, "assigned", 0, 1),
        event(200, "revoked", 0, 1),
        event(255, "assigned", 0),
        event(600, "assigned", 1),
    )
    b = log("b", event(260, "assigned", 1), event(500, "revoked", 1), event(501, "stopped"))
    held = om.all_holdings([a, b])
    assert om.assignment_rounds(held, partitions(2), 100, 1000) == 2
    # A window that starts during the gap still counts the round that closes it.
    assert om.assignment_rounds(held, partitions(2), 230, 1000) == 2
    assert om.assignment_rounds(held, partitions(2), 300, 1000) == 1
    # The initial assignment before the window is no rebalance.
    assert (
        om.assignment_rounds(
            om.all_holdings([log("a", event(0, "assigned", 0, 1))]), partitions(2), 100, 1000
        )
        == 0
    )


def test_an_eager_round_that_gives_everything_back_is_still_a_round():
    a = log("a", event(0, "assigned", 0), event(200, "revoked", 0), event(210, "assigned", 0))
    held = om.all_holdings([a])
    assert om.assignment_rounds(held, partitions(1), 100, 1000) == 1
    assert om.partitions_moved(held, 100, 1000) == 0


def test_a_hand_over_in_the_same_millisecond_is_a_round_and_a_move():
    a = log("a", event(0, "assigned", 0, 1), event(300, "revoked", 1))
    b = log("b", event(300, "assigned", 1))
    held = om.all_holdings([a, b])
    assert om.assignment_rounds(held, partitions(2), 100, 1000) == 1
    assert om.partitions_moved(held, 100, 1000) == 1


def test_partitions_moved_counts_hand_overs_between_processes_in_the_window():
    a = log("a", event(0, "assigned", 0, 1, 2), event(200, "revoked", 0, 1, 2))
    b = log("b", event(250, "assigned", 1, 2), event(800, "stopped"))
    a2 = log("a", event(250, "assigned", 0), event(900, "assigned", 1, 2), incarnation=2)
    held = om.all_holdings([a, b, a2])
    # p0: a#1 -> a#2 (another process of the same slot: a move); p1, p2: a#1 -> b -> a#2.
    assert om.partitions_moved(held, 100, 1000) == 5
    assert om.partitions_moved(held, 100, 850) == 3
    assert om.partitions_moved(held, 0, 1000) == 5  # the first assignment is no move
