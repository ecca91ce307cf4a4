"""The OpenAPI 3.1 document, generated from the route table and the message dataclasses.

`docs/openapi.json` is this document checked in; a test fails when it is stale. Regenerate
with `staticfleet coordinator openapi --output docs/openapi.json`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from coordinator.server.http_errors import ErrorBody
from coordinator.server.jsonschema import JsonSchema, schema_components
from coordinator.server.operations import Access, Operation
from coordinator.server.routes import OPERATIONS

API_VERSION = "1"
SECURITY_SCHEME = "bearerAuth"

_ERROR_STATUSES: dict[int, str] = {
    400: "Malformed request: bad JSON, wrong types, unknown or missing fields (INVALID_REQUEST)",
    401: "No bearer token (GROUP_AUTHORIZATION_FAILED)",
    403: "Token not valid, or its role/group does not allow this (GROUP_AUTHORIZATION_FAILED)",
    404: "No such route (INVALID_REQUEST)",
    408: "The request body did not arrive within the body timeout (INVALID_REQUEST)",
    413: "Request body over the size limit (INVALID_REQUEST)",
    500: "The coordinator failed on this request (UNKNOWN_SERVER_ERROR); the server keeps serving",
    503: "The coordinator is starting or stopping (COORDINATOR_NOT_AVAILABLE); retry",
}


def _error_statuses(operation: Operation) -> list[int]:
    statuses = [500]
    if operation.request_body is not None or operation.query:
        statuses.append(400)
    if operation.access is not Access.PUBLIC:
        statuses += [401, 403]
    if operation.path_params:
        # A group id that cannot be a path segment (e.g. empty) finds no route.
        statuses.append(404)
    if operation.request_body is not None:
        statuses += [408, 413]
    if operation.uses_coordinator:
        statuses.append(503)
    return sorted(statuses)


def _json_content(schema: JsonSchema) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _operation(operation: Operation, refs: dict[type, JsonSchema]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "tags": [operation.tag],
    }
    if operation.description:
        doc["description"] = operation.description
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "minLength": 1},
            "description": "The group; must equal the body's group_id where there is one",
        }
        for name in operation.path_params
    ]
    parameters += [
        {
            "name": param.name,
            "in": "query",
            "required": False,
            "schema": param.schema,
            "description": param.description,
        }
        for param in operation.query
    ]
    if parameters:
        doc["parameters"] = parameters
    if operation.request_body is not None:
        doc["requestBody"] = {
            "required": True,
            "content": _json_content(refs[operation.request_body]),
        }
    responses: dict[str, Any] = {}
    if operation.response_body is not None:
        ok = {"description": "OK", "content": _json_content(refs[operation.response_body])}
    elif operation.response_media_type == "application/json":
        ok = {"description": "OK", "content": {"application/json": {"schema": {}}}}
    else:
        ok = {
            "description": "OK",
            "content": {operation.response_media_type: {"schema": {"type": "string"}}},
        }
    responses["200"] = ok
    for status, body in operation.extra_responses:
        responses[str(status)] = {
            "description": _ERROR_STATUSES.get(status, "See the body"),
            "content": _json_content(refs[body]),
        }
    error_schema = refs[ErrorBody]
    for status in _error_statuses(operation):
        responses.setdefault(
            str(status),
            {"description": _ERROR_STATUSES[status], "content": _json_content(error_schema)},
        )
    doc["responses"] = dict(sorted(responses.items()))
    if operation.access is Access.PUBLIC:
        doc["security"] = []
    return doc


def _bodies() -> list[type]:
    """Every body type of the routes, in route order (their schemas are the components)."""
    bodies: list[type] = [ErrorBody]
    for operation in OPERATIONS:
        if operation.request_body is not None:
            bodies.append(operation.request_body)
        if operation.response_body is not None:
            bodies.append(operation.response_body)
        bodies += [body for _, body in operation.extra_responses]
    return bodies


def build_openapi() -> dict[str, Any]:
    refs, components = schema_components(_bodies())
    paths: dict[str, dict[str, Any]] = {}
    for operation in OPERATIONS:
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(operation, refs)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "staticfleet coordinator",
            "version": API_VERSION,
            "description": (
                "Kafka consumer-group coordination over HTTP/JSON. Bodies are the Kafka "
                "messages with snake_case fields; bytes are base64. Kafka error codes of the "
                "protocol are answered with 200 and the code in the body; 4xx/5xx carry "
                "ErrorBody. See docs/server.md."
            ),
        },
        "security": [{SECURITY_SCHEME: []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                SECURITY_SCHEME: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An admin token, or a member token scoped to groups",
                }
            },
        },
    }


@functools.cache
def render_openapi() -> str:
    """The document as checked in: stable key order, two-space indent, final newline."""
    return json.dumps(build_openapi(), indent=2, ensure_ascii=False) + "\n"
