"""The journal rebuilt from member logs (Kafka mode): the journal metrics over it."""

from __future__ import annotations

from coordinator import journal_metrics as jm
from staticfleet.demo.log_journal import journal_from_logs
from staticfleet.demo.ownership import member_aliases
from tests.demo.rows import TOPIC, event, log


def test_static_rejoin_into_the_same_generation_is_no_rebalance_and_no_move():
    # Generation 1: a alone; generation 2: a and b. Then b's process restarts and rejoins
    # generation 2 (KIP-345): the same partitions, logged again, much later.
    logs = [
        log(
            "a",
            event(100, "assigned", 0, 1, generation_id=1, member_id="a1", instance_id="a"),
            event(500, "revoked", 1, generation_id=1, member_id="a1", instance_id="a"),
            event(510, "assigned", generation_id=2, member_id="a1", instance_id="a"),
        ),
        log("b", event(520, "assigned", 1, generation_id=2, member_id="b1", instance_id="b")),
        log(
            "b",
            event(5_000, "assigned", 1, generation_id=2, member_id="b2", instance_id="b"),
            incarnation=2,
        ),
    ]
    journal = journal_from_logs("g", logs)
    aliases = member_aliases(logs)
    window = (1_000, 10_000)  # after the fleet formed: only the restart inside
    assert jm.rebalance_count(journal, *window) == 0
    assert jm.partition_moves(journal, aliases, *window) == []
    # The fleet forming (from 0): generations 1 and 2; partition 1 went from a to b.
    assert jm.rebalance_count(journal, 0, 10_000) == 2
    assert [
        (m.partition, m.from_owner, m.to_owner)
        for m in jm.partition_moves(journal, aliases, 0, 10_000)
    ] == [((TOPIC, 1), "a", "b")]
    # Generation 2 was complete when its last member got its first assignment.
    assert jm.first_stable_after(journal, 505) == 520
    assert jm.time_to_stable_ms(journal, 400, 10_000) == 120
    assert {row["group_id"] for row in journal} == {"g"}


def test_cooperative_assigned_lines_count_what_is_already_held():
    # Cooperative: the `assigned` of generation 3 names only what was added, yet a keeps 0.
    logs = [
        log(
            "a",
            event(100, "assigned", 0, 1, generation_id=2, member_id="a1"),
            event(200, "revoked", 1, generation_id=2, member_id="a1"),
            event(210, "assigned", generation_id=3, member_id="a1"),
        ),
        log("b", event(220, "assigned", 1, generation_id=3, member_id="b1")),
    ]
    generations = jm.generation_assignments(journal_from_logs("g", logs), member_aliases(logs))
    assert [g.owners for g in generations] == [
        {(TOPIC, 0): "a", (TOPIC, 1): "a"},
        {(TOPIC, 0): "a", (TOPIC, 1): "b"},
    ]
