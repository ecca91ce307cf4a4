"""The description of one HTTP operation: how it is routed, guarded and documented.

The route table (`routes.py`) is a list of these; the app and the OpenAPI document are both
built from it, so a route cannot exist without documentation or the other way round.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Access(Enum):
    PUBLIC = "public"  # no token (probes, metrics, the API document)
    AUTHENTICATED = "authenticated"  # any valid token, member or admin
    GROUP = "group"  # admin, or a member token scoped to the path's {group_id}
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class QueryParam:
    name: str
    schema: dict[str, Any]
    description: str


@dataclass(frozen=True, slots=True)
class Operation:
    operation_id: str
    method: str
    path: str
    handler: Handler
    access: Access
    summary: str
    tag: str
    description: str = ""
    request_body: type | None = None
    response_body: type | None = None
    # For non-JSON answers (the Prometheus exposition).
    response_media_type: str = "application/json"
    query: tuple[QueryParam, ...] = ()
    # Calls the coordinator: may answer 503 while it is not ready, 500 if it fails.
    uses_coordinator: bool = True
    # Further documented answers with their own body type (e.g. /readyz's 503).
    extra_responses: tuple[tuple[int, type], ...] = ()

    @property
    def path_params(self) -> list[str]:
        return [part[1:-1] for part in self.path.split("/") if part.startswith("{")]
