"""JSON Schema (draft 2020-12, as OpenAPI 3.1 uses it) from the message dataclasses.

msgspec writes the schemas (`msgspec.json.schema_components`) of the very types the server
decodes with (`coordinator.wire.schema_type`), so the document cannot drift from what the
server accepts: bytes are base64 strings, `X | None` may be null, integers carry their
int32/int64 bounds, and objects are closed (`additionalProperties: false`).

What is ours, applied to msgspec's output: an `error_code` has its `error` name beside it
in answers (and no `error` elsewhere), error codes are listed with their names, and
msgspec's `title`s are dropped (the component's key is its name), and a field's own
extras (`dataclasses.field(metadata={"json_schema": ...})`) override msgspec's keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from coordinator.errors import ErrorCode
from coordinator.wire import FIELD_SCHEMAS, schema_type

COMPONENT_PREFIX = "#/components/schemas/"

JsonSchema = dict[str, Any]


def schema_components(
    types: Iterable[type],
) -> tuple[dict[type, JsonSchema], dict[str, JsonSchema]]:
    """A `$ref` for each of `types`, and the components they refer to (sorted by name)."""
    roots = list(dict.fromkeys(types))
    refs, components = msgspec.json.schema_components(
        [schema_type(cls) for cls in roots], ref_template=COMPONENT_PREFIX + "{name}"
    )
    for name, component in components.items():
        component.pop("title", None)
        if name == ErrorCode.__name__:
            component["type"] = "integer"
            component["description"] = ", ".join(f"{int(code)} {code.name}" for code in ErrorCode)
        elif component.get("type") == "object":
            for field, extra in FIELD_SCHEMAS.get(name, {}).items():
                component["properties"][field].update(extra)
            _name_error_code(component)
    return dict(zip(roots, refs, strict=True)), dict(sorted(components.items()))


def _name_error_code(component: JsonSchema) -> None:
    properties: JsonSchema = component["properties"]
    # The decoder tolerates an `error` in any object (a client reads answers back); the
    # document shows it only where it is written: beside `error_code`.
    properties.pop("error", None)
    if "error_code" in properties:
        properties["error"] = {"type": "string", "enum": [code.name for code in ErrorCode]}
        component.setdefault("required", []).append("error")
