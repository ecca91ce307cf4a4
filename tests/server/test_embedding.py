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
        assert await coordinator.topic_metadata() == {"orders": 6}
        async with http.get(server.url + "/healthz") as response:
            assert await response.json() == {"status": "ok"}
    assert not coordinator.is_ready


async def test_listen_backlog_is_configurable() -> None:
    """A whole fleet reconnecting at once needs more than aiohttp's default backlog (128)."""
    import asyncio

    from coordinator import GroupCoordinator
    from coordinator.server import AuthConfig, create_app, start_server

    app = create_app(GroupCoordinator(), AuthConfig(insecure=True))
    server = await start_server(app, "127.0.0.1", 0, backlog=77)
    try:
        ss = await asyncio.create_subprocess_exec(
            "ss", "-ltnH", f"sport = :{server.port}", stdout=asyncio.subprocess.PIPE
        )
        output, _ = await ss.communicate()
        listing = output.decode().split()
        # For a listening socket, ss shows the backlog as Send-Q (third column).
        assert listing[0] == "LISTEN" and listing[2] == "77"
    finally:
        await server.stop()
