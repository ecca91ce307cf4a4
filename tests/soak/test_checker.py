"""The soak's checker and plan: pure functions over rows, no processes (well under 1 s)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from staticfleet.soak.arguments import parse_duration
from staticfleet.soak.checker import (
    Ack,
    GroupSpec,
    Interval,
    Process,
    Run,
    commit_regressions,
    converged,
    holdings,
    lost_at_restart,
    overlaps,
    percentiles,
    resumed_at,
    running,
    sampled_regressions,
    stale_fences,
    static_members_not_back,
)

KEY = ("g", "events", 0)


def process(name: str, rows: list[dict[str, object]], **overrides: object) -> Process:
    fields: dict[str, object] = {
        "slot": name,
        "incarnation": 1,
        "group_id": "g",
        "rows": rows,
        "start_ms": 0,
        "end_ms": None,
        "how": "running",
        "exit_code": None,
        "paused": (),
    }
    fields.update(overrides)
    return Process(**fields)  # type: ignore[arg-type]


def row(ts: int, event: str, **fields: object) -> dict[str, object]:
    return {"ts_ms": ts, "event": event, **fields}


def test_a_holding_ends_at_revoke_lost_stop_or_death() -> None:
    rows = [row(10, "assigned", partitions=[["events", 0], ["events", 1]])]
    rows.append(row(20, "revoked", partitions=[["events", 0]]))
    held = holdings(process("a", rows, end_ms=50, how="killed"), run_end_ms=99)
    assert sorted((i.key[2], i.start_ms, i.end_ms) for i in held) == [(0, 10, 20), (1, 10, 50)]
    stopped = holdings(process("b", [*rows, row(30, "stopped")]), run_end_ms=99)
    assert sorted((i.key[2], i.end_ms) for i in stopped) == [(0, 20), (1, 30)]


def test_overlaps_are_half_open_and_between_processes() -> None:
    a = Interval(KEY, "a#1", 0, 10)
    assert overlaps([a, Interval(KEY, "b#1", 10, 20)]) == []
    assert overlaps([a, Interval(KEY, "a#1", 5, 20)]) == []  # one process, re-assigned
    found = overlaps([a, Interval(KEY, "b#1", 7, 20)])
    assert [(f["processes"], f["overlap_ms"]) for f in found] == [(["a#1", "b#1"], 3)]


def test_a_stopped_process_owns_nothing_while_stopped() -> None:
    pieces = running(Interval(KEY, "a#1", 0, 100), [(10, 20), (50, 200)])
    assert [(p.start_ms, p.end_ms) for p in pieces] == [(0, 10), (20, 50)]


def test_a_woken_process_runs_from_its_first_line_at_most_a_grace_later() -> None:
    rows = [row(5, "commit"), row(103, "commit"), row(107, "lost")]
    assert resumed_at(rows, 100) == 107  # an answer read on waking is no work done
    assert resumed_at([row(103, "commit_failed"), *rows[2:]], 100) == 103
    assert resumed_at(rows, 100_000) == 101_000


def test_a_zombie_that_works_before_it_logs_lost_is_two_running_owners() -> None:
    # The member before the fix: woken at 1000, a failed commit at 1007, lost at 1009,
    # while b has held the partition since 900.
    zombie_rows = [
        row(0, "assigned", partitions=[["events", 0]]),
        row(1007, "commit_failed", partitions=[["events", 0]]),
        row(1009, "lost", partitions=[["events", 0]]),
    ]
    zombie = process("a", zombie_rows, paused=((100, resumed_at(zombie_rows, 1000)),))
    owner = process("b", [row(900, "assigned", partitions=[["events", 0]])])
    intervals = [
        piece for p in (zombie, owner) for h in holdings(p, 2000) for piece in running(h, p.paused)
    ]
    assert [f["overlap_ms"] for f in overlaps(intervals)] == [2]
    # After the fix its first line is `lost`: no overlap.
    fixed_rows = [zombie_rows[0], row(1002, "lost", partitions=[["events", 0]])]
    fixed = process("a", fixed_rows, paused=((100, resumed_at(fixed_rows, 1000)),))
    intervals = [
        piece for p in (fixed, owner) for h in holdings(p, 2000) for piece in running(h, p.paused)
    ]
    assert overlaps(intervals) == []


def test_commit_regressions_need_a_commit_certainly_applied_after_a_higher_one() -> None:
    commits = [
        Ack(ts_ms=10, earliest_ms=5, key=KEY, offset=10, process="a#1"),
        Ack(ts_ms=12, earliest_ms=11, key=KEY, offset=12, process="b#1"),
        # Read late by a process woken from SIGSTOP: sent at 6, maybe applied before 12.
        Ack(ts_ms=40, earliest_ms=6, key=KEY, offset=11, process="a#1"),
        Ack(ts_ms=50, earliest_ms=45, key=KEY, offset=9, process="c#1"),
    ]
    found = commit_regressions(commits)
    assert [(f["earlier"]["offset"], f["later_offset"]) for f in found] == [(12, 9)]


def test_sampled_offsets_must_not_go_down() -> None:
    samples = [
        {"ts_ms": 1, "offsets": {"g": [["events", 0, 5]]}},
        {"ts_ms": 2, "offsets": {}},  # the coordinator was down: no reading
        {"ts_ms": 3, "offsets": {"g": [["events", 0, 4]]}},
    ]
    assert [f["later"]["offset"] for f in sampled_regressions(samples)] == [4]


def test_an_acknowledged_commit_must_be_served_at_once_after_a_kill_and_restart() -> None:
    spec = GroupSpec("g", static=True, protocol="eager", members=1)
    kill = {"kind": "broker_kill", "start_ms": 100, "end_ms": 200}
    acked = [Ack(90, 80, KEY, 7, "a#1"), Ack(150, 95, KEY, 9, "a#1")]  # the 2nd: after the kill

    def run(*samples: dict[str, object]) -> Run:
        return Run({}, [spec], [], [kill], list(samples), db_path=None)  # type: ignore[arg-type]

    # The first sample after the restart that has the group's offsets is the one judged: an
    # earlier one without them (the broker still loading) does not count.
    served = {"ts_ms": 210, "offsets": {"g": [["events", 0, 7]]}}
    assert lost_at_restart(run({"ts_ms": 205, "offsets": {}}, served), acked) == []
    lost = lost_at_restart(run({"ts_ms": 210, "offsets": {"g": [["events", 0, 5]]}}), acked)
    assert [(v["acknowledged"]["offset"], v["read"]["offset"]) for v in lost] == [(7, 5)]
    # A sample from before the restart ended is not one after it.
    assert lost_at_restart(run({"ts_ms": 150, "offsets": {"g": []}}), acked) == []
    # A partition missing from the served offsets lost its commit.
    gone = lost_at_restart(run({"ts_ms": 210, "offsets": {"g": []}}), acked)
    assert [v["read"]["offset"] for v in gone] == [None]


def test_converged_needs_stable_every_instance_and_the_live_member_ids() -> None:
    spec = GroupSpec("g", static=True, protocol="eager", members=2)
    members = [
        {"member_id": "m0", "group_instance_id": "member-0"},
        {"member_id": "m1", "group_instance_id": "member-1"},
    ]
    described = {"group_state": "Stable", "members": members}
    assert converged(described, spec, {"m0", "m1"})
    assert not converged({**described, "group_state": "CompletingRebalance"}, spec, {"m0", "m1"})
    assert not converged(described, spec, {"m0", "old"})  # a process not back under its id
    assert not converged({**described, "members": members[:1]}, spec, {"m0"})


def test_percentiles_and_durations() -> None:
    assert percentiles([]) == {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    stats = percentiles(list(range(1, 101)))
    assert (stats["p50_ms"], stats["p99_ms"], stats["max_ms"]) == (50, 99, 100)
    assert parse_duration("30m") == 1800 and parse_duration("90") == 90
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        parse_duration("soon")


def test_the_journal_must_end_with_every_static_member_in_the_group() -> None:
    spec = GroupSpec("g", static=True, protocol="eager", members=2)
    journal = [
        {"group_id": "g", "kind": "member_joined", "group_instance_id": "member-0"},
        {"group_id": "g", "kind": "member_joined", "group_instance_id": "member-1"},
        {"group_id": "g", "kind": "member_removed", "group_instance_id": "member-1"},
        {"group_id": "g", "kind": "member_removed", "group_instance_id": "member-0"},
        {"group_id": "g", "kind": "member_joined", "group_instance_id": "member-0"},
        {"group_id": "g", "kind": "member_fenced", "group_instance_id": "member-0"},
    ]
    assert static_members_not_back([spec], journal) == [
        {"group_id": "g", "instance_id": "member-1", "last": "member_removed"}
    ]


def test_a_broker_that_fences_a_sole_holder_after_its_restart_is_the_brokers_finding() -> None:
    kill = {"kind": "broker_kill", "start_ms": 100, "end_ms": 200}
    fenced = row(250, "fatal", error="FENCED_INSTANCE_ID", member_id="m-old")

    def run(*processes: Process, kafka: bool = True) -> Run:
        settings = {"recovery_bound_s": 60, **({"coordinator": "kafka"} if kafka else {})}
        return Run(settings, [], list(processes), [kill], [], db_path=None, end_ms=999)  # type: ignore[arg-type]

    exited = process("g/member-0", [fenced], incarnation=1, end_ms=251, how="exited", exit_code=3)
    assert [f["process"] for f in stale_fences(run(exited))] == ["g/member-0#1"]
    # Another process of the slot running then: the fence may be right; it stays a violation.
    twin = process("g/member-0", [], incarnation=2, start_ms=240)
    assert stale_fences(run(exited, twin)) == []
    # Outside a broker kill's window (its end + the recovery bound), or another error.
    late = process("g/member-0", [row(60_201, "fatal", error="FENCED_INSTANCE_ID")], how="exited")
    assert stale_fences(run(late)) == []
    other = process("g/member-0", [row(250, "fatal", error="GROUP_AUTHORIZATION_FAILED")])
    assert stale_fences(run(dataclasses.replace(other, how="exited"))) == []
