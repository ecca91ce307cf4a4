"""JSON form of the request/response dataclasses, shared by the HTTP server and client.

Field names are the dataclass field names; `bytes` travel as base64 strings; error codes as
their integer plus, in responses, an `error` name for humans. Decoding is msgspec's, strict:
a missing required field, an unknown field or a wrong type raises `WireError` with the
field's path. (The server's number and text policies run before it, `server/bodies.py`.)
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints

import msgspec

from coordinator.errors import ErrorCode
from coordinator.messages import IntRange

T = TypeVar("T")

# The HTTP header of a JoinGroup answer that carries the member's leave key, which a member
# token's LeaveGroup must send back (coordinator.server.member_keys).
MEMBER_KEY_HEADER = "Staticfleet-Member-Key"

# Field-level JSON-schema extras (bounds, patterns) sit in `dataclasses.field(metadata=...)`
# under this key. They override msgspec's schema of the field (a Meta's extra_json_schema
# would not: msgspec's own keys win), so they are kept here by type and field name.
SCHEMA_METADATA_KEY = "json_schema"
FIELD_SCHEMAS: dict[str, dict[str, dict[str, Any]]] = {}


class WireError(ValueError):
    """JSON that does not match a message's shape."""


def to_json(message: Any) -> Any:
    """A dataclass (or list/dict/scalar of them) as JSON-ready data (msgspec's builtins:
    bytes as base64, enums as their integer), each `error_code` with its `error` name."""
    return _name_errors(msgspec.to_builtins(message, str_keys=True))


def encode(message: Any) -> bytes:
    """`message` as a compact JSON document (UTF-8 bytes)."""
    return _ENCODER.encode(to_json(message))


_ENCODER = msgspec.json.Encoder()
_ERROR_NAMES = {int(code): code.name for code in ErrorCode}


def _name_errors(data: Any) -> Any:
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            code = value.get("error_code")
            if type(code) is int and code in _ERROR_NAMES:
                value["error"] = _ERROR_NAMES[code]
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return data


_HINTS_CACHE: dict[type, dict[str, Any]] = {}
_STRICT_CACHE: dict[Any, Any] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS_CACHE.get(cls)
    if hints is None:
        hints = get_type_hints(cls, include_extras=True)
        _HINTS_CACHE[cls] = hints
    return hints


def from_json(cls: type[T], data: Any, path: str = "$") -> T:
    """Build `cls` (a message dataclass) from JSON data, strictly (msgspec, strict=True).

    msgspec checks the shape against a closed twin of `cls` first (see `_strict_type`):
    its dataclass decoding ignores unknown fields and our `IntRange` bounds, the twin
    refuses both. Errors name the path, e.g. "Expected `int`, got `str` - at `$.x`".
    """
    try:
        msgspec.convert(data, _strict_type(cls), strict=True)
        result: T = msgspec.convert(data, cls, strict=True)
    except msgspec.ValidationError as error:
        message = str(error)
        if path != "$":
            message = message.replace("`$", f"`{path}", 1)
        raise WireError(message) from None
    return result


def _strict_type(tp: Any, error: Any = Any) -> Any:
    """`tp` with each dataclass as a msgspec Struct that forbids unknown fields (but takes
    the `error` twin of `error_code`, typed `error`) and each `IntRange` as msgspec bounds."""
    cached = _STRICT_CACHE.get((tp, error))
    if cached is None:
        cached = _build_strict(tp, error)
        _STRICT_CACHE[(tp, error)] = cached
    return cached


def _build_strict(tp: Any, error: Any) -> Any:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        metas = [
            msgspec.Meta(
                ge=extra.minimum, le=extra.maximum, extra_json_schema={"format": extra.format}
            )
            for extra in extras
            if isinstance(extra, IntRange)
        ]
        if not metas:
            return _strict_type(base, error)
        # The range replaces the int64 bounds a plain int gets (msgspec allows one `ge`).
        inner = base if base is int else _strict_type(base, error)
        return Annotated[(inner, *metas)]
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(
            operator.or_, [_strict_type(option, error) for option in get_args(tp)]
        )
    if origin is list:
        (item_type,) = get_args(tp)
        return list[_strict_type(item_type, error)]  # type: ignore[misc]
    if origin is tuple:
        return tuple[tuple(_strict_type(item, error) for item in get_args(tp))]  # type: ignore[misc]
    if origin is dict:
        key_type, value_type = get_args(tp)
        return dict[_strict_type(key_type, error), _strict_type(value_type, error)]  # type: ignore[misc]
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        fields: list[tuple[str, Any, Any] | tuple[str, Any]] = []
        for field in dataclasses.fields(tp):
            strict = _strict_type(hints[field.name], error)
            extra_schema = field.metadata.get(SCHEMA_METADATA_KEY)
            if extra_schema:
                FIELD_SCHEMAS.setdefault(tp.__name__, {})[field.name] = dict(extra_schema)
            if field.default is not dataclasses.MISSING:
                fields.append((field.name, strict, field.default))
            elif field.default_factory is not dataclasses.MISSING:
                fields.append(
                    (field.name, strict, msgspec.field(default_factory=field.default_factory))
                )
            else:
                fields.append((field.name, strict))
        if "error" not in {field.name for field in dataclasses.fields(tp)}:
            # "error" is the human-readable twin of error_code in responses; accepted, ignored.
            fields.append(("error", error, None))
        doc = tp.__doc__
        doc = " ".join(doc.split()) if doc and not doc.startswith(f"{tp.__name__}(") else None
        return msgspec.defstruct(
            tp.__name__,
            fields,
            kw_only=True,
            forbid_unknown_fields=True,
            namespace={"__doc__": doc},
            module=tp.__module__,
        )
    if tp is int:
        # The store keeps integers as SQLite int64 (the server's pre-check refuses wider).
        return _INT64
    if tp is bytes:
        return _BYTES
    return tp


_INT64 = Annotated[
    int, msgspec.Meta(ge=-(2**63), le=2**63 - 1, extra_json_schema={"format": "int64"})
]
_BYTES = Annotated[bytes, msgspec.Meta(extra_json_schema={"format": "byte"})]


def schema_type(cls: type) -> Any:
    """The msgspec type that decodes `cls` strictly; its JSON schema is the document's."""
    return _strict_type(cls)


def plain_type(cls: type) -> Any:
    """`schema_type(cls)` but an `error` field may only be null (see `decode_plain`)."""
    return _strict_type(cls, None)


_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {}


def decode_plain(cls: type[T], raw: bytes) -> T | None:
    """`cls` from a JSON document in one pass, or None when the document is not plainly
    valid and the caller must judge it with its full policies (`server/bodies.py`): not
    JSON, not UTF-8, a missing/unknown field, a wrong type, a value out of bounds (also an
    integer past 64 bits), an integral float such as 3.0 (which the policies count as an
    integer), a lone surrogate, or an `error` field that is not null (accepted and ignored,
    but whatever it holds must pass the policies). Whatever this returns, the full path
    returns too, equal."""
    decoder = _DECODERS.get(cls)
    if decoder is None:
        decoder = _DECODERS[cls] = msgspec.json.Decoder(plain_type(cls))
    try:
        parsed = decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):  # ValidationError is a DecodeError
        # (msgspec raises UnicodeDecodeError for invalid UTF-8 inside a string.)
        return None
    result: T = msgspec.convert(parsed, cls, from_attributes=True)
    return result
