"""Request bodies and query parameters: strict decoding into the message dataclasses.

Everything a handler receives has been checked here, so bad input becomes a 400 before it
can reach the coordinator (and its store) at all.

A body is parsed once when it is plainly valid (`wire.decode_plain`: msgspec straight into
the message's strict twin, which refuses everything the policies below would, and lets
through nothing they would refuse). Anything else - malformed, out of bounds, 3.0 for an
integer, a lone surrogate, a non-null `error` - is judged by the full path: Python's JSON
parser under our number and text policies, then msgspec's strict conversion, whose answer
(accepted, or which 400 and why) is the one the client gets.
"""

from __future__ import annotations

import asyncio
import json
import re
from decimal import Decimal
from typing import Any, TypeVar

from aiohttp import web

from coordinator.errors import ErrorCode
from coordinator.server.http_errors import ApiError, bad_request
from coordinator.server.limits import INT_MAX, INT_MIN
from coordinator.wire import WireError, decode_plain, from_json

T = TypeVar("T")

# Plain ASCII decimal only: int() alone would also take "1_000", " 7 " and other digits.
_DECIMAL = re.compile(r"-?[0-9]{1,20}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_number(text: str) -> int | float:
    # JSON Schema (and so the OpenAPI document) counts 3.0 and 3e2 as integers; so do we.
    # The exponent bound keeps "1e999999999" from becoming a gigantic int.
    number = Decimal(text)
    if number.adjusted() < 20 and number == number.to_integral_value():
        return int(number)
    return float(text)


def parse_json(raw: bytes) -> Any:
    """Strict JSON: no NaN/Infinity, valid UTF-8, bounded nesting."""
    try:
        data = json.loads(raw, parse_constant=_reject_constant, parse_float=_parse_number)
    except RecursionError:
        raise bad_request("request body is nested too deeply") from None
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise bad_request(f"request body is not valid JSON: {error}") from None
    _check_values(data, "$")
    return data


def _check_values(data: Any, path: str) -> None:
    """Refuse values JSON allows but the store cannot keep (lone surrogates, huge ints)."""
    stack: list[tuple[Any, str]] = [(data, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            _check_text(value, where)
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int):
            if not INT_MIN <= value <= INT_MAX:
                raise bad_request(f"{where}: integer out of the 64-bit range")
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{index}]") for index, item in enumerate(value))
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, where)
                stack.append((item, f"{where}.{key}"))


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_request(f"{where}: string is not valid Unicode (lone surrogate)") from None


async def read_json(request: web.Request, max_bytes: int, timeout_s: float | None = None) -> Any:
    return parse_json(await read_body(request, max_bytes, timeout_s))


async def read_body(request: web.Request, max_bytes: int, timeout_s: float | None = None) -> bytes:
    """The raw body: at most `max_bytes` (413), within `timeout_s` (408), not empty (400)."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise too_large(max_bytes)
    try:
        async with asyncio.timeout(timeout_s):
            raw = await _read_at_most(request, max_bytes)
    except TimeoutError:
        # The client is too slow (or stalling on purpose): 408, and the connection closes.
        request.protocol.keep_alive(False)
        raise ApiError(
            408, ErrorCode.INVALID_REQUEST, f"request body not received within {timeout_s:g} s"
        ) from None
    if not raw:
        raise bad_request("request body is empty; a JSON object is required")
    return raw


async def _read_at_most(request: web.Request, max_bytes: int) -> bytes:
    # Our own loop rather than request.read(): the limit differs per request (a group's
    # limit grows with its size), while aiohttp's client_max_size is one per app.
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > max_bytes:
            request.protocol.keep_alive(False)  # do not read on what is left of it
            raise too_large(max_bytes)
    return bytes(body)


async def read_message(
    request: web.Request, cls: type[T], max_bytes: int, timeout_s: float | None = None
) -> T:
    """The body as `cls`, decoded with the wire mapping (unknown/missing fields refused)."""
    raw = await read_body(request, max_bytes, timeout_s)
    message = decode_plain(cls, raw)
    if message is not None:
        return message
    data = parse_json(raw)
    try:
        return from_json(cls, data)
    except WireError as error:
        raise bad_request(str(error)) from None


def too_large(max_bytes: int) -> ApiError:
    return ApiError(
        413, ErrorCode.INVALID_REQUEST, f"request body is larger than the {max_bytes}-byte limit"
    )


def query_int(request: web.Request, name: str, default: int, minimum: int, maximum: int) -> int:
    values = request.query.getall(name, [])
    if not values:
        return default
    if len(values) > 1:
        raise bad_request(f"query parameter {name} must be given once")
    raw = values[0]
    # Present but empty is not "absent": the schema says integer, so it is a bad request.
    if not _DECIMAL.fullmatch(raw):
        raise bad_request(f"query parameter {name} must be an integer")
    value = int(raw)
    if not minimum <= value <= maximum:
        raise bad_request(f"query parameter {name} must be between {minimum} and {maximum}")
    return value


def query_text(request: web.Request, name: str) -> str | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    _check_text(raw, f"query parameter {name}")
    return raw
