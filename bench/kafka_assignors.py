"""Ours side by side with Kafka's own assignors (kafka-clients 4.4.0 in the harness that
`make java-assignors` builds): the same groups, the time of each `assign` call, and the
partitions each revokes.

The 1,000,000-partition cases (500 topics x 2,000, 2,000 members; issue 13's target):
cooperative-sticky and sticky, first assignment and the rebalance in which every member
reports what the first assignment gave it while 100 members join, and range. Each side runs
on its own core (this process pinned with sched_setaffinity, the JVM with `taskset -c`).
Three timings on each side:

- `assign`: Kafka's `assign` (Java objects out) and ours (`TopicPartition` tuples out: the
  fast path's arrays made into tuples), and our pure-Python reference `assign_reference`
  (one call);
- Kafka's `assign` against our `assign_compact` (each member's partitions as a numpy array);
- what the leader sends: Kafka's `assign` plus `ConsumerProtocol.serializeAssignment` of
  every member against our `assign_encoded` (the same bytes; SHA-256 digests compared).
  This is the like-for-like figure: the same input objects in, the same bytes out.

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

from coordinator.assignors import CooperativeStickyAssignor, get_assignor
from coordinator.protocol import Subscription, TopicPartition
from tests.assignors.differential import (
    cooperative_subscriptions,
    plain_subscriptions,
    sticky_subscriptions,
)
from tests.assignors.kafka_assignors import (
    Group,
    KafkaAssignors,
    Member,
    build_harness,
    serialized_digest,
    sorted_digest,
)

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


@dataclass(frozen=True)
class BigCase:
    name: str
    assignor: str
    topics: int
    partitions_per_topic: int
    members: int
    # members joining in the rebalance; None: one phase only (range is stateless)
    joining: int | None


def _big_cases(quick: bool) -> tuple[BigCase, ...]:
    t, p, m, k = (50, 1000, 200, 10) if quick else (500, 2000, 2000, 100)
    size = "50k" if quick else "1m"
    return (
        BigCase(f"cooperative-sticky-{size}", "cooperative-sticky", t, p, m, k),
        BigCase(f"sticky-{size}", "sticky", t, p, m, k),
        BigCase(f"range-{size}", "range", t, p, m, None),
    )


def _cores() -> tuple[int | None, int | None]:
    """(ours, Kafka's): two different usable cores when there are two."""
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    usable = sorted(os.sched_getaffinity(0))
    return (usable[-1], usable[0]) if len(usable) > 1 else (usable[0], usable[0])


def run(quick: bool) -> dict[str, Any]:
    repeat, warm_up = (3, 2) if quick else (3, 3)
    ours_cpu, kafka_cpu = _cores()
    kafka = KafkaAssignors(build_harness(), cpu=kafka_cpu)
    previous_affinity = os.sched_getaffinity(0) if ours_cpu is not None else None
    if ours_cpu is not None:
        os.sched_setaffinity(0, {ours_cpu})
    try:
        results: dict[str, Any] = {"cores": {"ours": ours_cpu, "kafka": kafka_cpu}}
        for case in _cases(quick):
            # Both sides share the machine: the load says how much others took.
            load_before = os.getloadavg()
            results[case.name] = _run_case(kafka, case, repeat, warm_up)
            results[case.name]["load_average_before_after"] = [load_before, os.getloadavg()]
        for big in _big_cases(quick):
            load_before = os.getloadavg()
            results[big.name] = _run_big_case(kafka, big, repeat, warm_up)
            results[big.name]["load_average_before_after"] = [load_before, os.getloadavg()]
            print(f"  {big.name}: {results[big.name]['summary']}", flush=True)
        return results
    finally:
        kafka.close()
        if previous_affinity is not None:
            os.sched_setaffinity(0, previous_affinity)


def _run_big_case(
    kafka: KafkaAssignors, case: BigCase, repeat: int, warm_up: int
) -> dict[str, Any]:
    topic_names = tuple(f"topic-{t:04d}" for t in range(case.topics))
    ppt = dict.fromkeys(topic_names, case.partitions_per_topic)
    members = [f"member-{i:05d}" for i in range(case.members)]
    first_group = Group(ppt, tuple(Member(m, None, topic_names, (), -1) for m in members))
    groups = [("first_assignment", first_group)]
    if case.joining is not None:
        first = get_assignor(case.assignor).assign_compact(
            ppt, _subscriptions(case.assignor, first_group)
        )
        assert first is not None, "the fast path covers equal subscriptions"
        owned = first.to_assignments()
        joining = [f"joined-{i:05d}" for i in range(case.joining)]
        rebalance = Group(
            ppt,
            (
                *(Member(m, None, topic_names, owned[m].partitions, 1) for m in members),
                *(Member(m, None, topic_names, (), -1) for m in joining),
            ),
        )
        groups.append(("rebalance", rebalance))
    phases: dict[str, Any] = {}
    for phase, group in groups:
        phases[phase] = _big_phase(kafka, case.assignor, group, repeat, warm_up)
    totals = {
        key: round(sum(p[key] for p in phases.values()), 4)
        for key in (
            "ours_assign_seconds",
            "ours_reference_seconds",
            "ours_compact_seconds",
            "ours_encoded_seconds",
            "kafka_assign_seconds",
            "kafka_serialized_seconds",
        )
    }
    ratios = {
        "encoded_vs_kafka_serialized": _ratio(
            totals["ours_encoded_seconds"], totals["kafka_serialized_seconds"]
        ),
        "compact_vs_kafka_assign": _ratio(
            totals["ours_compact_seconds"], totals["kafka_assign_seconds"]
        ),
        "assign_vs_kafka_assign": _ratio(
            totals["ours_assign_seconds"], totals["kafka_assign_seconds"]
        ),
        "reference_vs_kafka_assign": _ratio(
            totals["ours_reference_seconds"], totals["kafka_assign_seconds"]
        ),
    }
    summary = ", ".join(f"{k} {v}" for k, v in ratios.items())
    return {
        "case": asdict(case),
        "partitions": case.topics * case.partitions_per_topic,
        "repeat": repeat,
        "kafka_warm_up_calls": warm_up,
        "phases": phases,
        "all_phases": totals,
        "ratios_all_phases": ratios,
        "summary": summary,
    }


def _subscriptions(assignor: str, group: Group) -> dict[str, Subscription]:
    """The subscriptions the members send (built before the timers start)."""
    if assignor == "cooperative-sticky":
        return cooperative_subscriptions(group)
    if assignor == "sticky":
        return sticky_subscriptions(group)
    return plain_subscriptions(group)


def _big_phase(
    kafka: KafkaAssignors, assignor: str, group: Group, repeat: int, warm_up: int
) -> dict[str, Any]:
    subscriptions = _subscriptions(assignor, group)
    ppt = group.partitions_per_topic

    def timed(call: str, calls: int = repeat) -> tuple[float, Any]:
        seconds: list[float] = []
        result: Any = None
        for _ in range(calls):
            ours = get_assignor(assignor)
            start = time.perf_counter()
            result = getattr(ours, call)(ppt, subscriptions)
            seconds.append(time.perf_counter() - start)
        return round(statistics.median(seconds), 4), result

    assign_seconds, assigned = timed("assign")
    # The pure-Python reference: one call (it is the slow one; `assign` takes the fast path).
    reference_seconds, _ = timed("assign_reference", 1)
    compact_seconds, compact = timed("assign_compact")
    encoded_seconds, encoded = timed("assign_encoded")
    theirs = kafka.timed_serialized(group, assignor, warm_up + repeat)
    kafka_assign = round(statistics.median(theirs.assign_nanos[warm_up:]) / 1e9, 4)
    kafka_serialized = round(statistics.median(theirs.serialize_nanos[warm_up:]) / 1e9, 4)
    ours_sizes = [len(a.partitions) for a in assigned.values()]
    return {
        "ours_assign_seconds": assign_seconds,
        "ours_reference_seconds": reference_seconds,
        "ours_compact_seconds": compact_seconds,
        "ours_encoded_seconds": encoded_seconds,
        "kafka_assign_seconds": kafka_assign,
        "kafka_serialized_seconds": kafka_serialized,
        "kafka_cold_assign_seconds": round(theirs.assign_nanos[0] / 1e9, 4),
        "fast_path": compact is not None,
        "same_bytes_as_kafka": serialized_digest(encoded) == theirs.sha256,
        "same_assignment_as_kafka": sorted_digest({m: a.partitions for m, a in assigned.items()})
        == theirs.sorted_sha256,
        "ours_min_max": f"{min(ours_sizes)}/{max(ours_sizes)}",
        "kafka_min_max": f"{min(theirs.sizes.values())}/{max(theirs.sizes.values())}",
        "ours_assigned": sum(ours_sizes),
        "kafka_assigned": sum(theirs.sizes.values()),
    }


def _ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 3) if theirs > 0 else None


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
