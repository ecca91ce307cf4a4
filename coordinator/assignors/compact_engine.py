"""The fast path of range, sticky and cooperative-sticky: the same decisions as the reference
(`range_assignor`, `sticky_engine` + `constrained`), on numpy arrays of partition numbers.

It covers the cases large groups are made of, and answers None for the others, which then
take the reference path (`assign_compact` in the assignors makes that choice):

- sticky and cooperative-sticky: equal subscriptions (Kafka's constrained path) and claims
  in which no partition is claimed twice (no ownership conflict to resolve);
- range: everything.

Setting the environment variable STATICFLEET_ASSIGNOR_PATH=reference turns the fast path off
(`base.fast_path_enabled`). numpy is imported only when the fast path first runs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from coordinator.assignors.base import java_string_key, known_topic_sets, ordered_members
from coordinator.assignors.compact import _EMPTY, CompactAssignment, CompactSpace, IdArray
from coordinator.assignors.constrained import round_robin_fill
from coordinator.protocol import Subscription

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class _Chunks:
    """A member's partitions as a list of chunks (ranges, array slices, single numbers), so
    that `round_robin_fill` deals whole strided slices without touching each partition."""

    __slots__ = ("parts",)

    def __init__(self, first: IdArray | None = None) -> None:
        self.parts: list[IdArray | range | list[int]] = [] if first is None else [first]

    def extend(self, chunk: IdArray | range) -> None:
        self.parts.append(chunk)

    def append(self, number: int) -> None:
        self.parts.append([int(number)])

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def sorted_ids(self) -> IdArray:
        arrays = [_as_array(p) for p in self.parts if len(p)]
        if not arrays:
            return _EMPTY
        if len(arrays) == 1 and isinstance(self.parts[-1], range):
            return arrays[0]  # one ascending range: already sorted
        return np.sort(np.concatenate(arrays))


def _as_array(chunk: IdArray | range | list[int]) -> IdArray:
    if isinstance(chunk, range):
        return np.arange(chunk.start, chunk.stop, chunk.step, dtype=np.int64)
    return np.asarray(chunk, dtype=np.int64)


# -- sticky and cooperative-sticky ---------------------------------------------------------


def compact_sticky(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    read_claim: Callable[[CompactSpace, str], IdArray | None],
    *,
    cooperative: bool,
) -> CompactAssignment | None:
    """`sticky_engine.sticky_assign` on arrays, or None when the fast path does not apply.
    `read_claim(space, member_id)` gives the partition numbers a member claims, or None when
    its claim must be read by the reference path. Generations are not needed: they only
    settle conflicting claims, and with a conflict the reference path decides."""
    members = sorted(subscriptions, key=java_string_key)
    if not members:
        return None
    topic_sets = known_topic_sets(partitions_per_topic, subscriptions, members)
    if any(topics != topic_sets[0] for topics in topic_sets):
        return None  # the general path: reference only
    space = CompactSpace(partitions_per_topic, sorted(topic_sets[0]))
    claimed: list[IdArray] = []
    for member_id in members:
        ids = read_claim(space, member_id)
        if ids is None:
            return None
        claimed.append(ids)
    lengths = [c.size for c in claimed]
    any_claim = any(lengths)
    owner_of: IdArray | None = None
    if any_claim:
        all_ids = np.concatenate(claimed)
        owners = np.repeat(np.arange(len(members), dtype=np.int64), lengths)
        owner_of = np.full(space.size, -1, dtype=np.int64)
        owner_of[all_ids] = owners
        if int(np.count_nonzero(owner_of >= 0)) != all_ids.size:
            return None  # a partition claimed twice: ownership rules in the reference
    assigned = _constrained(space, claimed)
    if cooperative and owner_of is not None:
        for m, ids in enumerate(assigned):
            holder = owner_of[ids]
            keep = (holder == m) | (holder == -1)
            if not keep.all():
                assigned[m] = ids[keep]
    return CompactAssignment(space, members, assigned)


def _constrained(space: CompactSpace, owned: Sequence[IdArray]) -> list[IdArray]:
    """`constrained.constrained_assign` on arrays (same steps, same order)."""
    member_count = len(owned)
    min_quota, members_with_extra = divmod(space.size, member_count)
    max_quota = min_quota + (1 if members_with_extra else 0)
    assignment: list[_Chunks] = []
    below_min: list[int] = []
    waiting_for_extra: list[int] = []
    extra_granted = 0
    for member, ids in enumerate(owned):
        count = ids.size
        if count < min_quota:
            keep = ids
            below_min.append(member)
        elif count >= max_quota and extra_granted < members_with_extra:
            extra_granted += 1
            if extra_granted == members_with_extra:
                waiting_for_extra.clear()
            keep = _keep_in_partition_order(space, ids, max_quota)
        else:
            keep = _keep_in_partition_order(space, ids, min_quota)
            if extra_granted < members_with_extra:
                waiting_for_extra.append(member)
        assignment.append(_Chunks(keep))

    unassigned: IdArray | range
    if any(ids.size for ids in owned):
        taken = np.zeros(space.size, dtype=bool)
        for chunks in assignment:
            taken[chunks.parts[0]] = True
        unassigned = np.flatnonzero(~taken).astype(np.int64)
    else:
        unassigned = range(space.size)
    deficits = [min_quota - len(assignment[m]) for m in below_min]
    dealt, reached_min = round_robin_fill(unassigned, below_min, deficits, assignment)  # type: ignore[arg-type]
    waiting_for_extra.extend(reached_min)
    if len(unassigned) - dealt > len(waiting_for_extra):
        raise AssertionError("constrained assignment: more partitions left than members with room")
    for member, number in zip(waiting_for_extra, unassigned[dealt:], strict=False):
        assignment[member].append(int(number))
    return [chunks.sorted_ids() for chunks in assignment]


def _keep_in_partition_order(space: CompactSpace, ids: IdArray, quota: int) -> IdArray:
    """The first `quota` of `ids` in (partition, topic) order (`keep_in_partition_order`)."""
    if ids.size <= quota:
        return ids
    topic = space.topic_of(ids)
    key = (ids - space.offsets[topic]) * len(space.topics) + topic
    return ids[np.argsort(key, kind="stable")[:quota]]


# -- claims from the members' data -----------------------------------------------------------


def sticky_user_data_ids(space: CompactSpace, data: bytes | None) -> tuple[IdArray, int] | None:
    """Sticky user data (`[topic:string partitions:[int32]]`, then an optional int32
    generation) read straight into partition numbers and the generation (-1 for v0 or none).
    None when the bytes are not well formed, for the reference decoder to judge."""
    if not data:
        return _EMPTY, -1
    end = len(data)
    try:
        (count,) = _INT32.unpack_from(data, 0)
        if count < 0:
            return None
        pos = 4
        # (byte position of the partitions, their count, topic index) per known topic
        blocks: list[tuple[int, int, int]] = []
        append = blocks.append
        unpack16, unpack32 = _INT16.unpack_from, _INT32.unpack_from
        index_of = space.index_of_utf8
        for _ in range(count):
            (length,) = unpack16(data, pos)
            start = pos + 2
            pos = start + length
            if length < 0 or pos + 4 > end:
                return None
            name = data[start:pos]
            (n,) = unpack32(data, pos)
            pos += 4
            if n < 0 or pos + 4 * n > end:
                return None
            index = index_of.get(name)
            if index is None:
                name.decode()  # not a topic of ours; still rejected if not UTF-8, as Kafka does
            elif n:
                append((pos, n, index))
            pos += 4 * n
    except (struct.error, UnicodeDecodeError):
        return None
    generation = _INT32.unpack_from(data, pos)[0] if end - pos >= 4 else -1
    if not blocks:
        return _EMPTY, generation
    table = np.array(blocks, dtype=np.int64)
    starts, size, topic = table[:, 0], table[:, 1], table[:, 2]
    within = np.arange(int(size.sum()), dtype=np.int64) - np.repeat(np.cumsum(size) - size, size)
    raw = np.frombuffer(data, dtype=np.uint8)
    at = np.repeat(starts, size) + 4 * within
    partition = raw[at[:, None] + np.arange(4)].copy().view(">i4").reshape(-1).astype(np.int64)
    valid = (partition >= 0) & (partition < np.repeat(space.counts[topic], size))
    ids = np.repeat(space.offsets[topic], size) + partition
    return (ids if valid.all() else ids[valid]), generation


# -- range ---------------------------------------------------------------------------------


def compact_range(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> CompactAssignment:
    """`RangeAssignor.assign` on arrays. Members with the same topics list are handled as one
    subscription, and topics with the same subscriptions and partition count are laid out
    together: one array operation per member and such topic group, nothing per partition or
    per (member, topic)."""
    members = ordered_members(subscriptions)
    # Distinct topic lists -> the positions (ascending) of the members that sent them.
    positions_by_topics: dict[tuple[str, ...], list[int]] = {}
    for position, member_id in enumerate(members):
        positions_by_topics.setdefault(tuple(subscriptions[member_id].topics), []).append(position)
    position_lists = list(positions_by_topics.values())
    known_sets = [
        frozenset(t for t in topics if t in partitions_per_topic) for topics in positions_by_topics
    ]
    space = CompactSpace(partitions_per_topic, set().union(*known_sets))
    groups: dict[tuple[tuple[int, ...], int], list[int]] = {}
    for index, topic in enumerate(space.topics):
        holders = tuple(s for s, known in enumerate(known_sets) if topic in known)
        groups.setdefault((holders, int(space.counts[index])), []).append(index)
    chunks: list[list[IdArray]] = [[] for _ in members]
    for (holders, count), topic_indices in groups.items():
        if len(holders) == 1:
            group_members: Sequence[int] = position_lists[holders[0]]
        else:
            group_members = sorted(p for s in holders for p in position_lists[s])
        starts = space.offsets[np.array(topic_indices, dtype=np.int64)]
        per_member, extra = divmod(count, len(group_members))
        for position, member in enumerate(group_members):
            start = per_member * position + min(position, extra)
            length = per_member + (1 if position < extra else 0)
            if length:
                block = starts[:, None] + np.arange(start, start + length, dtype=np.int64)
                chunks[member].append(block.reshape(-1))
    ids = [_merge(parts) for parts in chunks]
    return CompactAssignment(space, members, ids)


def _merge(parts: Iterable[IdArray]) -> IdArray:
    arrays = list(parts)
    if not arrays:
        return _EMPTY
    if len(arrays) == 1:
        return arrays[0]
    return np.sort(np.concatenate(arrays))
