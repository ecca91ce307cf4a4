"""The last step of the general path: of the most balanced assignments, one that moves the
fewest owned partitions.

Balancing by single moves and chains (see `general`) reaches the most balanced counts but
not always with the fewest moves: an unowned partition may have gone to one member while
another member's owned partition had to move to make room, where giving the unowned
partition elsewhere would have moved nothing. Kafka's assignor happens to avoid some of
these; we avoid all of them.

Only per-topic counts matter: with `x[m][t]` partitions of topic `t` for member `m`, which
owns `o[m][t]` of them from before, at best `min(x, o)` stay where they were, and that best
is reachable for all members at once (their owned partitions are disjoint). So this is a
min-cost flow from topics to members with a lexicographic cost (potential
`sum(count**2 / weight)` first, then moves), solved by cancelling negative cycles in the
residual graph (Klein's algorithm). Its nodes are the topics, the members and one sink:

- topic -> member: one more partition of the topic for the member; saves a move while the
  member has fewer than it owned (`x < o`);
- member -> topic: one fewer; costs a move while `x <= o`;
- member -> sink and back: one more or one fewer partition in all, at the potential's cost.

A cycle with negative cost moves partitions between members so that the potential drops, or
stays and fewer owned partitions move. With none left, the counts are optimal for both. The
graph has topics + members + 1 nodes, so this stays cheap where the general path is used.
Hand-written: no maintained Python library does min-cost flow with these convex costs
without a dependency far larger than this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import lcm

# Per member: partitions held per topic index.
TopicCounts = list[dict[int, int]]


def fewest_moves(
    held: Sequence[dict[int, int]],
    owned: Sequence[dict[int, int]],
    receivers: Sequence[Sequence[int]],
    weights: Sequence[int],
) -> TopicCounts:
    """Per member and topic the number of partitions to hold: of the counts reachable by
    moving partitions of a topic among `receivers[topic]`, the ones with the lowest
    potential and, among those, the most partitions kept where `owned` says they were.

    `held[m][t]` is the current count (every partition assigned), `owned[m][t]` how many of
    them member `m` owned before, `weights[m]` its capacity (0: receives nothing).
    """
    x = [dict(counts) for counts in held]
    member_count = len(x)
    topic_count = len(receivers)
    positive = [w for w in weights if w > 0]
    scale = lcm(*positive) if positive else 1
    sink = topic_count + member_count
    # Moves change by at most one per arc, and a simple cycle has fewer arcs than this.
    potential_unit = sink + 2
    while True:
        arcs = _residual_arcs(x, owned, receivers, weights, scale, potential_unit)
        cycle = _negative_cycle(sink + 1, arcs)
        if cycle is None:
            return x
        units = min(arcs[3][k] for k in cycle)
        tails, heads = arcs[0], arcs[1]
        for k in cycle:
            tail, head = tails[k], heads[k]
            if tail < topic_count and head < sink:  # topic -> member: one more
                member = head - topic_count
                x[member][tail] = x[member].get(tail, 0) + units
            elif head < topic_count:  # member -> topic: one fewer
                member = tail - topic_count
                x[member][head] -= units


def _residual_arcs(
    x: TopicCounts,
    owned: Sequence[dict[int, int]],
    receivers: Sequence[Sequence[int]],
    weights: Sequence[int],
    scale: int,
    potential_unit: int,
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Arcs as parallel lists: tail, head, cost, units that can pass at that cost."""
    topic_count = len(receivers)
    sink = topic_count + len(x)
    tails: list[int] = []
    heads: list[int] = []
    costs: list[int] = []
    units: list[int] = []
    unlimited = sum(sum(counts.values()) for counts in x) + 1
    for topic, members in enumerate(receivers):
        for member in members:
            have, had = x[member].get(topic, 0), owned[member].get(topic, 0)
            node = topic_count + member
            tails.append(topic)
            heads.append(node)
            if have < had:
                costs.append(-1)
                units.append(had - have)
            else:
                costs.append(0)
                units.append(unlimited)
            if have > 0:
                tails.append(node)
                heads.append(topic)
                if have > had:
                    costs.append(0)
                    units.append(have - had)
                else:
                    costs.append(1)
                    units.append(have)
    for member, counts in enumerate(x):
        weight = weights[member]
        if weight <= 0:
            continue
        count = sum(counts.values())
        node = topic_count + member
        step = (scale // weight) * potential_unit
        tails.append(node)
        heads.append(sink)
        costs.append((2 * count + 1) * step)
        units.append(1)
        if count > 0:
            tails.append(sink)
            heads.append(node)
            costs.append(-(2 * count - 1) * step)
            units.append(1)
    return tails, heads, costs, units


def _negative_cycle(
    node_count: int, arcs: tuple[list[int], list[int], list[int], list[int]]
) -> list[int] | None:
    """Arc indices of a negative-cost cycle, in order, or None: Bellman-Ford from a virtual
    source joined to every node at cost 0. After each round the predecessor graph is checked
    for a cycle (any cycle in it is negative), which usually finds one long before the
    `node_count` rounds that prove there is none."""
    tails, heads, costs, _ = arcs
    distance = [0] * node_count
    via = [-1] * node_count
    arc_range = range(len(tails))
    for _ in range(node_count):
        changed = False
        for k in arc_range:
            candidate = distance[tails[k]] + costs[k]
            head = heads[k]
            if candidate < distance[head]:
                distance[head] = candidate
                via[head] = k
                changed = True
        if not changed:
            return None
        cycle = _cycle_of_predecessors(via, tails)
        if cycle is not None:
            return cycle
    raise AssertionError("Bellman-Ford: relaxing after every round but no cycle found")


def _cycle_of_predecessors(via: list[int], tails: list[int]) -> list[int] | None:
    """A cycle of the graph in which each node points to the tail of its `via` arc."""
    state = [0] * len(via)  # 0: unseen, 1: on the current walk, 2: done
    for start in range(len(via)):
        node = start
        walk: list[int] = []
        while node != -1 and state[node] == 0:
            state[node] = 1
            walk.append(node)
            k = via[node]
            node = tails[k] if k != -1 else -1
        if node != -1 and state[node] == 1:
            # Back on this walk: the cycle runs from `node` around to itself.
            cycle: list[int] = []
            current = node
            while True:
                k = via[current]
                cycle.append(k)
                current = tails[k]
                if current == node:
                    break
            cycle.reverse()
            return cycle
        for seen in walk:
            state[seen] = 2
    return None
