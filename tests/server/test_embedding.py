"""Embedding the server in another asyncio program (as the operator does)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from coordinator import GroupCoordinator, SqliteStore
from coordinator.server import create_app, serving

from .conftest import ADMIN_TOKEN, TEST_AUTH, TEST_CONFIG


async def test_caller_managed_coordinator(tmp_path: Path) -> None:
    coordinator = GroupCoordinator(config=TEST_CONFIG, store=SqliteStore(tmp_path / "c.db"))
    await coordinator.start()
    await coordinator.set_topic_metadata({"orders": 3})
    app = create_app(coordinator, TEST_AUTH, manage_coordinator=False)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with serving(app) as server, aiohttp.ClientSession() as http:
        async with http.get(server.url + "/readyz") as response:
            assert response.status == 200
        async with http.get(server.url + "/v1/topics", headers=headers) as response:
            assert await response.json() == {"topics": {"orders": 3}}
        # The owner closes the coordinator: the server says so instead of failing requests.
        await coordinator.close()
        async with http.get(server.url + "/readyz") as response:
            assert response.status == 503
        async with http.get(server.url + "/v1/groups", headers=headers) as response:
            assert response.status == 503
            assert (await response.json())["error"] == "COORDINATOR_NOT_AVAILABLE"


async def test_server_managed_coordinator_is_started_and_closed(tmp_path: Path) -> None:
    coordinator = GroupCoordinator(config=TEST_CONFIG, store=SqliteStore(tmp_path / "c.db"))
    app = create_app(coordinator, TEST_AUTH, initial_topics={"orders": 6})
    async with serving(app) as server, aiohttp.ClientSession() as http:
        assert coordinator.is_ready
        assert coordinator.topic_metadata() == {"orders": 6}
        async with http.get(server.url + "/healthz") as response:
            assert await response.json() == {"status": "ok"}
    assert not coordinator.is_ready
