"""Running an app on a TCP port from any asyncio program (the CLI, the operator, tests)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web

from coordinator.server.connections import ConnectionGuard
from coordinator.server.context import CONTEXT
from coordinator.server.tls import DEFAULT_RELOAD_INTERVAL_S, ReloadingTls

DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0


@dataclass(slots=True)
class RunningServer:
    runner: web.AppRunner
    host: str
    port: int
    tls: ReloadingTls | None = None
    tls_watch: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    async def stop(self) -> None:
        """Stop listening, run shutdown (closes a managed coordinator), wait for open
        requests up to the shutdown timeout, then clean up. Idempotent."""
        if self.tls_watch is not None:
            self.tls_watch.cancel()
        await self.runner.cleanup()


class _GuardedTCPSite(web.TCPSite):
    """aiohttp's TCPSite with each connection's protocol wrapped by a `ConnectionGuard`."""

    def __init__(
        self,
        runner: web.AppRunner,
        guard: ConnectionGuard,
        host: str,
        port: int,
        backlog: int,
        tls: ReloadingTls | None,
    ) -> None:
        super().__init__(runner, host, port, backlog=backlog)
        self._guard = guard
        self._tls = tls

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            backlog=self._backlog,
            ssl=self._tls.context if self._tls is not None else None,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


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
    tls: ReloadingTls | None = None,
    tls_reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S,
) -> RunningServer:
    """Start serving `app`; port 0 picks a free port (see `RunningServer.port`).

    `tls`: serve HTTPS with its certificate, reloaded from its files every
    `tls_reload_interval_s` when they change (coordinator/server/tls.py)."""
    guard = app[CONTEXT].connection_guard
    if tls is not None:
        app[CONTEXT].metrics.serve_certificate(tls)
    if access_log:
        # The access log is aiohttp's: it would miss the heartbeats the fast path answers.
        guard.fast_path = None
    runner = web.AppRunner(
        app,
        access_log=logging.getLogger("aiohttp.access") if access_log else None,
        shutdown_timeout=shutdown_timeout,
        keepalive_timeout=guard.limits.keepalive_timeout_s,
        # How long aiohttp keeps reading (and dropping) a body the handler did not read:
        # no longer than a body may take anyway.
        lingering_time=guard.limits.body_timeout_s,
    )
    await runner.setup()
    try:
        site = _GuardedTCPSite(runner, guard, host, port, backlog=backlog, tls=tls)
        await site.start()
        bound_port = int(runner.addresses[0][1])
    except BaseException:
        await runner.cleanup()
        raise
    watch = (
        asyncio.create_task(tls.watch(tls_reload_interval_s), name="tls-reload")
        if tls is not None
        else None
    )
    return RunningServer(runner=runner, host=host, port=bound_port, tls=tls, tls_watch=watch)


@asynccontextmanager
async def serving(
    app: web.Application,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    access_log: bool = False,
    backlog: int = DEFAULT_BACKLOG,
    tls: ReloadingTls | None = None,
    tls_reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S,
) -> AsyncIterator[RunningServer]:
    """`start_server` as an async context manager that stops the server on exit."""
    server = await start_server(
        app,
        host,
        port,
        shutdown_timeout=shutdown_timeout,
        access_log=access_log,
        backlog=backlog,
        tls=tls,
        tls_reload_interval_s=tls_reload_interval_s,
    )
    try:
        yield server
    finally:
        await server.stop()
