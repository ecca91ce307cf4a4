"""The fast building blocks against plain, obviously correct versions of the same thing."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from itertools import product
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.assignors.constrained import round_robin_fill
from coordinator.assignors.fewest_moves import fewest_moves
from coordinator.assignors.ownership import CONTESTED, NO_OWNER, Claim, resolve_ownership
from coordinator.assignors.partition_space import PartitionSpace
from coordinator.protocol import TopicPartition

from .helpers import reference_owners


def naive_round_robin(
    unassigned: list[int], members: list[int], deficits: list[int]
) -> tuple[dict[int, list[int]], list[int]]:
    """One partition at a time, as Kafka's assignRoundRobin does."""
    got: dict[int, list[int]] = {m: [] for m in members}
    need = dict(zip(members, deficits, strict=True))
    filled = [m for m in members if need[m] <= 0]
    circle = [m for m in members if need[m] > 0]
    position = 0
    while circle and position < len(unassigned):
        still = []
        for m in circle:
            if position == len(unassigned):
                still.append(m)
                continue
            got[m].append(unassigned[position])
            position += 1
            need[m] -= 1
            if need[m] == 0:
                filled.append(m)
            else:
                still.append(m)
        circle = still
    return got, filled


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 9), max_size=8),
    st.integers(0, 60),
)
def test_round_robin_fill_matches_one_at_a_time(deficits: list[int], extra: int) -> None:
    members = list(range(len(deficits)))
    unassigned = list(range(100, 100 + max(0, sum(deficits) - extra)))
    new: list[list[int]] = [[] for _ in members]
    dealt, filled = round_robin_fill(unassigned, members, deficits, new)
    expected, expected_filled = naive_round_robin(unassigned, members, deficits)
    assert {m: new[m] for m in members} == expected
    assert filled == expected_filled
    assert dealt == sum(len(v) for v in expected.values())


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdé𝄞"), st.integers(0, 6), max_size=5))
def test_partition_space_numbers_in_kafka_order(ppt: dict[str, int]) -> None:
    space = PartitionSpace(ppt, ppt)
    everything = [TopicPartition(t, p) for t in ppt for p in range(ppt[t])]
    ids = space.ids_of([*everything, TopicPartition("zz", 0), TopicPartition("a", 99)])
    assert sorted(ids) == list(range(space.size))
    in_order = space.to_partitions(range(space.size))
    java_order = sorted(everything, key=lambda tp: (tp.topic.encode("utf-16-be"), tp.partition))
    assert list(in_order) == java_order
    by_partition = space.to_partitions(space.partition_major_order(range(space.size)))
    assert list(by_partition) == sorted(
        everything, key=lambda tp: (tp.partition, tp.topic.encode("utf-16-be"))
    )


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from("mnop"),
        st.tuples(
            st.lists(st.builds(TopicPartition, st.sampled_from("ab"), st.integers(0, 3))),
            st.integers(-1, 2),
        ),
    )
)
def test_resolve_ownership_matches_the_rules(
    claims: dict[str, tuple[list[TopicPartition], int]],
) -> None:
    space = PartitionSpace({"a": 3, "b": 2}, ["a", "b"])
    members = sorted(claims)
    ownership = resolve_ownership(
        space, [Claim(tuple(claims[m][0]), claims[m][1]) for m in members]
    )
    known = {TopicPartition("a", p) for p in range(3)} | {TopicPartition("b", p) for p in range(2)}
    owners, contested = reference_owners(claims, known)
    for number, tp in enumerate(space.to_partitions(range(space.size))):
        owner = ownership.owner_of[number]
        if tp in contested:
            assert owner == CONTESTED
        elif tp in owners:
            assert members[owner] == owners[tp]
            assert number in ownership.owned[owner]
        else:
            assert owner == NO_OWNER
    for position, owned in enumerate(ownership.owned):
        assert len(owned) == len(set(owned))
        assert all(ownership.owner_of[n] == position for n in owned)


SCRIPT = """
from coordinator.assignors import ASSIGNOR_NAMES, get_assignor
from coordinator.protocol import Subscription, TopicPartition
ppt = {f"t{i}": 5 + i for i in range(5)}
names = sorted(ppt)
subs = {
    f"m{m}": Subscription(
        tuple(n for i, n in enumerate(names) if (i + m) % 3),
        owned_partitions=tuple(TopicPartition(names[(m + k) % 5], k) for k in range(3)),
        generation_id=m % 3,
        group_instance_id=f"i{m}" if m % 2 else None,
    )
    for m in range(8)
}
for name in ASSIGNOR_NAMES:
    result = get_assignor(name).assign(ppt, subs)
    print(name, sorted((m, a.partitions) for m, a in result.items()))
"""


def test_same_result_in_processes_with_different_hash_seeds() -> None:
    """A new leader in another process must compute the same assignment: no output may
    depend on str hashing (set or dict order of strings)."""
    outputs = set()
    for seed in ("1", "2"):
        completed = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[2],
            env={"PYTHONHASHSEED": seed},
        )
        outputs.add(completed.stdout)
    assert len(outputs) == 1


@st.composite
def count_problems(
    draw: st.DrawFn,
) -> tuple[list[dict[int, int]], list[dict[int, int]], list[list[int]], list[int]]:
    """Tiny general-path states: per topic its receivers, a current distribution of its
    partitions over them, and how many each owned before (at most the topic's count)."""
    members = draw(st.integers(1, 3))
    topics = draw(st.integers(1, 3))
    weights = [draw(st.sampled_from((1, 1, 2, 3))) for _ in range(members)]
    receivers = [
        sorted(draw(st.sets(st.integers(0, members - 1), min_size=1))) for _ in range(topics)
    ]
    held: list[dict[int, int]] = [{} for _ in range(members)]
    owned: list[dict[int, int]] = [{} for _ in range(members)]
    for topic, who in enumerate(receivers):
        for _ in range(draw(st.integers(0, 4))):
            member = draw(st.sampled_from(who))
            held[member][topic] = held[member].get(topic, 0) + 1
            if draw(st.booleans()):
                owner = draw(st.sampled_from(who))
                owned[owner][topic] = owned[owner].get(topic, 0) + 1
    return held, owned, receivers, weights


def _splits(total: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(total,)]
    return [(k, *rest) for k in range(total + 1) for rest in _splits(total - k, parts - 1)]


def _cost(
    counts: list[dict[int, int]], owned: list[dict[int, int]], weights: list[int]
) -> tuple[Fraction, int]:
    potential = sum(
        (Fraction(sum(c.values()) ** 2, w) for c, w in zip(counts, weights, strict=True)),
        Fraction(0),
    )
    moves = sum(
        had - min(counts[m].get(t, 0), had)
        for m, per_topic in enumerate(owned)
        for t, had in per_topic.items()
    )
    return potential, moves


@settings(max_examples=300, deadline=None)
@given(count_problems())
def test_fewest_moves_finds_the_most_balanced_counts_that_move_least(
    problem: tuple[list[dict[int, int]], list[dict[int, int]], list[list[int]], list[int]],
) -> None:
    held, owned, receivers, weights = problem
    result = fewest_moves(held, owned, receivers, weights)
    # Same partitions per topic, only to its receivers.
    for topic, who in enumerate(receivers):
        assert sum(result[m].get(topic, 0) for m in range(len(held))) == sum(
            held[m].get(topic, 0) for m in range(len(held))
        )
        assert all(result[m].get(topic, 0) == 0 for m in range(len(held)) if m not in who)
    # Optimal against every distribution of every topic over its receivers.
    best: tuple[Fraction, int] | None = None
    totals = [sum(held[m].get(t, 0) for m in range(len(held))) for t in range(len(receivers))]
    for choice in product(*(_splits(totals[t], len(receivers[t])) for t in range(len(totals)))):
        counts: list[dict[int, int]] = [{} for _ in held]
        for topic, split in enumerate(choice):
            for member, count in zip(receivers[topic], split, strict=True):
                if count:
                    counts[member][topic] = count
        cost = _cost(counts, owned, weights)
        best = cost if best is None else min(best, cost)
    assert _cost(result, owned, weights) == best
