"""Capacity-weighted sticky assignment, the algorithm behind `static-sticky`.

Each member has a weight (its capacity; 0 for a draining member, which receives nothing
and gives its partitions away) and a list of preferred partitions (what it owns, or what the
coordinator last assigned it). Goals, in order: every partition of a subscribed topic
assigned once; counts proportional to weights; preferred partitions kept.

- Equal subscriptions: exact quotas by largest remainder. Member `m` gets
  `floor(N * w_m / W)`, and the `N - sum(floors)` members with the largest remainders one
  more (ties: members that would otherwise have to give up a preferred partition first,
  then member order). So every count is the floor or the ceiling of its exact share, and
  with equal weights this is Kafka's min/max quota. Members keep preferred partitions up to
  their quota; the rest is dealt round-robin like Kafka's constrained assignment.
- Different subscriptions: the general balancer with weights (see `general`), which reaches
  the most proportional assignment the subscriptions allow.

A topic that only members with weight 0 subscribe to stays with them (sticky, spread by
count): leaving it unconsumed would be worse than a draining member consuming it. If no
member has a positive weight, everybody counts as weight 1 for the same reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.assignors.constrained import (
    keep_in_partition_order,
    round_robin_fill,
    unassigned_partitions,
)
from coordinator.assignors.general import general_assign
from coordinator.assignors.ownership import NO_OWNER
from coordinator.assignors.partition_space import PartitionSpace


def weighted_sticky_assign(
    space: PartitionSpace,
    topics_of_member: Sequence[frozenset[int]],
    weights: Sequence[int],
    preferred: Sequence[Sequence[int]],
) -> list[list[int]]:
    """Each member's partition numbers, ascending. `topics_of_member[m]` holds topic indices
    of `space`; `preferred[m]` partition numbers no other member prefers."""
    member_count = len(topics_of_member)
    if not any(weights[m] > 0 and topics_of_member[m] for m in range(member_count)):
        weights = [1] * member_count
    topic_of = space.topic_of
    preferred = [
        [n for n in ids if topic_of[n] in topics_of_member[m]] for m, ids in enumerate(preferred)
    ]
    receivers = [m for m in range(member_count) if weights[m] > 0]
    common = topics_of_member[receivers[0]] if receivers else frozenset()
    if all(topics_of_member[m] == common for m in receivers) and all(
        topics_of_member[m] <= common for m in range(member_count)
    ):
        return _by_quota(space, receivers, weights, preferred)
    return _by_balancing(space, topics_of_member, weights, preferred)


def _by_quota(
    space: PartitionSpace,
    receivers: Sequence[int],
    weights: Sequence[int],
    preferred: Sequence[Sequence[int]],
) -> list[list[int]]:
    total = space.size
    total_weight = sum(weights[m] for m in receivers)
    target = [0] * len(preferred)
    remainder = [0] * len(preferred)
    for m in receivers:
        target[m], remainder[m] = divmod(total * weights[m], total_weight)
    extras = total - sum(target)
    ranked = sorted(
        receivers,
        key=lambda m: (-remainder[m], 0 if len(preferred[m]) > target[m] else 1, m),
    )
    for m in ranked[:extras]:
        target[m] += 1

    assignment = [keep_in_partition_order(space, ids, target[m]) for m, ids in enumerate(preferred)]
    round_robin_fill(
        unassigned_partitions(total, assignment),
        receivers,
        [target[m] - len(assignment[m]) for m in receivers],
        assignment,
    )
    return [sorted(ids) for ids in assignment]


def _by_balancing(
    space: PartitionSpace,
    topics_of_member: Sequence[frozenset[int]],
    weights: Sequence[int],
    preferred: Sequence[Sequence[int]],
) -> list[list[int]]:
    member_count = len(topics_of_member)
    result = general_assign(space, topics_of_member, weights, preferred)

    receivable = set().union(*(topics_of_member[m] for m in range(member_count) if weights[m] > 0))
    topic_of = space.topic_of
    holder = [NO_OWNER] * space.size
    for m, ids in enumerate(preferred):
        for n in ids:
            if topic_of[n] not in receivable:
                holder[n] = m
    for topic in range(len(space.topics)):
        if topic in receivable:
            continue
        subscribers = [m for m in range(member_count) if topic in topics_of_member[m]]
        if not subscribers:
            continue
        in_topic = [0] * member_count
        for n in space.ids_of_topic(topic):
            if holder[n] != NO_OWNER:
                in_topic[holder[n]] += 1
        for n in space.ids_of_topic(topic):
            if holder[n] == NO_OWNER:
                taker = min(subscribers, key=lambda m: (in_topic[m], m))
                holder[n] = taker
                in_topic[taker] += 1
        for n in space.ids_of_topic(topic):
            result[holder[n]].append(n)
    return [sorted(ids) for ids in result]
