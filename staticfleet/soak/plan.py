"""The faults of a soak, drawn from its seed: pure, so a seed always gives the same plan."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum


class FaultKind(StrEnum):
    COORDINATOR_KILL = "coordinator_kill"  # kill -9, restart on the same store file
    COORDINATOR_PAUSE_SHORT = "coordinator_pause_short"  # SIGSTOP below the session timeout
    COORDINATOR_PAUSE_LONG = "coordinator_pause_long"  # SIGSTOP past the session timeout
    MEMBER_KILL = "member_kill"  # kill -9, restarted under its instance id (the kubelet)
    MEMBER_PAUSE = "member_pause"  # SIGSTOP past the session timeout: a zombie that wakes
    # Between one member's network namespace and the coordinator (need root: docs/soak.md).
    NETWORK_DELAY_SHORT = "network_delay_short"  # each way, with jitter, below the timeout
    NETWORK_DELAY_LONG = "network_delay_long"  # each way, past the session timeout
    NETWORK_LOSS = "network_loss"  # a share of the packets dropped, both ways
    PARTITION_SHORT = "partition_short"  # every packet dropped, below the session timeout
    PARTITION_LONG = "partition_long"  # every packet dropped, past the session timeout
    # The coordinator's store on a full filesystem (needs root to mount it).
    DISK_FULL = "disk_full"
    # The Kafka variant (`--coordinator kafka`): the groups on a real Kafka broker.
    BROKER_KILL = "broker_kill"  # kill -9, restart on the same log directory and ports
    BROKER_PAUSE_SHORT = "broker_pause_short"  # SIGSTOP below the session timeout
    BROKER_PAUSE_LONG = "broker_pause_long"  # SIGSTOP past the session timeout
    # The operator variant (`python -m e2e.soak_operator`): the groups on the embedded
    # coordinator of `staticfleet operator run`, beside a real kube-apiserver.
    OPERATOR_KILL = "operator_kill"  # kill -9 the operator, restart on the same store
    APISERVER_RESTART = "apiserver_restart"  # kill -9 kube-apiserver, restart it on etcd


PROCESS_KINDS = frozenset(
    {
        FaultKind.COORDINATOR_KILL,
        FaultKind.COORDINATOR_PAUSE_SHORT,
        FaultKind.COORDINATOR_PAUSE_LONG,
        FaultKind.MEMBER_KILL,
        FaultKind.MEMBER_PAUSE,
    }
)
NETWORK_KINDS = frozenset(
    {
        FaultKind.NETWORK_DELAY_SHORT,
        FaultKind.NETWORK_DELAY_LONG,
        FaultKind.NETWORK_LOSS,
        FaultKind.PARTITION_SHORT,
        FaultKind.PARTITION_LONG,
    }
)
BROKER_KINDS = frozenset(
    {FaultKind.BROKER_KILL, FaultKind.BROKER_PAUSE_SHORT, FaultKind.BROKER_PAUSE_LONG}
)
OPERATOR_KINDS = frozenset({FaultKind.OPERATOR_KILL, FaultKind.APISERVER_RESTART})
MEMBER_KINDS = NETWORK_KINDS | {FaultKind.MEMBER_KILL, FaultKind.MEMBER_PAUSE}
# The plan deals the faults from a deck, shuffled anew each round: each kind comes up at
# a fixed rate (its copies per round), in a seeded order. The network and disk kinds three
# times, so a 10-minute run (about 80 faults or more) injects each of them ten times.
# Our coordinator's deck (the broker's kinds do not apply to it):
DECK = tuple(
    kind
    for kind in FaultKind
    if kind not in BROKER_KINDS | OPERATOR_KINDS
    for _ in range(1 if kind in PROCESS_KINDS else 3)
)
# The Kafka variant's: the broker's kinds in place of our coordinator's process and disk
# kinds (a broker has no store of ours), the member and network kinds as they are, each
# once a round (the network kinds between a member and the broker, through its relay).
KAFKA_DECK = (
    *sorted(BROKER_KINDS),
    FaultKind.MEMBER_KILL,
    FaultKind.MEMBER_PAUSE,
    *sorted(NETWORK_KINDS),
)

# The operator variant's: the operator's kill in place of the coordinator's (the coordinator
# runs in the operator's process; the pauses stop that process), the API server's restart,
# and every other kind of ours, each twice a round, so 30 minutes inject each of the twelve
# kinds ten times or more.
OPERATOR_DECK = tuple(
    kind
    for kind in FaultKind
    if kind not in BROKER_KINDS and kind is not FaultKind.COORDINATOR_KILL
    for _ in range(2)
)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    # The member slot ("<group>/<slot>") for member faults, "" for the coordinator.
    target: str
    # How long the process stays stopped (pauses) or dead before its restart (kills), the
    # network fault or the full disk lasts.
    duration_ms: int
    # Quiet time before the fault, after the previous one has recovered.
    gap_ms: int
    # Network delay and jitter each way (ms), or the share of packets lost (percent).
    delay_ms: int = 0
    jitter_ms: int = 0
    loss_percent: int = 0


def fault_plan(
    rng: random.Random, slots: list[str], session_timeout_ms: int, deck: Sequence[FaultKind] = DECK
) -> Iterator[Fault]:
    """The faults, endless: each round deals `deck` shuffled, a kind as often as it is in it."""
    if not deck:
        raise ValueError("an empty deck of fault kinds")
    while True:
        kinds = list(deck)
        rng.shuffle(kinds)
        for kind in kinds:
            yield draw_fault(rng, kind, slots, session_timeout_ms)


def draw_fault(
    rng: random.Random, kind: FaultKind, slots: list[str], session_timeout_ms: int
) -> Fault:
    """One fault of `kind`: the target and durations from the seed."""
    target = rng.choice(slots) if kind in MEMBER_KINDS else ""
    timeout = session_timeout_ms
    delay = jitter = loss = 0
    if kind in (FaultKind.COORDINATOR_PAUSE_SHORT, FaultKind.BROKER_PAUSE_SHORT):
        duration = rng.randint(timeout // 10, timeout // 2)
    elif kind in (
        FaultKind.COORDINATOR_PAUSE_LONG,
        FaultKind.BROKER_PAUSE_LONG,
        FaultKind.MEMBER_PAUSE,
    ):
        duration = rng.randint(timeout * 5 // 4, timeout * 2)
    elif kind is FaultKind.NETWORK_DELAY_SHORT:
        delay, jitter = rng.randint(timeout // 20, timeout // 5), rng.randint(0, timeout // 20)
        duration = rng.randint(timeout, timeout * 2)
    elif kind is FaultKind.NETWORK_DELAY_LONG:
        delay = rng.randint(timeout * 5 // 4, timeout * 2)
        jitter = rng.randint(0, timeout // 10)
        duration = rng.randint(timeout * 2, timeout * 3)
    elif kind is FaultKind.NETWORK_LOSS:
        loss = rng.randint(10, 50)
        duration = rng.randint(timeout, timeout * 2)
    elif kind is FaultKind.PARTITION_SHORT:
        duration = rng.randint(timeout // 10, timeout // 2)
    elif kind in (FaultKind.PARTITION_LONG, FaultKind.DISK_FULL):
        duration = rng.randint(timeout * 5 // 4, timeout * 2)
    else:  # kills and restarts: at once or after a while (a kubelet's back-off)
        duration = rng.randint(0, timeout // 2)
    return Fault(
        kind=kind,
        target=target,
        duration_ms=duration,
        gap_ms=rng.randint(0, 3_000),
        delay_ms=delay,
        jitter_ms=jitter,
        loss_percent=loss,
    )
