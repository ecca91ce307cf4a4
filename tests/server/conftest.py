"""A real server on loopback over a real GroupCoordinator with a SQLite store file."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDictProxy

from coordinator import CoordinatorConfig, GroupCoordinator, SqliteStore
from coordinator.server import AuthConfig, RunningServer, create_app, start_server

ADMIN_TOKEN = "admin-secret"
MEMBER_A_TOKEN = "member-a-secret"
MEMBER_B_TOKEN = "member-b-secret"
GROUP_A = "group-a"
GROUP_B = "group-b"

TEST_AUTH = AuthConfig(
    admin_tokens=frozenset({ADMIN_TOKEN}),
    member_tokens={GROUP_A: frozenset({MEMBER_A_TOKEN}), GROUP_B: frozenset({MEMBER_B_TOKEN})},
)
# Small initial rebalance delay: joins of a new group answer in tens of milliseconds.
TEST_CONFIG = CoordinatorConfig(
    group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=50
)

_UNSET: Any = object()


@dataclass
class Reply:
    status: int
    text: str
    headers: CIMultiDictProxy[str]

    @property
    def body(self) -> Any:
        return json.loads(self.text)


@dataclass
class Server:
    running: RunningServer
    coordinator: GroupCoordinator
    db_path: Path
    http: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return self.running.url

    async def call(
        self,
        method: str,
        path: str,
        body: Any = _UNSET,
        *,
        token: str | None = ADMIN_TOKEN,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        if body is not _UNSET:
            data = json.dumps(body).encode()
            all_headers.setdefault("Content-Type", "application/json")
        async with self.http.request(
            method, self.url + path, data=data, headers=all_headers
        ) as response:
            return Reply(response.status, await response.text(), response.headers)


async def start_test_server(
    db_path: Path, *, auth: AuthConfig = TEST_AUTH, max_body_bytes: int | None = None
) -> tuple[RunningServer, GroupCoordinator]:
    coordinator = GroupCoordinator(config=TEST_CONFIG, store=SqliteStore(db_path))
    if max_body_bytes is None:
        app = create_app(coordinator, auth)
    else:
        app = create_app(coordinator, auth, max_body_bytes=max_body_bytes)
    return await start_server(app, "127.0.0.1", 0, shutdown_timeout=2.0), coordinator


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    db_path = tmp_path / "coordinator.db"
    running, coordinator = await start_test_server(db_path)
    async with aiohttp.ClientSession() as http:
        yield Server(running, coordinator, db_path, http)
    await running.stop()
