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
from coordinator.messages import DescribedGroup
from coordinator.protocol import ProtocolError, decode_subscription
from staticfleet_operator.crd import ClientFamily, ConsumerGroupSpec

CONSUMER = RebalanceProtocolSetting.CONSUMER

# Our own assignor: its member metadata means nothing to the broker's assignors, which
# assign a converted group (Kafka's `uniform` or `range`); the others are Kafka's own.
CUSTOM_METADATA_ASSIGNORS = frozenset({"static-sticky"})
# Kafka's own classic assignors (librdkafka's carry the same names and formats). Their user
# data (sticky: owned partitions and a generation; cooperative-sticky: a generation) is what
# the subscription's owned partitions and the broker's sticky assignors carry anyway, so the
# broker dropping it at conversion loses nothing. Any other assignor's user data is its own.
KAFKA_ASSIGNORS = frozenset({"range", "roundrobin", "sticky", "cooperative-sticky"})
# The embedded protocol's type: only such a group can convert (ClassicGroup's
# usesConsumerGroupProtocol in Kafka's group coordinator).
CONSUMER_PROTOCOL_TYPE = "consumer"


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


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a classic group's members embed in their subscriptions (DescribeGroups' member
    metadata, Kafka's ConsumerProtocolSubscription), as the broker's conversion reads it."""

    assignor: str  # the group's chosen protocol (DescribeGroups' protocol_data)
    # Members (instance id, else member id) whose subscription carries non-empty user data.
    with_user_data: tuple[str, ...] = ()
    # Members whose metadata is no ConsumerProtocolSubscription at all.
    unreadable: tuple[str, ...] = ()


def classic_metadata(described: DescribedGroup | None) -> ClassicMetadata | None:
    """The metadata facts of a classic group on Kafka's embedded consumer protocol, or None
    when there is nothing to read (no group, no members, between generations: no protocol
    chosen yet, or another protocol type, which the broker does not convert anyway)."""
    if described is None or described.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    if not described.protocol_data or not described.members:
        return None
    with_user_data: list[str] = []
    unreadable: list[str] = []
    for member in described.members:
        name = member.group_instance_id or member.member_id
        if not member.member_metadata:
            continue  # not sent (a describe between generations): nothing to judge
        try:
            subscription = decode_subscription(member.member_metadata)
        except ProtocolError:
            unreadable.append(name)
            continue
        if subscription.user_data:
            with_user_data.append(name)
    return ClassicMetadata(described.protocol_data, tuple(with_user_data), tuple(unreadable))


def metadata_refusal(metadata: ClassicMetadata) -> str | None:
    """Member metadata a conversion would drop or refuse. Kafka's group coordinator reads
    only the topics, owned partitions and rack of each classic member's subscription when
    it converts the group (ConsumerGroup.fromClassicGroup) and hands classic members
    assignments without user data (Utils.toConsumerProtocolAssignment); a subscription it
    cannot parse makes it refuse the conversion (GROUP_ID_NOT_FOUND to the joining member;
    the group stays classic). docs/kafka.md, "Migrating a fleet"."""
    if metadata.unreadable:
        return (
            f"the group's member metadata is not Kafka's consumer protocol subscription "
            f"(unreadable for {', '.join(sorted(metadata.unreadable)[:3])}): the broker "
            "refuses to convert such a group (GROUP_ID_NOT_FOUND to the first member "
            "joining with group.protocol=consumer)"
        )
    if metadata.with_user_data and metadata.assignor not in KAFKA_ASSIGNORS:
        count = len(metadata.with_user_data)
        return (
            f"the group's classic assignor {metadata.assignor} embeds custom metadata "
            f"(user data in {count} member subscription{'s' if count != 1 else ''}, e.g. "
            f"{sorted(metadata.with_user_data)[0]}): the broker drops it when it converts the "
            "group and its assignors (uniform, range) cannot use it; move the fleet to a "
            "Kafka assignor (range, roundrobin, sticky, cooperative-sticky) first"
        )
    return None


def adopted_refusal(
    spec: ConsumerGroupSpec, pod_protocols: Iterable[RebalanceProtocolSetting]
) -> str | None:
    """An adopted group (spec.selector) is never bounced by the operator: its pods belong to
    someone else (a Spark driver, a Deployment). A migration there would only happen pod
    by pod as their owner replaces them, with none of the rollout's pre-checks or gates."""
    if spec.selector is None:
        return None
    desired = RebalanceProtocolSetting(spec.rebalance.protocol.value)
    way = direction(pod_protocols, desired)
    if way is None:
        return None
    return (
        f"an adopted group's pods are made by someone else, so the operator cannot bounce "
        f"them for a consumer-protocol {way.value}; new pods keep the fleet's protocol. "
        "Restart the fleet from its owner with the new group.protocol (for a Spark job: "
        "the next job), or set spec.rebalance.protocol back"
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
    metadata: ClassicMetadata | None = None,
) -> str | None:
    """Why the fleet's migration must not start (or go on), or None. The client family and
    the assignor are read from the spec; the broker's facts and the classic group's member
    metadata, when the pass read them."""
    desired = RebalanceProtocolSetting(spec.rebalance.protocol.value)
    protocols = list(pod_protocols)
    way = direction(protocols, desired)
    if way is None:
        return None
    if way is Direction.UPGRADE:
        refusal = (
            family_refusal(spec.coordinator.client_family)
            or assignor_refusal(spec)
            or (metadata_refusal(metadata) if metadata is not None else None)
        )
        if refusal is not None:
            return refusal
    if facts is None:
        return None
    return broker_refusal(facts, way, spec.replicas or len(protocols))
