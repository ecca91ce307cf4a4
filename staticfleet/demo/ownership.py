"""Who held which partition when, from the members' own event logs.

Pure functions over rows: a row is one parsed line of a `staticfleet member run` event log
(`ts_ms`, `event`, `member_id`, `instance_id`, `partitions`, `offsets`, ...; see
docs/client.md). Only the members know when they really started and stopped working on a
partition — the journal knows what was *assigned*, not when a process let go — so the
safety check and the "no owner" arithmetic live here. Kept free of I/O so they can be unit
tested and cross-checked against the PySpark analytics.

Intervals are half-open, [start_ms, end_ms): a revoke and another member's assign in the
same millisecond do not overlap (the revoke line is written after the commit, the assign
line before the first read).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]
Partition = tuple[str, int]

STARTED = "started"
ASSIGNED = "assigned"
REVOKED = "revoked"
LOST = "lost"
COMMIT = "commit"
FATAL = "fatal"
STOPPED = "stopped"
# Events after which a process holds nothing (it stopped, or can no longer act).
_ENDS_ALL = frozenset({FATAL, STOPPED})


@dataclass(frozen=True, slots=True)
class MemberLog:
    """One member process's event log.

    `owner` is the stable name shown to people (the slot, e.g. `member-3`, which is also
    the static instance id); `process` names this one incarnation, because two processes
    of one slot holding a partition at once is exactly as unsafe as two slots doing so.
    """

    owner: str
    process: str
    rows: Sequence[Row]


@dataclass(frozen=True, slots=True)
class Holding:
    partition: Partition
    owner: str
    process: str
    start_ms: int
    end_ms: int | None  # None: still held when the log ends


@dataclass(frozen=True, slots=True)
class Overlap:
    """A stretch of time during which more than one process held one partition."""

    partition: Partition
    processes: tuple[str, ...]
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class RevocationCounts:
    revoked: int  # given up in a rebalance (what eager rebalancing costs)
    released: int  # given up because the process was stopping
    lost: int  # dropped without a commit (session lost, fenced, stale generation)


def partitions_of(row: Row) -> list[Partition]:
    return [(str(topic), int(partition)) for topic, partition in row.get("partitions") or []]


def holdings(log: MemberLog) -> list[Holding]:
    """Ownership intervals of one process: an assign opens, revoke/lost close, and
    stopped/fatal close everything still open."""
    open_since: dict[Partition, int] = {}
    result: list[Holding] = []

    def close(partition: Partition, ts: int) -> None:
        result.append(Holding(partition, log.owner, log.process, open_since.pop(partition), ts))

    for row in log.rows:
        kind = row.get("event")
        ts = int(row["ts_ms"])
        if kind == ASSIGNED:
            for partition in partitions_of(row):
                open_since.setdefault(partition, ts)
        elif kind in (REVOKED, LOST):
            for partition in partitions_of(row):
                if partition in open_since:
                    close(partition, ts)
        elif kind in _ENDS_ALL:
            for partition in list(open_since):
                close(partition, ts)
    result.extend(
        Holding(partition, log.owner, log.process, since, None)
        for partition, since in open_since.items()
    )
    return result


def all_holdings(logs: Iterable[MemberLog]) -> list[Holding]:
    return [holding for log in logs for holding in holdings(log)]


def _by_partition(items: Iterable[Holding]) -> dict[Partition, list[Holding]]:
    grouped: dict[Partition, list[Holding]] = {}
    for holding in items:
        grouped.setdefault(holding.partition, []).append(holding)
    return grouped


def _segments(items: Sequence[Holding], end_ms: int) -> list[tuple[int, int, tuple[str, ...]]]:
    """Constant-holder stretches of one partition: (start, end, processes holding it),
    open holdings cut at `end_ms`. Stretches with no holder are left out."""
    points: list[tuple[int, int, str]] = []
    for holding in items:
        stop = end_ms if holding.end_ms is None else min(holding.end_ms, end_ms)
        if stop > holding.start_ms:  # a zero-length holding never held anything
            points.append((holding.start_ms, 1, holding.process))
            points.append((stop, -1, holding.process))
    # Ends sort before starts at the same instant: touching intervals do not overlap.
    points.sort(key=lambda point: (point[0], point[1]))
    active: Counter[str] = Counter()
    segments: list[tuple[int, int, tuple[str, ...]]] = []
    previous: int | None = None
    for ts, delta, process in points:
        if previous is not None and ts > previous and +active:
            segments.append((previous, ts, tuple(sorted((+active).elements()))))
        active[process] += delta
        previous = ts
    return segments


def ownership_overlaps(items: Iterable[Holding], end_ms: int) -> list[Overlap]:
    """The safety check: every stretch in which two or more processes held one partition."""
    overlaps = []
    for partition, group in sorted(_by_partition(items).items()):
        for start, end, processes in _segments(group, end_ms):
            if len(processes) > 1:
                overlaps.append(Overlap(partition, processes, start, end))
    return overlaps


def max_simultaneous_owners(items: Iterable[Holding], end_ms: int) -> int:
    """The most processes that ever held one partition at the same time (1 when safe)."""
    return max(
        (
            len(processes)
            for group in _by_partition(items).values()
            for _start, _end, processes in _segments(group, end_ms)
        ),
        default=0,
    )


def _covered(group: Sequence[Holding], lo: int, hi: int) -> list[tuple[int, int]]:
    """Merged stretches of [lo, hi) during which someone held the partition."""
    spans = sorted(
        (max(h.start_ms, lo), min(hi if h.end_ms is None else h.end_ms, hi)) for h in group
    )
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _gaps(group: Sequence[Holding], start_ms: int, end_ms: int) -> list[tuple[int, int]]:
    """Stretches of [from, end_ms) with no holder, where `from` is the partition's first
    assignment or `start_ms`, whichever is later. A partition nobody ever held counts
    from `start_ms`: a partition that never gets an owner is the worst case, not a zero."""
    first = min((h.start_ms for h in group), default=start_ms)
    lo = max(start_ms, first)
    if lo >= end_ms:
        return []
    gaps = []
    cursor = lo
    for start, end in _covered(group, lo, end_ms):
        if start > cursor:
            gaps.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < end_ms:
        gaps.append((cursor, end_ms))
    return gaps


def unowned_ms(
    items: Iterable[Holding], partitions: Iterable[Partition], start_ms: int, end_ms: int
) -> dict[Partition, int]:
    """Per partition, the milliseconds of [start_ms, end_ms) (after its first assignment)
    during which no process held it."""
    grouped = _by_partition(items)
    return {
        partition: sum(
            end - start for start, end in _gaps(grouped.get(partition, []), start_ms, end_ms)
        )
        for partition in partitions
    }


def unowned_partition_seconds(
    items: Iterable[Holding], partitions: Iterable[Partition], start_ms: int, end_ms: int
) -> float:
    return sum(unowned_ms(items, partitions, start_ms, end_ms).values()) / 1000


def all_owned_again_at(
    items: Iterable[Holding], partitions: Iterable[Partition], start_ms: int, end_ms: int
) -> int | None:
    """When the last ownerless stretch inside [start_ms, end_ms) ended: the moment every
    partition was owned again. `start_ms` if nothing was ever without an owner; None if
    some partition still had no owner at `end_ms`."""
    grouped = _by_partition(items)
    latest = start_ms
    for partition in partitions:
        for _gap_start, gap_end in _gaps(grouped.get(partition, []), start_ms, end_ms):
            if gap_end >= end_ms:
                return None
            latest = max(latest, gap_end)
    return latest


def held_at(items: Iterable[Holding], ts_ms: int) -> dict[Partition, set[str]]:
    """Which processes held each partition at one instant."""
    held: dict[Partition, set[str]] = {}
    for h in items:
        if h.start_ms <= ts_ms and (h.end_ms is None or ts_ms < h.end_ms):
            held.setdefault(h.partition, set()).add(h.process)
    return held


def assignment_rounds(
    items: Iterable[Holding], partitions: Iterable[Partition], start_ms: int, end_ms: int
) -> int:
    """Rebalances as the members saw them: how many times in (start_ms, end_ms] the fleet
    came to a complete assignment (every partition held) after a stretch in which some
    partition had no holder, or with other holders than the complete assignment before.

    One per rebalance whatever the client reports on its own: an eager round revokes
    everything and assigns it again (a gap, then complete), a member that leaves drops its
    partitions until the others take them (a gap), and the assigns of one round arriving a
    few milliseconds apart are one round, not one per member."""
    items = list(items)
    wanted = list(partitions)
    instants = sorted(
        {
            ts
            for h in items
            for ts in (h.start_ms, h.end_ms)
            if ts is not None and start_ms < ts <= end_ms
        }
    )

    def complete_at(ts: int) -> dict[Partition, frozenset[str]] | None:
        held = held_at(items, ts)
        if not all(held.get(partition) for partition in wanted):
            return None
        return {partition: frozenset(held[partition]) for partition in wanted}

    last = complete_at(start_ms)
    broken = last is None
    rounds = 0
    for ts in instants:
        now = complete_at(ts)
        if now is None:
            broken = True
            continue
        if broken or now != last:
            rounds += 1
        last, broken = now, False
    return rounds


def partitions_moved(items: Iterable[Holding], start_ms: int, end_ms: int) -> int:
    """Hand-overs in (start_ms, end_ms]: a partition's next holding (in start order) that
    begins in the window in another process than the one before. A partition revoked and
    given back to the same process (an eager round that changed nothing for it) did not
    move; its first assignment is no move either."""
    moved = 0
    for group in _by_partition(items).values():
        ordered = sorted(group, key=lambda h: (h.start_ms, h.process))
        for before, after in itertools.pairwise(ordered):
            if start_ms < after.start_ms <= end_ms and after.process != before.process:
                moved += 1
    return moved


def count_steps(items: Iterable[Holding], end_ms: int) -> list[tuple[int, int, int]]:
    """(start, end, number of partitions held) stretches for a set of holdings — one
    owner's lane in the timeline. Stretches holding nothing are left out."""
    points: list[tuple[int, int]] = []
    for h in items:
        stop = end_ms if h.end_ms is None else min(h.end_ms, end_ms)
        if stop > h.start_ms:
            points.append((h.start_ms, 1))
            points.append((stop, -1))
    return _sweep(points)


def unowned_steps(
    items: Iterable[Holding], partitions: Iterable[Partition], start_ms: int, end_ms: int
) -> list[tuple[int, int, int]]:
    """(start, end, number of partitions with no owner) stretches of [start_ms, end_ms)."""
    grouped = _by_partition(items)
    points: list[tuple[int, int]] = []
    for partition in partitions:
        for gap_start, gap_end in _gaps(grouped.get(partition, []), start_ms, end_ms):
            points.append((gap_start, 1))
            points.append((gap_end, -1))
    return _sweep(points)


def revocations(logs: Iterable[MemberLog], start_ms: int, end_ms: int) -> RevocationCounts:
    """Partitions given up inside [start_ms, end_ms], split by why.

    A revoke that is the process's last act before `stopped` (commits aside) is a release
    at shutdown: every member does that when it is stopped, static or not, and it says
    nothing about the rebalance protocol. Every other revoke was asked for by a rebalance.
    """
    revoked = released = lost = 0
    for log in logs:
        rows = [row for row in log.rows if row.get("event") != COMMIT]
        for index, row in enumerate(rows):
            ts = int(row["ts_ms"])
            if not start_ms <= ts <= end_ms:
                continue
            kind = row.get("event")
            count = len(partitions_of(row))
            if kind == LOST:
                lost += count
            elif kind == REVOKED:
                following = rows[index + 1].get("event") if index + 1 < len(rows) else None
                if following == STOPPED:
                    released += count
                else:
                    revoked += count
    return RevocationCounts(revoked=revoked, released=released, lost=lost)


def acknowledged_offsets(logs: Iterable[MemberLog], before_ms: int) -> dict[Partition, int]:
    """The highest offset per partition whose commit the coordinator acknowledged before
    `before_ms` (a `commit` line is written only after a successful answer)."""
    acknowledged: dict[Partition, int] = {}
    for log in logs:
        for row in log.rows:
            if row.get("event") != COMMIT or int(row["ts_ms"]) >= before_ms:
                continue
            for topic, partition, offset in row.get("offsets") or []:
                key = (str(topic), int(partition))
                acknowledged[key] = max(acknowledged.get(key, -1), int(offset))
    return acknowledged


def offsets_lost(
    acknowledged: Mapping[Partition, int], committed: Mapping[Partition, int]
) -> dict[Partition, tuple[int, int | None]]:
    """Partitions whose stored offset is missing or behind an acknowledged commit:
    (acknowledged, stored or None)."""
    return {
        partition: (offset, committed.get(partition))
        for partition, offset in sorted(acknowledged.items())
        if committed.get(partition, -1) < offset
    }


def commit_regressions(logs: Iterable[MemberLog]) -> list[tuple[Partition, int, int, int]]:
    """Commits that went backwards, across all members in time order:
    (partition, ts_ms, highest earlier offset, this offset). A regression means someone
    resumed from an offset older than one already committed — a lost commit."""
    commits: list[tuple[int, Partition, int]] = []
    for log in logs:
        for row in log.rows:
            if row.get("event") == COMMIT:
                for topic, partition, offset in row.get("offsets") or []:
                    commits.append((int(row["ts_ms"]), (str(topic), int(partition)), int(offset)))
    commits.sort()
    highest: dict[Partition, int] = {}
    regressions = []
    for ts, partition, offset in commits:
        if offset < highest.get(partition, -1):
            regressions.append((partition, ts, highest[partition], offset))
        highest[partition] = max(highest.get(partition, -1), offset)
    return regressions


def member_aliases(logs: Iterable[MemberLog]) -> dict[str, str]:
    """member id -> owner name, from the logs (a dynamic member's id changes with every
    process; the slot does not)."""
    aliases: dict[str, str] = {}
    for log in logs:
        for row in log.rows:
            member_id = row.get("member_id")
            if member_id:
                aliases[str(member_id)] = log.owner
    return aliases


def process_lifetimes(log: MemberLog, end_ms: int) -> tuple[int, int] | None:
    """(first line, `stopped`/`fatal` or `end_ms`) of one process, for the timeline."""
    if not log.rows:
        return None
    start = int(log.rows[0]["ts_ms"])
    stop = end_ms
    for row in log.rows:
        if row.get("event") in _ENDS_ALL:
            stop = int(row["ts_ms"])
            break
    return start, stop


def _sweep(points: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(start, end, count) stretches with count > 0 from (ts, +1/-1) edges."""
    points.sort()
    steps: list[tuple[int, int, int]] = []
    count = 0
    previous: int | None = None
    for ts, delta in points:
        if previous is not None and ts > previous and count > 0:
            steps.append((previous, ts, count))
        count += delta
        previous = ts
    return steps
