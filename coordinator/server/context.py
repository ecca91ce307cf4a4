"""What every handler of one server shares, stored on its aiohttp application."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from coordinator import GroupCoordinator
from coordinator.server.auth import ADMIN, Authenticator, Principal, Role, bearer_token
from coordinator.server.connections import ConnectionGuard
from coordinator.server.member_keys import MemberKeys
from coordinator.server.metrics import ServerMetrics
from coordinator.server.models import LagFigure
from coordinator.server.pod_identity import PodAuth, Refused, group_problem, looks_like_jwt

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
    # Members known by their pod's ServiceAccount token (docs/server.md); None: group tokens only.
    pod_auth: PodAuth | None = None
    # A group's lag figure, set by whoever embeds the server (the operator reads it from the
    # group's source cluster: the server alone knows no log ends); None: none served.
    group_lag: Callable[[str], LagFigure | None] | None = None

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


async def request_principal(request: web.Request) -> Principal | Refused | None:
    """`principal_of`, and, for a token no configuration knows, a pod's reviewed
    ServiceAccount token when pod identity is on: a member principal scoped to the group
    its pod is bound to (none when unbound), or the review's refusal."""
    principal = principal_of(request)
    context = context_of(request)
    pod_auth = context.pod_auth
    if principal is not None or pod_auth is None:
        return principal
    token = bearer_token(request.headers.get("Authorization"))
    if token is None or not looks_like_jwt(token):
        return None
    identity = await pod_auth.cache.identify(token)
    if isinstance(identity, Refused):
        return identity
    binding = pod_auth.bindings.get((identity.namespace, identity.pod_name))
    bound = (
        binding is not None and group_problem(identity, pod_auth.bindings, binding.group_id) is None
    )
    groups = frozenset({binding.group_id}) if binding is not None and bound else frozenset()
    return Principal(Role.MEMBER, groups, pod=identity)
