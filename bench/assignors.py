"""Assignor benchmarks (docs/performance.md).

The target: cooperative-sticky over 1,000,000 partitions (500 topics x 2,000) and 2,000
members with equal subscriptions, first assignment plus one rebalance in which every member
reports its owned partitions, within 30 s on one core (the time Kafka's own Java test
allows). Two such rebalances are measured: 100 members join, and 100 members leave; each
is followed by the cooperative follow-up rebalance that hands out what was revoked.
Smaller groups, the general (different subscriptions) path, and the other assignors at a
medium size complete the picture.

Every case runs in its own process pinned to one core, so its peak RSS (ru_maxrss, which
includes building the inputs) is its own. Timers cover `assign` calls only; building the
subscriptions (the members' work) and checking the results are reported or done apart.

    python -m bench.run --only assignors [--quick]
    python -m bench.assignors --case NAME      # one case, JSON on stdout
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.child import run_child
from coordinator.assignors import get_assignor
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    encode_sticky_user_data,
)

TARGET_SECONDS = 30.0
REPO_ROOT = Path(__file__).resolve().parent.parent
COOPERATIVE = ("cooperative-sticky", "static-sticky")


@dataclass(frozen=True)
class Case:
    name: str
    assignor: str
    topics: int
    partitions_per_topic: int
    members: int
    # "join": `changed` members join; "leave": `changed` members leave; "restart": every
    # member comes back with a new member id and no memory (static-sticky only).
    scenario: str
    changed: int
    different_subscriptions: bool = False
    # The target of docs/performance.md, "Targets", applies to this case.
    target: bool = False


def _cases(quick: bool) -> tuple[Case, ...]:
    if quick:
        big = (500, 100, 200, 10)  # 50,000 partitions
        medium = (10, 1000, 100, 5)
    else:
        big = (500, 2000, 2000, 100)  # 1,000,000 partitions
        medium = (50, 2000, 500, 25)
    t, p, m, k = big
    t2, p2, m2, k2 = medium
    return (
        Case("cooperative-sticky-big-join", "cooperative-sticky", t, p, m, "join", k, target=True),
        Case(
            "cooperative-sticky-big-leave", "cooperative-sticky", t, p, m, "leave", k, target=True
        ),
        Case("cooperative-sticky-10k-join", "cooperative-sticky", 10, 1000, 100, "join", 5),
        Case("cooperative-sticky-100k-join", "cooperative-sticky", 100, 1000, 1000, "join", 50),
        Case(
            "cooperative-sticky-10k-general-join",
            "cooperative-sticky",
            20,
            500,
            100,
            "join",
            5,
            different_subscriptions=True,
        ),
        Case("range-medium-join", "range", t2, p2, m2, "join", k2),
        Case("roundrobin-medium-join", "roundrobin", t2, p2, m2, "join", k2),
        Case("sticky-medium-join", "sticky", t2, p2, m2, "join", k2),
        Case("static-sticky-medium-join", "static-sticky", t2, p2, m2, "join", k2),
        Case("static-sticky-medium-restart", "static-sticky", t2, p2, m2, "restart", m2),
    )


# -- parent side ---------------------------------------------------------------------------


def run(quick: bool) -> dict[str, Any]:
    """Run every case in a child process; the figures `bench.run` writes to JSON."""
    results: dict[str, Any] = {}
    for case in _cases(quick):
        results[case.name] = run_child("bench.assignors", ["--case", case.name], quick, 1800)
        summary = results[case.name].get("seconds_first_plus_rebalance", "error")
        print(f"  {case.name}: first+rebalance {summary} s", flush=True)
    targets = [case for case in _cases(quick) if case.target]
    target_figures = {
        case.name: results[case.name].get("seconds_first_plus_rebalance") for case in targets
    }
    met = not quick and all(
        isinstance(s, float) and s < TARGET_SECONDS for s in target_figures.values()
    )
    return {
        "target": {
            "what": (
                "cooperative-sticky, 1,000,000 partitions (500 topics x 2,000), 2,000 members, "
                "first assignment + one rebalance with owned partitions, one core"
            ),
            "target_seconds": TARGET_SECONDS,
            "seconds_first_plus_rebalance": target_figures,
            "peak_rss_mib": {case.name: results[case.name].get("peak_rss_mib") for case in targets},
            # A quick run does not measure the target size.
            "met": met if not quick else None,
        },
        "cases": results,
    }


# -- child side ----------------------------------------------------------------------------


def run_case(case: Case) -> dict[str, Any]:
    pinned_cpu = _pin_to_one_core()
    baseline_rss = _peak_rss_mib()
    topic_names = [f"topic-{t:04d}" for t in range(case.topics)]
    ppt = {name: case.partitions_per_topic for name in topic_names}
    build = _SubscriptionBuilder(case, topic_names)
    assignor = get_assignor(case.assignor)
    seconds: dict[str, float] = {}
    building: dict[str, float] = {}

    def timed(
        phase: str,
        subscriptions: dict[str, Subscription],
        last: dict[str, tuple[TopicPartition, ...]] | None = None,
    ) -> dict[str, Assignment]:
        start = time.perf_counter()
        result = assignor.assign(ppt, subscriptions, last_assignment_by_member=last)
        seconds[phase] = round(time.perf_counter() - start, 3)
        return result

    start = time.perf_counter()
    subs = {m: build.fresh(i) for i, m in enumerate(build.member_ids(case.members))}
    building["first_assignment"] = round(time.perf_counter() - start, 3)
    first = timed("first_assignment", subs)

    start = time.perf_counter()
    last: dict[str, tuple[TopicPartition, ...]] | None = None
    if case.scenario == "join":
        rebalance_subs = {m: build.owning(s, first[m], 1) for m, s in subs.items()}
        for i, m in enumerate(build.member_ids(case.changed, prefix="joined")):
            rebalance_subs[m] = build.fresh(case.members + i)
    elif case.scenario == "leave":
        staying = list(subs)[: case.members - case.changed]
        rebalance_subs = {m: build.owning(subs[m], first[m], 1) for m in staying}
    else:
        # Every member restarts: new member id, nothing owned; the coordinator remembers.
        last = {subs[m].group_instance_id or m: first[m].partitions for m in subs}
        rebalance_subs = {"restarted-" + m: subs[m] for m in subs}
    building["rebalance"] = round(time.perf_counter() - start, 3)
    second = timed("rebalance", rebalance_subs, last)

    final, final_subs = second, rebalance_subs
    follow_ups = 0
    if case.assignor in COOPERATIVE and case.scenario != "restart":
        # Rebalance again while revoked partitions are pending: one round with equal
        # subscriptions; the general path may need a few (so may Kafka's).
        while follow_ups < 5 and (follow_ups == 0 or _pending(ppt, final)):
            follow_ups += 1
            owned = final
            final_subs = {
                m: build.owning(s, owned[m], 1 + follow_ups) for m, s in rebalance_subs.items()
            }
            phase = "follow_up" if follow_ups == 1 else f"follow_up_{follow_ups}"
            final = timed(phase, final_subs)

    checks = _check(ppt, first, second, final, final_subs)
    checks["follow_up_rounds"] = follow_ups
    if case.scenario == "restart":
        checks["restart_identical"] = all(
            second["restarted-" + m].partitions == first[m].partitions for m in subs
        )
    return {
        "case": asdict(case),
        "partitions": sum(ppt.values()),
        "scenario": _describe(case),
        "seconds": seconds,
        "seconds_first_plus_rebalance": round(
            seconds["first_assignment"] + seconds["rebalance"], 3
        ),
        "seconds_total": round(sum(seconds.values()), 3),
        "input_build_seconds": building,
        "peak_rss_mib": _peak_rss_mib(),
        "baseline_rss_mib": baseline_rss,
        "pinned_cpu": pinned_cpu,
        "checks": checks,
    }


class _SubscriptionBuilder:
    """The subscriptions the members would send, as the assignor's member side builds them."""

    def __init__(self, case: Case, topic_names: list[str]) -> None:
        self.case = case
        self.topic_names = topic_names
        self.all_topics = tuple(topic_names)
        self.member_side = get_assignor(case.assignor)

    def member_ids(self, count: int, prefix: str = "member") -> list[str]:
        return [f"{prefix}-{i:05d}" for i in range(count)]

    def topics(self, index: int) -> tuple[str, ...]:
        if not self.case.different_subscriptions:
            return self.all_topics
        # Every member skips a different third of the topics.
        return tuple(t for i, t in enumerate(self.topic_names) if (i + index) % 3 != 0)

    def fresh(self, index: int) -> Subscription:
        topics = self.topics(index)
        return Subscription(
            topics,
            user_data=self.member_side.subscription_user_data(topics),
            group_instance_id=f"instance-{index:05d}",
        )

    def owning(self, sub: Subscription, got: Assignment, generation: int) -> Subscription:
        if self.case.assignor == "sticky":
            # Eager: owns nothing at join; the previous assignment rides in user data.
            user_data = encode_sticky_user_data(got.partitions, generation)
            return Subscription(sub.topics, user_data, group_instance_id=sub.group_instance_id)
        if self.case.assignor in COOPERATIVE:
            return Subscription(
                sub.topics,
                sub.user_data,
                owned_partitions=got.partitions,
                generation_id=generation,
                group_instance_id=sub.group_instance_id,
            )
        return sub  # range / roundrobin: eager and stateless


def _check(
    ppt: dict[str, int],
    first: dict[str, Assignment],
    second: dict[str, Assignment],
    final: dict[str, Assignment],
    final_subs: dict[str, Subscription],
) -> dict[str, Any]:
    total = sum(ppt.values())
    sizes = [len(a.partitions) for a in final.values()]
    assigned = [tp for a in final.values() for tp in a.partitions]
    # Stickiness: partitions a member still in the group had and lost in the rebalance.
    revoked = sum(
        len(set(a.partitions) - set(second[m].partitions)) for m, a in first.items() if m in second
    )
    second_count = sum(len(a.partitions) for a in second.values())
    return {
        "all_partitions_assigned_once": len(assigned) == total == len(set(assigned)),
        "members": len(final_subs),
        "min_partitions": min(sizes, default=0),
        "max_partitions": max(sizes, default=0),
        "rebalance_partitions_assigned": second_count,
        "rebalance_partitions_withheld": total - second_count,
        "rebalance_revoked_from_remaining_owners": revoked,
    }


def _pending(ppt: dict[str, int], result: dict[str, Assignment]) -> bool:
    return sum(len(a.partitions) for a in result.values()) < sum(ppt.values())


def _describe(case: Case) -> str:
    subscriptions = "different" if case.different_subscriptions else "equal"
    if case.scenario == "join":
        what = (
            f"all {case.members} members report their assignment as owned (generation 1) "
            f"and {case.changed} new members join"
        )
    elif case.scenario == "leave":
        what = (
            f"{case.changed} members leave; the other {case.members - case.changed} "
            "report their assignment as owned (generation 1)"
        )
    else:
        what = (
            f"all {case.members} static members restart with new member ids and nothing "
            "owned; last_assignment_by_member keyed by instance id"
        )
    follow = ""
    if case.assignor in COOPERATIVE and case.scenario != "restart":
        follow = "; then cooperative follow-up rebalances until nothing is pending"
    return f"{case.assignor}, {subscriptions} subscriptions: first assignment; {what}{follow}"


def _pin_to_one_core() -> int | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def _peak_rss_mib() -> float:
    # ru_maxrss is KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    divisor = 1024 * 1024 if sys.platform == "darwin" else 1024
    return round(peak / divisor, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.assignors")
    parser.add_argument("--case", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    cases = {case.name: case for case in _cases(args.quick)}
    if args.case not in cases:
        parser.error(f"unknown case {args.case!r}; known: {', '.join(cases)}")
    print(json.dumps(run_case(cases[args.case])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
