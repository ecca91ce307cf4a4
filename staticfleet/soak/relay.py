"""A TCP relay between the members and the coordinator that can delay each member's bytes,
each way, by a delay with jitter: the soak's network delay. Hand-written because the kernel
here has no `sch_netem` (docs/soak.md); the members always talk through it (no delay unless
a fault sets one), so a delay fault does not change their connections.

It runs its own asyncio loop on a thread; `set_delay` may be called from any thread."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from dataclasses import dataclass

_CHUNK = 65_536


@dataclass(frozen=True, slots=True)
class Delay:
    delay_ms: int
    jitter_ms: int

    def draw(self, rng: random.Random) -> float:
        """One chunk's delay in seconds (never negative)."""
        return max(0, self.delay_ms + rng.randint(-self.jitter_ms, self.jitter_ms)) / 1000


class DelayRelay:
    def __init__(self, listen_host: str, target_host: str, seed: int = 0) -> None:
        self.listen_host = listen_host
        self.target_host = target_host
        self.target_port = 0  # set before the first member connects
        self.port = 0
        self._delays: dict[str, Delay] = {}  # by the member's address
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="soak-relay", daemon=True
        )
        self._server: asyncio.Server | None = None

    def start(self) -> None:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, self.listen_host, 0), self._loop
        ).result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]

    def set_delay(self, address: str, delay: Delay | None) -> None:
        """Delay the bytes from and to `address` from now on (None: no more delay)."""
        if delay is None:
            self._delays.pop(address, None)
        else:
            self._delays[address] = delay

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = str(writer.get_extra_info("peername")[0])
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                self.target_host, self.target_port
            )
        except OSError:
            # The coordinator is down (killed): the member sees its connection closed.
            writer.close()
            return
        pumps = [
            asyncio.create_task(self._pump(reader, upstream_writer, address)),
            asyncio.create_task(self._pump(upstream_reader, writer, address)),
        ]
        try:
            done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            if pending and all(task.result() for task in done):
                # One side closed cleanly (its EOF passed on): let the other finish, but
                # not forever (a partitioned member may never answer).
                await asyncio.wait(pending, timeout=60)
        finally:
            for task in pumps:
                task.cancel()
            for stream in (writer, upstream_writer):
                stream.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> bool:
        """Forward until EOF (True) or an error (False)."""
        # Chunks keep their order: one is released no earlier than the one before it.
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer))
        released = 0.0
        try:
            while data := await reader.read(_CHUNK):
                delay = self._delays.get(address)
                due = time.monotonic() + (delay.draw(self._rng) if delay else 0.0)
                released = max(released, due)
                queue.put_nowait((released, data))
            queue.put_nowait((released, b""))
            await sender
            return True
        except OSError:
            return False
        finally:
            sender.cancel()

    @staticmethod
    async def _send(
        queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
