"""spec.coordinator (embedded | kafka), client families and protocolChange: the schema, the
CEL rules (cel-python, as test_crd.py) and the model agree; member env per family."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import ClientFamily, ProtocolChange, parse_spec, validate_spec
from staticfleet_operator.crd.models import (
    COORDINATOR_RULES,
    RULE_COORDINATOR_TYPE_IMMUTABLE,
    RULE_KAFKA_NEEDS_BOOTSTRAP,
    RULE_PARTITIONS_UNLESS_KAFKA,
    RULE_STOCK_CLIENTS_NEED_KAFKA,
    spec_update_problems,
)
from staticfleet_operator.kafka_clients import UnsupportedProtocol, assignment_strategy
from staticfleet_operator.members import MemberSettings, managed_pod
from tests.operator.test_crd import (
    MANAGED,
    Json,
    apply_defaults,
    cel,
    crd,
    failing_spec_rules,
    root_schema,
    schema_errors,
    spec_schema,
    with_changes,
)

__all__ = ["crd", "root_schema", "spec_schema"]  # fixtures used by name

KAFKA: Json = with_changes(
    MANAGED,
    topics=[{"name": "orders"}],
    coordinator={
        "type": "kafka",
        "bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092",
        "clientFamily": "java",
    },
)


def coordinator_failures(coordinator: Json, spec_schema: Json) -> list[str]:
    schema = spec_schema["properties"]["coordinator"]
    value = apply_defaults(copy.deepcopy(coordinator), schema)
    return [rule.message for rule in COORDINATOR_RULES if not cel(rule.rule, value)]


def test_kafka_spec_is_valid_everywhere(spec_schema: Json) -> None:
    assert validate_spec(KAFKA) == []
    assert schema_errors(spec_schema, KAFKA) == []
    assert failing_spec_rules(apply_defaults(copy.deepcopy(KAFKA), spec_schema)) == []
    assert coordinator_failures(KAFKA["coordinator"], spec_schema) == []
    spec = parse_spec(KAFKA)
    assert spec.coordinator.is_kafka and spec.coordinator.client_family is ClientFamily.JAVA
    assert spec.coordinator.env.instance_id == "KAFKA_GROUP_INSTANCE_ID"
    assert spec.rebalance.protocol_change is ProtocolChange.TWO_BOUNCE
    assert spec.partitions_per_topic == {}  # read from the cluster


def test_embedded_is_the_default_and_unchanged(spec_schema: Json) -> None:
    spec = parse_spec(MANAGED)
    assert not spec.coordinator.is_kafka
    defaulted = apply_defaults(copy.deepcopy(MANAGED), spec_schema)
    assert defaulted["coordinator"]["type"] == "embedded"
    assert failing_spec_rules(defaulted) == []


@pytest.mark.parametrize(
    ("coordinator", "rule"),
    [
        ({"type": "kafka"}, RULE_KAFKA_NEEDS_BOOTSTRAP),
        ({"type": "embedded", "bootstrapServers": "k:9092"}, RULE_KAFKA_NEEDS_BOOTSTRAP),
        ({"clientSecretRef": {"name": "tls"}}, RULE_KAFKA_NEEDS_BOOTSTRAP),
        ({"clientFamily": "librdkafka"}, RULE_STOCK_CLIENTS_NEED_KAFKA),
        ({"type": "kafka", "bootstrapServers": "k:9092", "clientFamily": "java"}, None),
    ],
)
def test_coordinator_rules_agree(coordinator: Json, rule: Any, spec_schema: Json) -> None:
    spec = with_changes(MANAGED, coordinator=coordinator)
    cel_failures = coordinator_failures(coordinator, spec_schema)
    model_failures = validate_spec(spec)
    if rule is None:
        assert cel_failures == [] and model_failures == []
    else:
        assert cel_failures == [rule.message]
        assert any(rule.message in line for line in model_failures), model_failures


def test_partitions_required_only_with_the_embedded_coordinator(spec_schema: Json) -> None:
    embedded = with_changes(MANAGED, topics=[{"name": "orders"}])
    assert RULE_PARTITIONS_UNLESS_KAFKA.message in failing_spec_rules(
        apply_defaults(copy.deepcopy(embedded), spec_schema)
    )
    assert any(RULE_PARTITIONS_UNLESS_KAFKA.message in p for p in validate_spec(embedded))


def test_bootstrap_servers_pattern(spec_schema: Json) -> None:
    bad = with_changes(KAFKA, coordinator={**KAFKA["coordinator"], "bootstrapServers": "k"})
    assert schema_errors(spec_schema, bad)
    assert validate_spec(bad)


def test_coordinator_type_is_immutable(spec_schema: Json) -> None:
    old = apply_defaults(copy.deepcopy(MANAGED), spec_schema)
    new = apply_defaults(copy.deepcopy(KAFKA), spec_schema)
    assert RULE_COORDINATOR_TYPE_IMMUTABLE.message in failing_spec_rules(new, old)
    assert RULE_COORDINATOR_TYPE_IMMUTABLE.message not in failing_spec_rules(new, new)
    assert RULE_COORDINATOR_TYPE_IMMUTABLE.message in spec_update_problems(
        parse_spec(MANAGED), parse_spec(KAFKA)
    )


JAVA = "org.apache.kafka.clients.consumer."


@pytest.mark.parametrize(
    ("family", "protocol", "expected"),
    [
        ("java", "eager", JAVA + "RangeAssignor"),
        ("java", "cooperative", JAVA + "CooperativeStickyAssignor"),
        ("java", "compatible", f"{JAVA}CooperativeStickyAssignor,{JAVA}RangeAssignor"),
        ("librdkafka", "eager", "range"),
        ("librdkafka", "cooperative", "cooperative-sticky"),
        ("kafka-python", "eager", "range"),
        ("librdkafka", "compatible", None),
        ("kafka-python", "compatible", None),
    ],
)
def test_assignment_strategy_per_family(family: str, protocol: str, expected: str | None) -> None:
    spec = parse_spec(
        with_changes(KAFKA, coordinator={**KAFKA["coordinator"], "clientFamily": family})
    )
    setting = RebalanceProtocolSetting(protocol)
    if expected is None:
        with pytest.raises(UnsupportedProtocol):
            assignment_strategy(spec, setting)
    else:
        assert assignment_strategy(spec, setting) == expected


def _env(pod: Json) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_java_pod_env_uses_the_configured_names() -> None:
    coordinator = {
        **KAFKA["coordinator"],
        "env": {"instanceId": "GROUP_INSTANCE_ID"},
        "clientSecretRef": {"name": "kafka-client"},
    }
    spec = parse_spec(with_changes(KAFKA, coordinator=coordinator))
    pod = managed_pod(
        spec,
        MemberSettings("http://unused", "orders"),
        namespace="ns",
        owner_uid="u",
        slot=2,
        protocol=RebalanceProtocolSetting.COMPATIBLE,
        pod_key="k",
    )
    values = _env(pod)
    assert values["GROUP_INSTANCE_ID"] == "orders-2"
    assert values["KAFKA_GROUP_ID"] == "orders"
    assert values["KAFKA_BOOTSTRAP_SERVERS"] == "kafka-0.kafka:9092,kafka-1.kafka:9092"
    assert values["KAFKA_PARTITION_ASSIGNMENT_STRATEGY"].startswith(JAVA + "Cooperative")
    assert env.TOKEN not in values  # the cluster authenticates members, not our token
    assert pod["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "kafka-client"}}]


def test_our_members_on_kafka_get_a_kafka_url() -> None:
    spec = parse_spec(
        with_changes(KAFKA, coordinator={**KAFKA["coordinator"], "clientFamily": "staticfleet"})
    )
    pod = managed_pod(
        spec,
        MemberSettings("http://unused", "orders"),
        namespace="ns",
        owner_uid="u",
        slot=0,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="k",
    )
    values = _env(pod)
    assert values[env.COORDINATOR_URL] == "kafka://kafka-0.kafka:9092,kafka-1.kafka:9092"
    assert values[env.INSTANCE_ID] == "orders-0"
    assert env.TOKEN not in values


def test_librdkafka_itself_refuses_the_compatible_list() -> None:
    """Why the operator refuses the two-bounce for librdkafka: the client will not even be
    created with an eager and a cooperative assignor together (confluent-kafka)."""
    with pytest.raises(KafkaException, match="same protocol type"):
        Consumer(
            {
                "bootstrap.servers": "127.0.0.1:1",
                "group.id": "g",
                "partition.assignment.strategy": "cooperative-sticky,range",
            }
        )
    Consumer(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "group.id": "g",
            "partition.assignment.strategy": "cooperative-sticky",
        }
    ).close()
