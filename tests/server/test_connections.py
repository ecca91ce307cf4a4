"""Slow and idle connections are closed; one address cannot hold more than its share.
Real sockets on loopback; every wait is bounded."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore
from coordinator.server import AuthConfig, RunningServer, create_app, start_server
from coordinator.server.connections import ConnectionLimits

from .messages import join_body

LIMITS = ConnectionLimits(
    header_timeout_s=0.5,
    body_timeout_s=0.5,
    keepalive_timeout_s=0.8,
    max_connections_per_address=5,
)
# Longer than every limit above: a closed connection is seen well before it.
BOUND_S = 5.0


@pytest.fixture
async def running() -> AsyncIterator[RunningServer]:
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=1500),
        store=MemoryStore(),
    )
    app = create_app(coordinator, AuthConfig(insecure=True), connection_limits=LIMITS)
    server = await start_server(app, "127.0.0.1", 0, shutdown_timeout=1.0)
    yield server
    await server.stop()


async def _connect(server: RunningServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def _closed_after(reader: asyncio.StreamReader) -> float:
    """Seconds until the server closes the connection (reading whatever it sends)."""
    started = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), BOUND_S):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


async def test_a_client_trickling_its_headers_is_closed(running: RunningServer) -> None:
    reader, writer = await _connect(running)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")

    async def trickle() -> None:
        for _ in range(int(BOUND_S / 0.1)):
            await asyncio.sleep(0.1)
            writer.write(b"X")  # one byte of a header line that never ends

    trickling = asyncio.create_task(trickle())
    try:
        assert await _closed_after(reader) < 2.0
    finally:
        trickling.cancel()
        writer.close()


async def test_a_client_that_sends_nothing_is_closed(running: RunningServer) -> None:
    reader, writer = await _connect(running)
    try:
        assert await _closed_after(reader) < 2.0
    finally:
        writer.close()


async def test_an_idle_kept_alive_connection_is_closed(running: RunningServer) -> None:
    reader, writer = await _connect(running)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND_S)
        assert head.startswith(b"HTTP/1.1 200")
        assert await _closed_after(reader) < 2.5
    finally:
        writer.close()


async def test_a_body_that_does_not_arrive_is_408(running: RunningServer) -> None:
    reader, writer = await _connect(running)
    try:
        writer.write(
            b"POST /v1/groups/g/heartbeat HTTP/1.1\r\nHost: x\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"group_id"'
        )
        answer = await asyncio.wait_for(reader.read(65536), BOUND_S)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"INVALID_REQUEST" in answer
        assert await _closed_after(reader) < 2.0
    finally:
        writer.close()


async def test_connections_per_address_are_capped(running: RunningServer) -> None:
    held = [await _connect(running) for _ in range(5)]
    try:
        await asyncio.sleep(0.05)
        reader, writer = await _connect(running)
        assert await _closed_after(reader) < 0.3, "the sixth is refused at once"
        writer.close()
        # Counted in /metrics, scraped through one of the five.
        scrape_reader, scrape_writer = held[0]
        scrape_writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(scrape_reader.readuntil(b"\r\n\r\n"), BOUND_S)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        exposition = await asyncio.wait_for(scrape_reader.readexactly(length), BOUND_S)
        assert b'connections_refused_total{reason="per_address"} 1.0' in exposition
        assert b"staticfleet_coordinator_connections_open 5.0" in exposition
        # One of the five goes away: a new connection is admitted and served.
        held.pop()[1].close()
        await asyncio.sleep(0.1)
        reader, writer = await _connect(running)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND_S)
        assert head.startswith(b"HTTP/1.1 200")
        writer.close()
    finally:
        for _, held_writer in held:
            held_writer.close()


async def test_a_long_poll_outlives_the_head_timeout(running: RunningServer) -> None:
    """A join parked for the initial rebalance delay (1.5 s) is not a slow client."""
    reader, writer = await _connect(running)
    try:
        body = json.dumps(join_body("g", "i-0")).encode()
        writer.write(
            b"POST /v1/groups/g/join HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        started = time.monotonic()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND_S)
        assert head.startswith(b"HTTP/1.1 200")
        assert time.monotonic() - started > 1.0
    finally:
        writer.close()


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        ConnectionLimits(header_timeout_s=0)
    with pytest.raises(ValueError):
        ConnectionLimits(max_connections_per_address=0)
