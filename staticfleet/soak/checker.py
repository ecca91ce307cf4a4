"""Judges a soak run from what the processes left behind, independently of the code under
test: the members' event logs, the driver's record of processes and faults, samples of the
coordinator's public HTTP API, and the coordinator's SQLite file read with `sqlite3` (its
`journal` and `offsets` tables). Nothing here imports the coordinator or the member.

In the Kafka variant the samples are of the broker's public API (DescribeGroups, OffsetFetch
through librdkafka), and the stored offsets are the ones the driver read from it once the
members had stopped (`final_offsets.json`); a broker keeps no journal, so the journal's
check is not made (the describe's is).

Definitions (docs/soak.md):
- A process *holds* a partition from its `assigned` line until its `revoked` or `lost`
  line for it, or its `stopped`/`fatal` line, or its death (the driver's `ended` row).
- It is a *running owner* while it holds the partition and is not stopped by SIGSTOP (the
  driver's `paused` rows). A process woken by SIGCONT runs again from the first line it
  writes after it, a `commit` line aside (the answer to a commit sent before the stop may
  be read first), at most `RESUME_GRACE_MS` after SIGCONT. A zombie that wakes is a
  running owner again from then until it logs `lost`: a member must lose its partitions
  before it does anything else (its first line must be `lost`).
- Every process reads one clock (CLOCK_REALTIME of one machine, ms): there is no skew to
  allow for, only the order of two lines written in one ms, so intervals are half-open.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from staticfleet.demo.fleet import read_rows
from staticfleet.soak import records

Row = Mapping[str, Any]
PartitionKey = tuple[str, str, int]  # group, topic, partition
_CLOSES = frozenset({"revoked", "lost"})
RESUME_GRACE_MS = 1_000
_ENDS_ALL = frozenset({"stopped", "fatal"})


@dataclass(frozen=True, slots=True)
class GroupSpec:
    group_id: str
    static: bool
    protocol: str
    members: int

    def instance_ids(self) -> frozenset[str]:
        return frozenset(f"member-{i}" for i in range(self.members)) if self.static else frozenset()


def latest_member_id(rows: Iterable[Row], until_ms: int | None = None) -> str:
    """The member id a process last logged an assignment under (before `until_ms`)."""
    member_id = ""
    for row in rows:
        if until_ms is not None and int(row.get("ts_ms", 0)) > until_ms:
            break
        if row.get("event") == "assigned" and row.get("member_id"):
            member_id = str(row["member_id"])
    return member_id


def converged(described: Row, spec: GroupSpec, live_member_ids: set[str]) -> bool:
    """The public describe of one group shows it Stable with every member, every static
    member under its instance id, and every live process in it under the member id it was
    last assigned partitions as."""
    members = described.get("members") or []
    if described.get("group_state") != "Stable" or len(members) != spec.members:
        return False
    instance_ids = {str(m["group_instance_id"]) for m in members if m.get("group_instance_id")}
    if spec.static and instance_ids != spec.instance_ids():
        return False
    return (
        live_member_ids <= {str(m["member_id"]) for m in members}
        and len(live_member_ids) == spec.members
    )


@dataclass(frozen=True, slots=True)
class Process:
    slot: str
    incarnation: int
    group_id: str
    rows: Sequence[Row]
    start_ms: int
    end_ms: int | None
    how: str
    exit_code: int | None
    paused: tuple[tuple[int, int], ...]

    @property
    def name(self) -> str:
        return f"{self.slot}#{self.incarnation}"


@dataclass(frozen=True, slots=True)
class Interval:
    key: PartitionKey
    process: str
    start_ms: int
    end_ms: int


def _key(group: str, item: Sequence[Any]) -> PartitionKey:
    return (group, str(item[0]), int(item[1]))


def holdings(process: Process, run_end_ms: int) -> list[Interval]:
    open_since: dict[PartitionKey, int] = {}
    result: list[Interval] = []
    for row in process.rows:
        kind, ts = row.get("event"), int(row["ts_ms"])
        items = [_key(process.group_id, p) for p in row.get("partitions") or []]
        if kind == "assigned":
            for key in items:
                open_since.setdefault(key, ts)
        elif kind in _CLOSES:
            for key in items:
                if key in open_since:
                    result.append(Interval(key, process.name, open_since.pop(key), ts))
        elif kind in _ENDS_ALL:
            for key, since in open_since.items():
                result.append(Interval(key, process.name, since, ts))
            open_since.clear()
    end = process.end_ms if process.end_ms is not None else run_end_ms
    result.extend(Interval(key, process.name, since, end) for key, since in open_since.items())
    return result


def running(interval: Interval, paused: Iterable[tuple[int, int]]) -> list[Interval]:
    """The interval minus the times its process was stopped."""
    pieces = [(interval.start_ms, interval.end_ms)]
    for p_start, p_end in paused:
        next_pieces = []
        for start, end in pieces:
            if p_end <= start or p_start >= end:
                next_pieces.append((start, end))
                continue
            if start < p_start:
                next_pieces.append((start, p_start))
            if p_end < end:
                next_pieces.append((p_end, end))
        pieces = next_pieces
    return [Interval(interval.key, interval.process, s, e) for s, e in pieces if e > s]


def overlaps(intervals: Iterable[Interval]) -> list[dict[str, Any]]:
    """Every pair of running-owner intervals of one partition, from two processes, that
    share time (half-open: an end and a start in one ms do not)."""
    by_key: dict[PartitionKey, list[Interval]] = {}
    for interval in intervals:
        by_key.setdefault(interval.key, []).append(interval)
    found = []
    for key, items in sorted(by_key.items()):
        items.sort(key=lambda i: i.start_ms)
        for i, first in enumerate(items):
            for second in items[i + 1 :]:
                if second.start_ms >= first.end_ms:
                    break
                if second.process != first.process:
                    found.append(
                        {
                            "partition": list(key),
                            "processes": [first.process, second.process],
                            "start_ms": second.start_ms,
                            "end_ms": min(first.end_ms, second.end_ms),
                            "overlap_ms": min(first.end_ms, second.end_ms) - second.start_ms,
                        }
                    )
    return found


@dataclass(frozen=True, slots=True)
class Ack:
    """A commit a member logged as acknowledged. The coordinator applied it at some time in
    [earliest_ms, ts_ms]: after the process's previous line (it was sent after that line
    was written) and before the member read the answer. A process stopped with a commit in
    flight reads the answer only when it wakes: its line's time is not the commit's."""

    ts_ms: int
    earliest_ms: int
    key: PartitionKey
    offset: int
    process: str


def acknowledged_commits(processes: Iterable[Process]) -> list[Ack]:
    commits = []
    for process in processes:
        previous = process.start_ms
        for row in process.rows:
            ts = int(row["ts_ms"])
            if row.get("event") == "commit":
                for item in row.get("offsets") or []:
                    key = _key(process.group_id, item)
                    commits.append(Ack(ts, previous, key, int(item[2]), process.name))
            previous = ts
    commits.sort(key=lambda ack: (ack.ts_ms, ack.key, ack.offset))
    return commits


def commit_regressions(commits: Sequence[Ack]) -> list[dict[str, Any]]:
    """An acknowledged commit certainly applied after a higher one for the partition (its
    earliest possible time is after the higher one's acknowledgement)."""
    best: dict[PartitionKey, Ack] = {}
    found = []
    for ack in sorted(commits, key=lambda a: (a.earliest_ms, a.ts_ms)):
        earlier = best.get(ack.key)
        if earlier is not None and ack.offset < earlier.offset and ack.earliest_ms > earlier.ts_ms:
            found.append(
                {
                    "partition": list(ack.key),
                    "earlier": {"ts_ms": earlier.ts_ms, "offset": earlier.offset},
                    "earlier_by": earlier.process,
                    "later": {"earliest_ms": ack.earliest_ms, "ts_ms": ack.ts_ms},
                    "later_offset": ack.offset,
                    "later_by": ack.process,
                }
            )
        if earlier is None or ack.offset >= earlier.offset:
            best[ack.key] = ack
    return found


def sampled_regressions(samples: Iterable[Row]) -> list[dict[str, Any]]:
    """A committed offset read from the public API lower than one read before it."""
    last: dict[PartitionKey, tuple[int, int]] = {}
    found = []
    for sample in samples:
        for group, items in (sample.get("offsets") or {}).items():
            for item in items:
                key, offset = _key(group, item), int(item[2])
                previous = last.get(key)
                if previous is not None and offset < previous[1]:
                    found.append(
                        {
                            "partition": list(key),
                            "earlier": {"ts_ms": previous[0], "offset": previous[1]},
                            "later": {"ts_ms": sample["ts_ms"], "offset": offset},
                        }
                    )
                last[key] = (int(sample["ts_ms"]), offset)
    return found


def stored_offsets(db_path: Path) -> dict[PartitionKey, int]:
    """The committed offsets in the coordinator's SQLite file, read read-only."""
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT group_id, topic, partition, committed_offset FROM offsets")
        return {(str(g), str(t), int(p)): int(o) for g, t, p, o in rows}


def journal_rows(db_path: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT ts_ms, group_id, kind, member_id, group_instance_id, detail FROM journal "
            "ORDER BY seq"
        )
        return [
            {
                "ts_ms": ts,
                "group_id": g,
                "kind": kind,
                "member_id": m,
                "group_instance_id": i,
                "detail": json.loads(detail),
            }
            for ts, g, kind, m, i, detail in rows
        ]


# Journal kinds after which an instance id is in the group, and after which it is not.
_IN_GROUP = frozenset({"member_joined", "member_replaced", "static_rejoin"})
# (member_fenced is about an old member id: the instance id stays, under its new one.)
_OUT_OF_GROUP = frozenset({"member_left", "member_removed"})


def static_members_not_back(
    specs: Iterable[GroupSpec], journal: Iterable[Row]
) -> list[dict[str, Any]]:
    """By the coordinator's own journal: every static instance id's last membership row
    says it is in the group."""
    last: dict[tuple[str, str], str] = {}
    for row in journal:
        kind, instance = row["kind"], row.get("group_instance_id")
        if instance and kind in _IN_GROUP | _OUT_OF_GROUP:
            last[(str(row["group_id"]), str(instance))] = str(kind)
    return [
        {
            "group_id": spec.group_id,
            "instance_id": instance,
            "last": last.get((spec.group_id, instance)),
        }
        for spec in specs
        if spec.static
        for instance in sorted(spec.instance_ids())
        if last.get((spec.group_id, instance)) not in _IN_GROUP
    ]


def percentiles(values: Sequence[int]) -> dict[str, int | None]:
    if not values:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]
    return {
        "count": len(ordered),
        "p50_ms": int(statistics.median_low(ordered)),
        "p99_ms": p99,
        "max_ms": ordered[-1],
    }


@dataclass
class Run:
    settings: dict[str, Any]
    specs: list[GroupSpec]
    processes: list[Process]
    faults: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    db_path: Path
    end_ms: int = field(default=0)
    # The Kafka variant's final committed offsets (records.FINAL_OFFSETS); None on ours.
    final_offsets: dict[str, Any] | None = None

    @property
    def on_kafka(self) -> bool:
        return self.settings.get("coordinator") == "kafka"


def load_run(run_dir: Path) -> Run:
    settings = json.loads((run_dir / records.RUN).read_text())
    specs = [GroupSpec(**g) for g in settings["groups"]]
    rows = read_rows(run_dir / records.PROCESSES)
    started = [r for r in rows if r["event"] == "started"]
    ended = {(r["slot"], r["incarnation"]): r for r in rows if r["event"] == "ended"}
    paused: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in rows:
        if r["event"] == "paused":
            paused.setdefault((r["slot"], r["incarnation"]), []).append(
                (int(r["start_ms"]), int(r["end_ms"]))
            )
    processes = []
    for r in started:
        log_rows = read_rows(run_dir / r["log"])
        ident = (r["slot"], r["incarnation"])
        end = ended.get(ident)
        processes.append(
            Process(
                slot=r["slot"],
                incarnation=int(r["incarnation"]),
                group_id=r["group_id"],
                rows=log_rows,
                start_ms=int(r["ts_ms"]),
                end_ms=int(end["ts_ms"]) if end else None,
                how=str(end["how"]) if end else "running",
                exit_code=end.get("exit_code") if end else None,
                paused=tuple(
                    (start, resumed_at(log_rows, end)) for start, end in paused.get(ident, [])
                ),
            )
        )
    samples = read_rows(run_dir / records.SAMPLES)
    faults = read_rows(run_dir / records.FAULTS)
    end_ms = max([p.end_ms or 0 for p in processes] + [int(s["ts_ms"]) for s in samples] + [0])
    final = run_dir / records.FINAL_OFFSETS
    return Run(
        settings,
        specs,
        processes,
        faults,
        samples,
        run_dir / records.STORE,
        end_ms,
        json.loads(final.read_text()) if final.exists() else None,
    )


def offsets_of(sample: Row) -> dict[PartitionKey, int]:
    """A sample's committed offsets (or the final read's), by partition."""
    return {
        _key(group, item): int(item[2])
        for group, items in (sample.get("offsets") or {}).items()
        for item in items
    }


# Faults after which the process holding the groups is a new one, on the same store or log.
_RESTARTS = frozenset({"coordinator_kill", "broker_kill", "operator_kill"})


def lost_at_restart(run: Run, commits: Sequence[Ack]) -> list[dict[str, Any]]:
    """After each kill -9 and restart of what holds the groups, the first sample of a
    group's committed offsets holds, for every partition, at least the highest offset
    acknowledged before the kill: an acknowledged commit survives the crash at once, not
    only once a member commits again."""
    found = []
    for fault in run.faults:
        if fault.get("kind") not in _RESTARTS or "end_ms" not in fault:
            continue
        killed, back = int(fault["start_ms"]), int(fault["end_ms"])
        before: dict[PartitionKey, Ack] = {}
        for ack in commits:
            if ack.ts_ms < killed and ack.offset > getattr(before.get(ack.key), "offset", -1):
                before[ack.key] = ack
        for spec in run.specs:
            sample = next(
                (
                    s
                    for s in run.samples
                    if int(s["ts_ms"]) >= back and spec.group_id in (s.get("offsets") or {})
                ),
                None,
            )
            if sample is None:
                continue
            read = offsets_of({"offsets": {spec.group_id: sample["offsets"][spec.group_id]}})
            for key, ack in sorted(before.items()):
                if key[0] == spec.group_id and read.get(key, -1) < ack.offset:
                    found.append(
                        {
                            "partition": list(key),
                            "fault": {"kind": fault["kind"], "start_ms": killed, "end_ms": back},
                            "acknowledged": {"ts_ms": ack.ts_ms, "offset": ack.offset},
                            "by": ack.process,
                            "read": {"ts_ms": sample["ts_ms"], "offset": read.get(key)},
                        }
                    )
    return found


def resumed_at(rows: Iterable[Row], continued_ms: int) -> int:
    """When a process continued at `continued_ms` runs again: its first line since, at most
    RESUME_GRACE_MS later."""
    # A `commit` line may be the answer to a request sent before the stop, read on waking;
    # a `commit_failed` refused as stale, or any other line, is work done since.
    first = next(
        (
            int(r["ts_ms"])
            for r in rows
            if int(r["ts_ms"]) >= continued_ms and r.get("event") != "commit"
        ),
        None,
    )
    limit = continued_ms + RESUME_GRACE_MS
    return limit if first is None else min(first, limit)


def _converged_at(run: Run, sample: Row) -> bool:
    groups = sample.get("groups")
    if not groups:
        return False
    ts = int(sample["ts_ms"])
    for spec in run.specs:
        live = {
            latest_member_id(p.rows, ts)
            for p in run.processes
            if p.group_id == spec.group_id
            and p.start_ms <= ts
            and (p.end_ms is None or p.end_ms > ts)
        }
        if not converged(groups[spec.group_id], spec, live):
            return False
    return True


def recovery_times(run: Run) -> tuple[dict[str, list[int]], list[dict[str, Any]]]:
    """Fault end -> the first sample showing every group converged, per fault kind; and the
    faults not recovered within the bound (or before the next fault began)."""
    bound_ms = int(run.settings["recovery_bound_s"] * 1000)
    injected = [f for f in run.faults if "end_ms" in f]
    by_kind: dict[str, list[int]] = {}
    unrecovered = []
    for index, fault in enumerate(injected):
        end = int(fault["end_ms"])
        horizon = min(
            end + bound_ms,
            int(injected[index + 1]["start_ms"]) if index + 1 < len(injected) else end + bound_ms,
        )
        found = next(
            (
                int(s["ts_ms"]) - end
                for s in run.samples
                if end <= int(s["ts_ms"]) <= horizon and _converged_at(run, s)
            ),
            None,
        )
        if found is None:
            unrecovered.append({"fault": fault, "bound_ms": bound_ms})
        else:
            by_kind.setdefault(str(fault["kind"]), []).append(found)
    return by_kind, unrecovered


def final_assignment(run: Run) -> list[dict[str, Any]]:
    """At the last sample: each partition held by exactly one live process, each live
    process holding at least one (the groups have at least as many partitions as members)."""
    if not run.samples:
        return [{"problem": "no samples"}]
    ts = int(run.samples[-1]["ts_ms"])
    problems = []
    partitions = int(run.settings["partitions"])
    topic = str(run.settings["topic"])
    for spec in run.specs:
        holders: dict[PartitionKey, list[str]] = {}
        live = [
            p
            for p in run.processes
            if p.group_id == spec.group_id
            and p.start_ms <= ts
            and (p.end_ms is None or p.end_ms > ts)
        ]
        for p in live:
            for interval in holdings(p, run.end_ms):
                if interval.start_ms <= ts < interval.end_ms:
                    holders.setdefault(interval.key, []).append(p.name)
        for number in range(partitions):
            key = (spec.group_id, topic, number)
            if len(holders.get(key, [])) != 1:
                problems.append({"partition": list(key), "holders": holders.get(key, [])})
        idle = [p.name for p in live if not any(p.name in h for h in holders.values())]
        if idle:
            problems.append({"group_id": spec.group_id, "holding_nothing": idle})
    return problems


def stale_fences(run: Run) -> list[dict[str, Any]]:
    """Members a restarting broker fenced while nobody else held their identity.

    A member that exits on FENCED_INSTANCE_ID says another process holds its
    group.instance.id. In the soak none can: the driver starts a slot's next process only
    after the last one ended. A broker that answered a rejoin so, from a group state it had
    replayed only part of after a kill -9 (seen at 1 of 16 restarts), fenced a sole holder:
    the member did what Kafka's Java consumer does (the error is fatal there too), and the
    fault is the broker's. Such an exit is listed here, with its evidence, rather than as a
    violation: it ended within a broker kill's window (from the kill to the recovery bound
    after it served again) and no other process of its slot ran at the time."""
    bound_ms = int(run.settings["recovery_bound_s"] * 1000)
    kills = [
        (int(f["start_ms"]), int(f["end_ms"]) + bound_ms)
        for f in run.faults
        if f.get("kind") == "broker_kill" and "end_ms" in f
    ]
    found: list[dict[str, Any]] = []
    for process in run.processes:
        fatal = next((r for r in reversed(process.rows) if r.get("event") == "fatal"), None)
        if process.how != "exited" or fatal is None or fatal.get("error") != "FENCED_INSTANCE_ID":
            continue
        ts = int(fatal["ts_ms"])
        others = [
            other.name
            for other in run.processes
            if other.slot == process.slot
            and other is not process
            and other.start_ms <= ts < (other.end_ms if other.end_ms is not None else run.end_ms)
        ]
        if others or not any(start <= ts <= end for start, end in kills):
            continue
        found.append(
            {
                "process": process.name,
                "exit_code": process.exit_code,
                "ts_ms": ts,
                "member_id": fatal.get("member_id"),
            }
        )
    return found


def check(run: Run) -> dict[str, Any]:
    """The report: faults by kind, violations by kind with their evidence, recovery times."""
    violations: dict[str, list[Any]] = {}
    intervals = [
        piece
        for p in run.processes
        for held in holdings(p, run.end_ms)
        for piece in running(held, p.paused)
    ]
    violations["two_running_owners"] = overlaps(intervals)
    commits = acknowledged_commits(run.processes)
    violations["acknowledged_commit_regressed"] = commit_regressions(commits)
    violations["sampled_offset_regressed"] = sampled_regressions(run.samples)
    violations["acknowledged_commit_lost_at_restart"] = lost_at_restart(run, commits)
    not_checked: dict[str, str] = {}
    if run.on_kafka:
        final = run.final_offsets or {}
        if run.final_offsets is None or final.get("error"):
            violations["final_offsets_unread"] = [{"error": final.get("error", "no file")}]
        stored = offsets_of(final)
    else:
        stored = stored_offsets(run.db_path)
    highest: dict[PartitionKey, tuple[int, str]] = {}
    for ack in commits:
        if ack.offset > highest.get(ack.key, (-1, ""))[0]:
            highest[ack.key] = (ack.offset, ack.process)
    violations["acknowledged_commit_lost"] = [
        {"partition": list(key), "acknowledged": offset, "by": by, "stored": stored.get(key)}
        for key, (offset, by) in sorted(highest.items())
        if stored.get(key, -1) < offset
    ]
    last_groups: dict[str, Any] = next(
        (s["groups"] for s in reversed(run.samples) if s.get("groups")), {}
    )
    violations["static_member_missing"] = [
        {"group_id": spec.group_id, "missing": sorted(spec.instance_ids() - present)}
        for spec in run.specs
        if spec.static
        and (
            present := {
                str(m.get("group_instance_id"))
                for m in (last_groups.get(spec.group_id) or {}).get("members") or []
            }
        )
        is not None
        and spec.instance_ids() - present
    ]
    journal = [] if run.on_kafka else journal_rows(run.db_path)
    if run.on_kafka:
        not_checked["static_member_not_back_in_journal"] = (
            "a Kafka broker keeps no journal; the last describe's members are checked "
            "(static_member_missing)"
        )
    else:
        # Up to the last sample, the end state judged: once the driver stops the fleet,
        # static members (which do not leave, KIP-345) are expired while the others stop.
        end_state_ms = max((int(s["ts_ms"]) for s in run.samples), default=0)
        violations["static_member_not_back_in_journal"] = static_members_not_back(
            run.specs, [row for row in journal if int(row["ts_ms"]) <= end_state_ms]
        )
    violations["final_assignment"] = final_assignment(run)
    by_kind, unrecovered = recovery_times(run)
    violations["not_recovered_within_bound"] = unrecovered
    stopped = next((f for f in run.faults if f.get("kind") == "faults_stopped"), None)
    final_ms = None
    if stopped is not None:
        since = int(stopped["ts_ms"])
        final_ms = next(
            (
                int(s["ts_ms"]) - since
                for s in run.samples
                if int(s["ts_ms"]) >= since and _converged_at(run, s)
            ),
            None,
        )
    bound_ms = int(run.settings["recovery_bound_s"] * 1000)
    if stopped is None or final_ms is None or final_ms > bound_ms:
        violations["not_converged_after_faults"] = [
            {"converged_ms": final_ms, "bound_ms": bound_ms}
        ]
    stale = stale_fences(run) if run.on_kafka else []
    excused = {fence["process"] for fence in stale}
    violations["member_exited"] = [
        {"process": p.name, "exit_code": p.exit_code, "ts_ms": p.end_ms}
        for p in run.processes
        if p.how == "exited" and p.name not in excused
    ]
    faults = Counter(str(f["kind"]) for f in run.faults if "end_ms" in f)
    all_recoveries = [ms for values in by_kind.values() for ms in values]
    return {
        "seed": run.settings["seed"],
        "coordinator": run.settings.get("coordinator", "embedded"),
        "not_checked": not_checked,
        "started_at": datetime.fromtimestamp(
            min((p.start_ms for p in run.processes), default=0) / 1000, UTC
        ).isoformat(timespec="seconds"),
        "duration_s": run.settings["duration_s"],
        "groups": [
            {
                "group_id": s.group_id,
                "static": s.static,
                "protocol": s.protocol,
                "members": s.members,
            }
            for s in run.specs
        ],
        "partitions_per_group": run.settings["partitions"],
        "session_timeout_ms": run.settings["session_timeout_ms"],
        "recovery_bound_s": run.settings["recovery_bound_s"],
        # Which kinds the plan drew from, and which it left out and why (not root).
        "fault_kinds": run.settings.get("fault_kinds", sorted(faults)),
        "fault_kinds_left_out": run.settings.get("fault_kinds_left_out", {}),
        # Kill -9 to serving again, by kind (what holds the groups restarting).
        "restart_ms_by_kind": {
            kind: percentiles([int(f["restart_ms"]) for f in run.faults if f.get("kind") == kind])
            for kind in sorted({str(f["kind"]) for f in run.faults if "restart_ms" in f})
        },
        "network": run.settings.get("network"),
        "faults_by_kind": dict(sorted(faults.items())),
        "faults_total": sum(faults.values()),
        "violations_total": sum(len(v) for v in violations.values()),
        "violations_by_kind": {k: len(v) for k, v in sorted(violations.items())},
        "violations": {k: v[:20] for k, v in sorted(violations.items()) if v},
        # Kafka's side, not a violation of ours: docs/soak.md "A broker that fenced members
        # by member ids they no longer held".
        "broker_stale_fences": stale,
        "recovery_ms": percentiles(all_recoveries),
        "recovery_ms_by_kind": {k: percentiles(v) for k, v in sorted(by_kind.items())},
        "final_convergence_ms": final_ms,
        "member_processes": len(run.processes),
        "acknowledged_commits": len(commits),
        "ownership_intervals": len(intervals),
        "api_samples": len(run.samples),
        "journal_kinds": dict(sorted(Counter(r["kind"] for r in journal).items())),
        "journal_fenced_operations": dict(
            sorted(
                Counter(
                    str(r["detail"].get("operation"))
                    for r in journal
                    if r["kind"] == "member_fenced"
                ).items()
            )
        ),
    }
