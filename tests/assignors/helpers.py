"""Checks and independent reference computations shared by the assignor tests."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping

from coordinator.protocol import Assignment, Subscription, TopicPartition

Claims = Mapping[str, tuple[Iterable[TopicPartition], int]]


def subscribed_partitions(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> set[TopicPartition]:
    topics = {t for sub in subscriptions.values() for t in sub.topics if t in partitions_per_topic}
    return {TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])}


def check_valid(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    result: Mapping[str, Assignment],
    *,
    complete: bool = True,
) -> None:
    """Every member present; no partition twice; only to subscribers; with `complete`,
    every partition of a subscribed topic assigned."""
    assert set(result) == set(subscriptions)
    seen = Counter(tp for a in result.values() for tp in a.partitions)
    assert all(n == 1 for n in seen.values()), [tp for tp, n in seen.items() if n > 1]
    for member_id, assignment in result.items():
        for tp in assignment.partitions:
            assert tp.topic in subscriptions[member_id].topics, (member_id, tp)
            assert 0 <= tp.partition < partitions_per_topic[tp.topic]
    if complete:
        assert set(seen) == subscribed_partitions(partitions_per_topic, subscriptions)


def counts(result: Mapping[str, Assignment]) -> dict[str, int]:
    return {m: len(a.partitions) for m, a in result.items()}


def spread(result: Mapping[str, Assignment]) -> int:
    sizes = counts(result).values()
    return max(sizes) - min(sizes) if sizes else 0


def reference_owners(
    claims: Claims, known: set[TopicPartition]
) -> tuple[dict[TopicPartition, str], set[TopicPartition]]:
    """KIP-792 rules written plainly: highest generation wins, a tie at the top means
    contested. Returns (valid owner per partition, contested partitions)."""
    by_partition: dict[TopicPartition, dict[str, int]] = {}
    for member_id, (partitions, generation) in claims.items():
        for tp in partitions:
            if tp in known:
                by_partition.setdefault(tp, {})[member_id] = generation
    owners: dict[TopicPartition, str] = {}
    contested: set[TopicPartition] = set()
    for tp, claimants in by_partition.items():
        top = max(claimants.values())
        at_top = [m for m, g in claimants.items() if g == top]
        if len(at_top) == 1:
            owners[tp] = at_top[0]
        else:
            contested.add(tp)
    return owners, contested


def claims_of(subscriptions: Mapping[str, Subscription]) -> Claims:
    return {m: (s.owned_partitions, s.generation_id) for m, s in subscriptions.items()}


def minimum_moves(valid_owned_counts: Iterable[int], total: int, members: int) -> int:
    """Fewest validly owned partitions that must change owner to reach counts in
    {total // members, total // members + 1} (equal subscriptions)."""
    owned = list(valid_owned_counts)
    min_quota, extra = divmod(total, members)
    surplus = sum(max(0, o - min_quota) for o in owned)
    return surplus - min(extra, sum(1 for o in owned if o > min_quota))


def moved_partitions(
    owners: Mapping[TopicPartition, str], result: Mapping[str, Assignment]
) -> set[TopicPartition]:
    """Validly owned partitions that their owner no longer has."""
    return {tp for tp, owner in owners.items() if tp not in set(result[owner].partitions)}


def next_round(
    subscriptions: Mapping[str, Subscription],
    result: Mapping[str, Assignment],
    generation: int,
) -> dict[str, Subscription]:
    """Every member reports what it got as owned, in `generation` (cooperative members);
    topics, user data and instance id stay."""
    return {
        m: Subscription(
            sub.topics,
            user_data=sub.user_data,
            owned_partitions=result[m].partitions,
            generation_id=generation,
            group_instance_id=sub.group_instance_id,
        )
        for m, sub in subscriptions.items()
    }


def optimal_max_load(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> int:
    """Smallest K such that all subscribed partitions fit with at most K per member (a max
    flow from topics to members), independent of the assignors' own balancing."""
    topics = sorted(
        {t for s in subscriptions.values() for t in s.topics if t in partitions_per_topic}
    )
    total = sum(partitions_per_topic[t] for t in topics)
    for limit in range(total + 1):
        if _max_flow(partitions_per_topic, subscriptions, topics, limit) == total:
            return limit
    raise AssertionError("unreachable")


def _max_flow(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    topics: list[str],
    limit: int,
) -> int:
    members = sorted(subscriptions)
    source, sink = "source", "sink"
    capacity: dict[tuple[str, str], int] = {}
    for t in topics:
        capacity[(source, "t:" + t)] = partitions_per_topic[t]
        for m in members:
            if t in subscriptions[m].topics:
                capacity[("t:" + t, "m:" + m)] = partitions_per_topic[t]
    for m in members:
        capacity[("m:" + m, sink)] = limit
    flow = 0
    while True:
        parent: dict[str, str] = {source: source}
        queue = deque([source])
        while queue and sink not in parent:
            node = queue.popleft()
            for (a, b), cap in capacity.items():
                if a == node and cap > 0 and b not in parent:
                    parent[b] = a
                    queue.append(b)
        if sink not in parent:
            return flow
        path = []
        node = sink
        while node != source:
            path.append((parent[node], node))
            node = parent[node]
        push = min(capacity[edge] for edge in path)
        for a, b in path:
            capacity[(a, b)] -= push
            capacity[(b, a)] = capacity.get((b, a), 0) + push
        flow += push
