"""Figures from hand-made rebalance journals."""

from __future__ import annotations

from coordinator import journal_metrics as jm
from tests.demo.rows import assignment, journal

T = "t"


def test_rebalances_are_counted_inside_the_window():
    rows = [
        journal(100, "rebalance_started"),
        journal(200, "stable"),
        journal(300, "rebalance_started"),
        journal(900, "rebalance_started"),
    ]
    assert jm.rebalance_count(rows, 0, 1000) == 3
    assert jm.rebalance_count(rows, 150, 300) == 1
    assert jm.rebalance_count(rows, 301, 899) == 0


def test_an_eager_reshuffle_moves_partitions_between_instances():
    rows = [
        assignment(100, 1, "a-1", 0, 1, instance="a"),
        assignment(100, 1, "b-1", 2, 3, instance="b"),
        # A static restart gives a new member id but the same instance: not a move.
        assignment(200, 2, "a-2", 0, 2, instance="a"),
        assignment(200, 2, "b-1", 1, 3, instance="b"),
    ]
    moves = jm.partition_moves(rows, {}, 150, 1000)
    assert [(m.partition[1], m.from_owner, m.to_owner, m.generation_id) for m in moves] == [
        (1, "a", "b", 2),
        (2, "b", "a", 2),
    ]
    # The first generation is the baseline, not a move; outside the window nothing counts.
    assert jm.partition_moves(rows, {}, 0, 150) == []


def test_a_cooperative_hand_over_is_one_move():
    rows = [
        assignment(100, 1, "a", 0, 1, 2, instance="a"),
        assignment(100, 1, "b", instance="b"),
        # Generation 2: 2 is revoked from a and given to nobody yet.
        assignment(200, 2, "a", 0, 1, instance="a"),
        assignment(200, 2, "b", instance="b"),
        # Generation 3: b gets it.
        assignment(300, 3, "a", 0, 1, instance="a"),
        assignment(300, 3, "b", 2, instance="b"),
    ]
    moves = jm.partition_moves(rows, {}, 0, 1000)
    assert [(m.partition, m.from_owner, m.to_owner, m.generation_id) for m in moves] == [
        ((T, 2), "a", "b", 3)
    ]


def test_dynamic_member_ids_are_resolved_to_slots_through_aliases():
    rows = [
        assignment(100, 1, "uuid-1", 0, 1),
        assignment(200, 2, "uuid-2", 0, 1),  # the same slot, restarted: a new member id
    ]
    assert jm.partition_moves(rows, {}, 0, 1000) != []
    aliases = {"uuid-1": "member-0", "uuid-2": "member-0"}
    assert jm.partition_moves(rows, aliases, 0, 1000) == []
    assert jm.owner_of(rows[0], aliases) == "member-0"


def test_time_to_stable():
    rows = [
        journal(1000, "member_left"),
        journal(1010, "rebalance_started"),
        journal(1500, "stable"),
        journal(1600, "rebalance_started"),
        journal(2100, "stable"),
        journal(5000, "rebalance_started"),
    ]
    # To the end of the last rebalance started in the window.
    assert jm.time_to_stable_ms(rows, 900, 3000) == 1200
    # No rebalance: the group never left Stable.
    assert jm.time_to_stable_ms(rows, 2200, 4000) == 0
    # A rebalance that has not finished by the end of the window.
    assert jm.time_to_stable_ms(rows, 4000, 6000) is None


def test_first_stable_after_and_departures():
    rows = [
        journal(100, "stable"),
        journal(400, "member_removed", member_id="x", instance="member-4"),
        journal(410, "member_left", member_id="y", instance=None),
        journal(420, "member_left", member_id="z", instance="member-5"),
        journal(500, "stable"),
    ]
    assert jm.first_stable_after(rows, 101) == 500
    assert jm.first_stable_after(rows, 501) is None
    assert [r["member_id"] for r in jm.departures(rows, 0, 1000)] == ["x", "y", "z"]
    assert jm.static_departures(rows, 0, 1000) == ["member-4", "member-5"]
    assert jm.static_departures(rows, 415, 1000) == ["member-5"]


def test_generation_assignments_group_rows_per_generation():
    rows = [
        assignment(100, 1, "a", 0, instance="a"),
        assignment(101, 1, "b", 1, instance="b"),
        assignment(200, 2, "a", 0, 1, instance="a"),
    ]
    generations = jm.generation_assignments(rows, {})
    assert [(g.generation_id, g.ts_ms, g.owners) for g in generations] == [
        (1, 101, {(T, 0): "a", (T, 1): "b"}),
        (2, 200, {(T, 0): "a", (T, 1): "a"}),
    ]
