"""Running an app on a TCP port from any asyncio program (the CLI, the operator, tests)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web

DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0


@dataclass(slots=True)
class RunningServer:
    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        """Stop listening, run shutdown (closes a managed coordinator), wait for open
        requests up to the shutdown timeout, then clean up. Idempotent."""
        await self.runner.cleanup()


# A fleet restarting at once opens one long-poll connection per member: aiohttp's default
# listen backlog (128) overflows under a burst of 1,000 (measured by bench/http_bench.py).
DEFAULT_BACKLOG = 1024


async def start_server(
    app: web.Application,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    access_log: bool = False,
    backlog: int = DEFAULT_BACKLOG,
) -> RunningServer:
    """Start serving `app`; port 0 picks a free port (see `RunningServer.port`)."""
    runner = web.AppRunner(
        app,
        access_log=logging.getLogger("aiohttp.access") if access_log else None,
        shutdown_timeout=shutdown_timeout,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=backlog)
        await site.start()
        bound_port = int(runner.addresses[0][1])
    except BaseException:
        await runner.cleanup()
        raise
    return RunningServer(runner=runner, host=host, port=bound_port)


@asynccontextmanager
async def serving(
    app: web.Application,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    access_log: bool = False,
    backlog: int = DEFAULT_BACKLOG,
) -> AsyncIterator[RunningServer]:
    """`start_server` as an async context manager that stops the server on exit."""
    server = await start_server(
        app,
        host,
        port,
        shutdown_timeout=shutdown_timeout,
        access_log=access_log,
        backlog=backlog,
    )
    try:
        yield server
    finally:
        await server.stop()
