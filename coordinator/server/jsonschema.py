"""JSON Schema (draft 2020-12, as OpenAPI 3.1 uses it) from the message dataclasses.

The schema is derived from the same type hints `coordinator.wire` decodes with, so the
document cannot drift from what the server accepts: bytes are base64 strings, error codes
are integers with their names beside them, `X | None` may be null, and objects are closed
(`additionalProperties: false`) because the decoder rejects unknown fields.

Field-level extras (bounds, descriptions) come from `dataclasses.field(metadata=...)` under
the key `json_schema`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import IntEnum
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from coordinator.errors import ErrorCode
from coordinator.messages import IntRange
from coordinator.server.limits import INT_MAX, INT_MIN
from coordinator.wire import to_json

SCHEMA_METADATA_KEY = "json_schema"
COMPONENT_PREFIX = "#/components/schemas/"

JsonSchema = dict[str, Any]


class SchemaBuilder:
    """Collects one component schema per dataclass or enum reached from the roots."""

    def __init__(self) -> None:
        self.components: dict[str, JsonSchema] = {}
        self._owners: dict[str, type] = {}

    def ref(self, cls: type) -> JsonSchema:
        """A `$ref` to `cls`'s component, building the component on first use."""
        name = cls.__name__
        owner = self._owners.get(name)
        if owner is None:
            self._owners[name] = cls
            # Placeholder first: recursive types then refer to it instead of looping.
            self.components[name] = {}
            self.components[name] = self._component(cls)
        elif owner is not cls:
            raise ValueError(f"two schema types are named {name}: {owner!r} and {cls!r}")
        return {"$ref": COMPONENT_PREFIX + name}

    def schema(self, tp: Any) -> JsonSchema:
        origin = get_origin(tp)
        if origin is Annotated:
            base, *extras = get_args(tp)
            schema = dict(self.schema(base))
            for extra in extras:
                if isinstance(extra, IntRange):
                    schema.update(format=extra.format, minimum=extra.minimum, maximum=extra.maximum)
            return schema
        if origin in (typing.Union, types.UnionType):
            options = [self.schema(option) for option in get_args(tp) if option is not type(None)]
            if type(None) in get_args(tp):
                options.append({"type": "null"})
            return options[0] if len(options) == 1 else {"anyOf": options}
        if origin is list:
            (item_type,) = get_args(tp)
            return {"type": "array", "items": self.schema(item_type)}
        if origin is tuple:
            item_types = get_args(tp)
            return {
                "type": "array",
                "prefixItems": [self.schema(item) for item in item_types],
                "items": False,
                "minItems": len(item_types),
                "maxItems": len(item_types),
            }
        if origin is dict:
            key_type, value_type = get_args(tp)
            if key_type is not str:
                raise TypeError(f"JSON object keys must be strings, not {key_type!r}")
            return {"type": "object", "additionalProperties": self.schema(value_type)}
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            return self.ref(tp)
        if isinstance(tp, type) and issubclass(tp, IntEnum):
            return self.ref(tp)
        if tp is bytes:
            return {"type": "string", "format": "byte", "contentEncoding": "base64"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            # The store keeps integers as SQLite int64; the server rejects anything wider.
            return {"type": "integer", "format": "int64", "minimum": INT_MIN, "maximum": INT_MAX}
        if tp is str:
            return {"type": "string"}
        if tp is Any:
            return {}
        raise TypeError(f"no JSON schema for {tp!r}")

    def _component(self, cls: type) -> JsonSchema:
        if issubclass(cls, IntEnum):
            members = list(cls)
            return {
                "type": "integer",
                "enum": [int(member) for member in members],
                "description": ", ".join(f"{int(member)} {member.name}" for member in members),
            }
        return self._object(cls)

    def _object(self, cls: type) -> JsonSchema:
        hints = get_type_hints(cls, include_extras=True)
        properties: dict[str, JsonSchema] = {}
        required: list[str] = []
        for field in dataclasses.fields(cls):
            prop = dict(self.schema(hints[field.name]))
            prop.update(field.metadata.get(SCHEMA_METADATA_KEY, {}))
            default = _default_of(field)
            if default is not dataclasses.MISSING:
                prop["default"] = default
            else:
                required.append(field.name)
            properties[field.name] = prop
            if hints[field.name] is ErrorCode and field.name == "error_code":
                # wire.to_json writes the code's name beside every `error_code`.
                properties["error"] = {
                    "type": "string",
                    "enum": [code.name for code in ErrorCode],
                }
                required.append("error")
        schema: JsonSchema = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):
            schema["description"] = " ".join(cls.__doc__.split())
        return schema


def _default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return to_json(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return to_json(field.default_factory())
    return dataclasses.MISSING
