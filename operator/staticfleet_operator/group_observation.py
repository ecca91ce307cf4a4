"""What one pass over a ConsumerGroup decides on: a frozen `GroupObservation`, made by
`observer.observe` and read by the pure `plan_pass`. Data only.

A Kafka cluster that does not answer or refuses the operator is an observation too
(`unreachable`): the plan then reports it and acts on nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from coordinator import DescribedGroup
from coordinator.client.kafka_groups import ConsumerGroupDescription
from coordinator.client.kafka_settings import KafkaClientSettings
from staticfleet_operator.crd import (
    ConsumerGroupSpec,
    ConsumerGroupStatus,
)
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.kafka_auth import referenced_secrets
from staticfleet_operator.lag import LagReading
from staticfleet_operator.rollout.migration import BrokerFacts
from staticfleet_operator.tokens import token_secret_ref

UNREACHABLE = "CoordinatorUnreachable"


@dataclass(frozen=True, slots=True)
class TokenSecret:
    """Where the group's member token lives, and the Secret as found (None: absent)."""

    name: str
    key: str
    user_managed: bool
    body: Mapping[str, Any] | None
    # False: the group needs no group token (pod identity, `tokens.needs_group_token`); a
    # Secret made before the switch is still honoured while it exists, none is made.
    needed: bool = True


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """The member pods' PodDisruptionBudget as found (None: absent)."""

    body: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Unreachable:
    """The group's Kafka cluster did not answer (`CoordinatorUnreachable`), or refused the
    operator (the access error's own reason: KafkaAuthenticationFailed, ...)."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ExpectedMembers:
    """The embedded coordinator's pending expected members."""

    instance_ids: frozenset[str]
    deadline_ms: int  # on the coordinator's clock (`coordinator_now_ms`)


@dataclass(frozen=True, slots=True)
class GroupObservation:
    ref: GroupRef
    body: Mapping[str, Any]
    status: ConsumerGroupStatus
    now: datetime
    # What members are told to reach the embedded coordinator (pod env).
    coordinator_url: str
    # Unique per pass: new pods' keys are made from it (a plan draws no random numbers).
    pass_id: str
    # Set: members present their pod's ServiceAccount token for this audience (MemberSettings).
    member_token_audience: str | None = None
    # Set: the members' health port where the template sets none (MemberSettings).
    member_health_port: int | None = None
    problems: tuple[str, ...] = ()
    spec: ConsumerGroupSpec | None = None
    pods: tuple[Mapping[str, Any], ...] = ()
    token: TokenSecret | None = None
    # Kafka groups with spec.coordinator.kafka: the settings the operator connects with,
    # and the members' client configuration Secret as found.
    kafka_settings: KafkaClientSettings | None = None
    client_config: Mapping[str, Any] | None = None
    # Partition counts: the embedded coordinator's topic metadata, or the Kafka cluster's
    # counts of the spec's topics.
    topic_partitions: Mapping[str, int] = field(default_factory=dict)
    described: DescribedGroup | None = None
    # A Kafka group on the consumer protocol (KIP-848): its ConsumerGroupDescribe answer
    # (`described` is then made from it: backends.described_from_consumer).
    consumer_group: ConsumerGroupDescription | None = None
    unreachable: Unreachable | None = None
    expected_members: ExpectedMembers | None = None
    # The embedded coordinator's clock, which expected members' deadlines are on.
    coordinator_now_ms: int = 0
    ready_standbys: frozenset[str] = frozenset()
    # Managed mode: the member pods' PodDisruptionBudget (None: not read, nothing planned).
    disruption_budget: DisruptionBudget | None = None
    # Kafka groups: committed and log end offsets, when this pass read them (lag.lag_due);
    # None: not due, or the read failed (status keeps the last figure and its time).
    lag: LagReading | None = None
    # A lag read was due and tried, whatever came of it: the next try is an interval later,
    # so a cluster that does not answer costs a request timeout per interval, not per pass
    # (an embedded group's passes do not otherwise wait on its source cluster).
    lag_tried: bool = False
    # Kafka groups with a consumer-protocol migration ahead: the broker's facts for its
    # pre-checks (rollout/migration.py); None otherwise.
    broker: BrokerFacts | None = None

    @property
    def generation(self) -> int | None:
        value = (self.body.get("metadata") or {}).get("generation")
        return value if isinstance(value, int) else None

    @property
    def uid(self) -> str:
        return str((self.body.get("metadata") or {}).get("uid", ""))


def secrets_read(spec: ConsumerGroupSpec, name: str) -> frozenset[str]:
    """The Secrets a group's pass reads: a change to one of them wakes the group."""
    names = set(referenced_secrets(spec.coordinator.kafka))
    if not spec.coordinator.is_kafka:
        names.add(token_secret_ref(spec, name)[0])
    return frozenset(names)
