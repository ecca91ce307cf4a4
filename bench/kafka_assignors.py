"""Ours side by side with Kafka's own cooperative-sticky assignor (kafka-clients 4.4.0 in the
harness that `make java-assignors` builds): the same groups, the time of each `assign`
call, and the partitions each revokes.

Two groups of 10,000 partitions and 100 members, 5 of whom join with nothing: equal
subscriptions (Kafka's constrained path and ours) and different ones (every member skips a
third of the topics: the general paths). Phases: the first assignment (nobody owns
anything) and the rebalance in which the 100 members report what our first assignment gave
them. Both assignors get exactly the same input in each phase.

Kafka's time is measured in the JVM around `assign` only, after warm-up calls (the JIT
compiles the assignor first; the first, cold call is reported too); the JVM is not pinned
to a core and may use more than one for its own threads (JIT, GC). Ours is measured with
`time.perf_counter` around `assign` in this process. Medians of the repeated calls (3 in
a full run, Kafka's after 3 warm-up calls).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from coordinator.assignors import CooperativeStickyAssignor
from coordinator.protocol import Subscription, TopicPartition
from tests.assignors.differential import cooperative_subscriptions
from tests.assignors.kafka_assignors import Group, KafkaAssignors, Member, build_harness

ASSIGNOR = "cooperative-sticky"


@dataclass(frozen=True)
class Case:
    name: str
    topics: int
    partitions_per_topic: int
    members: int
    joining: int
    different_subscriptions: bool


def _cases(quick: bool) -> tuple[Case, ...]:
    if quick:
        return (
            Case("equal-1k", 10, 100, 20, 2, False),
            Case("general-1k", 20, 50, 20, 2, True),
        )
    return (
        Case("equal-10k", 10, 1000, 100, 5, False),
        Case("general-10k", 20, 500, 100, 5, True),
    )


def run(quick: bool) -> dict[str, Any]:
    repeat, warm_up = (3, 2) if quick else (3, 3)
    kafka = KafkaAssignors(build_harness())
    try:
        results: dict[str, Any] = {}
        for case in _cases(quick):
            # Both sides share the machine: the load says how much others took.
            load_before = os.getloadavg()
            results[case.name] = _run_case(kafka, case, repeat, warm_up)
            results[case.name]["load_average_before_after"] = [load_before, os.getloadavg()]
        return results
    finally:
        kafka.close()


def _run_case(kafka: KafkaAssignors, case: Case, repeat: int, warm_up: int) -> dict[str, Any]:
    topic_names = [f"topic-{t:04d}" for t in range(case.topics)]
    ppt = dict.fromkeys(topic_names, case.partitions_per_topic)

    def topics(index: int) -> tuple[str, ...]:
        if not case.different_subscriptions:
            return tuple(topic_names)
        return tuple(t for i, t in enumerate(topic_names) if (i + index) % 3 != 0)

    members = [f"member-{i:05d}" for i in range(case.members)]
    first_group = Group(
        ppt, tuple(Member(m, None, topics(i), (), -1) for i, m in enumerate(members))
    )
    first = _ours_once(first_group)
    joining = [f"joined-{i:05d}" for i in range(case.joining)]
    rebalance_group = Group(
        ppt,
        (
            *(Member(m, None, topics(i), first[m], 1) for i, m in enumerate(members)),
            *(Member(m, None, topics(case.members + i), (), -1) for i, m in enumerate(joining)),
        ),
    )
    owned = {m.member_id: set(m.owned) for m in rebalance_group.members}
    phases: dict[str, Any] = {}
    for phase, group in (("first_assignment", first_group), ("rebalance", rebalance_group)):
        subscriptions = cooperative_subscriptions(group)
        ours_seconds = [_timed_assign(ppt, subscriptions) for _ in range(repeat)]
        ours = _ours_once(group)
        answer, nanos = kafka.timed_assign(group, ASSIGNOR, warm_up + repeat)
        theirs = answer[ASSIGNOR]
        if isinstance(theirs, str):
            raise RuntimeError(f"Kafka's {ASSIGNOR} failed on {case.name}: {theirs}")
        phases[phase] = {
            "ours_seconds": round(statistics.median(ours_seconds), 4),
            "kafka_seconds": round(statistics.median(nanos[warm_up:]) / 1e9, 4),
            "kafka_cold_seconds": round(nanos[0] / 1e9, 4),
            "ours_revoked": _revoked(owned, ours),
            "kafka_revoked": _revoked(owned, theirs),
            "ours_min_max": _min_max(ours),
            "kafka_min_max": _min_max(theirs),
        }
    return {
        "case": asdict(case),
        "partitions": case.topics * case.partitions_per_topic,
        "repeat": repeat,
        "kafka_warm_up_calls": warm_up,
        "phases": phases,
    }


def _ours_once(group: Group) -> dict[str, tuple[TopicPartition, ...]]:
    result = CooperativeStickyAssignor().assign(
        group.partitions_per_topic, cooperative_subscriptions(group)
    )
    return {m: a.partitions for m, a in result.items()}


def _timed_assign(ppt: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> float:
    assignor = CooperativeStickyAssignor()
    start = time.perf_counter()
    assignor.assign(ppt, subscriptions)
    return time.perf_counter() - start


def _revoked(
    owned: dict[str, set[TopicPartition]], result: dict[str, tuple[TopicPartition, ...]]
) -> int:
    """Owned partitions missing from their owner's new assignment (revoked this round)."""
    return sum(len(owned[m] - set(parts)) for m, parts in result.items())


def _min_max(result: dict[str, tuple[TopicPartition, ...]]) -> str:
    sizes = [len(parts) for parts in result.values()]
    return f"{min(sizes)}/{max(sizes)}"
