"""`member run --health-port`: /readyz and /livez of a real member process against a real
`coordinator serve` process on loopback, through a join, a coordinator stalled past the
session (SIGSTOP), and a run loop stuck for real.

The stuck loop: the member writes its event log to a FIFO the test reads. The test stops
reading and fills the pipe's buffer, so the member's next event line blocks in write(2), as
a process whose stdout goes to a stalled log collector does. Its run loop stops ticking while
the health server, on a thread of its own, still answers: /livez turns 503 "stuck". Reading
again unblocks the member, and /livez is 200 again without a restart.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from staticfleet.kafka.broker import free_port
from staticfleet.member.health import STALL_MARGIN_MS
from staticfleet.member.runtime import EXIT_OK
from tests.serve import serve_coordinator, staticfleet

pytestmark = pytest.mark.slow

GROUP = "fleet"
TOPIC = "events"
TOKEN = "member-token"
SESSION_MS = 2_000
POLL_MS = 100
STALL_LIMIT_S = (SESSION_MS + POLL_MS + STALL_MARGIN_MS) / 1000


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def wait_until(
    port: int, path: str, wanted: Callable[[int, dict[str, Any]], bool], timeout_s: float
) -> tuple[list[tuple[int, str]], float]:
    """Poll `path` until `wanted`; every (status, reason) seen in order, and the time taken."""
    started = time.monotonic()
    seen: list[tuple[int, str]] = []
    while True:
        status, body = get(port, path)
        if not seen or seen[-1] != (status, body["reason"]):
            seen.append((status, body["reason"]))
        if wanted(status, body):
            return seen, time.monotonic() - started
        assert time.monotonic() - started < timeout_s, (path, seen, body)
        time.sleep(0.05)


class Fifo:
    """The read end of the member's event log, drained on demand (non-blocking)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.data = b""

    def drain(self) -> int:
        taken = 0
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return taken
            if not chunk:
                return taken
            self.data += chunk
            taken += len(chunk)

    def fill(self) -> int:
        """Fill the pipe's buffer from a writer of our own: the member's next write blocks."""
        writer = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        written = 0
        try:
            while True:
                try:
                    written += os.write(writer, b"#" * 4096)
                except OSError as error:
                    if error.errno != errno.EAGAIN:
                        raise
                    return written
        finally:
            os.close(writer)

    def events(self) -> list[str]:
        lines = self.data.replace(b"#", b"").decode().splitlines()
        return [json.loads(line)["event"] for line in lines if line.startswith("{")]


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[str]:
    with serve_coordinator(
        tmp_path,
        "--store",
        f"sqlite:///{tmp_path / 'coordinator.db'}",
        "--member-token",
        f"{GROUP}:{TOKEN}",
        "--admin-token",
        "admin-token",
        "--topics",
        f"{TOPIC}=4",
        # Long enough to see the member answer "joining" first.
        "--initial-rebalance-delay-ms",
        "1500",
        "--min-session-timeout-ms",
        "1000",
        "--log-level",
        "WARNING",
    ) as url:
        yield url


def coordinator_pid(tmp_path: Path) -> int:
    """The pid of the `coordinator serve` child (tests.serve keeps it to itself): the one
    process whose command line names this test's ready file."""
    ready = str(tmp_path / "ready").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if ready in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    assert len(found) == 1, found
    return found[0]


def test_readyz_and_livez_through_join_stall_and_stuck_loop(
    coordinator: str, tmp_path: Path
) -> None:
    fifo = Fifo(tmp_path / "events.fifo")
    port = free_port()
    environment = {
        **os.environ,
        "STATICFLEET_COORDINATOR_URL": coordinator,
        "STATICFLEET_GROUP_ID": GROUP,
        "STATICFLEET_INSTANCE_ID": "h-0",
        "STATICFLEET_TOPICS": TOPIC,
        "STATICFLEET_SESSION_TIMEOUT_MS": str(SESSION_MS),
        "STATICFLEET_REBALANCE_TIMEOUT_MS": "3000",
        "STATICFLEET_HEARTBEAT_INTERVAL_MS": "200",
        "STATICFLEET_TOKEN": TOKEN,
        "STATICFLEET_EVENT_LOG": str(fifo.path),
        "STATICFLEET_HEALTH_PORT": str(port),
    }
    errors = tmp_path / "member.err"
    member = subprocess.Popen(
        staticfleet(
            "member",
            "run",
            "--commit-interval-ms",
            "100",
            "--poll-interval-ms",
            str(POLL_MS),
            "--records-per-second",
            "50",
        ),
        env=environment,
        stderr=errors.open("w"),
    )
    stopped = False
    try:
        # Up, then joining until the (delayed) first rebalance completes, then stable.
        first = None
        deadline = time.monotonic() + 20
        while first is None:
            assert member.poll() is None, errors.read_text()
            with contextlib.suppress(OSError):
                first = get(port, "/readyz")
            assert time.monotonic() < deadline, errors.read_text()
            time.sleep(0.05)
        assert (first[0], first[1]["reason"]) == (503, "joining"), first

        def stable(status: int, body: dict[str, Any]) -> bool:
            fifo.drain()
            return status == 200 and body["reason"] == "stable"

        seen, _ = wait_until(port, "/readyz", stable, timeout_s=30)
        assert seen[0] == (503, "joining") and seen[-1] == (200, "stable"), seen
        status, body = get(port, "/readyz")
        assert body["partitions"] == 4 and body["generation_id"] >= 1, body
        assert get(port, "/livez")[0] == 200

        # The coordinator stalled past the session: lost (not ready), still alive.
        pid = coordinator_pid(tmp_path)
        os.kill(pid, signal.SIGSTOP)
        livez: list[int] = []

        def lost(status: int, body: dict[str, Any]) -> bool:
            fifo.drain()
            livez.append(get(port, "/livez")[0])
            return status == 503 and body["reason"] == "lost"

        try:
            seen, lost_after_s = wait_until(port, "/readyz", lost, timeout_s=SESSION_MS / 1000 + 10)
            assert lost_after_s >= SESSION_MS / 1000 - 0.5, (seen, lost_after_s)
            time.sleep(1.0)
            assert get(port, "/readyz")[0] == 503
        finally:
            os.kill(pid, signal.SIGCONT)
        assert set(livez) == {200}, livez  # a lost member's loop still runs: no restart
        seen, _ = wait_until(port, "/readyz", stable, timeout_s=30)
        assert seen[-1] == (200, "stable"), seen

        # The run loop stuck for real: its event log's pipe is full.
        fifo.drain()
        assert fifo.fill() > 0
        stuck_since = time.monotonic()
        seen, stuck_after_s = wait_until(
            port, "/livez", lambda s, b: s == 503, timeout_s=STALL_LIMIT_S + 15
        )
        status, body = get(port, "/livez")
        assert (status, body["reason"]) == (503, "stuck"), body
        assert "has not ticked" in body["detail"], body
        assert body["last_tick_ms_ago"] > STALL_LIMIT_S * 1000, body
        # Not before the limit (the member blocks at its next event line, within ~0.1 s).
        assert time.monotonic() - stuck_since >= STALL_LIMIT_S - 0.5, stuck_after_s
        assert get(port, "/readyz")[0] == 503  # its heartbeats stopped too
        assert member.poll() is None
        # The pipe read again: the loop runs on, alive and (after a rejoin) ready again.
        fifo.drain()
        wait_until(port, "/livez", lambda s, b: (fifo.drain() >= 0) and s == 200, timeout_s=20)
        wait_until(port, "/readyz", stable, timeout_s=30)
        member.send_signal(signal.SIGTERM)
        while member.poll() is None:
            fifo.drain()
            time.sleep(0.05)
        stopped = True
        assert member.returncode == EXIT_OK, errors.read_text()
        fifo.drain()
        events = fifo.events()
        assert events[0] == "started" and events[-1] == "stopped", events
        assert "lost" in events, events
    finally:
        if not stopped:
            member.kill()
            member.wait()
        os.close(fifo.fd)


def test_a_port_in_use_is_a_usage_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # the member binds every interface
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            staticfleet(
                "member",
                "run",
                "--coordinator",
                "http://127.0.0.1:9",
                "--group-id",
                GROUP,
                "--topics",
                TOPIC,
                "--health-port",
                str(port),
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2, result.stderr
    assert f"--health-port {port}:" in result.stderr, result.stderr
