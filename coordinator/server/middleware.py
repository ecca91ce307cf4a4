"""Two middlewares: `errors` (outermost) gives every failure the JSON error shape, and
`guard` admits a request to its operation (token, role, group scope, readiness).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from coordinator.errors import ErrorCode
from coordinator.server.auth import bearer_token, is_well_formed
from coordinator.server.bodies import too_large
from coordinator.server.context import context_of, request_principal
from coordinator.server.http_errors import ApiError, error_response, forbidden
from coordinator.server.operations import Access
from coordinator.server.pod_identity import Refused, group_problem

log = logging.getLogger(__name__)

_UNMATCHED = "unmatched"


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    context = context_of(request)
    operation = context.operation_for(request)
    name = operation.operation_id if operation else _UNMATCHED
    guard = context.connection_guard
    guard.request_started(request.transport)
    try:
        return await handler(request)
    except ApiError as error:
        context.metrics.observe_error(name, error.code)
        return error.response()
    except web.HTTPRequestEntityTooLarge:
        context.metrics.observe_error(name, ErrorCode.INVALID_REQUEST)
        return too_large(context.max_body_bytes).response()
    except web.HTTPException as error:
        # aiohttp's own answers: 404 for unknown routes, 405 for a wrong method.
        if error.status < 400:
            raise
        context.metrics.observe_error(name, ErrorCode.INVALID_REQUEST)
        message = f"{error.reason}: {request.method} {request.path}"
        headers = {"Allow": error.headers["Allow"]} if "Allow" in error.headers else None
        return error_response(error.status, ErrorCode.INVALID_REQUEST, message, headers)
    except asyncio.CancelledError:
        raise
    except Exception:
        # The coordinator (or we) failed on this request; the server keeps serving.
        # The raw (percent-encoded) path: a decoded one could carry a newline into the log.
        log.exception("%s %s failed (%s)", request.method, request.raw_path, name)
        context.metrics.observe_error(name, ErrorCode.UNKNOWN_SERVER_ERROR)
        return error_response(
            500, ErrorCode.UNKNOWN_SERVER_ERROR, "internal error; see the coordinator's log"
        )
    finally:
        guard.request_finished(request.transport)


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    context = context_of(request)
    operation = context.operation_for(request)
    if operation is None:
        # Nothing matched: the handler is aiohttp's 404/405.
        return await handler(request)
    if operation.access is not Access.PUBLIC:
        principal = await request_principal(request)
        if isinstance(principal, Refused):
            # A ServiceAccount token the review refused (expired, wrong audience, no pod).
            raise ApiError(
                401,
                ErrorCode.GROUP_AUTHORIZATION_FAILED,
                f"the pod token is refused: {principal.reason}",
                {"WWW-Authenticate": 'Bearer realm="staticfleet", error="invalid_token"'},
            )
        if principal is None:
            token = bearer_token(request.headers.get("Authorization"))
            if token is None:
                raise ApiError(
                    401,
                    ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    "missing bearer token (Authorization: Bearer <token>)",
                    {"WWW-Authenticate": 'Bearer realm="staticfleet"'},
                )
            if not is_well_formed(token):
                # RFC 6750 "invalid_token": not a token at all (e.g. non-ASCII characters).
                raise ApiError(
                    401,
                    ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    "malformed bearer token: only A-Z a-z 0-9 - . _ ~ + / = are allowed",
                    {"WWW-Authenticate": 'Bearer realm="staticfleet", error="invalid_token"'},
                )
            raise forbidden("the token is not valid")
        if operation.access is Access.ADMIN and not principal.is_admin:
            raise forbidden("this operation needs an admin token")
        group_id = request.match_info.get("group_id", "")
        if operation.access is Access.GROUP and not principal.may_use_group(group_id):
            pod_auth = context.pod_auth
            if principal.pod is not None and pod_auth is not None:
                why = group_problem(principal.pod, pod_auth.bindings, group_id)
                raise forbidden(f"the pod token is not allowed to act on this group: {why}")
            raise forbidden("the token is not allowed to act on this group")
    if operation.uses_coordinator and not context.ready:
        raise ApiError(
            503, ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is starting or stopping"
        )
    return await handler(request)
