"""The soak's plan and the names it makes: pure functions (no processes, no root)."""

from __future__ import annotations

import itertools
import random
from collections import Counter

from staticfleet.soak.network import free_subnet, stale_owners
from staticfleet.soak.plan import (
    BROKER_KINDS,
    DECK,
    KAFKA_DECK,
    MEMBER_KINDS,
    NETWORK_KINDS,
    OPERATOR_DECK,
    OPERATOR_KINDS,
    PROCESS_KINDS,
    Fault,
    FaultKind,
    fault_plan,
)

SLOTS = ["g/member-0", "g/member-1"]
SESSION_MS = 3_000
PAST_THE_SESSION = {
    FaultKind.MEMBER_PAUSE,
    FaultKind.COORDINATOR_PAUSE_LONG,
    FaultKind.BROKER_PAUSE_LONG,
    FaultKind.PARTITION_LONG,
    FaultKind.DISK_FULL,
}


def plan(seed: int, count: int, deck: tuple[FaultKind, ...] = DECK) -> list[Fault]:
    return list(itertools.islice(fault_plan(random.Random(seed), SLOTS, SESSION_MS, deck), count))


def test_a_seed_gives_the_same_plan_and_another_seed_another() -> None:
    assert plan(33, 50) == plan(33, 50)
    assert plan(33, 50) != plan(34, 50)


def test_every_round_deals_each_kind_as_often_as_the_deck_holds_it() -> None:
    rounds = 4
    faults = list(
        itertools.islice(fault_plan(random.Random(7), SLOTS, SESSION_MS), rounds * len(DECK))
    )
    counts = Counter(fault.kind for fault in faults)
    for kind in FaultKind:
        copies = 0 if kind in BROKER_KINDS | OPERATOR_KINDS else 1 if kind in PROCESS_KINDS else 3
        assert counts[kind] == rounds * copies, kind


def test_the_kafka_deck_has_the_brokers_kinds_and_the_members_not_ours() -> None:
    kinds = {fault.kind for fault in plan(5, 10 * len(KAFKA_DECK), KAFKA_DECK)}
    assert kinds == BROKER_KINDS | NETWORK_KINDS | {FaultKind.MEMBER_KILL, FaultKind.MEMBER_PAUSE}
    assert not kinds & (PROCESS_KINDS - {FaultKind.MEMBER_KILL, FaultKind.MEMBER_PAUSE})


def test_the_operator_deck_has_its_kinds_for_the_coordinators_kill_each_twice() -> None:
    counts = Counter(OPERATOR_DECK)
    ours = set(FaultKind) - BROKER_KINDS - {FaultKind.COORDINATOR_KILL}
    assert set(counts) == ours
    assert ours >= OPERATOR_KINDS
    assert set(counts.values()) == {2}
    # Dealt round by round: 20 rounds give every kind 40 times, in a seeded order.
    faults = plan(11, 20 * len(OPERATOR_DECK), OPERATOR_DECK)
    assert Counter(f.kind for f in faults) == {kind: 40 for kind in ours}
    # The operator's and the API server's kinds aim at no member.
    assert {f.target for f in faults if f.kind in OPERATOR_KINDS} == {""}


def test_durations_sit_on_the_stated_side_of_the_session_timeout() -> None:
    deck = DECK + KAFKA_DECK
    for fault in itertools.islice(fault_plan(random.Random(3), SLOTS, SESSION_MS, deck), 500):
        assert (fault.target in SLOTS) == (fault.kind in MEMBER_KINDS)
        if fault.kind is FaultKind.NETWORK_DELAY_SHORT:
            assert fault.delay_ms + fault.jitter_ms < SESSION_MS
        elif fault.kind is FaultKind.NETWORK_DELAY_LONG:
            assert fault.delay_ms - fault.jitter_ms > SESSION_MS
            assert fault.duration_ms > fault.delay_ms
        elif fault.kind is FaultKind.NETWORK_LOSS:
            assert 10 <= fault.loss_percent <= 50
        elif fault.kind in (
            FaultKind.PARTITION_SHORT,
            FaultKind.COORDINATOR_PAUSE_SHORT,
            FaultKind.BROKER_PAUSE_SHORT,
        ):
            assert fault.duration_ms < SESSION_MS
        elif fault.kind in PAST_THE_SESSION:
            assert fault.duration_ms > SESSION_MS
        if fault.kind not in NETWORK_KINDS:
            assert (fault.delay_ms, fault.jitter_ms, fault.loss_percent) == (0, 0, 0)


def test_a_smaller_deck_deals_only_its_kinds() -> None:
    deck = (FaultKind.MEMBER_KILL, FaultKind.PARTITION_LONG)
    assert {fault.kind for fault in plan(1, 20, deck)} == set(deck)


def test_the_subnet_is_the_first_10_203_x_no_route_uses() -> None:
    routes = "default via 192.0.2.1 dev eth0\n10.203.33.0/24 dev sfs9-br proto kernel\n"
    assert free_subnet(routes) == 34
    assert free_subnet("default via 192.0.2.1 dev eth0\n") == 33


def test_only_what_a_gone_driver_made_is_stale() -> None:
    names = ["sfs12-m0", "sfs12-br", "sfs99-m0", "eth0", "sfsx-m0", "docker0"]
    assert stale_owners(names, alive=[99]) == {"sfs12-m0", "sfs12-br"}
