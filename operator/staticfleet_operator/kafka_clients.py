"""How members of a Kafka-coordinated group are configured, per client family. Pure.

Stock clients read their settings from env under names their image chooses
(`spec.coordinator.env`); the assignment strategy of the current rollout phase is spelled
the way the family's `partition.assignment.strategy` takes it. Our own member gets its
usual `STATICFLEET_*` env with a `kafka://` coordinator URL (no token: the cluster
authenticates it, through the client Secret's settings).
"""

from __future__ import annotations

from typing import Any, Final

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import ClientFamily, ConsumerGroupSpec

JAVA_PACKAGE: Final = "org.apache.kafka.clients.consumer."
# Protocol (assignor) names as members put them in JoinGroup -> Java's class names.
JAVA_ASSIGNORS: Final = {
    "range": JAVA_PACKAGE + "RangeAssignor",
    "roundrobin": JAVA_PACKAGE + "RoundRobinAssignor",
    "sticky": JAVA_PACKAGE + "StickyAssignor",
    "cooperative-sticky": JAVA_PACKAGE + "CooperativeStickyAssignor",
}


class UnsupportedProtocol(ValueError):
    """The family cannot be configured for this protocol (librdkafka and kafka-python
    refuse a list mixing eager and cooperative assignors)."""


def assignor_names(spec: ConsumerGroupSpec, protocol: RebalanceProtocolSetting) -> list[str]:
    """The assignors a member offers in `protocol`, most preferred first (as the rollout's
    `Assignors.offered_by`: compatible offers the cooperative one first)."""
    eager = spec.rebalance.eager_assignor.value
    cooperative = spec.rebalance.cooperative_assignor.value
    if protocol is RebalanceProtocolSetting.EAGER:
        return [eager]
    if protocol is RebalanceProtocolSetting.COOPERATIVE:
        return [cooperative]
    return [cooperative, eager]


def assignment_strategy(spec: ConsumerGroupSpec, protocol: RebalanceProtocolSetting) -> str:
    """`partition.assignment.strategy` for the spec's client family in `protocol`."""
    family = spec.coordinator.client_family
    names = assignor_names(spec, protocol)
    if len(names) > 1 and not family.mixes_assignors:
        raise UnsupportedProtocol(
            f"{family.value} clients cannot offer {', '.join(names)} at once "
            "(they refuse eager and cooperative assignors together)"
        )
    if family is ClientFamily.JAVA:
        return ",".join(JAVA_ASSIGNORS[name] for name in names)
    return ",".join(names)


def kafka_member_env(
    spec: ConsumerGroupSpec, instance_id: str, protocol: RebalanceProtocolSetting
) -> list[dict[str, Any]]:
    """The env entries (core/v1 EnvVar) of a member of a Kafka-coordinated group."""
    coordinator = spec.coordinator
    bootstrap = coordinator.bootstrap_servers or ""
    topics = ",".join(topic.name for topic in spec.topics)
    if coordinator.client_family is ClientFamily.STATICFLEET:
        values = {
            env.COORDINATOR_URL: f"kafka://{bootstrap}",
            env.GROUP_ID: spec.group_id,
            env.INSTANCE_ID: instance_id,
            env.TOPICS: topics,
            env.REBALANCE_PROTOCOL: protocol.value,
            env.EAGER_ASSIGNOR: spec.rebalance.eager_assignor.value,
            env.COOPERATIVE_ASSIGNOR: spec.rebalance.cooperative_assignor.value,
            env.SESSION_TIMEOUT_MS: str(spec.membership.session_timeout_ms),
            env.REBALANCE_TIMEOUT_MS: str(spec.membership.rebalance_timeout_ms),
        }
    else:
        names = coordinator.env
        values = {
            names.bootstrap_servers: bootstrap,
            names.group_id: spec.group_id,
            names.instance_id: instance_id,
            names.topics: topics,
            names.assignment_strategy: assignment_strategy(spec, protocol),
        }
    return [{"name": name, "value": value} for name, value in values.items()]


def client_env_from(spec: ConsumerGroupSpec) -> list[dict[str, Any]]:
    """`envFrom` entries: the client Secret's settings (TLS/SASL), when one is named."""
    ref = spec.coordinator.client_secret_ref
    return [{"secretRef": {"name": ref.name}}] if ref is not None else []
