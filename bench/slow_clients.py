"""Slow clients against the coordinator server's default connection limits.

N sockets each send a partial request head and then one byte a second, for ever (a
"slowloris" client); meanwhile one ordinary client asks /healthz. Reports how long the
server held the slow sockets (the head timeout says 10 s) and the ordinary client's
latency during the flood. Before the limits existed, the server held such sockets as long
as the client kept trickling.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from coordinator import GroupCoordinator, MemoryStore
from coordinator.server import AuthConfig, create_app, start_server
from coordinator.server.connections import ConnectionLimits

HOLD_LIMIT_S = 120.0


async def _slow_client(port: int) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()

    async def trickle() -> None:
        while True:
            await asyncio.sleep(1.0)
            writer.write(b"X")

    trickling = asyncio.create_task(trickle())
    try:
        while await asyncio.wait_for(reader.read(1024), HOLD_LIMIT_S):
            pass
    except (ConnectionResetError, TimeoutError):
        pass
    finally:
        trickling.cancel()
        writer.close()
    return time.monotonic() - started


async def _healthz_latency_ms(port: int) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await reader.read()
    writer.close()
    return (time.monotonic() - started) * 1000


async def _run(sockets: int) -> dict[str, Any]:
    limits = ConnectionLimits()
    app = create_app(
        GroupCoordinator(store=MemoryStore()),
        AuthConfig(insecure=True),
        connection_limits=limits,
    )
    server = await start_server(app, "127.0.0.1", 0)
    try:
        slow = [asyncio.create_task(_slow_client(server.port)) for _ in range(sockets)]
        await asyncio.sleep(2.0)
        latency_ms = await _healthz_latency_ms(server.port)
        held = await asyncio.gather(*slow)
    finally:
        await server.stop()
    return {
        "slow_sockets": sockets,
        "header_timeout_s": limits.header_timeout_s,
        "held_s_max": round(max(held), 2),
        "held_s_min": round(min(held), 2),
        "healthz_latency_ms_during_flood": round(latency_ms, 1),
    }


def run(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run(50 if quick else 300))


if __name__ == "__main__":
    print(run(quick=False))
