"""GET /v1/groups/{group_id}/lag on a real server on loopback: the figure the embedding
process (the operator) serves, behind the group-scoped bearer tokens an autoscaler's
TriggerAuthentication carries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from coordinator import GroupCoordinator, SqliteStore
from coordinator.server import create_app, serve_group_lag, start_server
from coordinator.server.models import LagFigure
from tests.server.conftest import (
    ADMIN_TOKEN,
    GROUP_A,
    GROUP_B,
    MEMBER_A_TOKEN,
    MEMBER_B_TOKEN,
    TEST_AUTH,
    TEST_CONFIG,
    Server,
)

FIGURE = LagFigure(group_id=GROUP_A, lag=1234, partitions_without_commit=2, read_at_ms=1_000)


@pytest.fixture
async def lag_server(tmp_path: Path) -> AsyncIterator[tuple[Server, dict[str, LagFigure]]]:
    figures: dict[str, LagFigure] = {GROUP_A: FIGURE}
    db_path = tmp_path / "coordinator.db"
    coordinator = GroupCoordinator(config=TEST_CONFIG, store=SqliteStore(db_path))
    app = create_app(coordinator, TEST_AUTH)
    serve_group_lag(app, figures.get)
    running = await start_server(app, "127.0.0.1", 0, shutdown_timeout=2.0)
    async with aiohttp.ClientSession() as http:
        yield Server(running, coordinator, db_path, http), figures
    await running.stop()


async def test_the_groups_member_token_and_the_admin_token_read_the_figure(
    lag_server: tuple[Server, dict[str, LagFigure]],
) -> None:
    server, figures = lag_server
    for token in (MEMBER_A_TOKEN, ADMIN_TOKEN):
        reply = await server.call("GET", f"/v1/groups/{GROUP_A}/lag", token=token)
        assert reply.status == 200, reply.text
        assert reply.body == {
            "group_id": GROUP_A,
            "lag": 1234,
            "partitions_without_commit": 2,
            "read_at_ms": 1000,
        }
    # A new reading is served as soon as the embedding process has it.
    figures[GROUP_A] = LagFigure(GROUP_A, 7, 0, 2_000)
    reply = await server.call("GET", f"/v1/groups/{GROUP_A}/lag", token=MEMBER_A_TOKEN)
    assert (reply.body["lag"], reply.body["read_at_ms"]) == (7, 2000)


@pytest.mark.parametrize(
    ("token", "status"),
    [(None, 401), ("not-a-token", 403), (MEMBER_B_TOKEN, 403)],
)
async def test_refused_without_a_token_with_a_wrong_one_or_another_groups(
    lag_server: tuple[Server, dict[str, LagFigure]], token: str | None, status: int
) -> None:
    server, _ = lag_server
    reply = await server.call("GET", f"/v1/groups/{GROUP_A}/lag", token=token)
    assert reply.status == status, reply.text
    assert "1234" not in reply.text


async def test_a_group_without_a_figure_is_404(
    lag_server: tuple[Server, dict[str, LagFigure]],
) -> None:
    server, _ = lag_server
    reply = await server.call("GET", f"/v1/groups/{GROUP_B}/lag", token=MEMBER_B_TOKEN)
    assert reply.status == 404
    assert reply.body["error"] == "GROUP_ID_NOT_FOUND"
    assert GROUP_B in reply.body["message"]
    reply = await server.call("GET", "/v1/groups/nobody/lag", token=ADMIN_TOKEN)
    assert reply.status == 404


async def test_a_server_that_embeds_no_operator_serves_no_figures(server: Server) -> None:
    reply = await server.call("GET", f"/v1/groups/{GROUP_A}/lag", token=ADMIN_TOKEN)
    assert reply.status == 404
