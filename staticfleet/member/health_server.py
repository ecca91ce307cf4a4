"""The member's health endpoints over HTTP: `/livez` and `/readyz` (`staticfleet.member.health`).

The server runs on an event loop in a thread of its own, not on the member's: a member loop
blocked in a synchronous call (a source's read, a write to a stalled pipe) blocks its event
loop too, and the probe then deserves a 503 naming the stall, not a timeout that says
nothing about why.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from staticfleet.member.health import HealthState, Observation, Verdict, liveness, readiness


def _endpoint(state: HealthState, decide: Callable[[Observation], Verdict]) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        seen = state.observe()
        verdict = decide(seen)
        return web.json_response(verdict.body(seen), status=200 if verdict.ok else 503)

    return handle


def health_app(state: HealthState) -> web.Application:
    app = web.Application()
    app.router.add_get("/livez", _endpoint(state, liveness))
    app.router.add_get("/readyz", _endpoint(state, readiness))
    return app


class HealthServer:
    """`start()` binds `host:port` (0: any free port, then `port` says which) on a thread of
    its own; `stop()` closes it. A port that cannot be bound raises `OSError` from `start`."""

    # host None: every interface (the kubelet probes the pod's address).
    def __init__(self, state: HealthState, port: int, host: str | None = None) -> None:
        self.state = state
        self.host = host
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(health_app(state), access_log=None)
        self._thread = threading.Thread(target=self._loop.run_forever, name="member-health")
        self._thread.daemon = True  # never holds the process open after run_member returns

    def start(self) -> None:
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=30)
        except BaseException:
            self.stop()
            raise

    async def _serve(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = int(self._runner.addresses[0][1])

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
