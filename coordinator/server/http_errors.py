"""The one error shape every non-protocol failure uses: a Kafka code, its name, a message.

Kafka error codes inside successful protocol responses stay in their 200 bodies; these are
for transport, authentication and validation failures only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from coordinator.errors import ErrorCode
from coordinator.wire import encode


@dataclass(frozen=True, slots=True)
class ErrorBody:
    """Body of every 4xx/5xx response."""

    error_code: ErrorCode
    message: str


def error_response(
    status: int,
    code: ErrorCode,
    message: str,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    body = encode(ErrorBody(code, message))
    return web.Response(
        status=status, body=body, content_type="application/json", charset="utf-8", headers=headers
    )


class ApiError(Exception):
    """Raised by handlers and middleware; turned into `error_response` at the edge."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        return error_response(self.status, self.code, self.message, self.headers)


def bad_request(message: str) -> ApiError:
    return ApiError(400, ErrorCode.INVALID_REQUEST, message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, ErrorCode.GROUP_AUTHORIZATION_FAILED, message)
