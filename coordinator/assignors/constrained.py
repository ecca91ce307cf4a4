"""Kafka's "constrained" sticky assignment, for groups whose members all subscribe to the
same topics; near-linear, so it handles a million partitions in seconds.

With equal subscriptions every member should end with `min_quota = N // M` partitions, and
`N % M` of them with one more (`max_quota`). Following Kafka's ConstrainedAssignmentBuilder:

1. Each member keeps what it validly owns, up to its quota: all of it when it owns fewer
   than `min_quota`; `max_quota` while members with one extra are still needed; else
   `min_quota`. Kept partitions are chosen in (partition, topic) order; the rest is revoked.
2. The partitions nobody kept are dealt, in (topic, partition) order, round-robin to the
   members below `min_quota` until each reaches it; then one each to the members waiting at
   `min_quota` for an extra partition, in the order they got there.

Members are visited in the order given (the caller sorts them); Kafka visits them in hash
order in step 1, which only decides who of several equally entitled members keeps an extra
partition. Everything works on partition numbers (see `partition_space`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress

from coordinator.assignors.partition_space import PartitionSpace

_INVERT = bytes.maketrans(b"\x00\x01", b"\x01\x00")


def unassigned_partitions(size: int, kept: Sequence[Sequence[int]]) -> Sequence[int]:
    """Partition numbers 0..size-1 that no member keeps, ascending."""
    if not any(kept):
        return range(size)
    taken = bytearray(size)
    for ids in kept:
        for number in ids:
            taken[number] = 1
    return list(compress(range(size), taken.translate(_INVERT)))


def round_robin_fill(
    unassigned: Sequence[int],
    members: Sequence[int],
    deficits: Sequence[int],
    assignment: list[list[int]],
) -> tuple[int, list[int]]:
    """Deal `unassigned` round-robin to `members` (in order), member `members[k]` taking
    `deficits[k]` partitions; a member leaves the circle once it has them all.

    Appends to `assignment[member]`; returns how many partitions were dealt and the members in
    the order they got their share (members with no deficit first). Runs in whole rounds
    with strided slices rather than one partition at a time: when every member still in the
    circle needs at least `r` more, the next `r` rounds give the k-th of them the partitions
    at positions `k, k + u, k + 2u, ...` (u members in the circle), so the Python-level work
    is per member and per distinct deficit, not per partition.
    """
    remaining = list(deficits)
    filled = [members[k] for k in range(len(members)) if remaining[k] <= 0]
    active = [k for k in range(len(members)) if remaining[k] > 0]
    position = 0
    total = len(unassigned)
    while active and position < total:
        width = len(active)
        rounds = min(min(remaining[k] for k in active), (total - position) // width)
        if rounds == 0:
            # Fewer partitions left than members waiting: one each until they run out.
            for k in active[: total - position]:
                assignment[members[k]].append(unassigned[position])
                position += 1
                remaining[k] -= 1
                if remaining[k] == 0:
                    filled.append(members[k])
            break
        stop = position + width * rounds
        for offset, k in enumerate(active):
            assignment[members[k]].extend(unassigned[position + offset : stop : width])
        position = stop
        still_active: list[int] = []
        for k in active:
            remaining[k] -= rounds
            if remaining[k] == 0:
                filled.append(members[k])
            else:
                still_active.append(k)
        active = still_active
    return position, filled


def constrained_assign(space: PartitionSpace, owned: Sequence[Sequence[int]]) -> list[list[int]]:
    """Assign all of `space` to the members (positions of `owned`, which holds each member's
    validly owned partition numbers). Returns each member's partition numbers."""
    member_count = len(owned)
    if member_count == 0:
        return []
    min_quota, members_with_extra = divmod(space.size, member_count)
    max_quota = min_quota + (1 if members_with_extra else 0)

    # Starts as what each member keeps; the dealing below appends what it gets.
    assignment: list[list[int]] = []
    below_min: list[int] = []
    # Members at exactly min_quota that may still get one extra partition, in waiting order.
    waiting_for_extra: list[int] = []
    extra_granted = 0
    for member, ids in enumerate(owned):
        count = len(ids)
        if count < min_quota:
            keep = list(ids)
            below_min.append(member)
        elif count >= max_quota and extra_granted < members_with_extra:
            extra_granted += 1
            if extra_granted == members_with_extra:
                waiting_for_extra.clear()
            keep = keep_in_partition_order(space, ids, max_quota)
        else:
            keep = keep_in_partition_order(space, ids, min_quota)
            if extra_granted < members_with_extra:
                waiting_for_extra.append(member)
        assignment.append(keep)

    unassigned = unassigned_partitions(space.size, assignment)
    dealt, reached_min = round_robin_fill(
        unassigned, below_min, [min_quota - len(assignment[m]) for m in below_min], assignment
    )
    waiting_for_extra.extend(reached_min)
    if len(unassigned) - dealt > len(waiting_for_extra):
        raise AssertionError("constrained assignment: more partitions left than members with room")
    for member, number in zip(waiting_for_extra, unassigned[dealt:], strict=False):
        assignment[member].append(number)
    return assignment


def keep_in_partition_order(space: PartitionSpace, ids: Sequence[int], quota: int) -> list[int]:
    """The at most `quota` of `ids` a member keeps: the first in (partition, topic) order."""
    if len(ids) <= quota:
        return list(ids)
    return space.partition_major_order(ids)[:quota]
