"""The local-process adapter of the rollout orchestrator (no Kubernetes).

The same loop as the Kopf adapter (reconcile.py), over member *processes* instead of pods:
observe (the processes and the coordinator's describe) -> `decide` -> persist the
decision's state (write-ahead) -> act (a `Bounce` stops that process and starts its
replacement with the bounce's env) -> wait a poll interval -> observe again, until the
rollout is `Done` or `Paused`.

What a process is, and how to start, stop and describe, is injected (`LocalFleet`), so the
demo drives real `staticfleet member run` processes and the unit tests a fake fleet. A
process stands for a pod: its label (`member-0#2`) is both the pod name and the pod uid,
and it records the protocol and template hash it was started with, as a pod's annotations
do. Stopping a static member is a plain SIGTERM: it sends no LeaveGroup, its replacement
rejoins under the same instance id (KIP-345).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from coordinator import DescribedGroup
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.rollout import (
    Assignors,
    Bounce,
    CoordinatorView,
    Decision,
    Done,
    MemberPod,
    Observation,
    Pause,
    RolloutStatus,
    decide,
)


@dataclass(frozen=True, slots=True)
class LocalMember:
    """One member process, with what it was started with."""

    slot: int
    instance_id: str
    # Unique per incarnation (say `member-0#2`): the pod name and the pod uid in one.
    process: str
    protocol: RebalanceProtocolSetting
    template_hash: str
    alive: bool
    # The process has an assignment in its current incarnation (its readiness probe).
    ready: bool
    # Being stopped (a terminating pod): its slot's replacement waits.
    stopping: bool = False


class LocalFleet(Protocol):
    """The process control the adapter needs; the demo's fleet and test fakes provide it."""

    def members(self) -> Sequence[LocalMember]:
        """The member processes, one per slot (dead ones may be listed with alive=False)."""
        ...

    def describe(self) -> DescribedGroup | None:
        """The coordinator's describe of the group; None when it could not be reached."""
        ...

    def stop(self, slot: int) -> None:
        """SIGTERM the slot's process and wait until it has exited (no LeaveGroup)."""
        ...

    def start(self, slot: int, env: Mapping[str, str], template_hash: str) -> None:
        """Start a process for the slot with `env` over the fleet's own settings."""
        ...


@dataclass(frozen=True, slots=True)
class LocalRolloutSpec:
    """The part of a ConsumerGroup spec the orchestrator reads."""

    desired_protocol: RebalanceProtocolSetting
    template_hash: str
    assignors: Assignors
    desired_members: int
    member_ready_timeout_seconds: float


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One decision as the log keeps it (the Events the Kopf adapter would post)."""

    at: datetime
    kind: str
    event_reason: str
    reason: str
    bounce: str
    slot: int | None = None
    instance_id: str | None = None
    protocol: str | None = None
    # The coordinator's leader when the decision was taken (for "leader last").
    leader_instance_id: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "decision": self.kind,
            "event_reason": self.event_reason,
            "reason": self.reason,
            "bounce": self.bounce,
            "slot": self.slot,
            "instance_id": self.instance_id,
            "protocol": self.protocol,
            "leader_instance_id": self.leader_instance_id,
        }


@dataclass(frozen=True, slots=True)
class RolloutResult:
    outcome: Done | Pause
    decisions: tuple[DecisionRecord, ...]
    state: RolloutStatus

    @property
    def completed(self) -> bool:
        return isinstance(self.outcome, Done)

    @property
    def bounces(self) -> tuple[DecisionRecord, ...]:
        return tuple(record for record in self.decisions if record.kind == "bounce")


class RolloutTimeout(TimeoutError):
    """The loop ran past its own deadline without reaching Done or Pause (the orchestrator
    bounds every rollout wait; only waiting for a complete fleet before planning is not)."""


DecisionHook = Callable[[Decision, Observation], None]


def observation_of(
    spec: LocalRolloutSpec,
    members: Sequence[LocalMember],
    described: DescribedGroup | None,
) -> Observation:
    """The orchestrator's input from the processes and the describe result.

    A dead process is a pod that is gone; a failed describe is `coordinator=None` (nothing is
    decided on a guess). An unknown group reads as Dead with no members, as in the Kopf
    adapter (`CoordinatorView.from_described`).
    """
    pods = tuple(
        MemberPod(
            slot=member.slot,
            instance_id=member.instance_id,
            pod_name=member.process,
            protocol=member.protocol,
            template_hash=member.template_hash,
            ready=member.alive and member.ready and not member.stopping,
            deleting=member.stopping,
            pod_uid=member.process,
        )
        for member in members
        if member.alive
    )
    return Observation(
        desired_protocol=spec.desired_protocol,
        desired_template_hash=spec.template_hash,
        assignors=spec.assignors,
        desired_members=spec.desired_members,
        member_ready_timeout_seconds=spec.member_ready_timeout_seconds,
        pods=pods,
        coordinator=CoordinatorView.from_described(described) if described is not None else None,
    )


class LocalRollout:
    """Observe -> decide -> persist -> act over local member processes."""

    def __init__(
        self,
        fleet: LocalFleet,
        spec: LocalRolloutSpec,
        *,
        state_path: Path | None = None,
        poll_interval_s: float = 0.2,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
        on_decision: DecisionHook | None = None,
    ) -> None:
        self.fleet = fleet
        self.spec = spec
        self.state_path = state_path
        self.poll_interval_s = poll_interval_s
        self._clock = clock
        self._sleep = sleep
        self._on_decision = on_decision
        self.state = load_state(state_path) if state_path is not None else RolloutStatus()
        self.decisions: list[DecisionRecord] = []

    def observe(self) -> Observation:
        return observation_of(self.spec, self.fleet.members(), self.fleet.describe())

    def step(self) -> Decision:
        """One pass: observe, decide, persist the state, act."""
        observation = self.observe()
        decision = decide(observation, self.state, self._clock())
        changed = decision.state != self.state
        self.state = decision.state
        if self.state_path is not None and (changed or not self.state_path.exists()):
            save_state(self.state_path, self.state)  # before acting: write-ahead
        if isinstance(decision, Bounce) or changed or not self.decisions:
            self.decisions.append(_record(decision, observation, self._clock()))
        if self._on_decision is not None:
            self._on_decision(decision, observation)
        if isinstance(decision, Bounce):
            self._bounce(decision)
        return decision

    def run(self, timeout_s: float | None = None) -> RolloutResult:
        """Step every poll interval until Done or Pause; the log of every decision that
        changed the state (each Bounce, and each new reason to wait)."""
        started = time.monotonic()
        while True:
            decision = self.step()
            if isinstance(decision, Done | Pause):
                if self.decisions[-1].reason != decision.reason:
                    self.decisions.append(_record(decision, None, self._clock()))
                return RolloutResult(decision, tuple(self.decisions), self.state)
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise RolloutTimeout(
                    f"no Done or Pause after {timeout_s:.0f} s; last: {decision.reason}"
                )
            self._sleep(self.poll_interval_s)

    def _bounce(self, bounce: Bounce) -> None:
        """Replace exactly the process named, idempotently: stop it if it still runs, then
        start the replacement unless one already runs in the slot."""
        current = next((m for m in self.fleet.members() if m.slot == bounce.slot and m.alive), None)
        if current is not None and current.process == bounce.pod_uid:
            self.fleet.stop(bounce.slot)
        elif current is not None:
            return  # already replaced (a Bounce repeated after a driver restart)
        self.fleet.start(bounce.slot, bounce.member_env, bounce.template_hash)


def _record(decision: Decision, observation: Observation | None, at: datetime) -> DecisionRecord:
    leader = None
    if observation is not None and observation.coordinator is not None:
        leader = observation.coordinator.leader_instance_id
    kind = type(decision).__name__.lower()
    if isinstance(decision, Bounce):
        return DecisionRecord(
            at=at,
            kind=kind,
            event_reason=decision.event_reason,
            reason=decision.reason,
            bounce=decision.state.bounce_label,
            slot=decision.slot,
            instance_id=decision.instance_id,
            protocol=decision.protocol.value,
            leader_instance_id=leader,
        )
    slot = decision.slot if isinstance(decision, Pause) else None
    return DecisionRecord(
        at=at,
        kind=kind,
        event_reason=decision.event_reason,
        reason=decision.reason,
        bounce=decision.state.bounce_label,
        slot=slot,
        leader_instance_id=leader,
    )


def load_state(path: Path) -> RolloutStatus:
    """The persisted state; a missing or unreadable file starts from `RolloutStatus()` (the
    plan is re-derived from what the processes were started with)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return RolloutStatus()
    except (OSError, ValueError):
        return RolloutStatus()
    if not isinstance(data, dict):
        return RolloutStatus()
    try:
        return RolloutStatus.model_validate(data)
    except ValueError:
        return RolloutStatus()


def save_state(path: Path, state: RolloutStatus) -> None:
    """Write atomically: a driver killed mid-write leaves the previous state."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(json.dumps(state.to_wire(), indent=2) + "\n", encoding="utf-8")
    os.replace(scratch, path)
