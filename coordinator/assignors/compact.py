"""Assignments as arrays of partition numbers, and their wire bytes built array-wise.

A million-partition assignment made of `TopicPartition` tuples costs about a microsecond per
partition to create in CPython, while Kafka's Java assignor hands out a million partitions
in tens of milliseconds. What a group leader finally needs is not the tuples but each
member's ConsumerProtocol Assignment bytes for SyncGroup. So the fast path keeps every
member's partitions as a sorted numpy array of partition numbers (see `partition_space`:
partition `p` of the `t`-th topic in Java string order is `offsets[t] + p`) and encodes all
members' bytes with a few numpy operations, never creating a per-partition Python object.

`CompactAssignment.to_assignments()` gives the same `dict[str, Assignment]` as the
assignors' `assign`, and `encode()` the same bytes as `protocol.encode_assignment` of it;
tests/assignors/test_compact_differential.py checks both against the pure-Python reference.
"""

from __future__ import annotations

import contextlib
import gc
import struct
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from coordinator.assignors.base import java_string_key
from coordinator.protocol import HIGHEST_VERSION, Assignment, TopicPartition

IdArray = npt.NDArray[np.int64]
_EMPTY: IdArray = np.zeros(0, dtype=np.int64)
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class CompactSpace:
    """The partitions of some topics numbered in Kafka's (topic, partition) order, as arrays."""

    __slots__ = (
        "_index_or_minus_one",
        "_numbers",
        "_topic_table",
        "counts",
        "index_of",
        "index_of_utf8",
        "names",
        "offsets",
        "size",
        "topics",
    )

    def __init__(self, partitions_per_topic: Mapping[str, int], topics: Iterable[str]) -> None:
        self.topics: tuple[str, ...] = tuple(sorted(set(topics), key=java_string_key))
        self.counts: IdArray = np.array(
            [max(0, partitions_per_topic[t]) for t in self.topics], dtype=np.int64
        )
        self.offsets: IdArray = np.zeros(len(self.topics), dtype=np.int64)
        if len(self.topics) > 1:
            np.cumsum(self.counts[:-1], out=self.offsets[1:])
        self.size = int(self.counts.sum())
        self.index_of: dict[str, int] = {t: i for i, t in enumerate(self.topics)}
        self._index_or_minus_one = _IndexOrMinusOne(self.index_of)
        # The names as a numpy object array, to look many up at once.
        self.names: npt.NDArray[np.object_] = np.array(self.topics, dtype=object)
        self._numbers: npt.NDArray[np.object_] | None = None
        # The same keyed by the UTF-8 bytes, for reading names off the wire without decoding.
        self.index_of_utf8: dict[bytes, int] = {}
        for index, topic in enumerate(self.topics):
            # A name with a lone surrogate has no UTF-8 form: no wire name decodes to it.
            with contextlib.suppress(UnicodeEncodeError):
                self.index_of_utf8[topic.encode()] = index
        self._topic_table: npt.NDArray[np.int32] | None = None

    def topic_of(self, ids: IdArray) -> npt.NDArray[np.int32]:
        """Topic index of each partition number (a lookup in a table of N int32, built on
        first use: much faster than a binary search over the topic offsets)."""
        if self._topic_table is None:
            self._topic_table = np.repeat(np.arange(len(self.topics), dtype=np.int32), self.counts)
        return self._topic_table[ids]

    @property
    def numbers(self) -> npt.NDArray[np.object_]:
        """0 .. largest partition count - 1 as Python ints, made once (on first use) and
        shared by every tuple made from this space."""
        if self._numbers is None:
            largest = int(self.counts.max(initial=0))
            self._numbers = np.array(list(range(largest)), dtype=object)
        return self._numbers

    def ids_of(self, partitions: Sequence[TopicPartition]) -> IdArray:
        """Numbers of `partitions`, skipping those outside the space (unknown topics,
        partitions beyond the topic's count), in input order; `PartitionSpace.ids_of`
        array-wise."""
        if not partitions or not self.topics:
            return _EMPTY
        count = len(partitions)
        # C-level maps over the tuples: no per-partition bytecode.
        topics = map(_FIRST, partitions)
        index = np.fromiter(map(self._index_or_minus_one.__getitem__, topics), np.int64, count)
        partition = np.fromiter(map(_SECOND, partitions), np.int64, count)
        known = index >= 0
        safe = np.where(known, index, 0)
        valid = known & (partition >= 0) & (partition < self.counts[safe])
        ids = self.offsets[safe] + partition
        return ids if valid.all() else ids[valid]


class _IndexOrMinusOne(dict[str, int]):
    """Topic index by name, -1 for a topic outside the space."""

    def __missing__(self, key: str) -> int:
        return -1


_FIRST = itemgetter(0)
_SECOND = itemgetter(1)


class CompactAssignment:
    """Each member's partition numbers, sorted, over one `CompactSpace`."""

    __slots__ = ("ids", "members", "space")

    def __init__(self, space: CompactSpace, members: Sequence[str], ids: Sequence[IdArray]) -> None:
        self.space = space
        self.members = tuple(members)
        self.ids = tuple(ids)

    def partitions(self, position: int) -> tuple[TopicPartition, ...]:
        ids = self.ids[position]
        if ids.size == 0:
            return ()
        space = self.space
        topic_index = space.topic_of(ids)
        numbers = space.numbers[ids - space.offsets[topic_index]].tolist()
        names = space.names[topic_index].tolist()
        new_tuple = tuple.__new__
        return tuple(map(new_tuple, repeat(TopicPartition), zip(names, numbers, strict=True)))

    def to_assignments(self) -> dict[str, Assignment]:
        """The assignors' `assign` result: one `Assignment` per member.

        The cyclic garbage collector is paused meanwhile: the million new tuples (which
        cannot form cycles) would otherwise set off collections that walk every object
        of the process again and again, doubling the time."""
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return {m: Assignment(self.partitions(i)) for i, m in enumerate(self.members)}
        finally:
            if was_enabled:
                gc.enable()

    def sizes(self) -> dict[str, int]:
        return {m: int(ids.size) for m, ids in zip(self.members, self.ids, strict=True)}

    def encode(self, version: int = HIGHEST_VERSION) -> dict[str, bytes]:
        """Every member's ConsumerProtocol Assignment bytes (no user data), byte for byte
        `encode_assignment(Assignment(partitions), version)`: partitions grouped per topic
        in order, topics in Java string order."""
        if not 0 <= version <= HIGHEST_VERSION:
            raise ValueError(f"unsupported consumer protocol version {version}")
        return dict(zip(self.members, encode_members(self.space, self.ids, version), strict=True))


# Members are encoded in batches of about this many partitions, which bounds the size of the
# index arrays (a few MiB) whatever the group's size.
_BATCH_PARTITIONS = 1 << 18


def encode_members(space: CompactSpace, ids: Sequence[IdArray], version: int) -> list[bytes]:
    """All members' assignment bytes, a batch of members at a time.

    Per member: version, topic count, then per run of one topic (header = int16 length and
    UTF-8 name, int32 partition count, int32 partitions), then a null user_data.
    """
    headers = [_INT16.pack(len(b)) + b for b in (t.encode() for t in space.topics)]
    table = _HeaderTable(headers)
    version_bytes = _INT16.pack(version)
    result: list[bytes] = []
    batch: list[IdArray] = []
    batch_size = 0
    for member_ids in ids:
        batch.append(member_ids)
        batch_size += member_ids.size + 1
        if batch_size >= _BATCH_PARTITIONS:
            result.extend(_encode_batch(space, table, batch, version_bytes))
            batch, batch_size = [], 0
    if batch:
        result.extend(_encode_batch(space, table, batch, version_bytes))
    return result


class _HeaderTable:
    """Each topic's header bytes (int16 length + UTF-8 name), in one 2-D table per header
    width so that the headers of many runs are gathered a row at a time."""

    def __init__(self, headers: Sequence[bytes]) -> None:
        self.width_of = np.array([len(h) for h in headers] or [0], dtype=np.int64)
        self.row_of = np.zeros(max(1, len(headers)), dtype=np.int64)
        # width -> the headers of that width as one numpy void ("V<width>") element each
        self.rows: dict[int, npt.NDArray[np.void]] = {}
        by_width: dict[int, list[int]] = {}
        for index, header in enumerate(headers):
            by_width.setdefault(len(header), []).append(index)
        for width, indices in by_width.items():
            self.row_of[indices] = np.arange(len(indices))
            blob = b"".join(headers[i] for i in indices)
            self.rows[width] = np.frombuffer(blob, dtype=f"V{width}")


def _encode_batch(
    space: CompactSpace, table: _HeaderTable, ids: Sequence[IdArray], version: bytes
) -> list[bytes]:
    """Runs (a member's partitions of one topic) that share header width and length make
    fixed-size records, built as rows of one 2-D array per (width, length); a member's bytes
    are then its head, slices of those arrays' bytes for each stretch of runs of one shape,
    and its tail. Few shapes occur in large assignments, so there are few slices."""
    member_count = len(ids)
    lengths = np.fromiter((a.size for a in ids), np.int64, member_count)
    all_ids = np.concatenate(ids)
    total = all_ids.size
    heads = [version + _INT32.pack(0)] * member_count
    pieces: list[list[bytes | memoryview]] = [[] for _ in range(member_count)]
    if total:
        member_of_id = np.repeat(np.arange(member_count, dtype=np.int64), lengths)
        topic = space.topic_of(all_ids)
        partition_be = (all_ids - space.offsets[topic]).astype(">i4")
        # A run starts at every change of topic or member.
        run_start = np.ones(total, dtype=bool)
        run_start[1:] = (topic[1:] != topic[:-1]) | (member_of_id[1:] != member_of_id[:-1])
        run_first = np.flatnonzero(run_start)
        run_count = run_first.size
        run_length = np.diff(np.append(run_first, total))
        run_topic = topic[run_first]
        run_member = member_of_id[run_first]
        for member, runs in enumerate(np.bincount(run_member, minlength=member_count).tolist()):
            heads[member] = version + _INT32.pack(runs)

        run_width = table.width_of[run_topic]
        shape_key = run_width * (int(run_length.max()) + 1) + run_length
        present = np.flatnonzero(np.bincount(shape_key))
        lookup = np.zeros(int(present[-1]) + 1, dtype=np.int64)
        lookup[present] = np.arange(present.size)
        shape_of_run = lookup[shape_key]
        row_of_run = np.zeros(run_count, dtype=np.int64)
        buffers: list[bytes] = []
        record_size: list[int] = []
        for shape in range(present.size):
            runs = (
                np.flatnonzero(shape_of_run == shape) if present.size > 1 else np.arange(run_count)
            )
            width = int(run_width[runs[0]])
            length = int(run_length[runs[0]])
            # A packed record: header, int32 count, int32 partitions (big-endian).
            record = np.dtype([("h", f"V{width}"), ("c", ">i4"), ("p", ">i4", (length,))])
            records = np.empty(runs.size, dtype=record)
            records["h"] = table.rows[width].take(table.row_of[run_topic[runs]])
            records["c"] = length
            records["p"] = partition_be[run_first[runs][:, None] + np.arange(length)]
            row_of_run[runs] = np.arange(runs.size)
            buffers.append(records.tobytes())
            record_size.append(record.itemsize)
        # Stretches of consecutive runs of one member and one shape are contiguous records.
        stretch_start = np.ones(run_count, dtype=bool)
        stretch_start[1:] = (shape_of_run[1:] != shape_of_run[:-1]) | (
            run_member[1:] != run_member[:-1]
        )
        first = np.flatnonzero(stretch_start)
        last = np.append(first[1:], run_count) - 1
        views = [memoryview(b) for b in buffers]
        for member, shape, row_first, row_last in zip(
            run_member[first].tolist(),
            shape_of_run[first].tolist(),
            row_of_run[first].tolist(),
            row_of_run[last].tolist(),
            strict=True,
        ):
            size = record_size[shape]
            pieces[member].append(views[shape][row_first * size : (row_last + 1) * size])
    return [
        b"".join([head, *body, _NULL_USER_DATA]) for head, body in zip(heads, pieces, strict=True)
    ]


_NULL_USER_DATA = _INT32.pack(-1)
