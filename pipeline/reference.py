"""The pure-Python reference for the journal analytics (docs/spark.md defines every number).

The Spark job (`pipeline.analytics`) must compute exactly these numbers; the cross-check test
compares the two on a journal produced by a real coordinator. Rebalances, partition moves and
time to Stable call straight into the journal's own definitions
(`coordinator.journal_metrics`), so Spark, this module and the demo share one definition;
partition-seconds without an owner as the coordinator sees it, and load skew per generation,
are defined here (the demo measures unowned time from the member logs instead).

Owners are named as in the demo: the alias of the member id if one is given (the demo's
slot names for dynamic members, from the member logs), else the group instance id, else the
member id.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator import journal_metrics as jm
from coordinator.journal import JournalKind

Row = Mapping[str, Any]
Partition = tuple[str, int]

ALL_WINDOW = "all"


@dataclass(frozen=True, slots=True)
class Window:
    """A rollout window [start_ms, end_ms] (both ends included); for one group or all."""

    label: str
    start_ms: int
    end_ms: int
    group_id: str | None = None


@dataclass(frozen=True, slots=True)
class WindowFigures:
    group_id: str
    window: str
    start_ms: int
    end_ms: int
    rebalances: int
    moved: int
    unowned_partition_ms: int
    time_to_stable_ms: int | None


@dataclass(frozen=True, slots=True)
class GenerationFigures:
    group_id: str
    generation_id: int
    assigned_ts_ms: int
    members: int
    partitions: int
    min_partitions: int
    max_partitions: int
    skew: int  # max - min partitions per member
    skew_ratio: float  # max / mean partitions per member (0 when nothing is assigned)
    moved: int
    rebalance_ts_ms: int | None  # first rebalance_started that led to this generation
    stable_ts_ms: int | None  # first `stable` of this generation
    time_to_stable_ms: int | None


def ordered(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: int(row["seq"]))


def by_group(rows: Iterable[Row]) -> dict[str, list[Row]]:
    groups: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        groups[str(row["group_id"])].append(row)
    return {group: ordered(items) for group, items in sorted(groups.items())}


def owner_name(row: Row, aliases: Mapping[str, str]) -> str:
    return jm.owner_of(row, aliases)


def partitions_of(row: Row) -> list[Partition]:
    return [(str(t), int(p)) for t, p in (row.get("detail") or {}).get("partitions") or []]


def unowned_intervals(rows: Sequence[Row]) -> list[tuple[Partition, int, int]]:
    """One group's intervals [lo, hi) during which a partition had no owner as the
    coordinator sees it (docs/spark.md): a partition is known from the first assignment
    that names it; a `rebalance_started` takes every owned known partition's owner away;
    the next assignment row naming the partition gives it one again. A partition still
    without an owner at the end counts until the group's last journal row."""
    rows = ordered(rows)
    if not rows:
        return []
    end = max(int(row["ts_ms"]) for row in rows)
    owned: dict[Partition, bool] = {}
    since: dict[Partition, int] = {}
    intervals: list[tuple[Partition, int, int]] = []
    for row in rows:
        ts = int(row["ts_ms"])
        if row["kind"] == JournalKind.REBALANCE_STARTED:
            for partition, is_owned in owned.items():
                if is_owned:
                    owned[partition] = False
                    since[partition] = ts
        elif row["kind"] == JournalKind.ASSIGNMENT:
            for partition in partitions_of(row):
                if owned.get(partition) is False:
                    intervals.append((partition, since[partition], ts))
                owned[partition] = True
    intervals.extend(
        (partition, since[partition], end) for partition, is_owned in owned.items() if not is_owned
    )
    return intervals


def unowned_partition_ms(rows: Sequence[Row], start_ms: int, end_ms: int) -> int:
    """Sum over partitions of the time without an owner, clipped to [start_ms, end_ms]."""
    return sum(
        max(0, min(hi, end_ms) - max(lo, start_ms)) for _p, lo, hi in unowned_intervals(rows)
    )


def group_bounds(rows: Sequence[Row]) -> tuple[int, int]:
    stamps = [int(row["ts_ms"]) for row in rows]
    return min(stamps), max(stamps)


def windows_for(group_id: str, rows: Sequence[Row], windows: Sequence[Window]) -> list[Window]:
    """The "all" window (the group's whole journal) and the user's windows for this group."""
    start, end = group_bounds(rows)
    chosen = [Window(ALL_WINDOW, start, end, group_id)]
    chosen.extend(w for w in windows if w.group_id in (None, group_id))
    return chosen


def window_figures(
    rows: Iterable[Row],
    windows: Sequence[Window] = (),
    aliases: Mapping[str, str] | None = None,
) -> list[WindowFigures]:
    """Per group and window: the figures the Spark job writes to `windows/`."""
    aliases = aliases or {}
    result = []
    for group_id, items in by_group(rows).items():
        for window in windows_for(group_id, items, windows):
            s, e = window.start_ms, window.end_ms
            result.append(
                WindowFigures(
                    group_id=group_id,
                    window=window.label,
                    start_ms=s,
                    end_ms=e,
                    rebalances=jm.rebalance_count(items, s, e),
                    moved=len(jm.partition_moves(items, aliases, s, e)),
                    unowned_partition_ms=unowned_partition_ms(items, s, e),
                    time_to_stable_ms=jm.time_to_stable_ms(items, s, e),
                )
            )
    return result


def generation_figures(
    rows: Iterable[Row], aliases: Mapping[str, str] | None = None
) -> list[GenerationFigures]:
    """Per group and generation with an assignment: load skew, moves, time to Stable."""
    aliases = aliases or {}
    result = []
    for group_id, items in by_group(rows).items():
        moved: dict[int, int] = defaultdict(int)
        for move in jm.partition_moves(items, aliases, -(2**62), 2**62):
            moved[move.generation_id] += 1
        # The rebalance that led to a generation: the first rebalance_started after the
        # previous generation_started.
        first_rebalance: dict[int, int] = {}
        pending: int | None = None
        stable: dict[int, int] = {}
        counts: dict[int, dict[str, int]] = defaultdict(dict)
        for row in items:
            kind = row["kind"]
            generation = int(row["generation_id"])
            if kind == JournalKind.REBALANCE_STARTED and pending is None:
                pending = int(row["ts_ms"])
            elif kind == JournalKind.GENERATION_STARTED:
                if pending is not None:
                    first_rebalance[generation] = pending
                pending = None
            elif kind == JournalKind.STABLE:
                stable.setdefault(generation, int(row["ts_ms"]))
            elif kind == JournalKind.ASSIGNMENT:
                counts[generation].setdefault(owner_name(row, aliases), 0)
        for assigned in jm.generation_assignments(items, aliases):
            per_owner = counts[assigned.generation_id]
            for owner in assigned.owners.values():
                per_owner[owner] = per_owner.get(owner, 0) + 1
            sizes = list(per_owner.values()) or [0]
            total = sum(sizes)
            mean = total / len(sizes)
            rebalance = first_rebalance.get(assigned.generation_id)
            stable_ts = stable.get(assigned.generation_id)
            result.append(
                GenerationFigures(
                    group_id=group_id,
                    generation_id=assigned.generation_id,
                    assigned_ts_ms=assigned.ts_ms,
                    members=len(per_owner),
                    partitions=total,
                    min_partitions=min(sizes),
                    max_partitions=max(sizes),
                    skew=max(sizes) - min(sizes),
                    skew_ratio=max(sizes) / mean if mean else 0.0,
                    moved=moved.get(assigned.generation_id, 0),
                    rebalance_ts_ms=rebalance,
                    stable_ts_ms=stable_ts,
                    time_to_stable_ms=(
                        None if rebalance is None or stable_ts is None else stable_ts - rebalance
                    ),
                )
            )
    return result


def demo_aliases(logs_dir: Path) -> dict[str, str]:
    """member id -> slot, from a demo's member logs (`<slot>.<n>.jsonl` next to the journal):
    what `staticfleet.demo.ownership.member_aliases` builds from the same files."""
    aliases: dict[str, str] = {}
    for path in sorted(logs_dir.glob("member-*.jsonl")):
        slot = path.name.split(".", 1)[0]
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                member_id = json.loads(line).get("member_id")
                if member_id:
                    aliases[str(member_id)] = slot
    return aliases
