"""What a pass does, as data: the output of `plan_pass`, the input of the actuator.

Each action is one write the actuator makes (to the API server, the embedded coordinator
or the embedded server's token table). They are applied in order, after the status; a
failure stops the pass, and the next pass observes what was done and plans again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from staticfleet_operator.blockers import BlockerCode
from staticfleet_operator.crd import ConsumerGroupStatus, PromotionStatus, RolloutPhase
from staticfleet_operator.group_memory import MemoryUpdate
from staticfleet_operator.lag import PartitionLag
from staticfleet_operator.rollout import CoordinatorView


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event on the ConsumerGroup."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class CreatePod:
    manifest: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DeletePod:
    name: str
    # Set when the deletion is a rollout's bounce (counted by phase).
    bounce: RolloutPhase | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    """One batch LeaveGroup by instance id (KIP-345); `why` goes into its Event."""

    instance_ids: tuple[str, ...]
    why: str


@dataclass(frozen=True, slots=True)
class ExpectMembers:
    """Tell the embedded coordinator whom to expect before their pods exist (scale-up)."""

    instance_ids: tuple[str, ...]
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class ClearExpectedMembers:
    pass


@dataclass(frozen=True, slots=True)
class RaiseTopicPartitions:
    """The embedded coordinator's topic metadata, raised to the spec's counts."""

    partitions: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class CreateTokenSecret:
    """The operator-made member token Secret, with a new random token (made by the
    actuator: a plan is pure), which is then registered for `group_id`."""

    group_id: str


@dataclass(frozen=True, slots=True)
class RegisterToken:
    """The group's member token, registered with the embedded server for `group_id`."""

    group_id: str
    token: str


@dataclass(frozen=True, slots=True)
class UnregisterTokens:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CreateSecret:
    manifest: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PatchSecret:
    name: str
    patch: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class CreatePodDisruptionBudget:
    manifest: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PatchPodDisruptionBudget:
    name: str
    patch: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PromoteStandbys:
    """Hot standby (hot_standby.py): each record's standby takes over its instance id; the
    status with the records is written first (write-ahead)."""

    records: tuple[PromotionStatus, ...]


@dataclass(frozen=True, slots=True)
class LeaveForStandbys:
    """Hot standby on a consumer-protocol Kafka group (kafka_standby.py): for each record,
    a static leave (epoch -2) on behalf of `member_ids[i]`, whose pod is not alive, so the
    slot's waiting standby takes the instance id and its partitions. A None member id: the
    standby holds the id already, the record is only completed. Status first (write-ahead)."""

    records: tuple[PromotionStatus, ...]
    member_ids: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class SettleSlots:
    """Adopted mode: keep the slot table (shared with the admission webhook, so applied
    under its lock) true to the pods, and retire vacant slots past their grace period with
    one batch LeaveGroup (adopted.py)."""

    pods: tuple[Mapping[str, Any], ...]
    view: CoordinatorView


Action = (
    CreatePod
    | DeletePod
    | LeaveGroup
    | ExpectMembers
    | ClearExpectedMembers
    | RaiseTopicPartitions
    | CreateTokenSecret
    | RegisterToken
    | UnregisterTokens
    | CreateSecret
    | PatchSecret
    | CreatePodDisruptionBudget
    | PatchPodDisruptionBudget
    | PromoteStandbys
    | LeaveForStandbys
    | SettleSlots
)


@dataclass(frozen=True, slots=True)
class Gauges:
    """The group's gauges after the pass (metrics.observe_group)."""

    desired: int
    ready: int
    slots: int
    phase: RolloutPhase
    blocker: BlockerCode | None
    missing_expected: int = 0
    standbys: int = 0
    # A consumer-protocol group's (None: classic).
    converged: bool | None = None
    group_epoch: int | None = None
    # A Kafka group's lag (status.lag, None: not known) and, when read this pass, per partition.
    lag: int | None = None
    lag_partitions: tuple[PartitionLag, ...] = ()


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass: the status to write first, the Events, the actions, what to remember."""

    summary: str
    status: ConsumerGroupStatus | None = None
    events: tuple[Event, ...] = ()
    actions: tuple[Action, ...] = ()
    gauges: Gauges | None = None
    # Seconds until a deadline wants a pass (the coordinator's expected members expiring).
    wake_in: float | None = None
    # Kafka tells the operator nothing: its describe is polled.
    poll: bool = False
    # A Kafka group whose cluster did not answer or refused the operator: the reason
    # (`GroupObservation.unreachable`), None when it answered.
    unreachable: str | None = None
    # The spec is invalid: only an edit of it (an event) makes the next pass useful.
    invalid: bool = False
    # The status records intent (a rollout step, promotions): written before the actions
    # (write-ahead), so a restarted operator resumes them. Otherwise it reports what was
    # seen and goes after them: a replacement pod does not wait a status round trip.
    write_ahead: bool = False
    remember: MemoryUpdate = field(default_factory=MemoryUpdate)
