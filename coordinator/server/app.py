"""`create_app`: the aiohttp application over one `GroupCoordinator`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from aiohttp import web

from coordinator import GroupCoordinator
from coordinator.server import middleware
from coordinator.server.auth import AuthConfig, Authenticator
from coordinator.server.auth import describe as describe_auth
from coordinator.server.connections import REFUSAL_REASONS, ConnectionGuard, ConnectionLimits
from coordinator.server.context import CONTEXT, ServerContext
from coordinator.server.fast_path import FastPath
from coordinator.server.limits import DEFAULT_MAX_BODY_BYTES, MAX_DERIVED_BODY_BYTES
from coordinator.server.member_keys import MemberKeys
from coordinator.server.metrics import ServerMetrics
from coordinator.server.models import LagFigure
from coordinator.server.pod_identity import PodAuth
from coordinator.server.routes import OPERATIONS

log = logging.getLogger(__name__)


def create_app(
    coordinator: GroupCoordinator,
    auth: AuthConfig,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    manage_coordinator: bool = True,
    initial_topics: Mapping[str, int] | None = None,
    connection_limits: ConnectionLimits | None = None,
    fast_path: bool = True,
    pod_auth: PodAuth | None = None,
) -> web.Application:
    """The HTTP/JSON API over `coordinator`.

    With `manage_coordinator` (the default) the app starts the coordinator on startup (then
    applies `initial_topics`) and closes it on shutdown, before waiting for open requests,
    so parked long polls are released. Without it, the caller starts the coordinator before
    starting the server and closes it after stopping the server; the server is ready as
    soon as it runs.

    `connection_limits` (timeouts, connections per client address) apply when the app is
    served by `start_server`/`serving`; so does `fast_path`: well-formed, authorised
    heartbeats, JoinGroups and SyncGroups answered ahead of aiohttp's request stack
    (`fast_path.py`), same answers.

    `pod_auth` also accepts members by their pod's ServiceAccount token, each only as its
    pod's instance id (docs/server.md, "Members known by their pod"); the fast path answers
    their requests once the token's review is cached (aiohttp's path reviews it).

    Raises `AuthConfigError` when `auth` has no tokens and is not explicitly insecure.
    """
    auth.check_usable()
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    metrics = ServerMetrics()
    guard = ConnectionGuard(connection_limits or ConnectionLimits())
    metrics.watch_connections(guard, REFUSAL_REASONS)
    context = ServerContext(
        coordinator=coordinator,
        authenticator=Authenticator(auth),
        metrics=metrics,
        max_body_bytes=max_body_bytes,
        connection_guard=guard,
        pod_auth=pod_auth,
    )
    app = web.Application(
        # Bodies are read by bodies.read_json under a per-request limit (a group's grows
        # with its size); this is only aiohttp's own ceiling.
        client_max_size=max(max_body_bytes, MAX_DERIVED_BODY_BYTES),
        middlewares=[middleware.errors, middleware.guard],
    )
    app[CONTEXT] = context
    if fast_path:
        context.connection_guard.fast_path = FastPath(context)
    for operation in OPERATIONS:
        route = app.router.add_route(
            operation.method, operation.path, operation.handler, name=operation.operation_id
        )
        context.operations[route] = operation
    coordinator.add_journal_listener(metrics.on_journal_event)
    topics = dict(initial_topics or {})
    if auth.insecure:
        log.warning("coordinator server: %s; every caller is admin", describe_auth(auth))
    else:
        log.info("coordinator server: %s", describe_auth(auth))

    async def on_startup(app: web.Application) -> None:
        if manage_coordinator:
            await coordinator.start()
            if topics:
                await coordinator.set_topic_metadata(topics)
        context.member_keys = MemberKeys(await coordinator.store.instance_secret())
        context.serving = True

    async def on_shutdown(app: web.Application) -> None:
        # Not ready from here on: new requests get 503 (retriable) rather than a coordinator
        # that is half closed.
        context.serving = False
        if manage_coordinator:
            await coordinator.close()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    return app


def add_readiness_gate(app: web.Application, gate: Callable[[], bool]) -> None:
    """Make /readyz (and request admission) also depend on `gate()`: an embedding process
    uses it to keep a standby replica out of its Service's endpoints."""
    app[CONTEXT].readiness_gates.append(gate)


def serve_group_lag(app: web.Application, lag_of: Callable[[str], LagFigure | None]) -> None:
    """Serve `lag_of(group_id)` at GET /v1/groups/{group_id}/lag (an autoscaler's source):
    the embedding process (the operator) knows the figures."""
    app[CONTEXT].group_lag = lag_of


def authenticator_of(app: web.Application) -> Authenticator:
    """The app's authenticator: an embedding process (the operator) adds and removes member
    tokens at runtime through it (`set_member_tokens` / `remove_group`)."""
    return app[CONTEXT].authenticator
