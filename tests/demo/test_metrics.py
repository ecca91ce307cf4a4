"""A scenario's figures from a small hand-made journal and member logs."""

from __future__ import annotations

import pytest

from staticfleet.demo import metrics
from staticfleet.demo.record import Step
from tests.demo.rows import assignment, commit, event, journal, log, partitions

T = "t"


def static_restart_rows():
    """Two static members; member-1 restarts at 1000 without a rebalance."""
    journal_rows = [
        journal(100, "rebalance_started", 0),
        assignment(200, 1, "m0-a", 0, 1, instance="member-0"),
        assignment(200, 1, "m1-a", 2, 3, instance="member-1"),
        journal(200, "stable", 1),
        journal(1300, "member_replaced", 1, member_id="m1-b", instance="member-1"),
        journal(1300, "static_rejoin", 1, member_id="m1-b", instance="member-1"),
    ]
    logs = [
        log("member-0", event(210, "assigned", 0, 1, member_id="m0-a")),
        log(
            "member-1",
            event(210, "assigned", 2, 3, member_id="m1-a"),
            event(1100, "revoked", 2, 3, member_id="m1-a"),
            event(1101, "stopped", member_id="m1-a"),
        ),
        log("member-1", event(1310, "assigned", 2, 3, member_id="m1-b"), incarnation=2),
    ]
    return journal_rows, logs


def test_summarize_a_static_restart():
    journal_rows, logs = static_restart_rows()
    m = metrics.summarize(
        journal_rows, logs, partitions(4), [Step("restart member-1", 1000, 1500)], 500, 1500
    )
    assert m.rebalances == 0
    assert m.moved == 0
    assert (m.revoked, m.released_at_shutdown, m.lost) == (0, 2, 0)
    # Partitions 2 and 3 had no owner from 1100 to 1310.
    assert m.unowned_partition_s == pytest.approx(2 * 0.210)
    assert m.time_to_stable_ms == 0
    assert m.all_owned_after_ms == 310
    assert m.max_owners == 1
    assert m.overlaps == []
    (step,) = m.steps
    assert (step.rebalances, step.moved, step.time_to_stable_ms) == (0, 0, 0)


def test_summarize_flags_a_double_owner_anywhere_in_the_logs():
    journal_rows, logs = static_restart_rows()
    # The old member-1 process never let go of partition 2 (no revoke, no stop).
    logs[1] = log("member-1", event(210, "assigned", 2, 3, member_id="m1-a"))
    m = metrics.summarize(journal_rows, logs, partitions(4), [], 500, 1500)
    assert m.max_owners == 2
    assert {o.partition for o in m.overlaps} == {(T, 2), (T, 3)}


def test_slowest_step_is_none_when_a_step_never_settled():
    rows = [journal(100, "rebalance_started"), journal(2000, "rebalance_started")]
    m = metrics.summarize(
        rows, [], partitions(1), [Step("a", 0, 500), Step("b", 1900, 2500)], 0, 2500
    )
    assert m.time_to_stable_ms is None


def test_reassignment_after_the_members_are_gone():
    journal_rows = [journal(5000, "rebalance_started"), journal(5400, "stable")]
    logs = [
        log("member-0", event(0, "assigned", 0), event(5450, "assigned", 1)),
        log("member-1", event(0, "assigned", 1), event(1000, "revoked", 1), event(1001, "stopped")),
    ]
    figures = metrics.reassignment_figures(journal_rows, logs, partitions(2), 1200, 6000)
    assert figures == {"reassigned_after_ms": 4250, "journal_stable_after_ms": 4200}


def test_crash_figures_find_lost_members_and_offsets():
    logs = [
        log("member-0", commit(100, {0: 10}), commit(900, {0: 12})),
        log("member-1", commit(200, {1: 20}), commit(600, {1: 3})),
    ]
    rows = [journal(700, "member_removed", member_id="x", instance="member-1")]
    figures = metrics.crash_figures(
        rows,
        logs,
        members_before=["member-0", "member-1"],
        members_after=["member-0"],
        offsets_after_restart={(T, 0): 10, (T, 1): 19},
        kill_ms=500,
        ready_ms=800,
        window_start_ms=0,
        window_end_ms=1000,
    )
    assert figures["coordinator_down_ms"] == 300
    assert figures["static_members_lost"] == ["member-1"]
    assert figures["acknowledged_partitions"] == 2
    assert figures["offsets_lost"] == [{"partition": [T, 1], "acknowledged": 20, "stored": 19}]
    assert figures["commit_regressions"] == [
        {"partition": [T, 1], "ts_ms": 600, "previous": 20, "offset": 3}
    ]


def test_crash_figures_when_nothing_was_lost():
    logs = [log("member-0", commit(100, {0: 10}), commit(900, {0: 12}))]
    figures = metrics.crash_figures(
        [], logs, ["member-0"], ["member-0"], {(T, 0): 10}, 500, 800, 0, 1000
    )
    assert figures["static_members_lost"] == []
    assert figures["offsets_lost"] == []
    assert figures["commit_regressions"] == []
