"""JSON schemas for kubeconform, generated offline from OpenAPI and CRDs the project pins.

    python scripts/kube_schemas.py --swagger KUBERNETES_MODULE/api/openapi-spec/swagger.json \
        --crds crds/*.yaml ... --output build/kube-schemas      (scripts/build-kube-schemas.sh)

Kubernetes' own kinds come from the OpenAPI v2 document in the k8s.io/kubernetes Go module the
e2e control plane is built from (e2e/go/kubernetes/go.mod), so kubeconform checks against the
API server the e2e runs; custom resources from their CRDs' openAPIV3Schema. One file per kind
and version, named as kubeconform's -schema-location template
`{{ .ResourceKind }}_{{ .Group }}_{{ .ResourceAPIVersion }}.json` asks (core kinds: group v1).

The schemas are strict, like kubeconform's `-standalone-strict` ones: an object that lists
its properties refuses others (a misspelt field fails), unless it preserves unknown fields.
Kubernetes' int-or-string and quantities accept a number or a string, as the API server does.
Hand-written because kubeconform's own converter (openapi2jsonschema.py) is a script in its
repository, not a maintained package, and fetches from the network.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]
DEFINITIONS = "#/definitions/"
INT_OR_STRING: Schema = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
# The special formats of the OpenAPI document: what the API server accepts for them.
FIXED_DEFINITIONS: dict[str, Schema] = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": INT_OR_STRING,
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "oneOf": [{"type": "string"}, {"type": "number"}]
    },
    # helm renders an unset timestamp as null (metadata.creationTimestamp).
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": ["string", "null"]},
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": {"type": ["string", "null"]},
}


def file_name(kind: str, api_version: str) -> str:
    """The name kubeconform's template gives: kind lowercased, group = apiVersion's first part."""
    parts = api_version.split("/")
    return f"{kind.lower()}_{parts[0]}_{parts[-1]}.json"


# Where a schema holds schemas: maps of them, lists of them, or one.
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SCHEMA_ONE = ("not", "additionalProperties", "items")


def strict(schema: Any) -> Any:
    """A copy in which every object listing properties refuses unknown ones."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: strict(sub) for name, sub in out[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [strict(sub) for sub in out[key]]
    for key in _SCHEMA_ONE:
        if isinstance(out.get(key), dict):
            out[key] = strict(out[key])
        elif isinstance(out.get(key), list):
            out[key] = [strict(sub) for sub in out[key]]
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out.setdefault("anyOf", INT_OR_STRING["oneOf"])
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    preserves = out.get("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in out and "additionalProperties" not in out and not preserves:
        out["additionalProperties"] = False
    return out


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(DEFINITIONS):
            yield ref[len(DEFINITIONS) :]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def openapi_schemas(document: Schema) -> dict[str, Schema]:
    """File name -> standalone schema for every kind of a Kubernetes OpenAPI v2 document."""
    definitions: dict[str, Schema] = {
        name: FIXED_DEFINITIONS.get(name, strict(schema))
        for name, schema in document["definitions"].items()
    }
    out: dict[str, Schema] = {}
    for name, schema in document["definitions"].items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            group, version, kind = gvk["group"], gvk["version"], gvk["kind"]
            api_version = f"{group}/{version}" if group else version
            reachable: dict[str, Schema] = {}
            pending = [name]
            while pending:
                current = pending.pop()
                if current in reachable:
                    continue
                reachable[current] = definitions[current]
                pending.extend(_refs(definitions[current]))
            root = dict(definitions[name])
            root["$schema"] = "http://json-schema.org/draft-07/schema#"
            root["definitions"] = reachable
            out[file_name(kind, api_version)] = root
    return out


def crd_schemas(crd: Schema) -> dict[str, Schema]:
    """File name -> schema for every served version of a CustomResourceDefinition."""
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    out: dict[str, Schema] = {}
    for version in crd["spec"]["versions"]:
        if not version.get("served", True):
            continue
        schema = strict((version.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"})
        props = schema.setdefault("properties", {})
        # The CRD's schema may leave out the fields every object has.
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"
        out[file_name(kind, f"{group}/{version['name']}")] = schema
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--swagger", type=Path, required=True, help="Kubernetes OpenAPI v2")
    parser.add_argument("--crds", type=Path, nargs="*", default=[], help="CRD YAML files")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    schemas = openapi_schemas(json.loads(args.swagger.read_text()))
    for path in args.crds:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                schemas.update(crd_schemas(doc))
    if not schemas:
        print("kube_schemas: no schema generated", file=sys.stderr)
        return 1
    args.output.mkdir(parents=True, exist_ok=True)
    for name, schema in schemas.items():
        (args.output / name).write_text(json.dumps(schema, separators=(",", ":")))
    print(f"kube_schemas: {len(schemas)} schemas in {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
