"""JSON form of the request/response dataclasses, shared by the HTTP server and client.

Field names are the dataclass field names; `bytes` travel as base64 strings; error codes as
their integer plus, in responses, an `error` name for humans. Decoding is strict: a missing
required field, an unknown field or a wrong type raises `WireError` with the field's path.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import types
import typing
from enum import IntEnum
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints

from coordinator.errors import ErrorCode
from coordinator.messages import IntRange

T = TypeVar("T")

# The HTTP header of a JoinGroup answer that carries the member's leave key, which a member
# token's LeaveGroup must send back (coordinator.server.member_keys).
MEMBER_KEY_HEADER = "Staticfleet-Member-Key"


class WireError(ValueError):
    """JSON that does not match a message's shape."""


def to_json(message: Any) -> Any:
    """A dataclass (or list/dict/scalar of them) as JSON-ready data."""
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        out: dict[str, Any] = {}
        for field in dataclasses.fields(message):
            value = getattr(message, field.name)
            out[field.name] = to_json(value)
            if isinstance(value, ErrorCode) and field.name == "error_code":
                out["error"] = value.name
        return out
    if isinstance(message, bytes):
        return base64.b64encode(message).decode("ascii")
    if isinstance(message, IntEnum):
        return int(message)
    if isinstance(message, list | tuple):
        return [to_json(item) for item in message]
    if isinstance(message, dict):
        return {str(key): to_json(value) for key, value in message.items()}
    return message


_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS_CACHE.get(cls)
    if hints is None:
        hints = get_type_hints(cls, include_extras=True)
        _HINTS_CACHE[cls] = hints
    return hints


def from_json(cls: type[T], data: Any, path: str = "$") -> T:
    """Build `cls` (a message dataclass) from JSON data, strictly."""
    result: T = _convert(cls, data, path)
    return result


def _convert(tp: Any, data: Any, path: str) -> Any:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        value = _convert(base, data, path)
        for extra in extras:
            if isinstance(extra, IntRange) and not extra.minimum <= value <= extra.maximum:
                raise WireError(
                    f"{path}: {value} is outside the {extra.format} range "
                    f"{extra.minimum}..{extra.maximum}"
                )
        return value
    if origin in (typing.Union, types.UnionType):
        options = get_args(tp)
        if data is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, data, path)
            except WireError as error:
                errors.append(str(error))
        raise WireError(errors[0] if len(errors) == 1 else f"{path}: no accepted type matched")
    if origin is list:
        (item_type,) = get_args(tp)
        if not isinstance(data, list):
            raise WireError(f"{path}: expected a list")
        return [_convert(item_type, item, f"{path}[{index}]") for index, item in enumerate(data)]
    if origin is tuple:
        item_types = get_args(tp)
        if not isinstance(data, list) or len(data) != len(item_types):
            raise WireError(f"{path}: expected a list of {len(item_types)} items")
        return tuple(
            _convert(item_type, item, f"{path}[{index}]")
            for index, (item_type, item) in enumerate(zip(item_types, data, strict=True))
        )
    if origin is dict:
        key_type, value_type = get_args(tp)
        if not isinstance(data, dict):
            raise WireError(f"{path}: expected an object")
        return {
            _convert(key_type, key, f"{path}.{key}"): _convert(value_type, value, f"{path}.{key}")
            for key, value in data.items()
        }
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _convert_dataclass(tp, data, path)
    if tp is bytes:
        if not isinstance(data, str):
            raise WireError(f"{path}: expected a base64 string")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as error:
            raise WireError(f"{path}: invalid base64 ({error})") from None
    if isinstance(tp, type) and issubclass(tp, IntEnum):
        if isinstance(data, bool) or not isinstance(data, int):
            raise WireError(f"{path}: expected an integer code")
        try:
            return tp(data)
        except ValueError:
            raise WireError(f"{path}: unknown code {data}") from None
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise WireError(f"{path}: expected an integer")
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise WireError(f"{path}: expected true or false")
        return data
    if tp is str:
        if not isinstance(data, str):
            raise WireError(f"{path}: expected a string")
        return data
    if tp is Any:
        return data
    raise WireError(f"{path}: unsupported type {tp!r}")


def _convert_dataclass(cls: type, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise WireError(f"{path}: expected an object")
    hints = _hints(cls)
    fields = {field.name: field for field in dataclasses.fields(cls)}
    # "error" is the human-readable twin of error_code in responses; accept and ignore it.
    unknown = set(data) - set(fields) - {"error"}
    if unknown:
        raise WireError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
    kwargs: dict[str, Any] = {}
    for name, field in fields.items():
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], f"{path}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise WireError(f"{path}: missing required field {name}")
    return cls(**kwargs)
