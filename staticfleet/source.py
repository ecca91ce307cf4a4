"""What a member reads: the `PartitionReader` interface, and a synthetic source behind it.

The synthetic source is an always-growing log per (topic, partition), no broker (the Kafka
one is `staticfleet.kafka.source`).

Every record is a pure function of (topic, partition, offset), and a partition's end offset
is a pure function of wall-clock time, so independent member processes agree on what each
partition holds: a partition that moves to another member resumes exactly where the
committed offset says. Old records age out like a Kafka log with retention, so a member
with no committed offset starts at the log start (auto.offset.reset=earliest) without
replaying the log since the epoch.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from coordinator.protocol import TopicPartition


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes
    value: bytes


class PartitionReader(Protocol):
    """Reads exactly the partitions it is told to, from the offsets it is told to.

    Assignment is manual: the member's group decides who reads what, the reader never joins
    a group of its own. Nothing here blocks the event loop for long.
    """

    def assign(self, start_offsets: Mapping[TopicPartition, int | None]) -> None:
        """Start reading these partitions at these offsets (None: the oldest retained)."""
        ...

    def unassign(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop reading these partitions; records of theirs not yet returned are dropped."""
        ...

    def poll(self, max_records: int) -> list[Record]:
        """Records that have arrived on the assigned partitions, without waiting."""
        ...

    def close(self) -> None: ...


class SyntheticSource:
    def __init__(
        self,
        records_per_second: float = 10.0,
        retention_records: int = 10_000,
        epoch_ms: int = 0,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if records_per_second <= 0:
            raise ValueError("records_per_second must be positive")
        if retention_records <= 0:
            raise ValueError("retention_records must be positive")
        self.records_per_second = records_per_second
        self.retention_records = retention_records
        self.epoch_ms = epoch_ms
        self._clock_ms = clock_ms

    def end_offset(self, tp: TopicPartition) -> int:
        """The offset the next record will get (Kafka's high watermark)."""
        elapsed_ms = max(0, self._clock_ms() - self.epoch_ms)
        # Partitions are staggered by a fraction of a record so they do not all tick at once.
        stagger = (_digest(tp.topic, tp.partition, -1)[0] / 256) / self.records_per_second
        return int(elapsed_ms / 1000 * self.records_per_second + stagger)

    def start_offset(self, tp: TopicPartition) -> int:
        """The oldest offset still retained."""
        return max(0, self.end_offset(tp) - self.retention_records)

    def timestamp_ms(self, offset: int) -> int:
        return self.epoch_ms + int(offset * 1000 / self.records_per_second)

    def record(self, tp: TopicPartition, offset: int) -> Record:
        digest = _digest(tp.topic, tp.partition, offset)
        return Record(
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
            timestamp_ms=self.timestamp_ms(offset),
            key=f"{tp.topic}-{tp.partition}".encode(),
            value=digest.hex().encode(),
        )

    def read(self, tp: TopicPartition, offset: int, max_records: int = 500) -> list[Record]:
        """Records from `offset` (clamped to the retained range) up to the end offset."""
        first = max(offset, self.start_offset(tp))
        last = min(self.end_offset(tp), first + max_records)
        return [self.record(tp, position) for position in range(first, last)]


class SyntheticReader:
    """`PartitionReader` over a `SyntheticSource`: a read position per assigned partition."""

    def __init__(self, source: SyntheticSource) -> None:
        self.source = source
        self._positions: dict[TopicPartition, int] = {}

    def assign(self, start_offsets: Mapping[TopicPartition, int | None]) -> None:
        for tp, offset in start_offsets.items():
            # A committed offset older than retention resumes at the log start (earliest).
            self._positions[tp] = max(offset or 0, self.source.start_offset(tp))

    def unassign(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.pop(tp, None)

    def poll(self, max_records: int) -> list[Record]:
        records: list[Record] = []
        for tp, position in list(self._positions.items()):
            if len(records) >= max_records:
                break
            batch = self.source.read(tp, position, max_records - len(records))
            # Re-inserted at the end: the next poll starts with the partitions read least.
            del self._positions[tp]
            self._positions[tp] = batch[-1].offset + 1 if batch else position
            records.extend(batch)
        return records

    def close(self) -> None:
        self._positions.clear()


def _digest(topic: str, partition: int, offset: int) -> bytes:
    return hashlib.blake2b(f"{topic}/{partition}/{offset}".encode(), digest_size=16).digest()
