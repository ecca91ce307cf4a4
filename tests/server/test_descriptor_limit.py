"""A real `coordinator serve` process at its open-file limit: it raises its soft limit at
start, and once its descriptors run short it refuses new connections where it can count and
log them, while the members it holds keep getting their heartbeats answered."""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator import HeartbeatRequest, SyncGroupRequest
from coordinator.wire import to_json
from staticfleet.processes import NotReady, await_ready_port
from tests.serve import staticfleet

from .messages import join_body

pytestmark = pytest.mark.slow

GROUP = "fleet"
# Far more connections than the limit below leaves room for.
FLOOD = 200
BOUND_S = 10.0


def _nofile(soft: int, hard: int) -> Callable[[], None]:
    def apply() -> None:  # in the child, before exec
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


@dataclass
class Serve:
    process: asyncio.subprocess.Process
    port: int
    log: Path

    async def stop(self) -> str:
        self.process.terminate()
        await asyncio.wait_for(self.process.wait(), BOUND_S)
        return self.log.read_text()


@asynccontextmanager
async def serve(tmp_path: Path, soft: int, hard: int) -> AsyncIterator[Serve]:
    ready, log = tmp_path / "ready", tmp_path / "serve.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *staticfleet("coordinator", "serve"),
            "--insecure",
            "--store",
            "memory://",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--initial-rebalance-delay-ms",
            "0",
            # The flood's admitted connections send nothing: they must outlast the test.
            "--header-timeout",
            "120",
            stderr=stderr,
            preexec_fn=_nofile(soft, hard),
        )
    running = Serve(process, 0, log)
    try:
        try:
            running.port = await await_ready_port(ready, process, BOUND_S * 2, "serve")
        except NotReady as error:
            pytest.fail(f"{error}:\n{log.read_text()}")
        yield running
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


class Connection:
    """One kept-alive HTTP/1.1 connection, requests one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = b"" if body is None else json.dumps(body).encode()
        self.writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), BOUND_S)
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        length = int({k.lower(): v for k, v in headers.items()}["content-length"])
        payload = await asyncio.wait_for(self.reader.readexactly(length), BOUND_S)
        return int(lines[0].split()[1]), payload

    async def closed_by_server(self, within_s: float) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), within_s) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.writer.close()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def _member(port: int) -> tuple[Connection, dict[str, Any]]:
    """A static member through generation 1, on a connection of its own; its heartbeat."""
    connection = await Connection.open(port)
    status, body = await connection.request(
        "POST", f"/v1/groups/{GROUP}/join", join_body(GROUP, "m-0")
    )
    assert status == 200, body
    joined = json.loads(body)
    member_id = joined["member_id"]
    sync = SyncGroupRequest(GROUP, joined["generation_id"], member_id, "m-0", "consumer", "range")
    status, body = await connection.request("POST", f"/v1/groups/{GROUP}/sync", to_json(sync))
    assert status == 200 and json.loads(body)["error"] == "NONE", body
    heartbeat = HeartbeatRequest(GROUP, joined["generation_id"], joined["member_id"], "m-0")
    return connection, to_json(heartbeat)


async def _heartbeat(member: Connection, heartbeat: dict[str, Any]) -> None:
    status, body = await member.request("POST", f"/v1/groups/{GROUP}/heartbeat", heartbeat)
    assert status == 200 and json.loads(body)["error"] == "NONE", body


async def test_connections_beyond_the_descriptor_limit_are_refused_counted_and_logged(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, soft=128, hard=128) as server:
        scrape = await Connection.open(server.port)
        member, heartbeat = await _member(server.port)
        flood: list[Connection] = []
        try:
            for _ in range(FLOOD):
                flood.append(await Connection.open(server.port))
                if len(flood) % 20 == 0:
                    await _heartbeat(member, heartbeat)  # answered all along
            # Until the server has taken every one of them (admitted or refused).
            deadline = time.monotonic() + BOUND_S
            while True:
                status, text = await scrape.request("GET", "/metrics")
                assert status == 200
                samples = _samples(text.decode())
                open_now = samples[("staticfleet_coordinator_connections_open", ())]
                refusals = samples[
                    (
                        "staticfleet_coordinator_connections_refused_total",
                        (("reason", "descriptors"),),
                    )
                ]
                if open_now + refusals == 2 + FLOOD or time.monotonic() > deadline:
                    break
                await _heartbeat(member, heartbeat)
                await asyncio.sleep(0.05)
            closed = await asyncio.gather(*(c.closed_by_server(1.0) for c in flood))
            refused = sum(closed)
            assert 0 < refused < FLOOD
            await _heartbeat(member, heartbeat)

            # Every connection the server closed was one it refused and counted: none was
            # dropped by the event loop behind its back.
            assert refusals == refused
            assert (
                samples[
                    (
                        "staticfleet_coordinator_connections_refused_total",
                        (("reason", "per_address"),),
                    )
                ]
                == 0
            )
            # The scrape's, the member's and the flood's that were admitted.
            assert open_now == 2 + FLOOD - refused

            # A refused member that comes back once a connection is freed is admitted.
            for connection in flood:
                connection.close()
            await asyncio.sleep(0.2)
            again = await Connection.open(server.port)
            assert (await again.request("GET", "/healthz"))[0] == 200
            again.close()
        finally:
            for connection in (scrape, member, *flood):
                connection.close()
        log = await server.stop()
    lines = [line for line in log.splitlines() if "refusing connections" in line]
    # The first refusal is logged at once; the rest at most once a second, with their count.
    assert lines and "1 refused since the last line, 1 in all" in lines[0], log
    assert "open-file limit: soft 128, hard 128" in log


def _soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc")


async def test_serve_raises_its_soft_limit_to_the_hard_limit(tmp_path: Path) -> None:
    async with serve(tmp_path, soft=100, hard=300) as server:
        assert _soft_nofile(server.process.pid) == 300
        log = await server.stop()
    assert "open-file limit: soft 100 raised to the hard limit 300" in log
