"""The coordinator's HTTP/JSON server (aiohttp): see docs/server.md for routes and tokens."""

from __future__ import annotations

from coordinator.server.app import (
    add_readiness_gate,
    authenticator_of,
    create_app,
    serve_group_lag,
)
from coordinator.server.auth import (
    ENV_ADMIN_TOKEN,
    ENV_GROUP_ID,
    ENV_MEMBER_TOKEN,
    ENV_TOKENS_FILE,
    AuthConfig,
    AuthConfigError,
    Authenticator,
    Principal,
    Role,
)
from coordinator.server.openapi import build_openapi, render_openapi
from coordinator.server.runner import RunningServer, serving, start_server

__all__ = [
    "ENV_ADMIN_TOKEN",
    "ENV_GROUP_ID",
    "ENV_MEMBER_TOKEN",
    "ENV_TOKENS_FILE",
    "AuthConfig",
    "AuthConfigError",
    "Authenticator",
    "Principal",
    "Role",
    "RunningServer",
    "add_readiness_gate",
    "authenticator_of",
    "build_openapi",
    "create_app",
    "render_openapi",
    "serve_group_lag",
    "serving",
    "start_server",
]
