"""The `ConsumerGroup` custom resource (`staticfleet.dev/v1alpha1`) as pydantic models.

These models are the single source of truth: the CRD's OpenAPI schema is generated from them
(`schema.py`, `staticfleet crds`), and the operator parses every object it reads with them.
Wire names are camelCase (Kubernetes convention) through aliases; Python names are snake_case.

Docstrings of classes and fields become the schema's descriptions, so they are written for a
user reading `kubectl explain consumergroup.spec`.

Every rule a CEL expression enforces in the API server is also enforced by a model validator
here, because the operator must reject the same specs when it reads objects that never went
through an API server (tests, the local demo) and must report them in status with a message
a person can act on (`validate_spec`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidatorFunctionWrapHandler,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.blockers import BlockerCode

# --------------------------------------------------------------------------- resource identity

GROUP: Final = "staticfleet.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "ConsumerGroup"
LIST_KIND: Final = "ConsumerGroupList"
PLURAL: Final = "consumergroups"
SINGULAR: Final = "consumergroup"
SHORT_NAMES: Final = ("cg",)
# `kubectl get staticfleet` lists every staticfleet resource (Strimzi does the same with
# `strimzi`); not `all`, which would mix groups into unrelated listings.
CATEGORIES: Final = ("staticfleet",)
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# --------------------------------------------------------------------------- name rules

# Kafka's rule for topic names, group ids and group.instance.ids: 1-249 of [a-zA-Z0-9._-],
# but not "." or "..". Written as one RE2-compatible pattern (no lookaround) because the API
# server evaluates it with Go's regexp; the alternation says "at least one non-dot character,
# or three or more dots". It matches `coordinator.server.models.topic_problem` (a test proves it).
KAFKA_NAME_MAX_LENGTH: Final = 249
KAFKA_NAME_PATTERN: Final = r"^([a-zA-Z0-9._-]*[a-zA-Z0-9_-][a-zA-Z0-9._-]*|\.\.\.+)$"
_KAFKA_NAME = re.compile(KAFKA_NAME_PATTERN)

# Partitions per topic and topics per group: what the coordinator's request bodies can carry.
# A group's bodies may grow to what its size needs (coordinator.server.limits), at most
# MAX_DERIVED_BODY_BYTES (256 MiB); at 120 bytes per partition plus the topic's name
# (<= 249), 32 topics x 10,000 partitions need at most 118 MB, leaving room for 6,000
# members (docs/server.md, "Body limits"). Kafka itself allows int32 counts.
MAX_PARTITIONS: Final = 10_000
MAX_TOPICS: Final = 32
# The coordinator's default group_max_rebalance_timeout_ms: a longer one is refused.
MAX_REBALANCE_TIMEOUT_MS: Final = 1_800_000

# group.instance.id = "<prefix>-<slot>". The prefix is kept to Kubernetes label-value syntax
# (which is also Kafka-legal) and short enough that "<prefix>-<slot>" fits a label value's 63
# characters for any slot below 10**10: the operator may label and select pods by instance id.
INSTANCE_ID_PREFIX_MAX_LENGTH: Final = 52
INSTANCE_ID_PREFIX_PATTERN: Final = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
_INSTANCE_ID_PREFIX = re.compile(INSTANCE_ID_PREFIX_PATTERN)

# Secret names are DNS subdomains; Secret data keys are [-._a-zA-Z0-9]+ (Kubernetes' rules).
DNS_SUBDOMAIN_MAX_LENGTH: Final = 253
DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)
SECRET_KEY_PATTERN: Final = r"^[-._a-zA-Z0-9]+$"

# metav1.Condition's reason syntax: CamelCase words, machine-readable.
CONDITION_REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

DEFAULT_REPLACEMENT_GRACE_PERIOD_SECONDS: Final = 60


def kafka_name_problem(name: str) -> str | None:
    """Why `name` is not a legal Kafka topic name / group id, or None."""
    if len(name) > KAFKA_NAME_MAX_LENGTH or not _KAFKA_NAME.fullmatch(name):
        return (
            f"{name!r} is not a legal Kafka name: 1-{KAFKA_NAME_MAX_LENGTH} characters of "
            "a-z A-Z 0-9 . _ - (and not '.' or '..')"
        )
    return None


def instance_id_prefix_problem(prefix: str) -> str | None:
    """Why `prefix` cannot start every member's group.instance.id, or None."""
    if len(prefix) > INSTANCE_ID_PREFIX_MAX_LENGTH or not _INSTANCE_ID_PREFIX.fullmatch(prefix):
        return (
            f"{prefix!r} is not a usable instance id prefix: 1-{INSTANCE_ID_PREFIX_MAX_LENGTH} "
            "characters of A-Z a-z 0-9 - _ . starting and ending with a letter or digit"
        )
    return None


def _check_kafka_name(value: str) -> str:
    problem = kafka_name_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _check_instance_id_prefix(value: str) -> str:
    problem = instance_id_prefix_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _check_dns_subdomain(value: str) -> str:
    if len(value) > DNS_SUBDOMAIN_MAX_LENGTH or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Kubernetes object name: lower-case letters, digits, '-' and "
            f"'.', starting and ending alphanumeric, at most {DNS_SUBDOMAIN_MAX_LENGTH}"
        )
    return value


# The pattern goes into the schema (the API server checks it); the after-validator gives the
# operator a sentence instead of pydantic's "should match pattern '^(...)$'".
KafkaName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=KAFKA_NAME_MAX_LENGTH,
        json_schema_extra={"pattern": KAFKA_NAME_PATTERN},
    ),
    AfterValidator(_check_kafka_name),
]
InstanceIdPrefix = Annotated[
    str,
    Field(
        min_length=1,
        max_length=INSTANCE_ID_PREFIX_MAX_LENGTH,
        json_schema_extra={"pattern": INSTANCE_ID_PREFIX_PATTERN},
    ),
    AfterValidator(_check_instance_id_prefix),
]
ObjectName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=DNS_SUBDOMAIN_MAX_LENGTH,
        json_schema_extra={"pattern": DNS_SUBDOMAIN_PATTERN},
    ),
    AfterValidator(_check_dns_subdomain),
]

# --------------------------------------------------------------------------- CEL rules
# The API server enforces these (x-kubernetes-validations); the model validators below enforce
# the same rules in Python. Kept as constants so tests and docs can name them.


@dataclass(frozen=True, slots=True)
class CelRule:
    """One x-kubernetes-validations entry."""

    rule: str
    message: str

    def as_json(self) -> JsonDict:
        return {"rule": self.rule, "message": self.message}


RULE_ONE_MODE: Final = CelRule(
    rule="has(self.replicas) != has(self.selector)",
    message=(
        "set exactly one of replicas (managed mode, with template) or selector (adopted mode); "
        "an adopted group (selector) cannot be scaled: its pods are made by someone else "
        "(e.g. Spark), so `kubectl scale` and autoscalers are refused"
    ),
)
RULE_TEMPLATE_WITH_REPLICAS: Final = CelRule(
    rule="has(self.replicas) == has(self.template)",
    message="replicas and template go together: set both (managed mode) or neither (adopted mode)",
)
RULE_GRACE_ONLY_ADOPTED: Final = CelRule(
    rule="!has(self.replacementGracePeriodSeconds) || has(self.selector)",
    message="replacementGracePeriodSeconds applies to adopted mode (selector) only",
)
RULE_PREFIX_DERIVABLE: Final = CelRule(
    rule="(has(self.membership) && has(self.membership.instanceIdPrefix)) || "
    f"(size(self.groupId) <= {INSTANCE_ID_PREFIX_MAX_LENGTH} && "
    f"self.groupId.matches('{INSTANCE_ID_PREFIX_PATTERN}'))",
    message="set membership.instanceIdPrefix: groupId cannot serve as the instance id prefix "
    f"(that needs 1-{INSTANCE_ID_PREFIX_MAX_LENGTH} characters of A-Z a-z 0-9 - _ . "
    "starting and ending with a letter or digit)",
)
RULE_GROUP_ID_IMMUTABLE: Final = CelRule(
    rule="self.groupId == oldSelf.groupId",
    message="groupId is immutable: create a new ConsumerGroup for another group",
)
_EFFECTIVE_PREFIX = (
    "(has({s}.membership) && has({s}.membership.instanceIdPrefix) "
    "? {s}.membership.instanceIdPrefix : {s}.groupId)"
)
RULE_PREFIX_IMMUTABLE: Final = CelRule(
    rule=_EFFECTIVE_PREFIX.format(s="self") + " == " + _EFFECTIVE_PREFIX.format(s="oldSelf"),
    message="the instance id prefix (membership.instanceIdPrefix, else groupId) is immutable: "
    "it names every member's group.instance.id",
)
RULE_PARTITIONS_UNLESS_KAFKA: Final = CelRule(
    rule="(has(self.coordinator) && has(self.coordinator.type) && "
    "self.coordinator.type == 'kafka') || self.topics.all(t, has(t.partitions))",
    message="topics[].partitions is required with the embedded coordinator (on a Kafka "
    "cluster the operator reads partition counts from the cluster)",
)
RULE_COORDINATOR_TYPE_IMMUTABLE: Final = CelRule(
    rule="(has(self.coordinator) && has(self.coordinator.type) ? self.coordinator.type : "
    "'embedded') == (has(oldSelf.coordinator) && has(oldSelf.coordinator.type) ? "
    "oldSelf.coordinator.type : 'embedded')",
    message="coordinator.type is immutable: a group's state lives in its coordinator; create "
    "a new ConsumerGroup to move a fleet",
)
RULE_CONSUMER_NEEDS_KAFKA: Final = CelRule(
    rule="!has(self.rebalance) || !has(self.rebalance.protocol) || "
    "self.rebalance.protocol != 'consumer' || "
    "(has(self.coordinator) && has(self.coordinator.type) && self.coordinator.type == 'kafka')",
    message="rebalance.protocol consumer is Kafka's consumer group protocol (KIP-848): it "
    "needs coordinator type kafka (the embedded coordinator speaks the classic protocol only)",
)
RULE_SOURCE_ONLY_EMBEDDED: Final = CelRule(
    rule="!has(self.source) || !has(self.coordinator) || !has(self.coordinator.type) || "
    "self.coordinator.type != 'kafka'",
    message="source applies to the embedded coordinator only (a Kafka-coordinated group's "
    "lag is read from coordinator.bootstrapServers, where its commits are)",
)
SPEC_RULES: Final = (
    RULE_ONE_MODE,
    RULE_TEMPLATE_WITH_REPLICAS,
    RULE_GRACE_ONLY_ADOPTED,
    RULE_PREFIX_DERIVABLE,
    RULE_GROUP_ID_IMMUTABLE,
    RULE_PREFIX_IMMUTABLE,
    RULE_PARTITIONS_UNLESS_KAFKA,
    RULE_COORDINATOR_TYPE_IMMUTABLE,
    RULE_CONSUMER_NEEDS_KAFKA,
    RULE_SOURCE_ONLY_EMBEDDED,
)
RULE_KAFKA_NEEDS_BOOTSTRAP: Final = CelRule(
    rule="has(self.type) && self.type == 'kafka' ? has(self.bootstrapServers) : "
    "(!has(self.bootstrapServers) && !has(self.clientSecretRef))",
    message="coordinator type kafka needs bootstrapServers; bootstrapServers and "
    "clientSecretRef apply to type kafka only",
)
RULE_STOCK_CLIENTS_NEED_KAFKA: Final = CelRule(
    rule="!has(self.clientFamily) || self.clientFamily == 'staticfleet' || "
    "(has(self.type) && self.type == 'kafka')",
    message="clientFamily java, librdkafka and kafka-python speak Kafka's protocol: they need "
    "coordinator type kafka",
)
RULE_KAFKA_SETTINGS_NEED_KAFKA: Final = CelRule(
    rule="!has(self.kafka) || (has(self.type) && self.type == 'kafka')",
    message="coordinator.kafka (authentication, tls) applies to coordinator type kafka only",
)
COORDINATOR_RULES: Final = (
    RULE_KAFKA_NEEDS_BOOTSTRAP,
    RULE_STOCK_CLIENTS_NEED_KAFKA,
    RULE_KAFKA_SETTINGS_NEED_KAFKA,
)
# spec.coordinator.kafka.authentication, Strimzi's KafkaClientAuthentication shape: each type
# with exactly its own fields.
_SASL_FIELDS = ("username", "passwordSecret")
_TLS_FIELDS = ("certificateAndKey",)
_OAUTH_FIELDS = ("tokenEndpointUri", "clientId", "clientSecret", "scope")


def _auth_rule(types: str, needs: Sequence[str], allowed: Sequence[str], message: str) -> CelRule:
    others = [f for f in (*_SASL_FIELDS, *_TLS_FIELDS, *_OAUTH_FIELDS) if f not in allowed]
    condition = " && ".join([f"has(self.{f})" for f in needs] + [f"!has(self.{f})" for f in others])
    return CelRule(rule=f"!({types}) || ({condition})", message=message)


RULE_AUTH_SASL_FIELDS: Final = _auth_rule(
    "self.type in ['scram-sha-512', 'scram-sha-256', 'plain']",
    _SASL_FIELDS,
    _SASL_FIELDS,
    "authentication types scram-sha-512, scram-sha-256 and plain need username and "
    "passwordSecret, and take no certificateAndKey or oauth fields",
)
RULE_AUTH_TLS_FIELDS: Final = _auth_rule(
    "self.type == 'tls'",
    _TLS_FIELDS,
    _TLS_FIELDS,
    "authentication type tls needs certificateAndKey, and takes no username, passwordSecret "
    "or oauth fields",
)
RULE_AUTH_OAUTH_FIELDS: Final = _auth_rule(
    "self.type == 'oauth'",
    ("tokenEndpointUri", "clientId", "clientSecret"),
    _OAUTH_FIELDS,
    "authentication type oauth needs tokenEndpointUri, clientId and clientSecret, and takes "
    "no username, passwordSecret or certificateAndKey",
)
AUTHENTICATION_RULES: Final = (
    RULE_AUTH_SASL_FIELDS,
    RULE_AUTH_TLS_FIELDS,
    RULE_AUTH_OAUTH_FIELDS,
)
RULE_TLS_AUTH_NEEDS_TLS: Final = CelRule(
    rule="!has(self.authentication) || self.authentication.type != 'tls' || has(self.tls)",
    message="authentication type tls (client certificates) needs tls: set tls (its "
    "trustedCertificates may be empty to trust the system's CAs)",
)
KAFKA_CLIENT_RULES: Final = (RULE_TLS_AUTH_NEEDS_TLS,)
RULE_SELECTOR_NOT_EMPTY: Final = CelRule(
    rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || "
    "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
    message="selector must not be empty: an empty selector would adopt every pod in the namespace",
)
RULE_REQUIREMENT_VALUES: Final = CelRule(
    rule="self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) "
    ": (!has(self.values) || size(self.values) == 0)",
    message="operators In and NotIn need values; Exists and DoesNotExist take none",
)

# --------------------------------------------------------------------------- enums
# The fleet's target protocol (spec.rebalance.protocol, status.rollout.toProtocol) is
# FleetProtocol: KIP-429's two (the values of the assignors' RebalanceProtocol) and Kafka's
# consumer group protocol.


class FleetProtocol(StrEnum):
    """What the fleet runs once its rollout is done (spec.rebalance.protocol): KIP-429's eager
    or cooperative on the classic protocol, or Kafka's consumer group protocol (KIP-848, the
    broker assigns; Kafka-coordinated groups only). Moving to or from consumer is one static
    rolling bounce (docs/operator.md, "Migrating a fleet to the consumer protocol")."""

    EAGER = "eager"
    COOPERATIVE = "cooperative"
    CONSUMER = "consumer"


# What one member runs (and is told through STATICFLEET_REBALANCE_PROTOCOL) is the member
# client's own RebalanceProtocolSetting (eager, compatible or cooperative), so the value the
# operator writes is by construction one the member reads.


class EagerAssignor(StrEnum):
    """Assignor used while the group runs the eager protocol."""

    RANGE = "range"
    ROUNDROBIN = "roundrobin"
    STICKY = "sticky"


class CooperativeAssignor(StrEnum):
    """Assignor used while the group runs the cooperative protocol (also offered first by
    members in the compatible phase)."""

    COOPERATIVE_STICKY = "cooperative-sticky"
    STATIC_STICKY = "static-sticky"


class RemoteAssignor(StrEnum):
    """The broker's assignor of a consumer-protocol group (`group.remote.assignor`)."""

    UNIFORM = "uniform"
    RANGE = "range"


class CoordinatorType(StrEnum):
    """Where the group's coordinator runs: the operator's embedded one, or a Kafka cluster."""

    EMBEDDED = "embedded"
    KAFKA = "kafka"


class ClientFamily(StrEnum):
    """The Kafka client library the members use: it decides how the assignment strategy is
    spelled in their configuration and whether the KIP-429 two-bounce is possible (librdkafka
    and kafka-python refuse a list mixing eager and cooperative assignors)."""

    STATICFLEET = "staticfleet"
    JAVA = "java"
    LIBRDKAFKA = "librdkafka"
    KAFKA_PYTHON = "kafka-python"

    @property
    def mixes_assignors(self) -> bool:
        """Whether members can offer an eager and a cooperative assignor at once."""
        return self in (ClientFamily.STATICFLEET, ClientFamily.JAVA)


class ProtocolChange(StrEnum):
    """How the fleet moves between eager and cooperative. TwoBounce: KIP-429's two rolling
    bounces through the compatible protocol, no stop. Switch: every member is stopped, the
    operator removes every instance id in one batch LeaveGroup and restarts all of them on the
    target protocol (one rebalance, the fleet consumes nothing meanwhile); the only way for
    clients that cannot mix assignors (librdkafka, kafka-python)."""

    TWO_BOUNCE = "TwoBounce"
    SWITCH = "Switch"


class SelectorOperator(StrEnum):
    """A label selector requirement's operator."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class ObservedGroupState(StrEnum):
    """The group's state as the operator last saw it: the coordinator's `GroupState`
    (coordinator.state), or Unknown until it has been observed (or while it cannot be)."""

    UNKNOWN = "Unknown"
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupProtocol(StrEnum):
    """How the group's coordinator runs it: classic (JoinGroup/SyncGroup, rebalances ending
    Stable) or consumer (Kafka's KIP-848 protocol: the broker assigns, members reconcile
    towards a target assignment)."""

    CLASSIC = "classic"
    CONSUMER = "consumer"


class RolloutPhase(StrEnum):
    """Where the rollout is. Idle: no rollout has run yet. Bounce1: first bounce of a protocol
    change, members restarted one at a time with the compatible protocol. VerifyCompatible:
    between the bounces, waiting until every member offers the target protocol and the group
    is Stable with the expected member count. Bounce2: final bounce, members restarted one at
    a time with the target protocol. StaticBounce: a change that needs no protocol change, one
    static rolling bounce (no rebalance expected). ConsumerMigration: one static rolling bounce
    to Kafka's consumer protocol, or from it back to eager or cooperative, each member's step
    waiting for the group to converge (or be Stable). Paused: a member did not rejoin in time or
    verification failed; nothing proceeds (pausedPhase says where it stopped). Completed: the
    last rollout finished; its record stays until the next one starts."""

    IDLE = "Idle"
    BOUNCE1 = "Bounce1"
    VERIFY_COMPATIBLE = "VerifyCompatible"
    BOUNCE2 = "Bounce2"
    STATIC_BOUNCE = "StaticBounce"
    CONSUMER_MIGRATION = "ConsumerMigration"
    PAUSED = "Paused"
    COMPLETED = "Completed"


# Phases in which members are being bounced (the Progressing condition is True in these).
ROLLING_PHASES: Final = frozenset(
    {
        RolloutPhase.BOUNCE1,
        RolloutPhase.VERIFY_COMPATIBLE,
        RolloutPhase.BOUNCE2,
        RolloutPhase.STATIC_BOUNCE,
        RolloutPhase.CONSUMER_MIGRATION,
    }
)
# Phases with no rollout under way (Completed keeps the last one's record).
SETTLED_PHASES: Final = frozenset({RolloutPhase.IDLE, RolloutPhase.COMPLETED})


def bounce_phase(
    bounces: Sequence[RebalanceProtocolSetting],
    index: int,
    from_protocol: RebalanceProtocolSetting | None,
) -> RolloutPhase:
    """The phase that names bounce `index` of a planned rollout: a two-bounce protocol change
    is Bounce1 then Bounce2; a single bounce is Bounce2 when it changes the protocol (a fleet
    left in compatible going straight to its target) and StaticBounce when it does not; a
    bounce onto or off Kafka's consumer protocol is ConsumerMigration."""
    if not 0 <= index < len(bounces):
        raise ValueError(f"bounce index {index} outside {len(bounces)} planned bounces")
    migrates = RebalanceProtocolSetting.CONSUMER in (bounces[0], from_protocol)
    if len(bounces) == 1 and bounces[0] != from_protocol and migrates:
        return RolloutPhase.CONSUMER_MIGRATION
    if len(bounces) == 1:
        return RolloutPhase.STATIC_BOUNCE if bounces[0] == from_protocol else RolloutPhase.BOUNCE2
    return RolloutPhase.BOUNCE1 if index < len(bounces) - 1 else RolloutPhase.BOUNCE2


class ConditionType(StrEnum):
    """The condition types this operator sets (status.conditions[].type)."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Mode(StrEnum):
    """Who creates the member pods (derived from the spec, not a field of its own)."""

    MANAGED = "managed"  # replicas + template: the operator creates and deletes the pods
    ADOPTED = "adopted"  # selector: someone else does (Spark driver, Deployment, StatefulSet)


# --------------------------------------------------------------------------- base models

_COMMON_CONFIG = ConfigDict(
    alias_generator=to_camel,
    # Python code builds models by snake_case name; wire data is read by alias only
    # (`parse_spec` passes by_name=False) so `group_id:` in a manifest is an error, not a synonym.
    validate_by_name=True,
    validate_by_alias=True,
    serialize_by_alias=True,
    use_attribute_docstrings=True,
)


class SpecModel(BaseModel):
    """Base of the spec models: unknown fields are errors. The API server prunes unknown fields
    anyway; refusing them here catches typos in manifests checked without an API server."""

    model_config = ConfigDict(**_COMMON_CONFIG, extra="forbid")


class StatusModel(BaseModel):
    """Base of the status models: unknown fields are ignored, so an operator that was rolled
    back can still read (and resume from) a status written by a newer one."""

    model_config = ConfigDict(**_COMMON_CONFIG, extra="ignore")

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready camelCase dict without unset (None) fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --------------------------------------------------------------------------- spec


class TopicSpec(SpecModel):
    """A topic the group consumes and its partition count (the coordinator's topic metadata)."""

    name: KafkaName
    """Topic name (Kafka's rules: 1-249 characters of a-z A-Z 0-9 . _ -)."""
    partitions: int | None = Field(default=None, ge=1, le=MAX_PARTITIONS)
    """Number of partitions. Required with the embedded coordinator; on a Kafka cluster the
    cluster's count is used and this is ignored."""


class PodTemplateMetadata(SpecModel):
    """Labels and annotations for the member pods; other metadata is kept but not used."""

    model_config = ConfigDict(extra="allow")

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class ContainerSpec(SpecModel):
    """A container of the member pod (a core/v1 Container; only `name` is checked here)."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)


class PodSpec(SpecModel):
    """The member pod's spec (a core/v1 PodSpec; only `containers` is checked here, the API
    server validates the rest when the operator creates the pod)."""

    model_config = ConfigDict(extra="allow")

    containers: list[ContainerSpec] = Field(min_length=1)


class PodTemplate(SpecModel):
    """A core/v1 PodTemplateSpec for the member pods of a managed group. The operator adds the
    member environment (coordinator URL, group id, instance id, protocol, assignors, timeouts,
    token), the slot annotation and its labels."""

    # A PodTemplateSpec has no apiVersion/kind, so x-kubernetes-embedded-resource (which
    # requires them) does not fit; the schema types what the operator reads and preserves
    # the rest, and the API server validates the whole pod at creation.
    model_config = ConfigDict(extra="allow")

    metadata: PodTemplateMetadata | None = None
    spec: PodSpec


class LabelSelectorRequirement(SpecModel):
    """One match expression of a label selector."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [RULE_REQUIREMENT_VALUES.as_json()]}
    )

    key: str = Field(min_length=1, max_length=317)
    """Label key."""
    operator: SelectorOperator
    """In, NotIn, Exists or DoesNotExist."""
    # Bounded so the API server's CEL cost estimate for the rule above stays small.
    values: list[Annotated[str, Field(max_length=63)]] | None = Field(default=None, max_length=256)
    """Values for In and NotIn; empty for Exists and DoesNotExist."""

    @model_validator(mode="after")
    def _values_fit_operator(self) -> Self:
        needs_values = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if needs_values != bool(self.values):
            raise ValueError(RULE_REQUIREMENT_VALUES.message)
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        values = self.values or []
        match self.operator:
            case SelectorOperator.IN:
                return self.key in labels and labels[self.key] in values
            case SelectorOperator.NOT_IN:
                # Kubernetes: NotIn matches pods without the label too.
                return labels.get(self.key) not in values
            case SelectorOperator.EXISTS:
                return self.key in labels
            case SelectorOperator.DOES_NOT_EXIST:
                return self.key not in labels


class LabelSelector(SpecModel):
    """A metav1.LabelSelector picking the adopted member pods (for example
    spark-role=executor plus spark-app-selector). It must not be empty."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [RULE_SELECTOR_NOT_EMPTY.as_json()],
            # As metav1.LabelSelector: one owner replaces the selector as a whole.
            "x-kubernetes-map-type": "atomic",
        }
    )

    match_labels: dict[str, str] | None = None
    """Labels a pod must carry, all of them."""
    match_expressions: list[LabelSelectorRequirement] | None = Field(default=None, max_length=32)
    """Requirements a pod must meet, all of them."""

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if not self.match_labels and not self.match_expressions:
            raise ValueError(RULE_SELECTOR_NOT_EMPTY.message)
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with these labels is selected (Kubernetes' semantics)."""
        if any(labels.get(key) != value for key, value in (self.match_labels or {}).items()):
            return False
        return all(requirement.matches(labels) for requirement in self.match_expressions or [])


class MembershipSpec(SpecModel):
    """How members identify themselves to the coordinator."""

    instance_id_prefix: InstanceIdPrefix | None = None
    """Prefix of every member's group.instance.id, which is <prefix>-<slot>. Defaults to the
    groupId (which then must fit these rules). Cannot change once set."""
    session_timeout_ms: int = Field(default=45_000, ge=6_000, le=1_800_000)
    """Session timeout: how long a member may be silent (for example while its pod restarts)
    before the coordinator removes it and rebalances."""
    rebalance_timeout_ms: int = Field(default=300_000, ge=1_000, le=MAX_REBALANCE_TIMEOUT_MS)
    """How long the coordinator waits for every member to rejoin during a rebalance."""


class RebalanceSpec(SpecModel):
    """The rebalance protocol and assignors. Changing protocol starts a rollout."""

    protocol: FleetProtocol = FleetProtocol.EAGER
    """eager, cooperative or consumer. eager -> cooperative (and back) is done in two rolling
    bounces through the compatible protocol. consumer (Kafka-coordinated groups only) is
    Kafka's consumer group protocol (KIP-848): the move to it, or back to eager or
    cooperative, is one static rolling bounce after pre-checks of the broker, the group and
    the client family."""
    eager_assignor: EagerAssignor = EagerAssignor.RANGE
    """Assignor of the eager protocol: range, roundrobin or sticky."""
    cooperative_assignor: CooperativeAssignor = CooperativeAssignor.COOPERATIVE_STICKY
    """Assignor of the cooperative protocol: cooperative-sticky or static-sticky."""
    remote_assignor: RemoteAssignor | None = None
    """With protocol consumer: the broker's assignor the members ask for (uniform or range).
    Unset: range when eagerAssignor is range, else uniform."""
    protocol_change: ProtocolChange = ProtocolChange.TWO_BOUNCE
    """How a protocol change is rolled out: TwoBounce (KIP-429, no stop; not possible for
    librdkafka and kafka-python clients, which the operator then refuses) or Switch (stop the
    fleet, one batch LeaveGroup, restart everyone: one rebalance and a gap in consumption)."""


class RolloutSpec(SpecModel):
    """How the operator restarts members when their configuration changes."""

    max_unavailable: int = Field(default=1, ge=1)
    """Members restarted at once. Protocol changes always bounce one member at a time
    (KIP-429 needs it), whatever this says."""
    member_ready_timeout_seconds: int = Field(default=300, ge=10)
    """How long a restarted member may take to rejoin (and the group to become Stable)
    before the rollout pauses with a Degraded condition."""


# A percentage as Kubernetes' IntOrString takes it for a PodDisruptionBudget: 0% to 100%.
PERCENT_PATTERN: Final = r"^(100|[1-9]?[0-9])%$"
RULE_MAX_UNAVAILABLE: Final = CelRule(
    rule=f"type(self) == int ? self >= 0 : self.matches('{PERCENT_PATTERN}')",
    message="maxUnavailable is an integer >= 0 or a percentage from 0% to 100%",
)


class DisruptionSpec(SpecModel):
    """Managed mode: the PodDisruptionBudget `<group>-members` the operator keeps over the
    member pods (voluntary disruptions: drains, evictions; the operator's own rollout
    deletes pods directly and is not held by it)."""

    max_unavailable: int | str = Field(
        default=1,
        json_schema_extra={
            "x-kubernetes-int-or-string": True,
            "x-kubernetes-validations": [RULE_MAX_UNAVAILABLE.as_json()],
        },
    )
    """Member pods an eviction may leave unavailable: an integer >= 0 or a percentage
    ("25%") of the member pods, as a PodDisruptionBudget's maxUnavailable."""

    @field_validator("max_unavailable")
    @classmethod
    def _int_or_percentage(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value >= 0:
            return value
        if isinstance(value, str) and re.fullmatch(PERCENT_PATTERN, value):
            return value
        raise ValueError(RULE_MAX_UNAVAILABLE.message)


class ScaleUpSpec(SpecModel):
    """How the operator grows a managed group (embedded coordinator only: Kafka has no way to
    tell its coordinator which members to expect, so a Kafka-coordinated group rebalances as
    its new members arrive)."""

    expect_members: bool = True
    """Before creating new member pods, tell the coordinator to expect every member's
    instance id (its expected members): the group's join phase then waits for all of them
    and the scale-up is one rebalance. Cleared on scale-down and delete."""
    expected_members_timeout_seconds: int = Field(default=120, ge=1, le=300)
    """How long the join phase waits for expected members that have not joined (pods not
    scheduled, images still pulling); then it completes with those present and late members
    join as usual. At most 300 (the coordinator's new-member join timeout)."""


class ScaleDownSpec(SpecModel):
    """How the operator shrinks a managed group (scaling.py): each step down is a batch
    LeaveGroup, one rebalance."""

    stabilization_window_seconds: int = Field(default=30, ge=0, le=3600)
    """A scale-down goes to the highest spec.replicas asked for within this many seconds (an
    HorizontalPodAutoscaler's behavior.scaleDown.stabilizationWindowSeconds), so a count
    that flaps costs no rebalance per flap; status.scaleDownHeld says when one is held. 0:
    scale down at once. Scale-up is never held."""


class SecretKeyRef(SpecModel):
    """A key of a Secret in the ConsumerGroup's namespace."""

    name: ObjectName
    """Secret name."""
    key: str = Field(default="token", min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)
    """Key in the Secret's data."""


ENV_NAME_PATTERN: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
EnvName = Annotated[str, Field(min_length=1, max_length=253, pattern=ENV_NAME_PATTERN)]
# host:port[,host:port...]: what every Kafka client takes as bootstrap.servers.
_BROKER = r"[A-Za-z0-9.\[\]:_-]+:[0-9]{1,5}"
BOOTSTRAP_SERVERS_PATTERN: Final = rf"^{_BROKER}(,{_BROKER})*$"


class SecretRef(SpecModel):
    """A Secret in the ConsumerGroup's namespace."""

    name: ObjectName
    """Secret name."""


class ClientEnvNames(SpecModel):
    """Names of the environment variables member pods of a Kafka-coordinated group get (stock
    clients read configuration from env under names of their image's choosing). The defaults
    fit images that map KAFKA_* variables to client properties."""

    instance_id: EnvName = "KAFKA_GROUP_INSTANCE_ID"
    """group.instance.id (<prefix>-<slot>)."""
    group_id: EnvName = "KAFKA_GROUP_ID"
    """group.id."""
    bootstrap_servers: EnvName = "KAFKA_BOOTSTRAP_SERVERS"
    """bootstrap.servers."""
    assignment_strategy: EnvName = "KAFKA_PARTITION_ASSIGNMENT_STRATEGY"
    """partition.assignment.strategy of the current rollout phase, spelled for clientFamily."""
    topics: EnvName = "KAFKA_TOPICS"
    """The topics, comma-separated."""
    client_config: EnvName = "KAFKA_CLIENT_CONFIG"
    """With `kafka` set: the path of the mounted client configuration file (TLS, SASL) in
    clientFamily's dialect (java, librdkafka: .properties; kafka-python: JSON)."""


class KafkaAuthenticationType(StrEnum):
    """Strimzi's authentication types (KafkaClientAuthentication)."""

    SCRAM_SHA_512 = "scram-sha-512"
    SCRAM_SHA_256 = "scram-sha-256"
    PLAIN = "plain"
    TLS = "tls"
    OAUTH = "oauth"


SecretKey = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)]


class PasswordSecretSource(SpecModel):
    """A password in a Secret of the ConsumerGroup's namespace."""

    secret_name: ObjectName
    """Secret name."""
    password: SecretKey
    """Key of the password in the Secret's data."""


class CertAndKeySecretSource(SpecModel):
    """A client certificate and its private key (PEM) in a Secret of the ConsumerGroup's
    namespace."""

    secret_name: ObjectName
    """Secret name."""
    certificate: SecretKey
    """Key of the PEM certificate (chain) in the Secret's data, e.g. user.crt or tls.crt."""
    key: SecretKey
    """Key of the PEM private key (unencrypted) in the Secret's data, e.g. user.key."""


class GenericSecretSource(SpecModel):
    """A value in a Secret of the ConsumerGroup's namespace."""

    secret_name: ObjectName
    """Secret name."""
    key: SecretKey
    """Key in the Secret's data."""


class CertSecretSource(SpecModel):
    """A trusted CA certificate (PEM) in a Secret of the ConsumerGroup's namespace."""

    secret_name: ObjectName
    """Secret name."""
    certificate: SecretKey
    """Key of the PEM certificate(s) in the Secret's data, e.g. ca.crt."""


class KafkaClientAuthentication(SpecModel):
    """How the operator and the members authenticate to the cluster (Strimzi's
    KafkaClientAuthentication): SASL SCRAM or PLAIN with a username and password, TLS
    client certificates, or OAUTHBEARER with the OIDC client-credentials flow."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [r.as_json() for r in AUTHENTICATION_RULES]}
    )

    type: KafkaAuthenticationType
    """scram-sha-512, scram-sha-256, plain, tls or oauth."""
    username: str | None = Field(default=None, min_length=1, max_length=256)
    """scram-sha-512, scram-sha-256, plain: the user name."""
    password_secret: PasswordSecretSource | None = None
    """scram-sha-512, scram-sha-256, plain: where the password is."""
    certificate_and_key: CertAndKeySecretSource | None = None
    """tls: the client certificate and key (the principal is the certificate's subject)."""
    token_endpoint_uri: str | None = Field(
        default=None, max_length=2048, json_schema_extra={"pattern": r"^https?://[^/\s]+"}
    )
    """oauth: the OIDC token endpoint (client-credentials grant)."""
    client_id: str | None = Field(default=None, min_length=1, max_length=256)
    """oauth: the OAuth client id."""
    client_secret: GenericSecretSource | None = None
    """oauth: where the OAuth client secret is."""
    scope: str | None = Field(default=None, min_length=1, max_length=1024)
    """oauth: the scope asked for (optional)."""

    @model_validator(mode="after")
    def _fields_of_type(self) -> Self:
        problems = authentication_rule_problems(self)
        if problems:
            raise _RuleViolations(problems)
        return self


_AUTH_WIRE_FIELDS: Final = {
    "username": "username",
    "passwordSecret": "password_secret",
    "certificateAndKey": "certificate_and_key",
    "tokenEndpointUri": "token_endpoint_uri",
    "clientId": "client_id",
    "clientSecret": "client_secret",
    "scope": "scope",
}


def authentication_rule_problems(auth: KafkaClientAuthentication) -> list[str]:
    """The CEL rules of `KafkaClientAuthentication`, in Python."""
    present = {wire for wire, name in _AUTH_WIRE_FIELDS.items() if getattr(auth, name) is not None}
    kinds = (
        (("scram-sha-512", "scram-sha-256", "plain"), _SASL_FIELDS, _SASL_FIELDS),
        (("tls",), _TLS_FIELDS, _TLS_FIELDS),
        (("oauth",), ("tokenEndpointUri", "clientId", "clientSecret"), _OAUTH_FIELDS),
    )
    for (types, needs, allowed), rule in zip(kinds, AUTHENTICATION_RULES, strict=True):
        if auth.type.value in types and (not set(needs) <= present or not present <= set(allowed)):
            return [rule.message]
    return []


class ClientTls(SpecModel):
    """TLS to the cluster (Strimzi's ClientTls): present means TLS is on."""

    trusted_certificates: list[CertSecretSource] = Field(default_factory=list, max_length=16)
    """CA certificates the brokers' certificates are checked against; empty: the system's
    trusted CAs."""


class KafkaClientSpec(SpecModel):
    """How the operator and the member pods connect to the Kafka cluster: TLS and
    authentication (Strimzi's shape). Absent: the operator's --kafka-config settings (or
    PLAINTEXT) for its own connection, and nothing given to the members."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [r.as_json() for r in KAFKA_CLIENT_RULES]}
    )

    authentication: KafkaClientAuthentication | None = None
    """Authentication; absent: none (PLAINTEXT or SSL)."""
    tls: ClientTls | None = None
    """TLS; present turns it on (SSL, or SASL_SSL with a SASL authentication)."""

    @model_validator(mode="after")
    def _tls_for_certificates(self) -> Self:
        auth = self.authentication
        if auth is not None and auth.type is KafkaAuthenticationType.TLS and self.tls is None:
            raise _RuleViolations([RULE_TLS_AUTH_NEEDS_TLS.message])
        return self


class CoordinatorSpec(SpecModel):
    """Which coordinator runs the group: the embedded one (default) or a Kafka cluster's."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [r.as_json() for r in COORDINATOR_RULES]}
    )

    type: CoordinatorType = CoordinatorType.EMBEDDED
    """embedded or kafka. Immutable."""
    bootstrap_servers: str | None = Field(
        default=None, max_length=4096, json_schema_extra={"pattern": BOOTSTRAP_SERVERS_PATTERN}
    )
    """kafka: host:port[,host:port...] of the cluster, for the operator and the members."""
    client_secret_ref: SecretRef | None = None
    """kafka: a Secret of client settings given to member pods as env (envFrom), as is; the
    operator does not read it (prefer `kafka` for TLS and SASL)."""
    kafka: KafkaClientSpec | None = None
    """kafka: TLS and authentication for the operator's own connection and the members'
    (the operator writes each group a Secret of client configuration in its clientFamily's
    dialect and mounts it in the member pods). docs/operator.md, "Secured clusters"."""
    client_family: ClientFamily = ClientFamily.STATICFLEET
    """The members' client library: staticfleet, java, librdkafka or kafka-python."""
    env: ClientEnvNames = Field(default_factory=ClientEnvNames, json_schema_extra={"default": {}})
    """kafka: env variable names for the identity settings."""

    @model_validator(mode="after")
    def _fits_type(self) -> Self:
        problems = coordinator_rule_problems(self)
        if problems:
            raise _RuleViolations(problems)
        return self

    @property
    def is_kafka(self) -> bool:
        return self.type is CoordinatorType.KAFKA


class KafkaSourceSpec(KafkaClientSpec):
    """The Kafka cluster an embedded group's members read their topics from, for the
    operator's own connection (TLS and authentication as `coordinator.kafka`): it reads the
    topics' log end offsets there; the commits are in the embedded coordinator. The members'
    own source settings stay in their pod template (the operator does not interpret them)."""

    bootstrap_servers: str = Field(
        max_length=4096, json_schema_extra={"pattern": BOOTSTRAP_SERVERS_PATTERN}
    )
    """host:port[,host:port...] of the cluster."""

    @field_validator("bootstrap_servers")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        # Not Field(pattern=): pydantic's regex engine and the API server's differ on the
        # escapes (as coordinator.bootstrapServers, checked in coordinator_rule_problems).
        if not re.fullmatch(BOOTSTRAP_SERVERS_PATTERN, value):
            raise ValueError(f"bootstrapServers {value!r} is not host:port[,host:port...]")
        return value


class SourceSpec(SpecModel):
    """Where an embedded group's members read their records (for lag)."""

    kafka: KafkaSourceSpec
    """A Kafka cluster."""


def coordinator_rule_problems(coordinator: CoordinatorSpec) -> list[str]:
    problems: list[str] = []
    if coordinator.kafka is not None and not coordinator.is_kafka:
        problems.append(RULE_KAFKA_SETTINGS_NEED_KAFKA.message)
    if coordinator.is_kafka != (coordinator.bootstrap_servers is not None) or (
        not coordinator.is_kafka and coordinator.client_secret_ref is not None
    ):
        problems.append(RULE_KAFKA_NEEDS_BOOTSTRAP.message)
    if coordinator.client_family is not ClientFamily.STATICFLEET and not coordinator.is_kafka:
        problems.append(RULE_STOCK_CLIENTS_NEED_KAFKA.message)
    if coordinator.bootstrap_servers is not None and not re.fullmatch(
        BOOTSTRAP_SERVERS_PATTERN, coordinator.bootstrap_servers
    ):
        problems.append(
            f"bootstrapServers {coordinator.bootstrap_servers!r} is not host:port[,host:port...]"
        )
    return problems


class ConsumerGroupSpec(SpecModel):
    """The desired consumer group: which group and topics, which pods are its members
    (managed: replicas + template; adopted: selector), and how they rebalance."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [rule.as_json() for rule in SPEC_RULES]}
    )

    group_id: KafkaName
    """The consumer group id (Kafka's group.id). Immutable."""
    topics: list[TopicSpec] = Field(
        min_length=1,
        max_length=MAX_TOPICS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Topics the members subscribe to, with their partition counts; names are unique."""
    replicas: int | None = Field(default=None, ge=0)
    """Managed mode: number of member pods the operator runs from template."""
    template: PodTemplate | None = None
    """Managed mode: the member pod template."""
    selector: LabelSelector | None = None
    """Adopted mode: which existing pods (in this namespace) are members."""
    replacement_grace_period_seconds: int | None = Field(default=None, ge=0)
    """Adopted mode: how long a vanished pod's slot waits for a replacement before its member
    is removed with a LeaveGroup (default 60)."""
    membership: MembershipSpec = Field(
        default_factory=MembershipSpec, json_schema_extra={"default": {}}
    )
    """Member identity and timeouts."""
    rebalance: RebalanceSpec = Field(
        default_factory=RebalanceSpec, json_schema_extra={"default": {}}
    )
    """Rebalance protocol and assignors."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, json_schema_extra={"default": {}})
    """Rolling restart settings."""
    scale_up: ScaleUpSpec = Field(default_factory=ScaleUpSpec, json_schema_extra={"default": {}})
    """Managed mode: scale-up in one rebalance (the coordinator's expected members)."""
    scale_down: ScaleDownSpec = Field(
        default_factory=ScaleDownSpec, json_schema_extra={"default": {}}
    )
    """Managed mode: scale-down's stabilization window."""
    disruption: DisruptionSpec = Field(
        default_factory=DisruptionSpec, json_schema_extra={"default": {}}
    )
    """Managed mode: the member pods' PodDisruptionBudget."""
    standbys: int = Field(default=0, ge=0, le=100)
    """Managed mode on the embedded coordinator: hot standby member pods that hold no
    partitions. When an active member's pod is deleted, fails or loses its node, a Ready
    standby is promoted into its instance id and takes its assignment with no rebalance; a
    new standby replaces it. On a Kafka group of our members on the consumer protocol: the
    first N slots each get a standby waiting on the slot's instance id, which takes it over
    after a static leave for a dead pod's member. Ignored for other Kafka-coordinated groups
    (classic protocol, or clients that cannot wait on an instance id)."""
    token_secret_ref: SecretKeyRef | None = None
    """Secret holding the member token the coordinator checks (injected as STATICFLEET_TOKEN)."""
    coordinator: CoordinatorSpec = Field(
        default_factory=CoordinatorSpec, json_schema_extra={"default": {}}
    )
    """The group's coordinator: embedded (default) or a Kafka cluster."""
    source: SourceSpec | None = None
    """Embedded coordinator: the Kafka cluster the members read the topics from, so the
    operator reads the group's lag (log end offsets there, commits in the embedded
    coordinator). docs/operator.md, "Autoscaling"."""

    @model_validator(mode="after")
    def _cross_field_rules(self) -> Self:
        problems = spec_rule_problems(self)
        if problems:
            raise _RuleViolations(problems)
        return self

    @property
    def mode(self) -> Mode:
        return Mode.MANAGED if self.replicas is not None else Mode.ADOPTED

    @property
    def instance_id_prefix(self) -> str:
        return self.membership.instance_id_prefix or self.group_id

    def instance_id(self, slot: int) -> str:
        """The group.instance.id of the member in `slot`."""
        if slot < 0:
            raise ValueError(f"slot must be >= 0, not {slot}")
        return f"{self.instance_id_prefix}-{slot}"

    @property
    def effective_replacement_grace_period_seconds(self) -> int:
        if self.replacement_grace_period_seconds is None:
            return DEFAULT_REPLACEMENT_GRACE_PERIOD_SECONDS
        return self.replacement_grace_period_seconds

    @property
    def partitions_per_topic(self) -> dict[str, int]:
        """Topic metadata in the shape the coordinator takes it (topics with a count)."""
        return {
            topic.name: topic.partitions for topic in self.topics if topic.partitions is not None
        }


def spec_rule_problems(spec: ConsumerGroupSpec) -> list[str]:
    """The cross-field rules (the API server's CEL rules that need no old object, plus topic
    uniqueness, which the API server checks through the list-map keys)."""
    problems: list[str] = []
    if (spec.replicas is None) == (spec.selector is None):
        problems.append(RULE_ONE_MODE.message)
    if (spec.replicas is None) != (spec.template is None):
        problems.append(RULE_TEMPLATE_WITH_REPLICAS.message)
    if spec.replacement_grace_period_seconds is not None and spec.selector is None:
        problems.append(RULE_GRACE_ONLY_ADOPTED.message)
    if spec.membership.instance_id_prefix is None and instance_id_prefix_problem(spec.group_id):
        problems.append(RULE_PREFIX_DERIVABLE.message)
    names = [topic.name for topic in spec.topics]
    if not spec.coordinator.is_kafka and any(topic.partitions is None for topic in spec.topics):
        problems.append(RULE_PARTITIONS_UNLESS_KAFKA.message)
    if spec.rebalance.protocol is FleetProtocol.CONSUMER and not spec.coordinator.is_kafka:
        problems.append(RULE_CONSUMER_NEEDS_KAFKA.message)
    if spec.source is not None and spec.coordinator.is_kafka:
        problems.append(RULE_SOURCE_ONLY_EMBEDDED.message)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        problems.append(f"topics must be unique, repeated: {', '.join(duplicates)}")
    return problems


def spec_update_problems(old: ConsumerGroupSpec, new: ConsumerGroupSpec) -> list[str]:
    """The transition rules (the API server's CEL rules that compare with oldSelf)."""
    problems: list[str] = []
    if new.group_id != old.group_id:
        problems.append(RULE_GROUP_ID_IMMUTABLE.message)
    if new.instance_id_prefix != old.instance_id_prefix:
        problems.append(RULE_PREFIX_IMMUTABLE.message)
    if new.coordinator.type != old.coordinator.type:
        problems.append(RULE_COORDINATOR_TYPE_IMMUTABLE.message)
    return problems


class _RuleViolations(ValueError):
    """Several cross-field problems at once; `parse_spec` reports each on its own line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class InvalidSpecError(ValueError):
    """A spec the operator refuses; `errors` are human-readable, one per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def _format_location(location: tuple[int | str, ...]) -> str:
    path = "spec"
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _format_error(error: Mapping[str, Any]) -> list[str]:
    location = _format_location(tuple(error["loc"]))
    kind = error["type"]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, _RuleViolations):
        return [f"{location}: {problem}" for problem in cause.problems]
    if kind == "missing":
        message = "required field is missing"
    elif kind == "extra_forbidden":
        message = "unknown field"
    else:
        message = str(error["msg"]).removeprefix("Value error, ")
    return [f"{location}: {message}"]


def parse_spec(data: Mapping[str, Any]) -> ConsumerGroupSpec:
    """A spec as it comes from the API server (camelCase), or `InvalidSpecError`."""
    try:
        return ConsumerGroupSpec.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as error:
        raise InvalidSpecError(
            [line for item in error.errors() for line in _format_error(item)]
        ) from None


def validate_spec(data: Mapping[str, Any]) -> list[str]:
    """Human-readable problems of a spec (camelCase dict), empty when it is valid. The operator
    puts these in status (Ready=False, reason InvalidSpec) instead of acting on the spec."""
    try:
        parse_spec(data)
    except InvalidSpecError as error:
        return error.errors
    return []


# --------------------------------------------------------------------------- status


class PromotionStatus(StatusModel):
    """A hot standby promoted into a missing member's place (written before the promotion
    is made, so a restarted operator finishes it instead of starting another)."""

    standby: str
    """The standby pod promoted."""
    slot: int = Field(ge=0)
    """The slot (and instance id) it takes over."""
    instance_id: str
    """group.instance.id taken over."""
    rule: str = ""
    """Why: pod_deleted, pod_failed or node_lost_too."""
    started_at: datetime | None = None
    """When the operator decided it."""
    completed_at: datetime | None = None
    """When the coordinator had made it and the pod was relabeled into the slot."""


class MemberInstance(StatusModel):
    """One member slot: its instance id, the pod holding it and the coordinator's member id."""

    instance_id: str
    """group.instance.id (<prefix>-<slot>)."""
    slot: int = Field(ge=0)
    """Slot number."""
    pod: str | None = None
    """Name of the pod holding the slot, if any."""
    member_id: str | None = None
    """The coordinator's member id for this instance, if it has joined."""
    rebalance_protocol: RebalanceProtocolSetting | None = None
    """Protocol the pod was configured with (eager, compatible or cooperative)."""


class RolloutStatus(StatusModel):
    """Progress of the current (or last) rollout, complete enough that a restarted operator
    resumes exactly where it stopped: no member bounced twice, none skipped."""

    # The one model of a rollout's progress: the orchestrator (`rollout.decide`) returns a
    # new one with every decision, the operator writes it as status.rollout before acting
    # (write-ahead), the local adapter keeps it in a file. Frozen: a decision is a value.
    model_config = ConfigDict(frozen=True)

    phase: RolloutPhase = RolloutPhase.IDLE
    """Idle, Bounce1, VerifyCompatible, Bounce2, StaticBounce, Paused or Completed."""
    from_protocol: RebalanceProtocolSetting | None = None
    """Protocol the fleet ran when the rollout started."""
    to_protocol: FleetProtocol | None = None
    """Protocol the rollout ends at (spec.rebalance.protocol when it started)."""
    bounces: tuple[RebalanceProtocolSetting, ...] = ()
    """The planned bounces, one protocol each, in order: [compatible, cooperative] for an
    upgrade, [compatible, eager] for a downgrade, one entry for a static bounce."""
    # Strict: a slot or index of true is garbage, not 1.
    bounce_index: StrictInt = Field(default=0, ge=0)
    """Index into bounces of the current bounce."""
    template_hash: str | None = None
    """Hash of the pod template (and injected settings) the rollout recreates members with."""
    spec_generation: int | None = Field(default=None, ge=0)
    """metadata.generation of the spec the rollout was planned from."""
    bounced_slots: tuple[StrictInt, ...] = Field(
        default=(), json_schema_extra={"x-kubernetes-list-type": "set"}
    )
    """Slots recreated in the current bounce, in order; may include currentSlot while it
    is in flight. A slot is never listed twice."""
    pending_slots: tuple[StrictInt, ...] = ()
    """Slots still to restart in the current bounce, in order (the leader last)."""
    current_slot: StrictInt | None = Field(default=None, ge=0)
    """Slot being restarted now."""
    current_pod: str | None = None
    """Name of the pod being replaced in currentSlot."""
    current_pod_uid: str | None = None
    """UID of the pod being replaced: a pod in currentSlot with another UID is its
    replacement, so a restarted operator neither deletes it again nor waits for nothing."""
    current_member_id: str | None = None
    """Member id of the replaced incarnation: while the coordinator still lists it, the new
    pod has not rejoined."""
    current_slot_bounced_at: AwareDatetime | None = None
    """When the restart of currentSlot began."""
    waiting_since: AwareDatetime | None = None
    """When the rollout last made progress (memberReadyTimeoutSeconds counts from here)."""
    started_at: AwareDatetime | None = None
    """When the rollout started."""
    completed_at: AwareDatetime | None = None
    """When the rollout completed."""
    message: str = ""
    """What the rollout is doing or waiting for, or why it paused."""
    blocker: BlockerCode | None = None
    """What the rollout waits for, or paused on (the reason of the Degraded condition and
    of the pause's Event); unset while it makes progress."""

    @field_validator("message", mode="before")
    @classmethod
    def _no_message(cls, value: Any) -> Any:
        return "" if value is None else value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.bounces and not 0 <= self.bounce_index < len(self.bounces):
            raise ValueError(f"bounce index {self.bounce_index} outside {len(self.bounces)}")
        if self.active and not self.bounces:
            raise ValueError(f"a {self.phase.value} rollout needs at least one bounce")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def target_protocol(self) -> RebalanceProtocolSetting | None:
        """Protocol members are restarted with in the current bounce."""
        return self.bounce_protocol

    @computed_field  # type: ignore[prop-decorator]
    @property
    def paused_phase(self) -> RolloutPhase | None:
        """While Paused: the phase the rollout paused in, and resumes in."""
        if self.phase is not RolloutPhase.PAUSED or not self.bounces:
            return None
        return bounce_phase(self.bounces, self.bounce_index, self.from_protocol)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def progress(self) -> str | None:
        """Restarted/total members of the current bounce, e.g. 2/5 (for kubectl get)."""
        # Counted as sets so it reads right whether or not bouncedSlots includes the
        # slot in flight.
        in_flight = {self.current_slot} if self.current_slot is not None else set()
        everyone = set(self.bounced_slots) | set(self.pending_slots) | in_flight
        if not everyone:
            return None
        return f"{len(set(self.bounced_slots) - in_flight)}/{len(everyone)}"

    @property
    def active(self) -> bool:
        """A rollout is under way: rolling or paused (not Idle or Completed)."""
        return self.phase not in SETTLED_PHASES

    @property
    def progressing(self) -> bool:
        """Members are being bounced (an active rollout that is not paused)."""
        return self.phase in ROLLING_PHASES

    @property
    def bounce_protocol(self) -> RebalanceProtocolSetting | None:
        """The protocol the current bounce recreates members with."""
        return self.bounces[self.bounce_index] if self.active else None

    @property
    def bounce_label(self) -> str:
        if not self.active:
            return "no bounce"
        protocol = self.bounces[self.bounce_index].value
        return f"bounce {self.bounce_index + 1} of {len(self.bounces)} ({protocol})"

    def rolling(self) -> RolloutStatus:
        """This progress with the phase of a rollout under way: VerifyCompatible between
        the bounces (one finished, nobody in flight or pending), else the bounce's name."""
        between = (
            self.bounce_index + 1 < len(self.bounces)
            and not self.pending_slots
            and self.current_slot is None
            and bool(self.bounced_slots)
        )
        if between:
            phase = RolloutPhase.VERIFY_COMPATIBLE
        else:
            phase = bounce_phase(self.bounces, self.bounce_index, self.from_protocol)
        return self.model_copy(update={"phase": phase})


class Condition(StatusModel):
    """A metav1.Condition: Ready, Progressing or Degraded."""

    # A string, not ConditionType: an operator that was rolled back must still parse
    # conditions a newer one wrote.
    type: str = Field(min_length=1, max_length=316)
    """Ready, Progressing or Degraded."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str | None = Field(default=None, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    """Machine-readable CamelCase reason."""
    message: str | None = Field(default=None, max_length=32768)
    """Human-readable details."""
    last_transition_time: AwareDatetime | None = None
    """When status last changed."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation the condition was computed from."""


class ScaleDownHeldStatus(StatusModel):
    """A scale-down the operator has not made yet, and why."""

    replicas: int = Field(ge=0)
    """spec.replicas: the count asked for."""
    holding: int = Field(ge=0)
    """The count the fleet is kept at meanwhile."""
    reason: str
    """StabilizationWindow (a higher count was asked for within
    spec.scaleDown.stabilizationWindowSeconds) or RebalanceInProgress (the step in flight
    ends first; then one step to the latest count)."""
    until: datetime | None = None
    """StabilizationWindow: when the window lets the scale-down go, unless a higher count is
    asked for meanwhile. RebalanceInProgress: when it goes even if the group has not settled
    (rollout.memberReadyTimeoutSeconds after the hold began)."""


class ConsumerGroupStatus(StatusModel):
    """What the operator observed: the group in the coordinator, its members, the rollout."""

    observed_generation: int | None = None
    """metadata.generation of the spec last acted on."""
    group_state: ObservedGroupState | None = None
    """Empty, PreparingRebalance, CompletingRebalance, Stable, Dead, or Unknown."""
    generation: int | None = None
    """The group's generation id in the coordinator (a consumer-protocol group's epoch)."""
    group_protocol: GroupProtocol | None = None
    """classic, or consumer (KIP-848) when the Kafka cluster runs the group on the consumer
    protocol (ConsumerGroupDescribe)."""
    group_epoch: int | None = None
    """Consumer protocol: the group epoch (bumped on every membership or subscription
    change)."""
    assignment_epoch: int | None = None
    """Consumer protocol: the epoch of the target assignment (equal to the group epoch
    once the broker has assigned)."""
    converged: bool | None = None
    """Consumer protocol: every member at the group epoch holds its target assignment (what
    rollouts, replacements and scale-downs wait for, as Stable for a classic group)."""
    converged_members: int | None = Field(default=None, ge=0)
    """Consumer protocol: members at the group epoch holding their target assignment."""
    classic_members: int | None = Field(default=None, ge=0)
    """Consumer protocol: members still on the classic protocol (above 0: a migration)."""
    selected_protocol: str | None = None
    """Assignor (protocol name) the coordinator selected, e.g. range or cooperative-sticky."""
    effective_rebalance_protocol: RebalanceProtocolSetting | None = None
    """Protocol the fleet runs now: eager, compatible (mid-upgrade) or cooperative."""
    members: int | None = Field(default=None, ge=0)
    """Members in the group."""
    member_instances: list[MemberInstance] = Field(default_factory=list)
    """Per slot: instance id, pod and member id."""
    rollout: RolloutStatus = Field(default_factory=RolloutStatus)
    """Progress of the current or last rollout."""
    replicas: int | None = Field(default=None, ge=0)
    """Live member pods (not terminating, not finished; standbys not counted): the scale
    subresource's status.replicas, as a Deployment's."""
    selector: str | None = None
    """The member pods' label selector, serialized (the scale subresource's labelSelector,
    which an HorizontalPodAutoscaler reads); standby pods do not match it. Managed mode only."""
    lag: int | None = Field(default=None, ge=0)
    """Kafka-coordinated groups, and embedded groups with spec.source: records behind, summed
    over the spec's topics' partitions (log end offset - committed offset; a partition with
    no commit counts 0). Read at most every 15 seconds; kept as last read while the cluster
    does not answer (see lagTime)."""
    lag_partitions_without_commit: int | None = Field(default=None, ge=0)
    """Kafka-coordinated groups, and embedded groups with spec.source: partitions of the
    spec's topics the group has no commit for (their lag is not counted: where they start
    is the members' auto.offset.reset)."""
    lag_time: datetime | None = None
    """When lag was read as it stands (a reading that finds the same figures does not move
    it, so a fleet at rest costs no status write per read)."""

    @field_validator("rollout", mode="wrap")
    @classmethod
    def _fresh_if_unreadable(
        cls, value: Any, handler: ValidatorFunctionWrapHandler
    ) -> RolloutStatus:
        # An unreadable rollout record is not a reason to drop the rest of status: the
        # pods' recorded settings tell the orchestrator what it lost.
        try:
            rollout = handler(value)
        except ValidationError:
            return RolloutStatus()
        assert isinstance(rollout, RolloutStatus)
        return rollout

    scale_down_held: ScaleDownHeldStatus | None = None
    """Managed mode: a scale-down held back (unset when none is)."""
    missing_expected_members: list[str] = Field(default_factory=list)
    """Scale-up: the embedded coordinator's expected members that it does not list yet (its
    rebalance waits for them, up to scaleUp.expectedMembersTimeoutSeconds)."""
    standbys_ready: int | None = Field(default=None, ge=0)
    """Hot standby: standby pods the embedded coordinator hears from (ready to take over)."""
    promotions: list[PromotionStatus] = Field(default_factory=list)
    """Hot standby: promotions decided and not finished yet (write-ahead)."""
    last_promotion: PromotionStatus | None = None
    """Hot standby: the last promotion finished."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready, Progressing and Degraded."""

    def condition(self, condition_type: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == condition_type), None)

    def set_condition(
        self,
        condition_type: str,
        status: ConditionStatus,
        reason: str,
        message: str = "",
        *,
        observed_generation: int | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Add or update a condition; True when anything changed. lastTransitionTime moves
        only when the status flips (Kubernetes' convention), so it says how long a condition
        has held, not when the operator last looked."""
        when = (now or datetime.now(UTC)).replace(microsecond=0)
        new = Condition(
            type=condition_type,
            status=status,
            reason=reason,
            message=message,
            observed_generation=observed_generation,
            last_transition_time=when,
        )
        for index, old in enumerate(self.conditions):
            if old.type != condition_type:
                continue
            if old.status == status:
                new.last_transition_time = old.last_transition_time or when
            if new == old:
                return False
            self.conditions[index] = new
            return True
        self.conditions.append(new)
        return True

    def to_patch(self) -> dict[str, Any]:
        """A JSON merge patch body for the status subresource: like `to_wire`, but fields now
        unset are sent as null so the patch removes them (a merge patch keeps absent fields).
        Inside lists nothing is null: a merge patch replaces lists whole."""
        patch = self.model_dump(mode="json", by_alias=True)
        stripped = _drop_nulls_in_lists(patch)
        assert isinstance(stripped, dict)
        return stripped


def _drop_nulls_in_lists(value: Any, in_list: bool = False) -> Any:
    if isinstance(value, dict):
        return {
            key: _drop_nulls_in_lists(item, in_list)
            for key, item in value.items()
            if not (in_list and item is None)
        }
    if isinstance(value, list):
        return [_drop_nulls_in_lists(item, True) for item in value]
    return value


# --------------------------------------------------------------------------- whole object


class ConsumerGroup(BaseModel):
    """A whole ConsumerGroup object as read from a manifest or the API server."""

    model_config = ConfigDict(**_COMMON_CONFIG, extra="ignore")

    api_version: Literal["staticfleet.dev/v1alpha1"] = "staticfleet.dev/v1alpha1"
    kind: Literal["ConsumerGroup"] = "ConsumerGroup"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ConsumerGroupSpec
    status: ConsumerGroupStatus | None = None
