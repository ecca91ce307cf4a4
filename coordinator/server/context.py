"""What every handler of one server shares, stored on its aiohttp application."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from coordinator import GroupCoordinator
from coordinator.server.auth import ADMIN, Authenticator, Principal, bearer_token
from coordinator.server.connections import ConnectionGuard
from coordinator.server.member_keys import MemberKeys
from coordinator.server.metrics import ServerMetrics

if TYPE_CHECKING:
    from coordinator.server.operations import Operation


@dataclass(slots=True)
class ServerContext:
    coordinator: GroupCoordinator
    authenticator: Authenticator
    metrics: ServerMetrics
    max_body_bytes: int
    connection_guard: ConnectionGuard
    # True from app startup until shutdown begins.
    serving: bool = False
    # Set at startup, from the store's secret (see member_keys.py).
    member_keys: MemberKeys | None = None
    operations: dict[web.AbstractRoute, Operation] = field(default_factory=dict)
    # Extra conditions for readiness, set by whoever embeds the server (the operator: "this
    # replica is the active one"). All must hold.
    readiness_gates: list[Callable[[], bool]] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """Serving, the coordinator started with its store open (not yet closed), and every
        readiness gate open."""
        return (
            self.serving
            and self.coordinator.is_ready
            and all(gate() for gate in self.readiness_gates)
        )

    @property
    def body_timeout_s(self) -> float:
        return self.connection_guard.limits.body_timeout_s

    def operation_for(self, request: web.Request) -> Operation | None:
        route = request.match_info.route
        return self.operations.get(route)


CONTEXT = web.AppKey("staticfleet_server", ServerContext)


def context_of(request: web.Request) -> ServerContext:
    return request.app[CONTEXT]


def principal_of(request: web.Request) -> Principal | None:
    """The caller by its bearer token: ADMIN when auth is off, None for no or an unknown token.

    Recomputed where needed rather than stored on the request: hashing one token is cheap,
    and it keeps the server off request-storage APIs that differ between aiohttp versions.
    """
    authenticator = context_of(request).authenticator
    if authenticator.insecure:
        return ADMIN
    token = bearer_token(request.headers.get("Authorization"))
    return None if token is None else authenticator.authenticate(token)
