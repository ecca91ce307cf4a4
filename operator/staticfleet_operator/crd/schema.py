"""The ConsumerGroup CustomResourceDefinition, generated from the pydantic models.

pydantic emits JSON Schema (2020-12 flavoured: `$defs`/`$ref`, `anyOf` with `null` for
Optional, `title`, `const`, `additionalProperties: false`). The API server wants a
*structural* OpenAPI v3 schema: every node typed, no `$ref`, no type-bearing `anyOf`, pruning
instead of `additionalProperties: false`. `kubernetes_schema` converts one into the other and
refuses (SchemaError) anything it does not know how to convert, so a model change that would
produce a schema Kubernetes rejects fails here, at generation time, not at `kubectl apply`.

`structural_problems` checks the result against the structural rules independently of the
converter; the generator runs it on its own output and the tests run it too.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, Final, Literal

from pydantic import BaseModel

from staticfleet_operator.crd.models import (
    CATEGORIES,
    CRD_NAME,
    GROUP,
    KIND,
    LIST_KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    ConsumerGroupSpec,
    ConsumerGroupStatus,
)

Schema = dict[str, Any]


class SchemaError(ValueError):
    """The models produced something that has no structural OpenAPI equivalent."""


# Keywords a CRD schema may carry that this generator emits or passes through.
# Anything else pydantic produces is an error rather than a silent drop.
_VALUE_KEYWORDS: Final = frozenset(
    {
        "description",
        "type",
        "format",
        "enum",
        "default",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "nullable",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    }
)
_TYPES: Final = frozenset({"object", "array", "string", "integer", "number", "boolean"})
# Keys ordered the way people read a schema; the rest follow alphabetically. Only for stable,
# readable YAML: order means nothing to the API server.
_KEY_ORDER: Final = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "nullable",
    "required",
    "properties",
    "items",
    "additionalProperties",
)


def kubernetes_schema(
    model: type[BaseModel],
    *,
    mode: Literal["validation", "serialization"] = "validation",
    keep_defaults: bool = True,
) -> Schema:
    """The structural OpenAPI v3 schema of `model` (wire names, definitions inlined).

    `mode="serialization"` includes computed fields (for status, which the operator writes);
    `keep_defaults=False` drops defaults (status needs none: the operator writes what it means,
    and the API server defaulting status fields would only blur what was observed)."""
    raw = model.model_json_schema(by_alias=True, mode=mode)
    definitions = raw.pop("$defs", {})
    return _convert(raw, definitions, keep_defaults, path=model.__name__)


def _inline(node: Schema, definitions: dict[str, Schema], path: str) -> Schema:
    """Resolve `$ref` and Optional's `anyOf [X, null]` until the node stands on its own."""
    node = dict(node)
    while True:
        if "$ref" in node:
            reference = node.pop("$ref")
            name = reference.removeprefix("#/$defs/")
            if name not in definitions:
                raise SchemaError(f"{path}: unresolvable reference {reference}")
            # The field's own keywords (its description, its default) win over the
            # definition's (the class docstring, no default).
            node = {**copy.deepcopy(definitions[name]), **node}
        elif "allOf" in node and len(node["allOf"]) == 1:
            (only,) = node.pop("allOf")
            node = {**only, **node}
        elif "anyOf" in node and node.get("x-kubernetes-int-or-string") is True:
            # int | str as Kubernetes' IntOrString: the marker types it (its validation
            # is a CEL rule on the field), so the union goes.
            types = {branch.get("type") for branch in node.pop("anyOf")}
            if types != {"integer", "string"}:
                raise SchemaError(f"{path}: x-kubernetes-int-or-string needs int | str")
        elif "anyOf" in node:
            # Optional[X] is "X, or absent": null is not a value a Kubernetes field holds
            # (the API server prunes nulls of non-nullable fields), so the null branch goes.
            branches = [b for b in node.pop("anyOf") if b != {"type": "null"}]
            if len(branches) != 1:
                raise SchemaError(f"{path}: a union of {len(branches)} types is not structural")
            node = {**branches[0], **node}
        else:
            return node


def _convert(
    node: Schema, definitions: dict[str, Schema], keep_defaults: bool, path: str
) -> Schema:
    node = _inline(node, definitions, path)
    node.pop("title", None)
    node.pop("readOnly", None)  # computed fields; the parent drops them from `required`
    if "default" in node and (node["default"] is None or not keep_defaults):
        del node["default"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "description" in node:
        # Docstrings wrap lines; kubectl explain re-wraps, so one paragraph reads better.
        node["description"] = " ".join(str(node["description"]).split())
    if node.get("uniqueItems"):
        raise SchemaError(f"{path}: uniqueItems is not allowed; use x-kubernetes-list-type")
    node.pop("uniqueItems", None)

    additional = node.pop("additionalProperties", None)
    if additional is True:
        # Extra fields allowed by the model: keep them rather than prune them.
        node["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(additional, dict):
        node["additionalProperties"] = _convert(additional, definitions, keep_defaults, f"{path}.*")
    # additionalProperties false (extra="forbid") needs nothing: the API server prunes
    # unknown fields of every object that does not preserve them.

    if "properties" in node:
        properties: dict[str, Schema] = {}
        computed: set[str] = set()
        for name, child in node["properties"].items():
            if child.get("readOnly"):
                computed.add(name)
            properties[name] = _convert(child, definitions, keep_defaults, f"{path}.{name}")
        node["properties"] = properties
        node.setdefault("type", "object")
        required = [name for name in node.get("required", []) if name not in computed]
        if required:
            node["required"] = required
        else:
            node.pop("required", None)
    if "items" in node:
        node["items"] = _convert(node["items"], definitions, keep_defaults, f"{path}[]")
    if "x-kubernetes-validations" in node:
        # pydantic sorts keys; a rule reads better before its message.
        node["x-kubernetes-validations"] = [
            {"rule": rule["rule"], **{k: v for k, v in rule.items() if k != "rule"}}
            for rule in node["x-kubernetes-validations"]
        ]

    unknown = set(node) - _VALUE_KEYWORDS
    if unknown:
        raise SchemaError(f"{path}: keywords with no structural equivalent: {sorted(unknown)}")
    return _ordered(node)


def _ordered(node: Schema) -> Schema:
    def rank(key: str) -> tuple[int, str]:
        return (_KEY_ORDER.index(key), "") if key in _KEY_ORDER else (len(_KEY_ORDER), key)

    return {key: node[key] for key in sorted(node, key=rank)}


# --------------------------------------------------------------------------- structural check


def structural_problems(schema: Schema, path: str = "openAPIV3Schema") -> list[str]:
    """Where `schema` breaks the rules of a structural schema (KEP-2335) or what this project
    relies on; empty when it is fine. Independent of the converter above."""
    return list(_walk_problems(schema, path, root=True))


def _walk_problems(node: Any, path: str, root: bool = False) -> Iterator[str]:
    if not isinstance(node, dict):
        yield f"{path}: a schema must be an object, not {type(node).__name__}"
        return
    for keyword in ("$ref", "$defs", "definitions", "title", "const", "uniqueItems", "readOnly"):
        if keyword in node:
            yield f"{path}: {keyword} is not allowed in a CRD schema"
    for keyword in ("anyOf", "allOf", "oneOf", "not"):
        if keyword in node:
            # Value validations only: no typing, structure or defaults under a junctor.
            branches = node[keyword] if isinstance(node[keyword], list) else [node[keyword]]
            for index, branch in enumerate(branches):
                yield from _junctor_problems(branch, f"{path}.{keyword}[{index}]")
    unknown = set(node) - _VALUE_KEYWORDS - {"anyOf", "allOf", "oneOf", "not"}
    unknown -= {"$ref", "$defs", "definitions", "title", "const", "uniqueItems", "readOnly"}
    if unknown:
        yield f"{path}: unknown keywords {sorted(unknown)}"

    preserves = node.get("x-kubernetes-preserve-unknown-fields") is True
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    node_type = node.get("type")
    if node_type is None:
        if not (preserves or int_or_string):
            yield (
                f"{path}: no type (only x-kubernetes-preserve-unknown-fields or "
                "x-kubernetes-int-or-string nodes may omit it)"
            )
    elif node_type not in _TYPES:
        yield f"{path}: type {node_type!r} is not one of {sorted(_TYPES)}"
    if "nullable" in node and node_type is None:
        yield f"{path}: nullable needs a type"
    if "properties" in node and node_type != "object":
        yield f"{path}: properties need type: object"
    if "properties" in node and "additionalProperties" in node:
        yield f"{path}: properties and additionalProperties are mutually exclusive"
    if node.get("additionalProperties") is False:
        yield f"{path}: additionalProperties: false is not allowed (unknown fields are pruned)"
    if node_type == "array" and "items" not in node:
        yield f"{path}: an array needs items"
    if "items" in node and node_type != "array":
        yield f"{path}: items need type: array"
    if (
        node_type == "object"
        and not root
        and not path.endswith(".metadata")
        and "properties" not in node
        and "additionalProperties" not in node
        and not preserves
    ):
        yield f"{path}: an object with no properties would have every field pruned"
    if node.get("x-kubernetes-embedded-resource") and node_type != "object":
        yield f"{path}: x-kubernetes-embedded-resource needs type: object"
    if "required" in node:
        missing = [name for name in node["required"] if name not in node.get("properties", {})]
        if missing:
            yield f"{path}: required names undefined properties {missing}"
    yield from _list_type_problems(node, path)
    for rule in node.get("x-kubernetes-validations", []):
        if not isinstance(rule, dict) or not isinstance(rule.get("rule"), str):
            yield f"{path}: x-kubernetes-validations entries need a rule string"

    for name, child in node.get("properties", {}).items():
        yield from _walk_problems(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk_problems(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        yield from _walk_problems(node["items"], f"{path}[]")


def _junctor_problems(branch: Any, path: str) -> Iterator[str]:
    if not isinstance(branch, dict):
        yield f"{path}: not a schema"
        return
    structural = {
        "type",
        "properties",
        "additionalProperties",
        "items",
        "default",
        "nullable",
        "description",
        "$ref",
    } | {key for key in branch if key.startswith("x-kubernetes-")}
    found = sorted(set(branch) & structural)
    if found:
        yield f"{path}: {found} may not appear under anyOf/allOf/oneOf/not"


def _list_type_problems(node: Schema, path: str) -> Iterator[str]:
    list_type = node.get("x-kubernetes-list-type")
    if list_type is None:
        if "x-kubernetes-list-map-keys" in node:
            yield f"{path}: x-kubernetes-list-map-keys needs x-kubernetes-list-type: map"
        return
    if node.get("type") != "array":
        yield f"{path}: x-kubernetes-list-type needs type: array"
        return
    items = node.get("items", {})
    if list_type == "set" and items.get("type") in ("object", "array"):
        yield f"{path}: a set needs scalar items"
    if list_type == "map":
        keys = node.get("x-kubernetes-list-map-keys") or []
        if not keys:
            yield f"{path}: a map list needs x-kubernetes-list-map-keys"
        if items.get("type") != "object":
            yield f"{path}: a map list needs object items"
        for key in keys:
            key_schema = items.get("properties", {}).get(key)
            if key_schema is None:
                yield f"{path}: map key {key!r} is not a property of the items"
            elif key not in items.get("required", []) and "default" not in key_schema:
                # The API server refuses map keys that can be absent.
                yield f"{path}: map key {key!r} must be required or defaulted"
    elif list_type not in ("atomic", "set"):
        yield f"{path}: unknown x-kubernetes-list-type {list_type!r}"


# --------------------------------------------------------------------------- the CRD

# `kubectl scale` and autoscalers (HPA, KEDA) write spec.replicas through it; an adopted
# group has none, and RULE_ONE_MODE refuses the write.
SCALE_SUBRESOURCE: Final[dict[str, str]] = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}

PRINTER_COLUMNS: Final[list[dict[str, Any]]] = [
    {
        "name": "State",
        "type": "string",
        "jsonPath": ".status.groupState",
        "description": "The group's state in the coordinator",
    },
    {
        "name": "Generation",
        "type": "integer",
        "jsonPath": ".status.generation",
        "description": "The group's generation id",
    },
    {
        "name": "Protocol",
        "type": "string",
        "jsonPath": ".status.effectiveRebalanceProtocol",
        "description": "Rebalance protocol the fleet runs now",
    },
    {
        "name": "Members",
        "type": "integer",
        "jsonPath": ".status.members",
        "description": "Members in the group",
    },
    # After Members: the columns before it keep their places (scripts read them by
    # position, as e2e/kafka_fleet.py does).
    {
        "name": "Replicas",
        "type": "integer",
        "jsonPath": ".status.replicas",
        "description": "Live member pods (the scale subresource's status.replicas)",
    },
    {
        "name": "Rollout",
        "type": "string",
        "jsonPath": ".status.rollout.phase",
        "description": "Rollout phase",
    },
    {
        "name": "Progress",
        "type": "string",
        "jsonPath": ".status.rollout.progress",
        "description": "Members restarted / total in the current bounce",
    },
    {
        "name": "GroupProtocol",
        "type": "string",
        "jsonPath": ".status.groupProtocol",
        "description": "classic, or consumer (Kafka's KIP-848 group protocol)",
    },
    {
        "name": "Converged",
        "type": "boolean",
        "jsonPath": ".status.converged",
        "description": "Consumer protocol: every member at the group epoch holds its target",
    },
    {
        "name": "Lag",
        "type": "integer",
        "jsonPath": ".status.lag",
        "description": "Kafka-coordinated groups: records behind (log end - committed)",
    },
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "The Ready condition",
        "priority": 1,
    },
    {
        "name": "Group",
        "type": "string",
        "jsonPath": ".spec.groupId",
        "description": "Consumer group id",
        "priority": 1,
    },
    {
        "name": "Coordinator",
        "type": "string",
        "jsonPath": ".spec.coordinator.type",
        "description": "embedded, or kafka (state, protocol and members then come from the "
        "cluster's DescribeGroups)",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def openapi_v3_schema() -> Schema:
    """The ConsumerGroup's openAPIV3Schema."""
    return {
        "description": (
            "A consumer group of static members: the operator gives every member pod a stable "
            "group.instance.id, rolls protocol changes out in bounces and removes departed "
            "members at once."
        ),
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this object.",
                "type": "string",
            },
            "kind": {
                "description": "Kind is the REST resource this object represents.",
                "type": "string",
            },
            "metadata": {"type": "object"},
            "spec": kubernetes_schema(ConsumerGroupSpec, mode="validation", keep_defaults=True),
            "status": kubernetes_schema(
                ConsumerGroupStatus, mode="serialization", keep_defaults=False
            ),
        },
    }


def consumer_group_crd() -> dict[str, Any]:
    """The CustomResourceDefinition manifest for ConsumerGroup."""
    schema = openapi_v3_schema()
    problems = structural_problems(schema)
    if problems:
        raise SchemaError("generated schema is not structural:\n" + "\n".join(problems))
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {
                "app.kubernetes.io/name": "staticfleet",
                "app.kubernetes.io/part-of": "staticfleet",
            },
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": LIST_KIND,
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, "scale": copy.deepcopy(SCALE_SUBRESOURCE)},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


GENERATED_HEADER: Final = (
    "# Generated by `staticfleet crds` (make crds) from "
    "operator/staticfleet_operator/crd/models.py.\n"
    "# Do not edit: change the models and regenerate; a test fails when this file is stale.\n"
)


def render_yaml(manifest: dict[str, Any]) -> str:
    # Imported here: PyYAML is only needed to write the files, not to use the models.
    import yaml

    body = yaml.safe_dump(
        manifest, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100
    )
    return GENERATED_HEADER + body


def generated_files() -> dict[str, str]:
    """File name (in crds/) -> content, for every CRD this project defines."""
    return {f"{CRD_NAME}.yaml": render_yaml(consumer_group_crd())}
