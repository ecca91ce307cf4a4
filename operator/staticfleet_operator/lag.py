"""A group's lag: per partition, log end offset - committed offset. Pure.

Counted over the spec's topics' partitions (the log ends read), so a committed offset of a
topic the group no longer reads counts for nothing. A partition with no commit has no lag
figure (Kafka's consumer-groups tool shows "-"): where the group starts there is the members'
`auto.offset.reset`, which the operator does not decide, so it counts 0 in the total and is
reported apart (`without_commit`) rather than guessed as the whole log (KEDA's scaler asks
the same question with its `offsetResetPolicy`). A commit past the log end (a truncated
log) counts 0, never negative.

The read costs broker round trips (OffsetFetch, ListOffsets per leader), so it is made at
most once every `LAG_INTERVAL_SECONDS` per group (`lag_due`); a read that fails leaves the
previous figure and its time in status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from coordinator.server.models import LagFigure

LAG_INTERVAL_SECONDS: Final = 15.0

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    log_end: int
    committed: int | None  # None: the group has no commit for it
    lag: int


@dataclass(frozen=True, slots=True)
class GroupLag:
    total: int
    without_commit: int
    partitions: tuple[PartitionLag, ...]


@dataclass(frozen=True, slots=True)
class LagReading:
    """What the observer read: log end offsets of the spec's topics' partitions and the
    group's committed offsets (any topic)."""

    log_ends: Mapping[TopicPartition, int]
    committed: Mapping[TopicPartition, int]


def group_lag(reading: LagReading) -> GroupLag:
    rows: list[PartitionLag] = []
    for (topic, partition), log_end in sorted(reading.log_ends.items()):
        committed = reading.committed.get((topic, partition))
        # Kafka's "no commit" is offset -1 in OffsetFetch: the same as absent.
        if committed is not None and committed < 0:
            committed = None
        lag = 0 if committed is None else max(log_end - committed, 0)
        rows.append(PartitionLag(topic, partition, log_end, committed, lag))
    return GroupLag(
        total=sum(row.lag for row in rows),
        without_commit=sum(1 for row in rows if row.committed is None),
        partitions=tuple(rows),
    )


def lag_figure(
    group_id: str, total: int | None, without_commit: int | None, read_at: datetime | None
) -> LagFigure | None:
    """What the coordinator server answers for the group's lag (status.lag,
    lagPartitionsWithoutCommit, lagTime); None until a figure was read."""
    if total is None or read_at is None:
        return None
    return LagFigure(
        group_id=group_id,
        lag=total,
        partitions_without_commit=without_commit or 0,
        read_at_ms=int(read_at.timestamp() * 1000),
    )


def lag_due(
    last_read: datetime | None, now: datetime, interval_s: float = LAG_INTERVAL_SECONDS
) -> bool:
    """Whether a pass at `now` reads lag again (never read, or the last figure is older
    than the interval)."""
    return seconds_until_lag_due(last_read, now, interval_s) == 0


def seconds_until_lag_due(
    last_read: datetime | None, now: datetime, interval_s: float = LAG_INTERVAL_SECONDS
) -> float:
    """How long until a pass would read lag again (0: now)."""
    if last_read is None:
        return 0.0
    return max(0.0, interval_s - (now - last_read).total_seconds())
