"""Our assignors side by side with Kafka's own (kafka-clients 4.4.0, see `kafka_assignors`).

`random_groups` draws groups from a fixed seed: equal and unequal subscriptions, unknown and
empty topics, static and dynamic members, owned partitions from a balanced earlier
generation with members gone, joined or resubscribed since, stale claims from members that
missed a rebalance, and plain random (conflicting) claims. `compare` runs ours and Kafka's on
each group and counts what differs:

- range and roundrobin: the assignments must be equal, member by member;
- sticky (eager): ours valid, its potential `sum(count**2)` not above Kafka's, and, when
  equal, no more validly owned partitions moved than Kafka moves;
- cooperative-sticky: the same, over the rebalances it takes to hand every partition out
  (each member reporting what it got, one generation later), counting every revocation;
- Kafka's two defects, which ours must never show: a partition handed to a member that does
  not subscribe to its topic, and a cooperative hand-over to a member whose claim is from an
  older generation while the valid owner still holds the partition.

`python -m tests.assignors.differential` prints the figures (builds the jar first).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
)

from .helpers import reference_owners, subscribed_partitions
from .kafka_assignors import Group, KafkaAssignors, Member, build_harness

SEED = 20260909
GROUP_COUNT = 1000
TOPIC_NAMES = ("a", "b", "c", "d", "e")
MAX_COOPERATIVE_ROUNDS = 5

Result = Mapping[str, Sequence[TopicPartition]]


# -- groups ---------------------------------------------------------------------------------


def random_groups(seed: int = SEED, count: int = GROUP_COUNT) -> list[Group]:
    rng = random.Random(seed)
    return [_random_group(rng) for _ in range(count)]


def _random_group(rng: random.Random) -> Group:
    topics = rng.sample(TOPIC_NAMES, rng.randint(1, 4))
    ppt = {t: rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16)) for t in topics}
    ppt = {t: n for t, n in ppt.items() if n or rng.random() < 0.3}
    if not ppt:
        ppt = {topics[0]: rng.randint(1, 12)}
    member_ids = rng.sample([f"c{k}-{rng.randint(0, 99)}" for k in range(10)], rng.randint(1, 7))
    subscribable = [*ppt, *(["unknown"] if rng.random() < 0.15 else [])]

    def some_topics() -> tuple[str, ...]:
        return tuple(sorted(rng.sample(subscribable, rng.randint(1, len(subscribable)))))

    if rng.random() < 0.3:
        common = some_topics()
        topics_of = dict.fromkeys(member_ids, common)
    else:
        topics_of = {m: some_topics() for m in member_ids}
    instance_of = {
        m: (f"i-{rng.randint(0, 99):02d}-{m}" if rng.random() < 0.5 else None) for m in member_ids
    }

    mode = rng.choices(("fresh", "earlier", "stale", "random"), (1, 5, 3, 2))[0]
    if mode == "fresh":
        owned: dict[str, list[TopicPartition]] = {m: [] for m in member_ids}
        generation = dict.fromkeys(member_ids, -1)
    elif mode == "random":
        owned, generation = _random_claims(rng, ppt, member_ids)
    else:
        owned, generation = _earlier_generation(rng, ppt, member_ids, topics_of, subscribable)
        if mode == "stale":
            _add_stale_claims(rng, ppt, member_ids, owned, generation)
    members = tuple(
        Member(m, instance_of[m], topics_of[m], tuple(owned[m]), generation[m]) for m in member_ids
    )
    return Group(ppt, members)


def _earlier_generation(
    rng: random.Random,
    ppt: Mapping[str, int],
    member_ids: Sequence[str],
    topics_of: Mapping[str, tuple[str, ...]],
    subscribable: Sequence[str],
) -> tuple[dict[str, list[TopicPartition]], dict[str, int]]:
    """What a balanced earlier generation left: our sticky assignment of a group that has
    since lost or gained members, resubscribed some, and grown or shrunk topics."""
    earlier_ids = [m for m in member_ids if rng.random() < 0.8]
    earlier_ids += [f"gone-{k}" for k in range(rng.randint(0, 2))]
    earlier_topics = {
        m: (
            topics_of[m]
            if m in topics_of and rng.random() < 0.7
            else tuple(sorted(rng.sample(subscribable, rng.randint(1, len(subscribable)))))
        )
        for m in earlier_ids
    }
    # Kafka's topics only ever grow (its assignors throw on a claim past a topic's end).
    earlier_ppt = {t: max(0, n - rng.choice((0, 0, 0, 1, 3))) for t, n in ppt.items()}
    earlier = StickyAssignor().assign(
        earlier_ppt, {m: Subscription(earlier_topics[m]) for m in earlier_ids}
    )
    gen = rng.randint(1, 6)
    owned = {m: list(earlier[m].partitions) if m in earlier else [] for m in member_ids}
    generation = {m: (gen if m in earlier else -1) for m in member_ids}
    return owned, generation


def _add_stale_claims(
    rng: random.Random,
    ppt: Mapping[str, int],
    member_ids: Sequence[str],
    owned: dict[str, list[TopicPartition]],
    generation: dict[str, int],
) -> None:
    """Some members missed the last rebalance: they claim, one or two generations back,
    partitions that have moved to others since."""
    everything = [TopicPartition(t, p) for t, n in ppt.items() for p in range(n)]
    for m in member_ids:
        if rng.random() < 0.35 and everything:
            newest = max(generation.values())
            generation[m] = max(0, newest - rng.randint(1, 2))
            owned[m] = list(
                dict.fromkeys(
                    owned[m] + rng.sample(everything, min(len(everything), rng.randint(1, 4)))
                )
            )


def _random_claims(
    rng: random.Random, ppt: Mapping[str, int], member_ids: Sequence[str]
) -> tuple[dict[str, list[TopicPartition]], dict[str, int]]:
    """Any member may claim anything (also past a topic's end, or of a deleted topic), in
    any generation, possibly twice."""
    owned: dict[str, list[TopicPartition]] = {m: [] for m in member_ids}
    candidates = [TopicPartition(t, p) for t, n in ppt.items() for p in range(n + 1)]
    candidates.append(TopicPartition("gone", 0))
    for tp in candidates:
        if rng.random() < 0.6:
            owned[rng.choice(member_ids)].append(tp)
    for _ in range(rng.randint(0, 3)):
        owned[rng.choice(member_ids)].append(rng.choice(candidates))
    generation = {m: rng.randint(-1, 3) for m in member_ids}
    return owned, generation


# -- our side -------------------------------------------------------------------------------


def plain_subscriptions(group: Group) -> dict[str, Subscription]:
    return {
        m.member_id: Subscription(m.topics, group_instance_id=m.instance_id) for m in group.members
    }


def sticky_subscriptions(group: Group) -> dict[str, Subscription]:
    """As Kafka's eager consumer sends them: nothing owned, the claim in the user data."""
    return {
        m.member_id: Subscription(
            m.topics,
            user_data=(
                encode_sticky_user_data(m.owned, m.generation)
                if m.owned or m.generation >= 0
                else None
            ),
            group_instance_id=m.instance_id,
        )
        for m in group.members
    }


def cooperative_subscriptions(group: Group) -> dict[str, Subscription]:
    return {
        m.member_id: Subscription(
            m.topics,
            user_data=encode_cooperative_sticky_user_data(m.generation),
            owned_partitions=m.owned,
            generation_id=m.generation,
            group_instance_id=m.instance_id,
        )
        for m in group.members
    }


def partitions_of(result: Mapping[str, Assignment]) -> dict[str, tuple[TopicPartition, ...]]:
    return {m: a.partitions for m, a in result.items()}


# -- measures -------------------------------------------------------------------------------


def potential(result: Result) -> int:
    """Kafka's and our balance measure for the general case: lower is more balanced."""
    return sum(len(partitions) ** 2 for partitions in result.values())


def valid_owners(group: Group, *, subscribed_only: bool) -> dict[TopicPartition, str]:
    """The valid owner of each partition (KIP-792 rules); with `subscribed_only`, only where
    the owner still subscribes to the topic (a partition whose owner unsubscribed must move,
    so moving it costs no stickiness)."""
    subs = plain_subscriptions(group)
    known = subscribed_partitions(group.partitions_per_topic, subs)
    claims = {m.member_id: (m.owned, m.generation) for m in group.members}
    owners = reference_owners(claims, known)[0]
    if not subscribed_only:
        return owners
    return {tp: m for tp, m in owners.items() if tp.topic in subs[m].topics}


def unsubscribed_handouts(group: Group, result: Result) -> list[tuple[str, TopicPartition]]:
    """Kafka's first defect: partitions given to a member not subscribed to their topic."""
    topics = {m.member_id: set(m.topics) for m in group.members}
    return [(m, tp) for m, parts in result.items() for tp in parts if tp.topic not in topics[m]]


def stale_handovers(
    group: Group, owners: Mapping[TopicPartition, str], result: Result
) -> list[tuple[str, TopicPartition]]:
    """Kafka's second defect: in a cooperative round, a partition handed to a member (that
    claims it from an older generation) while its valid owner still holds it."""
    return [(m, tp) for m, parts in result.items() for tp in parts if owners.get(tp, m) != m]


def problems(group: Group, result: Result, *, complete: bool) -> list[str]:
    """Validity: every member answered, no partition twice, only to subscribers, only
    existing partitions, and (with `complete`) every subscribed partition assigned."""
    found: list[str] = []
    subs = plain_subscriptions(group)
    if set(result) != set(subs):
        found.append(f"members {sorted(result)} != {sorted(subs)}")
    seen: dict[TopicPartition, str] = {}
    for m, parts in result.items():
        for tp in parts:
            if tp in seen:
                found.append(f"{tp} to {seen[tp]} and {m}")
            seen[tp] = m
            if tp.partition >= group.partitions_per_topic.get(tp.topic, 0):
                found.append(f"{tp} does not exist")
    found += [f"{tp} to {m}, not subscribed" for m, tp in unsubscribed_handouts(group, result)]
    if complete:
        missing = subscribed_partitions(group.partitions_per_topic, subs) - set(seen)
        if missing:
            found.append(f"unassigned {sorted(missing)}")
    return found


@dataclass(frozen=True)
class Outcome:
    """One assignor's run on one group: final assignment, partitions moved, rounds taken."""

    final: dict[str, tuple[TopicPartition, ...]]
    moves: int
    rounds: int
    stale_handovers: int
    # Problems of the intermediate cooperative rounds (a partition twice, to a non-subscriber).
    round_problems: tuple[str, ...] = ()


def revocations(held: Result, result: Result) -> int:
    return sum(len(set(held.get(m, ())) - set(parts)) for m, parts in result.items())


def sticky_outcome(group: Group, result: Result) -> Outcome:
    owners = valid_owners(group, subscribed_only=True)
    held: dict[str, list[TopicPartition]] = {}
    for tp, m in owners.items():
        held.setdefault(m, []).append(tp)
    return Outcome(
        {m: tuple(parts) for m, parts in result.items()}, revocations(held, result), 1, 0
    )


def cooperative_outcome(group: Group, assign: Callable[[Group], Result]) -> Outcome:
    """Run cooperative rebalances until every subscribed partition is handed out: after
    each, every member reports what it got as owned, one generation later."""
    owners = valid_owners(group, subscribed_only=False)
    held: dict[str, tuple[TopicPartition, ...]] = {m.member_id: () for m in group.members}
    for tp, m in valid_owners(group, subscribed_only=True).items():
        held[m] += (tp,)
    everything = subscribed_partitions(group.partitions_per_topic, plain_subscriptions(group))
    generation = max((m.generation for m in group.members), default=-1)
    moves = 0
    stale = 0
    round_problems: list[str] = []
    current = group
    rounds = 0
    while rounds < MAX_COOPERATIVE_ROUNDS:
        rounds += 1
        result = assign(current)
        stale += len(stale_handovers(current, owners, result))
        round_problems += [f"round {rounds}: {p}" for p in problems(group, result, complete=False)]
        moves += revocations(held, result)
        held = {m: tuple(parts) for m, parts in result.items()}
        if {tp for parts in result.values() for tp in parts} >= everything:
            break
        generation += 1
        current = Group(
            group.partitions_per_topic,
            tuple(
                Member(m.member_id, m.instance_id, m.topics, held[m.member_id], generation)
                for m in group.members
            ),
        )
        owners = {tp: m for m, parts in held.items() for tp in parts}
    return Outcome(held, moves, rounds, stale, tuple(round_problems))


# -- comparison -----------------------------------------------------------------------------

STICKY_FAMILY = ("sticky", "cooperative-sticky")


@dataclass
class StickyFigures:
    compared: int = 0
    kafka_errors: list[str] = field(default_factory=list)
    kafka_invalid: list[str] = field(default_factory=list)
    # Groups where ours is invalid, less balanced, or moves more at equal balance (must stay empty).
    ours_invalid: list[str] = field(default_factory=list)
    ours_less_balanced: list[str] = field(default_factory=list)
    ours_more_moves: list[str] = field(default_factory=list)
    ours_unsubscribed: list[str] = field(default_factory=list)
    ours_stale_handovers: list[str] = field(default_factory=list)
    # Groups where ours ends more balanced than Kafka's, and where it moves fewer at equal balance.
    ours_more_balanced: int = 0
    ours_fewer_moves: int = 0
    # Totals over the groups compared at equal balance.
    moves_ours: int = 0
    moves_kafka: int = 0
    # Kafka's defects: groups where it handed out a partition of an unsubscribed topic, or
    # handed a partition to a stale claimant while the owner still held it.
    kafka_unsubscribed: int = 0
    kafka_stale_handovers: int = 0


@dataclass
class Figures:
    groups: int = 0
    exact_differences: dict[str, list[str]] = field(
        default_factory=lambda: {"range": [], "roundrobin": []}
    )
    sticky: dict[str, StickyFigures] = field(
        default_factory=lambda: {name: StickyFigures() for name in STICKY_FAMILY}
    )

    def summary(self) -> str:
        lines = [f"{self.groups} groups"]
        for name, differences in self.exact_differences.items():
            lines.append(
                f"{name}: {self.groups - len(differences)} equal, {len(differences)} differ"
            )
        for name, f in self.sticky.items():
            lines.append(
                f"{name}: {f.compared} compared ({len(f.kafka_errors)} Kafka errors, "
                f"{len(f.kafka_invalid)} Kafka invalid); ours "
                f"invalid {len(f.ours_invalid)}, less balanced {len(f.ours_less_balanced)}, "
                f"more moves at equal balance {len(f.ours_more_moves)}, more balanced "
                f"{f.ours_more_balanced}, fewer moves {f.ours_fewer_moves}; moves at equal "
                f"balance ours {f.moves_ours} vs Kafka {f.moves_kafka}; Kafka handed out "
                f"unsubscribed partitions in {f.kafka_unsubscribed} groups, to stale "
                f"claimants in {f.kafka_stale_handovers}"
            )
        return "\n".join(lines)


def _ours(name: str, group: Group) -> dict[str, tuple[TopicPartition, ...]]:
    if name == "range":
        return partitions_of(
            RangeAssignor().assign(group.partitions_per_topic, plain_subscriptions(group))
        )
    if name == "roundrobin":
        return partitions_of(
            RoundRobinAssignor().assign(group.partitions_per_topic, plain_subscriptions(group))
        )
    if name == "sticky":
        return partitions_of(
            StickyAssignor().assign(group.partitions_per_topic, sticky_subscriptions(group))
        )
    return partitions_of(
        CooperativeStickyAssignor().assign(
            group.partitions_per_topic, cooperative_subscriptions(group)
        )
    )


class KafkaError(Exception):
    pass


def _kafkas(
    kafka: KafkaAssignors, name: str, group: Group
) -> dict[str, tuple[TopicPartition, ...]]:
    answer = kafka.assign(group, [name])[name]
    if isinstance(answer, str):
        raise KafkaError(answer)
    return answer


def compare(kafka: KafkaAssignors, groups: Sequence[Group]) -> Figures:
    figures = Figures(groups=len(groups))
    for index, group in enumerate(groups):
        label = f"group {index}: {group}"
        answers = kafka.assign(group, ["range", "roundrobin", "sticky"])
        for name in ("range", "roundrobin"):
            if answers[name] != _ours(name, group):
                figures.exact_differences[name].append(f"{label}: Kafka {answers[name]}")
        _compare_sticky(figures.sticky["sticky"], label, group, answers["sticky"], kafka)
        _compare_sticky(figures.sticky["cooperative-sticky"], label, group, None, kafka)
    return figures


def _compare_sticky(
    f: StickyFigures,
    label: str,
    group: Group,
    kafka_answer: dict[str, tuple[TopicPartition, ...]] | str | None,
    kafka: KafkaAssignors,
) -> None:
    if kafka_answer is None:  # cooperative-sticky: over several rounds
        ours = cooperative_outcome(group, lambda g: _ours("cooperative-sticky", g))
        try:
            theirs = cooperative_outcome(group, lambda g: _kafkas(kafka, "cooperative-sticky", g))
        except KafkaError as error:
            f.kafka_errors.append(f"{label}: {error}")
            theirs = None
    else:
        ours = sticky_outcome(group, _ours("sticky", group))
        if isinstance(kafka_answer, str):
            f.kafka_errors.append(f"{label}: {kafka_answer}")
            theirs = None
        else:
            theirs = sticky_outcome(group, kafka_answer)

    invalid = [*ours.round_problems, *problems(group, ours.final, complete=True)]
    if invalid:
        f.ours_invalid.append(f"{label}: {invalid}")
    if unsubscribed_handouts(group, ours.final):
        f.ours_unsubscribed.append(label)
    if ours.stale_handovers:
        f.ours_stale_handovers.append(label)
    if theirs is None:
        return
    if theirs.stale_handovers:
        f.kafka_stale_handovers += 1
    if unsubscribed_handouts(group, theirs.final):
        f.kafka_unsubscribed += 1
    kafka_problems = problems(group, theirs.final, complete=True)
    if kafka_problems:
        # Kafka solved another problem (a member kept what it may not have, a partition went
        # to two members or to none): no measure of balance or stickiness compares fairly.
        f.kafka_invalid.append(f"{label}: {kafka_problems}")
        return
    f.compared += 1
    ours_potential, their_potential = potential(ours.final), potential(theirs.final)
    detail = (
        f"{label}: ours {ours.final} ({ours.moves} moves) Kafka {theirs.final} "
        f"({theirs.moves} moves)"
    )
    if ours_potential > their_potential:
        f.ours_less_balanced.append(detail)
    elif ours_potential < their_potential:
        f.ours_more_balanced += 1
    else:
        f.moves_ours += ours.moves
        f.moves_kafka += theirs.moves
        if ours.moves > theirs.moves:
            f.ours_more_moves.append(detail)
        elif ours.moves < theirs.moves:
            f.ours_fewer_moves += 1


def main() -> None:
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else SEED
    count = int(sys.argv[2]) if len(sys.argv) > 2 else GROUP_COUNT
    kafka = KafkaAssignors(build_harness())
    try:
        figures = compare(kafka, random_groups(seed, count))
    finally:
        kafka.close()
    print(figures.summary())
    for name, f in figures.sticky.items():
        for detail in f.ours_invalid + f.ours_less_balanced + f.ours_more_moves:
            print(name, detail, file=sys.stderr)
    for name, differences in figures.exact_differences.items():
        for detail in differences:
            print(name, detail, file=sys.stderr)


if __name__ == "__main__":
    main()
