"""The faults of a soak, drawn from its seed: pure, so a seed always gives the same plan."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum


class FaultKind(StrEnum):
    COORDINATOR_KILL = "coordinator_kill"  # kill -9, restart on the same store file
    COORDINATOR_PAUSE_SHORT = "coordinator_pause_short"  # SIGSTOP below the session timeout
    COORDINATOR_PAUSE_LONG = "coordinator_pause_long"  # SIGSTOP past the session timeout
    MEMBER_KILL = "member_kill"  # kill -9, restarted under its instance id (the kubelet)
    MEMBER_PAUSE = "member_pause"  # SIGSTOP past the session timeout: a zombie that wakes


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    # The member slot ("<group>/<slot>") for member faults, "" for the coordinator.
    target: str
    # How long the process stays stopped (pauses) or dead before its restart (kills).
    duration_ms: int
    # Quiet time before the fault, after the previous one has recovered.
    gap_ms: int


def draw_fault(rng: random.Random, slots: list[str], session_timeout_ms: int) -> Fault:
    """One fault: every kind equally likely, the target and durations from the seed."""
    kind = rng.choice(list(FaultKind))
    target = rng.choice(slots) if kind in (FaultKind.MEMBER_KILL, FaultKind.MEMBER_PAUSE) else ""
    if kind is FaultKind.COORDINATOR_PAUSE_SHORT:
        duration = rng.randint(session_timeout_ms // 10, session_timeout_ms // 2)
    elif kind in (FaultKind.COORDINATOR_PAUSE_LONG, FaultKind.MEMBER_PAUSE):
        duration = rng.randint(session_timeout_ms * 5 // 4, session_timeout_ms * 2)
    else:  # kills: restart at once or after a while (a kubelet's back-off)
        duration = rng.randint(0, session_timeout_ms // 2)
    return Fault(kind=kind, target=target, duration_ms=duration, gap_ms=rng.randint(0, 3_000))
