"""The ConsumerGroup CRD: models, generated schema, checked-in YAML, validation messages.

The CEL rules are evaluated here with cel-python, a local approximation of the API server's
cel-go; the e2e tier exercises them against a real API server.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from celpy.adapter import json_to_cel
from pydantic import BaseModel, ValidationError

from coordinator.client.config import RebalanceProtocolSetting
from coordinator.server.models import topic_problem
from coordinator.state import GroupState
from staticfleet.cli import main
from staticfleet_operator.crd import (
    CRD_NAME,
    SPEC_RULES,
    ConditionStatus,
    ConditionType,
    ConsumerGroup,
    ConsumerGroupSpec,
    ConsumerGroupStatus,
    FleetProtocol,
    InvalidSpecError,
    LabelSelector,
    MemberInstance,
    Mode,
    ObservedGroupState,
    RolloutPhase,
    RolloutStatus,
    SchemaError,
    bounce_phase,
    consumer_group_crd,
    generated_files,
    parse_spec,
    spec_rule_problems,
    spec_update_problems,
    structural_problems,
    validate_spec,
)
from staticfleet_operator.crd.models import (
    RULE_CONSUMER_NEEDS_KAFKA,
    RULE_COORDINATOR_TYPE_IMMUTABLE,
    RULE_GRACE_ONLY_ADOPTED,
    RULE_GROUP_ID_IMMUTABLE,
    RULE_MAX_UNAVAILABLE,
    RULE_ONE_MODE,
    RULE_PARTITIONS_UNLESS_KAFKA,
    RULE_PREFIX_DERIVABLE,
    RULE_PREFIX_IMMUTABLE,
    RULE_REQUIREMENT_VALUES,
    RULE_SELECTOR_NOT_EMPTY,
    RULE_SOURCE_ONLY_EMBEDDED,
    RULE_TEMPLATE_WITH_REPLICAS,
    kafka_name_problem,
)
from staticfleet_operator.crd.schema import PRINTER_COLUMNS, kubernetes_schema

ROOT = Path(__file__).resolve().parents[2]
CRDS_DIR = ROOT / "crds"
CRD_FILE = CRDS_DIR / f"{CRD_NAME}.yaml"
DOCS = ROOT / "docs" / "crd.md"

Json = dict[str, Any]

MANAGED: Json = {
    "groupId": "orders",
    "topics": [{"name": "orders", "partitions": 48}, {"name": "payments", "partitions": 12}],
    "replicas": 3,
    "template": {
        "metadata": {"labels": {"app": "orders-consumer"}},
        "spec": {
            "containers": [
                {
                    "name": "member",
                    "image": "ghcr.io/example/staticfleet:0.1.0",
                    "args": ["member", "run"],
                    "resources": {"requests": {"cpu": "100m"}},
                }
            ],
            "terminationGracePeriodSeconds": 30,
        },
    },
    "rebalance": {"protocol": "cooperative"},
    "tokenSecretRef": {"name": "orders-member-token"},
}

SPARK: Json = {
    "groupId": "clickstream-etl",
    "topics": [{"name": "clicks", "partitions": 64}],
    "selector": {
        "matchLabels": {"spark-role": "executor"},
        "matchExpressions": [
            {"key": "spark-app-selector", "operator": "In", "values": ["spark-0123abcd"]}
        ],
    },
    "replacementGracePeriodSeconds": 120,
    "membership": {"instanceIdPrefix": "clickstream", "sessionTimeoutMs": 30000},
    "rebalance": {"protocol": "eager", "eagerAssignor": "sticky"},
}


def with_changes(base: Json, **changes: Any) -> Json:
    """A deep copy of `base` with top-level fields replaced; a value of None removes one."""
    spec = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


@pytest.fixture(scope="module")
def crd() -> Json:
    return consumer_group_crd()


@pytest.fixture(scope="module")
def root_schema(crd: Json) -> Json:
    schema: Json = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.fixture(scope="module")
def spec_schema(root_schema: Json) -> Json:
    schema: Json = root_schema["properties"]["spec"]
    return schema


@pytest.fixture(scope="module")
def status_schema(root_schema: Json) -> Json:
    schema: Json = root_schema["properties"]["status"]
    return schema


def schema_errors(schema: Json, value: Any) -> list[str]:
    # OpenAPI v3.0 schema objects are JSON Schema draft 4 plus extensions; unknown keywords
    # (x-kubernetes-*) are ignored, which is what we want: CEL is checked separately.
    validator = jsonschema.Draft4Validator(schema)
    return [error.message for error in validator.iter_errors(value)]


def apply_defaults(value: Any, schema: Json) -> Any:
    """The API server's defaulting: absent properties with a `default` get it, recursively."""
    if isinstance(value, dict) and schema.get("type") == "object":
        for name, child in schema.get("properties", {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                apply_defaults(value[name], child)
        if isinstance(schema.get("additionalProperties"), dict):
            for item in value.values():
                apply_defaults(item, schema["additionalProperties"])
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            apply_defaults(item, schema["items"])
    return value


def pruned_fields(value: Any, schema: Json, path: str = "") -> list[str]:
    """Fields the API server would prune (absent from the schema): must be none, or the
    operator would lose what it wrote."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties")
        for name, item in value.items():
            if properties is not None:
                if name not in properties:
                    found.append(f"{path}.{name}")
                else:
                    found += pruned_fields(item, properties[name], f"{path}.{name}")
            elif isinstance(schema.get("additionalProperties"), dict):
                found += pruned_fields(item, schema["additionalProperties"], f"{path}.{name}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += pruned_fields(item, schema["items"], f"{path}[{index}]")
    return found


_CEL = celpy.Environment()


def cel(rule: str, self_value: Any, old_self: Any = None) -> bool:
    activation = {"self": json_to_cel(self_value)}
    if old_self is not None:
        activation["oldSelf"] = json_to_cel(old_self)
    program = _CEL.program(_CEL.compile(rule))
    return bool(program.evaluate(activation))


def failing_spec_rules(spec: Json, old: Json | None = None) -> list[str]:
    """Messages of the spec-level CEL rules that fail, as the API server evaluates them
    (on the defaulted object; transition rules only on update)."""
    failing = []
    for rule in SPEC_RULES:
        is_transition = "oldSelf" in rule.rule
        if is_transition and old is None:
            continue
        if not cel(rule.rule, spec, old if is_transition else None):
            failing.append(rule.message)
    return failing


# --------------------------------------------------------------------------- checked-in YAML


def test_checked_in_crd_is_current() -> None:
    expected = generated_files()[CRD_FILE.name]
    assert CRD_FILE.exists(), "crds/ has no ConsumerGroup CRD: run `make crds`"
    assert CRD_FILE.read_text(encoding="utf-8") == expected, (
        "crds/ is stale: run `make crds` (staticfleet crds --output-dir crds)"
    )


def test_checked_in_crd_parses_to_the_generated_manifest(crd: Json) -> None:
    assert yaml.safe_load(CRD_FILE.read_text(encoding="utf-8")) == crd


def test_crds_check_command_passes_on_the_repository() -> None:
    assert main(["crds", "--check", "--output-dir", str(CRDS_DIR)]) == 0


def test_crds_command_writes_and_check_detects_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "crds"
    assert main(["crds", "--check", "--output-dir", str(out)]) == 1  # missing
    assert "missing" in capsys.readouterr().err

    assert main(["crds", "--output-dir", str(out)]) == 0
    assert main(["crds", "--check", "--output-dir", str(out)]) == 0
    written = out / CRD_FILE.name
    assert written.read_text(encoding="utf-8") == CRD_FILE.read_text(encoding="utf-8")

    written.write_text(written.read_text(encoding="utf-8").replace("cg", "cgx"), encoding="utf-8")
    capsys.readouterr()
    assert main(["crds", "--check", "--output-dir", str(out)]) == 1
    assert "out of date" in capsys.readouterr().err

    assert main(["crds", "--output-dir", str(out)]) == 0
    (out / "old.staticfleet.dev.yaml").write_text("kind: Leftover\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["crds", "--check", "--output-dir", str(out)]) == 1
    assert "not generated" in capsys.readouterr().err


def test_generation_is_deterministic() -> None:
    assert generated_files() == generated_files()


# --------------------------------------------------------------------------- CRD shape


def test_crd_identity(crd: Json) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "consumergroups.staticfleet.dev"
    spec = crd["spec"]
    assert spec["group"] == "staticfleet.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "ConsumerGroup",
        "listKind": "ConsumerGroupList",
        "plural": "consumergroups",
        "singular": "consumergroup",
        "shortNames": ["cg"],
        "categories": ["staticfleet"],
    }
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1"
    assert version["served"] is True and version["storage"] is True
    assert version["subresources"] == {
        "status": {},
        # `kubectl scale` and autoscalers: spec.replicas in, live member pods and their
        # selector out.
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }


def test_printer_columns(crd: Json, root_schema: Json) -> None:
    columns = {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    # Scripts read `kubectl get cg --no-headers` by position: a new column goes after these.
    assert list(columns)[:5] == ["State", "Generation", "Protocol", "Members", "Replicas"]
    assert {name: c["jsonPath"] for name, c in columns.items() if c.get("priority", 0) == 0} == {
        "Replicas": ".status.replicas",
        "State": ".status.groupState",
        "Generation": ".status.generation",
        "Protocol": ".status.effectiveRebalanceProtocol",
        "Members": ".status.members",
        "Rollout": ".status.rollout.phase",
        "Progress": ".status.rollout.progress",
        "GroupProtocol": ".status.groupProtocol",
        "Converged": ".status.converged",
        "Lag": ".status.lag",
        "Age": ".metadata.creationTimestamp",
    }
    # The consumer protocol's columns come after the rollout's, then Lag; Age stays last.
    assert [name for name, c in columns.items() if c.get("priority", 0) == 0][-4:] == [
        "GroupProtocol",
        "Converged",
        "Lag",
        "Age",
    ]
    assert columns["Age"]["type"] == "date"
    assert columns["Members"]["type"] == columns["Generation"]["type"] == "integer"
    # Every column's path names a field the schema has (a typo would show an empty column).
    for column in PRINTER_COLUMNS:
        path = re.sub(r"\[\?.*\]", "", column["jsonPath"]).strip(".").split(".")
        if path[0] == "metadata":
            continue
        node = root_schema
        for part in path:
            if node.get("type") == "array":
                node = node["items"]
            assert part in node["properties"], column
            node = node["properties"][part]
        expected = {"integer": "integer", "boolean": "boolean", "date": "string"}.get(
            column["type"], "string"
        )
        assert node["type"] == expected, column


def test_generated_schema_is_structural(root_schema: Json) -> None:
    assert structural_problems(root_schema) == []
    text = CRD_FILE.read_text(encoding="utf-8")
    for forbidden in ("$ref", "$defs", "anyOf", "allOf", "oneOf", "title:", "const:", "nullable"):
        assert forbidden not in text


def test_spec_schema_types_and_constraints(spec_schema: Json) -> None:
    props = spec_schema["properties"]
    assert spec_schema["required"] == ["groupId", "topics"]
    assert props["groupId"]["maxLength"] == 249
    assert props["topics"]["minItems"] == 1
    assert props["topics"]["x-kubernetes-list-type"] == "map"
    assert props["topics"]["x-kubernetes-list-map-keys"] == ["name"]
    assert props["topics"]["items"]["properties"]["partitions"]["minimum"] == 1
    assert props["replicas"] == {
        "description": props["replicas"]["description"],
        "type": "integer",
        "minimum": 0,
    }
    template = props["template"]
    assert template["type"] == "object"
    assert template["x-kubernetes-preserve-unknown-fields"] is True
    assert template["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    assert template["properties"]["spec"]["properties"]["containers"]["minItems"] == 1
    selector = props["selector"]
    assert set(selector["properties"]) == {"matchLabels", "matchExpressions"}
    assert selector["properties"]["matchLabels"]["additionalProperties"] == {"type": "string"}
    operator = selector["properties"]["matchExpressions"]["items"]["properties"]["operator"]
    assert operator["enum"] == ["In", "NotIn", "Exists", "DoesNotExist"]
    assert "default" not in props["replacementGracePeriodSeconds"]  # only in adopted mode

    membership = props["membership"]
    assert membership["default"] == {}
    session = membership["properties"]["sessionTimeoutMs"]
    assert (session["default"], session["minimum"], session["maximum"]) == (45000, 6000, 1800000)
    assert membership["properties"]["rebalanceTimeoutMs"]["default"] == 300000
    assert "default" not in membership["properties"]["instanceIdPrefix"]

    rebalance = props["rebalance"]["properties"]
    assert rebalance["protocol"]["enum"] == ["eager", "cooperative", "consumer"]
    assert rebalance["protocol"]["default"] == "eager"
    assert rebalance["eagerAssignor"]["enum"] == ["range", "roundrobin", "sticky"]
    assert rebalance["eagerAssignor"]["default"] == "range"
    assert rebalance["cooperativeAssignor"]["enum"] == ["cooperative-sticky", "static-sticky"]
    assert rebalance["cooperativeAssignor"]["default"] == "cooperative-sticky"

    rollout = props["rollout"]["properties"]
    assert (rollout["maxUnavailable"]["default"], rollout["maxUnavailable"]["minimum"]) == (1, 1)
    assert rollout["memberReadyTimeoutSeconds"]["default"] == 300
    assert rollout["memberReadyTimeoutSeconds"]["minimum"] == 10
    assert props["tokenSecretRef"]["required"] == ["name"]
    assert props["tokenSecretRef"]["properties"]["key"]["default"] == "token"


def test_every_schema_default_is_valid_for_its_field(root_schema: Json) -> None:
    def walk(node: Json, path: str) -> None:
        if "default" in node:
            assert schema_errors(node, node["default"]) == [], path
            assert pruned_fields(node["default"], node) == [], path
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(root_schema, "")


def test_status_schema(status_schema: Json) -> None:
    props = status_schema["properties"]
    assert "required" not in status_schema
    assert props["effectiveRebalanceProtocol"]["enum"] == [
        "eager",
        "compatible",
        "cooperative",
        "consumer",
    ]
    assert set(props["groupState"]["enum"]) == {s.value for s in ObservedGroupState}
    rollout = props["rollout"]["properties"]
    assert rollout["phase"]["enum"] == [
        "Idle",
        "Bounce1",
        "VerifyCompatible",
        "Bounce2",
        "StaticBounce",
        "ConsumerMigration",
        "Paused",
        "Completed",
    ]
    assert rollout["bouncedSlots"]["x-kubernetes-list-type"] == "set"
    assert rollout["progress"]["type"] == "string"
    assert "default" not in str(status_schema)  # status is what the operator writes, no more
    conditions = props["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    condition = conditions["items"]
    assert condition["required"] == ["type", "status"]
    assert condition["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert condition["properties"]["lastTransitionTime"]["format"] == "date-time"
    for field in ("reason", "message", "observedGeneration"):
        assert field in condition["properties"]


def test_cel_rules_are_present(spec_schema: Json) -> None:
    rules = [entry["rule"] for entry in spec_schema["x-kubernetes-validations"]]
    assert rules == [
        "has(self.replicas) != has(self.selector)",
        "has(self.replicas) == has(self.template)",
        "!has(self.replacementGracePeriodSeconds) || has(self.selector)",
        RULE_PREFIX_DERIVABLE.rule,
        "self.groupId == oldSelf.groupId",
        RULE_PREFIX_IMMUTABLE.rule,
        RULE_PARTITIONS_UNLESS_KAFKA.rule,
        RULE_COORDINATOR_TYPE_IMMUTABLE.rule,
        RULE_CONSUMER_NEEDS_KAFKA.rule,
        RULE_SOURCE_ONLY_EMBEDDED.rule,
    ]
    for entry in spec_schema["x-kubernetes-validations"]:
        assert set(entry) == {"rule", "message"} and entry["message"]
    selector = spec_schema["properties"]["selector"]
    assert selector["x-kubernetes-validations"] == [RULE_SELECTOR_NOT_EMPTY.as_json()]
    expression = selector["properties"]["matchExpressions"]["items"]
    assert expression["x-kubernetes-validations"] == [RULE_REQUIREMENT_VALUES.as_json()]
    # The API server estimates CEL cost from bounds: lists under item rules are bounded.
    assert selector["properties"]["matchExpressions"]["maxItems"] == 32
    assert expression["properties"]["values"]["maxItems"] == 256
    assert spec_schema["properties"]["groupId"]["maxLength"] == 249


# --------------------------------------------------------------------------- structural checker


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": {"a": {}}}, "no type"),
        ({"properties": {"a": {"type": "string"}}}, "properties need type: object"),
        ({"type": "object", "properties": {"a": {"$ref": "#/x"}}}, "$ref"),
        (
            {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}},
            "may not appear under anyOf",
        ),
        ({"type": "object", "properties": {"a": {"nullable": True}}}, "nullable needs a type"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "array needs items"),
        (
            {"type": "object", "properties": {"a": {"type": "object"}}},
            "every field pruned",
        ),
        (
            {"type": "object", "additionalProperties": False, "properties": {}},
            "additionalProperties: false",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["k"],
                        "items": {"type": "object", "properties": {"k": {"type": "string"}}},
                    }
                },
            },
            "must be required or defaulted",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {
                        "type": "array",
                        "x-kubernetes-list-type": "set",
                        "items": {"type": "object", "properties": {"k": {"type": "string"}}},
                    }
                },
            },
            "scalar items",
        ),
        ({"type": "object", "title": "X", "properties": {}}, "title"),
        ({"type": "object", "required": ["b"], "properties": {}}, "undefined properties"),
        ({"type": "object", "properties": {"a": {"type": "string", "foo": 1}}}, "unknown"),
    ],
)
def test_structural_checker_finds_problems(schema: Json, problem: str) -> None:
    problems = structural_problems(schema)
    assert any(problem in p for p in problems), problems


def test_structural_checker_accepts_value_validations_under_junctors() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "anyOf": [{"pattern": "^a"}, {"maxLength": 3}]},
            "b": {"x-kubernetes-int-or-string": True},
            "c": {"x-kubernetes-preserve-unknown-fields": True},
        },
    }
    assert structural_problems(schema) == []


def test_converter_refuses_non_structural_models() -> None:
    class Union(BaseModel):
        value: int | str

    class Unique(BaseModel):
        values: set[int]

    with pytest.raises(SchemaError, match="union of 2 types"):
        kubernetes_schema(Union)
    with pytest.raises(SchemaError, match="uniqueItems"):
        kubernetes_schema(Unique)


# --------------------------------------------------------------------------- valid specs


@pytest.mark.parametrize("example", [MANAGED, SPARK], ids=["managed", "spark"])
def test_valid_examples_pass_schema_cel_and_model(example: Json, spec_schema: Json) -> None:
    assert schema_errors(spec_schema, example) == []
    defaulted = apply_defaults(copy.deepcopy(example), spec_schema)
    assert failing_spec_rules(defaulted) == []
    assert failing_spec_rules(defaulted, old=defaulted) == []
    assert validate_spec(example) == []
    spec = parse_spec(example)
    # The API server's defaults and the model's are the same values: what the operator
    # reads after defaulting equals what the model fills in by itself.
    assert parse_spec(defaulted) == spec
    assert spec.model_dump(mode="json", exclude_none=True) == defaulted
    assert pruned_fields(spec.model_dump(mode="json", exclude_none=True), spec_schema) == []


def test_managed_example_model() -> None:
    spec = parse_spec(MANAGED)
    assert spec.mode is Mode.MANAGED
    assert spec.instance_id_prefix == "orders"
    assert [spec.instance_id(slot) for slot in range(3)] == ["orders-0", "orders-1", "orders-2"]
    assert spec.partitions_per_topic == {"orders": 48, "payments": 12}
    assert spec.membership.session_timeout_ms == 45_000
    assert spec.membership.rebalance_timeout_ms == 300_000
    assert spec.rebalance.protocol == "cooperative"
    assert spec.rebalance.eager_assignor == "range"
    assert spec.rebalance.cooperative_assignor == "cooperative-sticky"
    assert spec.rollout.max_unavailable == 1
    assert spec.rollout.member_ready_timeout_seconds == 300
    assert spec.token_secret_ref is not None and spec.token_secret_ref.key == "token"
    assert spec.template is not None
    # Fields of the pod template the models do not name survive a round trip untouched.
    dumped = spec.template.model_dump(exclude_none=True)
    assert dumped == MANAGED["template"]


def test_spark_example_model() -> None:
    spec = parse_spec(SPARK)
    assert spec.mode is Mode.ADOPTED
    assert spec.instance_id(7) == "clickstream-7"
    assert spec.effective_replacement_grace_period_seconds == 120
    assert spec.selector is not None
    executor = {"spark-role": "executor", "spark-app-selector": "spark-0123abcd"}
    assert spec.selector.matches(executor)
    assert not spec.selector.matches({**executor, "spark-role": "driver"})
    assert not spec.selector.matches({"spark-role": "executor"})
    without_grace = parse_spec(with_changes(SPARK, replacementGracePeriodSeconds=None))
    assert without_grace.effective_replacement_grace_period_seconds == 60


def test_snake_case_names_work_in_python_but_not_on_the_wire() -> None:
    spec = ConsumerGroupSpec(
        group_id="g",
        topics=[{"name": "t", "partitions": 1}],  # type: ignore[list-item]
        replicas=1,
        template={"spec": {"containers": [{"name": "m"}]}},  # type: ignore[arg-type]
    )
    assert spec.model_dump(mode="json", exclude_none=True)["groupId"] == "g"
    errors = validate_spec({"group_id": "g", "topics": [{"name": "t", "partitions": 1}]})
    assert "spec.groupId: required field is missing" in errors
    assert "spec.group_id: unknown field" in errors


# --------------------------------------------------------------------------- invalid specs

# (name, spec, an expected substring of a validate_spec line, rejected by the JSON schema?)
INVALID: list[tuple[str, Json, str, bool]] = [
    (
        "missing groupId",
        with_changes(MANAGED, groupId=None),
        "spec.groupId: required field is missing",
        True,
    ),
    ("empty groupId", with_changes(MANAGED, groupId=""), "spec.groupId: String should", True),
    (
        "illegal groupId",
        with_changes(MANAGED, groupId="orders/v1"),
        "spec.groupId: 'orders/v1' is not a legal Kafka name",
        True,
    ),
    (
        "partitions 0",
        with_changes(MANAGED, topics=[{"name": "orders", "partitions": 0}]),
        "spec.topics[0].partitions: Input should be greater than or equal to 1",
        True,
    ),
    ("no topics", with_changes(MANAGED, topics=[]), "spec.topics: List should have", True),
    (
        "more partitions than a body can carry",
        with_changes(MANAGED, topics=[{"name": "orders", "partitions": 10_001}]),
        "spec.topics[0].partitions: Input should be less than or equal to 10000",
        True,
    ),
    (
        "33 topics",
        with_changes(MANAGED, topics=[{"name": f"t{i}", "partitions": 1} for i in range(33)]),
        "spec.topics: List should have at most 32 items",
        True,
    ),
    (
        "rebalanceTimeoutMs over the coordinator's maximum",
        with_changes(MANAGED, membership={"rebalanceTimeoutMs": 1_800_001}),
        "spec.membership.rebalanceTimeoutMs: Input should be less than or equal to 1800000",
        True,
    ),
    (
        "topic named ..",
        with_changes(MANAGED, topics=[{"name": "..", "partitions": 1}]),
        "spec.topics[0].name: '..' is not a legal Kafka name",
        True,
    ),
    (
        "protocol fancy",
        with_changes(MANAGED, rebalance={"protocol": "fancy"}),
        "spec.rebalance.protocol: Input should be 'eager', 'cooperative' or 'consumer'",
        True,
    ),
    (
        "consumer protocol on the embedded coordinator",
        with_changes(MANAGED, rebalance={"protocol": "consumer"}),
        "rebalance.protocol consumer is Kafka's consumer group protocol",
        False,
    ),
    (
        "eager assignor cooperative-sticky",
        with_changes(MANAGED, rebalance={"eagerAssignor": "cooperative-sticky"}),
        "spec.rebalance.eagerAssignor: Input should be 'range', 'roundrobin' or 'sticky'",
        True,
    ),
    (
        "sessionTimeoutMs 10",
        with_changes(MANAGED, membership={"sessionTimeoutMs": 10}),
        "spec.membership.sessionTimeoutMs: Input should be greater than or equal to 6000",
        True,
    ),
    (
        "sessionTimeoutMs too long",
        with_changes(MANAGED, membership={"sessionTimeoutMs": 1_800_001}),
        "spec.membership.sessionTimeoutMs: Input should be less than or equal to 1800000",
        True,
    ),
    (
        "maxUnavailable 0",
        with_changes(MANAGED, rollout={"maxUnavailable": 0}),
        "spec.rollout.maxUnavailable: Input should be greater than or equal to 1",
        True,
    ),
    (
        "memberReadyTimeoutSeconds 5",
        with_changes(MANAGED, rollout={"memberReadyTimeoutSeconds": 5}),
        "spec.rollout.memberReadyTimeoutSeconds: Input should be greater than or equal to 10",
        True,
    ),
    ("negative replicas", with_changes(MANAGED, replicas=-1), "spec.replicas: Input", True),
    (
        "template without containers",
        with_changes(MANAGED, template={"spec": {"containers": []}}),
        "spec.template.spec.containers: List should have at least 1 item",
        True,
    ),
    (
        "bad instance id prefix",
        with_changes(MANAGED, membership={"instanceIdPrefix": "-orders"}),
        "spec.membership.instanceIdPrefix: '-orders' is not a usable instance id prefix",
        True,
    ),
    (
        "bad secret name",
        with_changes(MANAGED, tokenSecretRef={"name": "Orders_Token"}),
        "spec.tokenSecretRef.name: 'Orders_Token' is not a Kubernetes object name",
        True,
    ),
    (
        "unknown field",
        with_changes(MANAGED, replica=3),
        "spec.replica: unknown field",
        False,  # the API server prunes it (kubectl's strict field validation rejects it)
    ),
    # Rules the API server enforces with CEL or list-map keys, not plain schema keywords:
    (
        "both replicas and selector",
        with_changes(MANAGED, selector={"matchLabels": {"a": "b"}}),
        "spec: " + RULE_ONE_MODE.message,
        False,
    ),
    (
        "neither replicas nor selector",
        with_changes(MANAGED, replicas=None, template=None),
        "spec: " + RULE_ONE_MODE.message,
        False,
    ),
    (
        "replicas without template",
        with_changes(MANAGED, template=None),
        "spec: " + RULE_TEMPLATE_WITH_REPLICAS.message,
        False,
    ),
    (
        "grace period in managed mode",
        with_changes(MANAGED, replacementGracePeriodSeconds=30),
        "spec: " + RULE_GRACE_ONLY_ADOPTED.message,
        False,
    ),
    (
        "groupId unusable as prefix",
        with_changes(SPARK, groupId="_clickstream", membership={}),
        "spec: " + RULE_PREFIX_DERIVABLE.message,
        False,
    ),
    (
        "duplicate topics",
        with_changes(
            MANAGED, topics=[{"name": "a", "partitions": 1}, {"name": "a", "partitions": 2}]
        ),
        "spec: topics must be unique, repeated: a",
        False,
    ),
    (
        "empty selector",
        with_changes(SPARK, selector={"matchLabels": {}}),
        "spec.selector: " + RULE_SELECTOR_NOT_EMPTY.message,
        False,
    ),
    (
        "In without values",
        with_changes(
            SPARK, selector={"matchExpressions": [{"key": "spark-role", "operator": "In"}]}
        ),
        "spec.selector.matchExpressions[0]: " + RULE_REQUIREMENT_VALUES.message,
        False,
    ),
    (
        "Exists with values",
        with_changes(
            SPARK,
            selector={"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["v"]}]},
        ),
        "spec.selector.matchExpressions[0]: " + RULE_REQUIREMENT_VALUES.message,
        False,
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected", "schema_rejects"),
    [pytest.param(spec, expected, rejects, id=name) for name, spec, expected, rejects in INVALID],
)
def test_invalid_specs_are_rejected(
    spec: Json, expected: str, schema_rejects: bool, spec_schema: Json
) -> None:
    errors = validate_spec(spec)
    assert any(expected in error for error in errors), errors
    with pytest.raises(InvalidSpecError) as raised:
        parse_spec(spec)
    assert raised.value.errors == errors
    with pytest.raises(ValidationError):
        ConsumerGroupSpec.model_validate(spec)
    assert bool(schema_errors(spec_schema, spec)) == schema_rejects


@pytest.mark.parametrize(
    ("name", "spec", "rule"),
    [
        ("both modes", with_changes(MANAGED, selector={"matchLabels": {"a": "b"}}), RULE_ONE_MODE),
        ("no mode", with_changes(MANAGED, replicas=None, template=None), RULE_ONE_MODE),
        ("replicas only", with_changes(MANAGED, template=None), RULE_TEMPLATE_WITH_REPLICAS),
        ("template only", with_changes(SPARK, template=MANAGED["template"]), None),
        (
            "grace in managed",
            with_changes(MANAGED, replacementGracePeriodSeconds=1),
            RULE_GRACE_ONLY_ADOPTED,
        ),
        ("underscore start", with_changes(SPARK, groupId="_x", membership={}), None),
        ("long group id", with_changes(SPARK, groupId="g" * 53, membership={}), None),
        ("52 chars is fine", with_changes(SPARK, groupId="g" * 52, membership={}), "ok"),
        ("underscore inside", with_changes(SPARK, groupId="a_b.C-1", membership={}), "ok"),
    ],
)
def test_cel_spec_rules_agree_with_the_model(
    name: str, spec: Json, rule: Any, spec_schema: Json
) -> None:
    defaulted = apply_defaults(copy.deepcopy(spec), spec_schema)
    cel_failures = failing_spec_rules(defaulted)
    try:
        model_failures = spec_rule_problems(parse_spec(spec))
    except InvalidSpecError as error:
        model_failures = [line.removeprefix("spec: ") for line in error.errors]
    assert sorted(cel_failures) == sorted(model_failures), name
    if rule == "ok":
        assert cel_failures == []
    elif rule is not None:
        assert rule.message in cel_failures


def test_cel_selector_rules() -> None:
    selector_rule = RULE_SELECTOR_NOT_EMPTY.rule
    assert cel(selector_rule, {"matchLabels": {"a": "b"}})
    assert cel(selector_rule, {"matchExpressions": [{"key": "a", "operator": "Exists"}]})
    assert not cel(selector_rule, {})
    assert not cel(selector_rule, {"matchLabels": {}, "matchExpressions": []})
    values_rule = RULE_REQUIREMENT_VALUES.rule
    assert cel(values_rule, {"key": "a", "operator": "In", "values": ["x"]})
    assert cel(values_rule, {"key": "a", "operator": "NotIn", "values": ["x"]})
    assert not cel(values_rule, {"key": "a", "operator": "In"})
    assert not cel(values_rule, {"key": "a", "operator": "NotIn", "values": []})
    assert cel(values_rule, {"key": "a", "operator": "Exists"})
    assert cel(values_rule, {"key": "a", "operator": "DoesNotExist", "values": []})
    assert not cel(values_rule, {"key": "a", "operator": "Exists", "values": ["x"]})


def test_transition_rules(spec_schema: Json) -> None:
    def defaulted(spec: Json) -> Json:
        result: Json = apply_defaults(copy.deepcopy(spec), spec_schema)
        return result

    old = defaulted(MANAGED)
    renamed = defaulted(with_changes(MANAGED, groupId="orders2"))
    assert RULE_GROUP_ID_IMMUTABLE.message in failing_spec_rules(renamed, old)
    assert RULE_PREFIX_IMMUTABLE.message in failing_spec_rules(renamed, old)

    reprefixed = defaulted(with_changes(MANAGED, membership={"instanceIdPrefix": "o"}))
    assert failing_spec_rules(reprefixed, old) == [RULE_PREFIX_IMMUTABLE.message]
    # Spelling out the default prefix changes no identity: allowed, both ways.
    explicit = defaulted(with_changes(MANAGED, membership={"instanceIdPrefix": "orders"}))
    assert failing_spec_rules(explicit, old) == []
    assert failing_spec_rules(old, explicit) == []
    # Everything else may change.
    scaled = defaulted(with_changes(MANAGED, replicas=7, rebalance={"protocol": "eager"}))
    assert failing_spec_rules(scaled, old) == []

    model_old = parse_spec(MANAGED)
    assert spec_update_problems(model_old, parse_spec(MANAGED)) == []
    assert spec_update_problems(model_old, parse_spec(explicit)) == []
    assert spec_update_problems(model_old, parse_spec(reprefixed)) == [
        RULE_PREFIX_IMMUTABLE.message
    ]
    assert spec_update_problems(model_old, parse_spec(renamed)) == [
        RULE_GROUP_ID_IMMUTABLE.message,
        RULE_PREFIX_IMMUTABLE.message,
    ]


def test_validate_spec_lists_every_problem_on_its_own_line() -> None:
    spec = with_changes(
        MANAGED,
        topics=[{"name": "orders", "partitions": 0}, {"name": "bad name", "partitions": 1}],
        rebalance={"protocol": "fancy"},
        membership={"sessionTimeoutMs": 10},
    )
    errors = validate_spec(spec)
    assert len(errors) == 4, errors
    assert all(error.startswith("spec.") for error in errors)
    cross = validate_spec(with_changes(MANAGED, template=None, replacementGracePeriodSeconds=5))
    assert cross == [
        "spec: " + RULE_TEMPLATE_WITH_REPLICAS.message,
        "spec: " + RULE_GRACE_ONLY_ADOPTED.message,
    ]
    assert validate_spec({}) == [
        "spec.groupId: required field is missing",
        "spec.topics: required field is missing",
    ]


# --------------------------------------------------------------------------- name rules


@pytest.mark.parametrize(
    "name",
    ["orders", "a", ".", "..", "...", "a.b_c-D", "a/b", "has space", "ü", "", "x" * 249, "x" * 250],
)
def test_kafka_names_agree_with_the_coordinator_and_the_schema(
    name: str, spec_schema: Json
) -> None:
    legal = kafka_name_problem(name) is None
    assert legal == (topic_problem(name, 1) is None)
    assert legal == (schema_errors(spec_schema["properties"]["groupId"], name) == [])


def test_group_states_cover_the_coordinator() -> None:
    assert {s.value for s in ObservedGroupState} == {s.value for s in GroupState} | {"Unknown"}


def test_member_protocols_are_the_member_clients() -> None:
    assert {p.value for p in RebalanceProtocolSetting} == {
        "eager",
        "compatible",
        "cooperative",
        "consumer",
    }
    status = ConsumerGroupStatus.model_validate({"effectiveRebalanceProtocol": "compatible"})
    assert status.effective_rebalance_protocol is RebalanceProtocolSetting.COMPATIBLE


# --------------------------------------------------------------------------- status


def mid_rollout_status() -> ConsumerGroupStatus:
    now = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)
    status = ConsumerGroupStatus(
        observed_generation=4,
        group_state=ObservedGroupState.STABLE,
        generation=17,
        selected_protocol="range",
        effective_rebalance_protocol=RebalanceProtocolSetting.EAGER,
        members=5,
        member_instances=[
            MemberInstance(instance_id=f"orders-{slot}", slot=slot, pod=f"orders-{slot}")
            for slot in range(5)
        ],
        rollout=RolloutStatus(
            phase=RolloutPhase.BOUNCE1,
            from_protocol=RebalanceProtocolSetting.EAGER,
            to_protocol=FleetProtocol.COOPERATIVE,
            bounces=(RebalanceProtocolSetting.COMPATIBLE, RebalanceProtocolSetting.COOPERATIVE),
            bounce_index=0,
            template_hash="abc123",
            spec_generation=4,
            bounced_slots=(3, 4),
            pending_slots=(1, 0),
            current_slot=2,
            current_pod="orders-2",
            current_pod_uid="6f1c9d2e",
            current_member_id="orders-2-5b1e",
            current_slot_bounced_at=now + timedelta(minutes=2),
            waiting_since=now + timedelta(minutes=2),
            started_at=now,
            message="bounce 1 of 2 (compatible): restarting slot 2",
        ),
    )
    status.set_condition(
        ConditionType.PROGRESSING,
        ConditionStatus.TRUE,
        "RolloutInProgress",
        "bounce 1 of 2",
        observed_generation=4,
        now=now,
    )
    return status


def test_status_round_trips_through_the_schema(status_schema: Json) -> None:
    status = mid_rollout_status()
    wire = status.to_wire()
    assert wire["rollout"]["progress"] == "2/5"
    assert wire["rollout"]["currentSlotBouncedAt"] == "2026-01-10T09:02:00Z"
    assert schema_errors(status_schema, wire) == []
    assert pruned_fields(wire, status_schema) == []  # nothing written is lost
    assert ConsumerGroupStatus.model_validate(wire) == status


def test_every_status_field_is_in_the_schema(status_schema: Json) -> None:
    # A field the schema lacks would be pruned by the API server, and a restarted operator
    # would resume without it.
    def fields_of(model: type[BaseModel]) -> set[str]:
        names = {field.alias or name for name, field in model.model_fields.items()}
        return names | {field.alias or name for name, field in model.model_computed_fields.items()}

    props = status_schema["properties"]
    assert set(props) == fields_of(ConsumerGroupStatus)
    assert set(props["rollout"]["properties"]) == fields_of(RolloutStatus)
    assert set(props["memberInstances"]["items"]["properties"]) == fields_of(MemberInstance)


def test_rollout_progress() -> None:
    assert RolloutStatus().progress is None
    assert RolloutStatus(pending_slots=(0, 1, 2)).progress == "0/3"
    # Counted the same whether or not bouncedSlots lists the slot in flight.
    assert RolloutStatus(bounced_slots=(2, 1), current_slot=0).progress == "2/3"
    assert RolloutStatus(bounced_slots=(2, 1, 0), current_slot=0).progress == "2/3"
    assert RolloutStatus(bounced_slots=(2, 1, 0)).progress == "3/3"
    one_bounce = (RebalanceProtocolSetting.COOPERATIVE,)
    assert RolloutStatus(phase=RolloutPhase.BOUNCE2, bounces=one_bounce).progressing
    paused = RolloutStatus(phase=RolloutPhase.PAUSED, bounces=one_bounce)
    assert paused.active and not paused.progressing  # under way, nobody bounced meanwhile
    assert not RolloutStatus(phase=RolloutPhase.COMPLETED).active


def test_bounce_phase_names_each_planned_bounce() -> None:
    eager, compatible, cooperative = (
        RebalanceProtocolSetting.EAGER,
        RebalanceProtocolSetting.COMPATIBLE,
        RebalanceProtocolSetting.COOPERATIVE,
    )
    upgrade = [compatible, cooperative]
    assert bounce_phase(upgrade, 0, eager) is RolloutPhase.BOUNCE1
    assert bounce_phase(upgrade, 1, eager) is RolloutPhase.BOUNCE2
    assert bounce_phase([compatible, eager], 1, cooperative) is RolloutPhase.BOUNCE2
    assert bounce_phase([cooperative], 0, compatible) is RolloutPhase.BOUNCE2
    assert bounce_phase([eager], 0, eager) is RolloutPhase.STATIC_BOUNCE
    with pytest.raises(ValueError):
        bounce_phase(upgrade, 2, eager)


def test_status_patch_clears_unset_fields() -> None:
    status = mid_rollout_status()
    status.rollout = status.rollout.model_copy(
        update={
            "bounced_slots": (*status.rollout.bounced_slots, 2),
            "pending_slots": (0,),
            "current_slot": 1,
            "current_pod_uid": None,
        }
    )
    patch = status.to_patch()
    assert patch["rollout"]["currentSlot"] == 1
    assert patch["rollout"]["currentPodUid"] is None  # a merge patch deletes it
    assert patch["rollout"]["pausedPhase"] is None
    assert patch["rollout"]["progress"] == "3/5"
    # Inside lists nothing is null: a merge patch stores list items as they are.
    assert "memberId" not in patch["memberInstances"][0]
    assert None not in patch["conditions"][0].values()


def test_status_ignores_unknown_fields() -> None:
    # An operator rolled back to an older version still reads what a newer one wrote.
    status = ConsumerGroupStatus.model_validate(
        {"members": 2, "shinyNewField": 1, "rollout": {"phase": "Idle", "future": True}}
    )
    assert status.members == 2
    assert status.rollout.phase is RolloutPhase.IDLE


def test_status_timestamps_must_carry_a_zone() -> None:
    with pytest.raises(ValidationError):
        RolloutStatus(started_at=datetime(2026, 1, 1))


def test_set_condition_moves_transition_time_only_on_a_flip() -> None:
    status = ConsumerGroupStatus()
    t0 = datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    assert status.set_condition(ConditionType.READY, ConditionStatus.FALSE, "Starting", now=t0)
    first = status.condition(ConditionType.READY)
    assert first is not None
    assert first.last_transition_time == t0.replace(microsecond=0)
    assert not status.set_condition(
        ConditionType.READY, ConditionStatus.FALSE, "Starting", now=t0 + timedelta(minutes=1)
    )
    assert status.set_condition(
        ConditionType.READY,
        ConditionStatus.FALSE,
        "InvalidSpec",
        "spec.groupId: required field is missing",
        now=t0 + timedelta(minutes=2),
    )
    changed = status.condition(ConditionType.READY)
    assert changed is not None and changed.reason == "InvalidSpec"
    assert changed.last_transition_time == t0.replace(microsecond=0)
    assert status.set_condition(
        ConditionType.READY, ConditionStatus.TRUE, "Stable", now=t0 + timedelta(minutes=3)
    )
    flipped = status.condition(ConditionType.READY)
    assert flipped is not None
    assert flipped.last_transition_time == (t0 + timedelta(minutes=3)).replace(microsecond=0)
    assert len(status.conditions) == 1
    status.set_condition(ConditionType.DEGRADED, ConditionStatus.FALSE, "AsExpected", now=t0)
    assert [c.type for c in status.conditions] == ["Ready", "Degraded"]


def test_condition_reason_follows_kubernetes_syntax() -> None:
    with pytest.raises(ValidationError):
        ConsumerGroupStatus().set_condition(
            ConditionType.READY, ConditionStatus.TRUE, "not a reason"
        )


# --------------------------------------------------------------------------- selector


def test_label_selector_semantics() -> None:
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {"spark-role": "executor"},
            "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["canary"]},
                {"key": "spark-app-selector", "operator": "Exists"},
                {"key": "paused", "operator": "DoesNotExist"},
            ],
        }
    )
    base = {"spark-role": "executor", "spark-app-selector": "spark-1"}
    assert selector.matches(base)
    assert selector.matches({**base, "tier": "main"})
    assert not selector.matches({**base, "tier": "canary"})
    assert not selector.matches({"spark-role": "executor"})
    assert not selector.matches({**base, "paused": "yes"})


# --------------------------------------------------------------------------- docs


def doc_examples() -> list[Json]:
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
    return [yaml.safe_load(block) for block in blocks]


def test_doc_examples_are_valid(root_schema: Json, status_schema: Json) -> None:
    examples = doc_examples()
    objects = [e for e in examples if e.get("kind") == "ConsumerGroup"]
    assert len(objects) == 2
    modes = set()
    for document in objects:
        assert schema_errors(root_schema, document) == []
        defaulted = apply_defaults(
            copy.deepcopy(document["spec"]), root_schema["properties"]["spec"]
        )
        assert failing_spec_rules(defaulted) == []
        modes.add(ConsumerGroup.model_validate(document).spec.mode)
    assert modes == {Mode.MANAGED, Mode.ADOPTED}
    statuses = [e["status"] for e in examples if set(e) == {"status"}]
    assert len(statuses) == 1
    assert schema_errors(status_schema, statuses[0]) == []
    parsed = ConsumerGroupStatus.model_validate(statuses[0])
    assert parsed.rollout.progress == statuses[0]["rollout"]["progress"]


# --------------------------------------------------------------------------- scale, disruptions


def test_adopted_groups_refuse_a_scale_with_a_message_that_says_so() -> None:
    # `kubectl scale` writes spec.replicas through the scale subresource; on an adopted
    # group the one-mode rule fails, and its message says why.
    scaled = with_changes(SPARK, replicas=4)
    failing = failing_spec_rules(scaled)
    assert RULE_ONE_MODE.message in failing
    assert "adopted group (selector) cannot be scaled" in RULE_ONE_MODE.message
    assert failing_spec_rules(with_changes(MANAGED, replicas=7)) == []


@pytest.mark.parametrize("value", [0, 1, 5, "0%", "25%", "100%"])
def test_max_unavailable_accepts_an_int_or_a_percentage(
    value: int | str, spec_schema: Json
) -> None:
    node = spec_schema["properties"]["disruption"]["properties"]["maxUnavailable"]
    assert node["x-kubernetes-int-or-string"] is True
    assert cel(RULE_MAX_UNAVAILABLE.rule, value)
    spec = parse_spec(with_changes(MANAGED, disruption={"maxUnavailable": value}))
    assert spec.disruption.max_unavailable == value


@pytest.mark.parametrize("value", [-1, "101%", "25", "abc", "5 %", "-5%", "050%"])
def test_max_unavailable_refuses_other_values(value: int | str) -> None:
    assert not cel(RULE_MAX_UNAVAILABLE.rule, value)
    problems = validate_spec(with_changes(MANAGED, disruption={"maxUnavailable": value}))
    assert any(RULE_MAX_UNAVAILABLE.message in problem for problem in problems), problems


def test_max_unavailable_defaults_to_one(spec_schema: Json) -> None:
    defaulted = apply_defaults(copy.deepcopy(MANAGED), spec_schema)
    assert defaulted["disruption"] == {"maxUnavailable": 1}
    assert parse_spec(MANAGED).disruption.max_unavailable == 1
