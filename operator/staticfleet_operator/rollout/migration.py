"""Pre-checks of a migration to Kafka's consumer group protocol (KIP-848), or back. Pure.

A classic group converts when its first member joins with `group.protocol=consumer`, and
back when its last consumer-protocol member leaves, if the broker lets it: so before the
first bounce of either direction the operator checks what would make the broker, or a
client, refuse it halfway. Each check returns why not (one sentence naming the way out), or
None. docs/operator.md, "Migrating a fleet to the consumer protocol".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import ClientFamily, ConsumerGroupSpec

CONSUMER = RebalanceProtocolSetting.CONSUMER

# Our own assignor: its member metadata means nothing to the broker's assignors, which
# assign a converted group (Kafka's `uniform` or `range`); the others are Kafka's own.
CUSTOM_METADATA_ASSIGNORS = frozenset({"static-sticky"})


class Direction(StrEnum):
    UPGRADE = "upgrade"  # classic -> consumer
    DOWNGRADE = "downgrade"  # consumer -> classic


class MigrationPolicy(StrEnum):
    """The broker's `group.consumer.migration.policy` (Kafka 4.x default: bidirectional)."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    def allows(self, direction: Direction) -> bool:
        return self is MigrationPolicy.BIDIRECTIONAL or self.value == direction.value


@dataclass(frozen=True, slots=True)
class BrokerFacts:
    """What the cluster says about the consumer protocol: ApiVersions and DescribeConfigs
    on the broker."""

    heartbeat_supported: bool  # ApiVersions advertises ConsumerGroupHeartbeat (key 68)
    migration_policy: MigrationPolicy
    max_size: int  # group.consumer.max.size
    # Why DescribeConfigs gave no values (e.g. no DESCRIBE_CONFIGS on the Cluster); None: read.
    unreadable: str | None = None


MIGRATION_POLICY_CONFIG = "group.consumer.migration.policy"
MAX_SIZE_CONFIG = "group.consumer.max.size"
BROKER_CONFIGS = (MIGRATION_POLICY_CONFIG, MAX_SIZE_CONFIG)


def broker_facts(
    heartbeat_supported: bool, configs: Mapping[str, str | None], unreadable: str | None = None
) -> BrokerFacts:
    """The facts from a broker's answers: whether ApiVersions listed ConsumerGroupHeartbeat,
    and DescribeConfigs' values (Kafka prints the policy in lower case and parses it in any;
    a config the broker does not know, before 3.7, means no consumer protocol anyway)."""
    policy = (configs.get(MIGRATION_POLICY_CONFIG) or "disabled").lower()
    size = configs.get(MAX_SIZE_CONFIG)
    return BrokerFacts(
        heartbeat_supported=heartbeat_supported,
        migration_policy=MigrationPolicy(policy),
        max_size=int(size) if size else 0,
        unreadable=unreadable,
    )


def pending(spec: ConsumerGroupSpec, pod_protocols: Iterable[RebalanceProtocolSetting]) -> bool:
    """Whether the broker's facts are wanted: a migration is ahead and the spec's own checks
    (family, assignor) do not refuse it already (a refused fleet costs no connection a pass)."""
    desired = RebalanceProtocolSetting(spec.rebalance.protocol.value)
    way = direction(pod_protocols, desired)
    if way is Direction.UPGRADE:
        return family_refusal(spec.coordinator.client_family) is None and not assignor_refusal(spec)
    return way is Direction.DOWNGRADE


def direction(
    pod_protocols: Iterable[RebalanceProtocolSetting], desired: RebalanceProtocolSetting
) -> Direction | None:
    """Which migration the fleet's next rollout makes, if any."""
    present = set(pod_protocols)
    if desired is CONSUMER and present - {CONSUMER}:
        return Direction.UPGRADE
    if desired is not CONSUMER and CONSUMER in present:
        return Direction.DOWNGRADE
    return None


def family_refusal(family: ClientFamily) -> str | None:
    """Whether the fleet's client library speaks the consumer protocol (KIP-848)."""
    if family is ClientFamily.KAFKA_PYTHON:
        return (
            "kafka-python clients do not implement Kafka's consumer group protocol (KIP-848: "
            "no ConsumerGroupHeartbeat), so the fleet cannot migrate; keep "
            "spec.rebalance.protocol eager or cooperative, or move to clientFamily java "
            "(kafka-clients >= 4.0) or librdkafka (>= 2.12)"
        )
    return None


def assignor_refusal(spec: ConsumerGroupSpec) -> str | None:
    """A classic assignor whose member metadata the broker's assignors cannot carry over."""
    custom = sorted(
        name
        for name in (spec.rebalance.eager_assignor.value, spec.rebalance.cooperative_assignor.value)
        if name in CUSTOM_METADATA_ASSIGNORS
    )
    if not custom:
        return None
    return (
        f"the classic assignor {', '.join(custom)} embeds its own member metadata, which the "
        "broker's consumer-protocol assignors (uniform, range) cannot use; set "
        "spec.rebalance.cooperativeAssignor to cooperative-sticky and roll the fleet to it "
        "first"
    )


def broker_refusal(facts: BrokerFacts, way: Direction, members: int) -> str | None:
    """What the broker would refuse: no consumer protocol, a policy against this direction,
    or (upgrading) a group larger than a consumer group may be."""
    if not facts.heartbeat_supported:
        return (
            "the Kafka cluster does not offer the consumer group protocol (ApiVersions lists "
            "no ConsumerGroupHeartbeat, API key 68): it needs Kafka >= 4.0 (or 3.7+ with "
            "group.coordinator.rebalance.protocols including consumer)"
        )
    if facts.unreadable is not None:
        return (
            f"the brokers' group.consumer.migration.policy cannot be read ({facts.unreadable}): "
            "the operator needs DESCRIBE_CONFIGS on the Cluster to check a migration first"
        )
    if not facts.migration_policy.allows(way):
        return (
            f"the brokers' group.consumer.migration.policy is {facts.migration_policy.value}: "
            f"it does not allow an online {way.value} of a group; set it to {way.value} or "
            "bidirectional on the brokers"
        )
    if way is Direction.UPGRADE and members > facts.max_size:
        return (
            f"the group has {members} members, more than the brokers' group.consumer.max.size "
            f"({facts.max_size}): the broker would refuse the members past it"
        )
    return None


def migration_refusal(
    spec: ConsumerGroupSpec,
    pod_protocols: Iterable[RebalanceProtocolSetting],
    facts: BrokerFacts | None,
) -> str | None:
    """Why the fleet's migration must not start (or go on), or None. The client family and
    the assignor are read from the spec; the broker's facts, when the pass read them."""
    desired = RebalanceProtocolSetting(spec.rebalance.protocol.value)
    protocols = list(pod_protocols)
    way = direction(protocols, desired)
    if way is None:
        return None
    if way is Direction.UPGRADE:
        refusal = family_refusal(spec.coordinator.client_family) or assignor_refusal(spec)
        if refusal is not None:
            return refusal
    if facts is None:
        return None
    return broker_refusal(facts, way, spec.replicas or len(protocols))
