"""HTTP benchmarks (issue 3, docs/performance.md): the real coordinator server on loopback.

`staticfleet coordinator serve` runs as a subprocess pinned to one core (SQLite store in a
temporary directory, bearer tokens, `--ready-file`); this process, pinned to the other
core(s), drives it over aiohttp with one `ClientSession` (connector limit 2,000):

1. Formation: 1,000 static members send JoinGroup at once (1,000 concurrent long polls on
   up to 1,000 new connections), the leader assigns with the real cooperative-sticky
   assignor (8 topics x 1,000 partitions), everyone syncs. Time from the first JoinGroup
   to the last SyncGroup answer. The server runs with a small initial rebalance delay
   (`INITIAL_REBALANCE_DELAY_MS`): joins arrive over the network one by one, and with 0 ms
   the first generation would close over whichever members had arrived.
2. Full rebalance, `REBALANCE_RUNS` (5) times in a row, after step 3: one member leaves
   (admin batch LeaveGroup by instance id), the others rejoin with member id and owned
   partitions, leader assigns, all sync; on the keep-alive connections of step 1. The
   target (docs/performance.md, "Targets"): under 2 s on loopback, judged on the median
   run; every run is reported, with the server's CPU time and this process's.
3. Heartbeats per second the server sustains on its one core: a pool of workers (1, 100,
   1,000 at once) sends pre-encoded heartbeat requests for the Stable group's members,
   each level bounded in time and count. The server's and this process's CPU use are
   reported, so it is visible which side was the limit.

Members are `bench.coordinator_bench.Fleet` over `coordinator.client.http.HttpTransport`.
Listen-queue overflows (TcpExt ListenOverflows/ListenDrops, whole network namespace) and
the slowest TCP connect are recorded around the formation: the server listens with
aiohttp's default backlog (128), so a burst of 1,000 connects can overflow it, and a
dropped SYN is retried by the client kernel only after 1 s.

    python -m bench.run --only http [--quick]
    python -m bench.http_bench [--quick]          # JSON on stdout
    python -m bench.http_bench --profile-server /tmp/server.prof   # server under cProfile
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp

from bench.child import process_cpu_seconds
from bench.coordinator_bench import (
    GROUP_ID,
    REBALANCE_RUNS,
    BenchError,
    Fleet,
    load_average,
    peak_rss_mib,
    summarize_rebalances,
)
from coordinator.client.http import HttpTransport
from coordinator.wire import to_json
from staticfleet.processes import NotReady, wait_ready_port

TARGET_SECONDS = 2.0
REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"  # loopback only
INITIAL_REBALANCE_DELAY_MS = 200
CONNECTOR_LIMIT = 2000
ROUND_TIMEOUT_S = 180.0
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
CHILD_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Sizes:
    members: int
    topics: int
    partitions_per_topic: int
    heartbeat_concurrency: tuple[int, ...]
    heartbeat_seconds: float
    heartbeat_max_requests: int


def sizes(quick: bool) -> Sizes:
    if quick:
        return Sizes(100, 8, 100, (1, 50), 1.0, 100_000)
    return Sizes(1000, 8, 1000, (1, 100, 1000), 10.0, 2_000_000)


# -- the server process ----------------------------------------------------------------------


class Server:
    """`staticfleet coordinator serve` in a subprocess pinned to `cpu`."""

    def __init__(
        self,
        directory: Path,
        cpu: int | None,
        topics: dict[str, int],
        profile: Path | None = None,
    ) -> None:
        self.directory = directory
        self.profile = profile
        self.cpu = cpu
        self.admin_token = secrets.token_urlsafe(24)
        self.member_token = secrets.token_urlsafe(24)
        self.tokens_file = directory / "tokens.json"
        self.tokens_file.write_text(
            json.dumps({"admin": [self.admin_token], "members": {GROUP_ID: [self.member_token]}})
        )
        self.ready_file = directory / "ready"
        self.log_path = directory / "server.log"
        self.database = directory / "coordinator.db"
        self.topics = topics
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.start_seconds = 0.0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        # Under cProfile (`--profile-server`) the server is slower: figures are not comparable.
        profiler = ["-m", "cProfile", "-o", str(self.profile)] if self.profile else []
        return [
            sys.executable,
            *profiler,
            "-m",
            "staticfleet.cli",
            "coordinator",
            "serve",
            "--store",
            f"sqlite://{self.database}",
            "--host",
            HOST,
            "--port",
            "0",
            "--tokens-file",
            str(self.tokens_file),
            "--initial-rebalance-delay-ms",
            str(INITIAL_REBALANCE_DELAY_MS),
            "--topics",
            ",".join(f"{name}={count}" for name, count in self.topics.items()),
            "--ready-file",
            str(self.ready_file),
            "--log-level",
            "WARNING",
        ]

    def start(self) -> None:
        cpu = self.cpu

        def pin() -> None:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})

        started = time.perf_counter()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=pin if cpu is not None else None,
            )
        try:
            self.port = wait_ready_port(self.ready_file, self.process, READY_TIMEOUT_S, "server")
        except NotReady as error:
            raise BenchError(f"{error}: {self.log_tail()}") from None
        self.start_seconds = time.perf_counter() - started

    def cpu_seconds(self) -> float:
        """utime + stime of the server process (all its threads), from /proc."""
        assert self.process is not None
        return process_cpu_seconds(self.process.pid)

    def status(self, key: str) -> float | None:
        """A `VmHWM`/`VmRSS`-style line of /proc/<pid>/status, in MiB."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return round(int(line.split()[1]) / 1024, 1)
        return None

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)
            return None

    def log_tail(self, lines: int = 20) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return []


# -- measurements -------------------------------------------------------------------------------


def listen_counters() -> dict[str, int]:
    """TcpExt ListenOverflows / ListenDrops of this network namespace."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return {}
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return {
                key: int(table[key]) for key in ("ListenOverflows", "ListenDrops") if key in table
            }
    return {}


class ConnectionTrace:
    """How many TCP connections the client opened, and how long the slowest took."""

    def __init__(self) -> None:
        self.created = 0
        self.seconds: list[float] = []
        self.config = aiohttp.TraceConfig()
        self.config.on_connection_create_start.append(self._start)
        self.config.on_connection_create_end.append(self._end)

    async def _start(
        self, session: aiohttp.ClientSession, context: SimpleNamespace, params: object
    ) -> None:
        context.connect_started = time.perf_counter()

    async def _end(
        self, session: aiohttp.ClientSession, context: SimpleNamespace, params: object
    ) -> None:
        self.created += 1
        self.seconds.append(time.perf_counter() - context.connect_started)

    def take(self) -> dict[str, Any]:
        seconds = sorted(self.seconds)
        result = {
            "connections_opened": self.created,
            "connect_seconds_max": round(seconds[-1], 4) if seconds else None,
            "connect_seconds_p50": round(seconds[len(seconds) // 2], 4) if seconds else None,
            "connects_over_1s": sum(1 for s in seconds if s >= 1.0),
        }
        self.created = 0
        self.seconds = []
        return result


async def measured_round(
    server: Server, trace: ConnectionTrace, make: Callable[[], Any]
) -> dict[str, Any]:
    before = listen_counters()
    server_cpu = server.cpu_seconds()
    wall = time.perf_counter()
    figures: dict[str, Any] = await asyncio.wait_for(make(), ROUND_TIMEOUT_S)
    wall = time.perf_counter() - wall
    figures["server_cpu_seconds"] = round(server.cpu_seconds() - server_cpu, 3)
    figures["server_cpu_share"] = round(figures["server_cpu_seconds"] / wall, 3)
    after = listen_counters()
    figures["listen_queue"] = {key: after[key] - before.get(key, 0) for key in after}
    figures.update(trace.take())
    return figures


async def heartbeat_load(
    session: aiohttp.ClientSession,
    server: Server,
    fleet: Fleet,
    concurrency: int,
    seconds: float,
    max_requests: int,
) -> dict[str, Any]:
    """`concurrency` workers send heartbeats for the fleet's members, round robin, until
    `seconds` pass or `max_requests` were sent; bodies are encoded beforehand."""
    headers = {
        "Authorization": f"Bearer {server.member_token}",
        "Content-Type": "application/json",
    }
    url = f"{server.url}/v1/groups/{GROUP_ID}/heartbeat"
    bodies = [
        json.dumps(to_json(fleet.heartbeat_request(member))).encode() for member in fleet.members
    ]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    sent = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal sent
        while sent < max_requests and time.perf_counter() < deadline:
            body = bodies[sent % len(bodies)]
            sent += 1
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                payload = await response.read()
                status = response.status
            latencies.append(time.perf_counter() - started)
            if status != 200:
                errors[f"HTTP {status}"] = errors.get(f"HTTP {status}", 0) + 1
            elif json.loads(payload).get("error_code") != 0:
                name = str(json.loads(payload).get("error"))
                errors[name] = errors.get(name, 0) + 1

    server_cpu = server.cpu_seconds()
    client_cpu = time.process_time()
    started = time.perf_counter()
    await asyncio.wait_for(
        asyncio.gather(*(worker() for _ in range(concurrency))), seconds + ROUND_TIMEOUT_S
    )
    elapsed = time.perf_counter() - started
    server_cpu = server.cpu_seconds() - server_cpu
    client_cpu = time.process_time() - client_cpu
    latencies.sort()

    def percentile(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 3)

    return {
        "concurrency": concurrency,
        "heartbeats": len(latencies),
        "errors": errors,
        "seconds": round(elapsed, 3),
        "heartbeats_per_second": round(len(latencies) / elapsed),
        "latency_ms_p50": percentile(0.50),
        "latency_ms_p99": percentile(0.99),
        "latency_ms_max": round(latencies[-1] * 1000, 3),
        "server_cpu_share": round(server_cpu / elapsed, 3),
        "client_cpu_share": round(client_cpu / elapsed, 3),
        # Server CPU per answered heartbeat, and the rate one fully busy core would give at
        # that cost: the server's own figure even when the client was the limit.
        "server_cpu_microseconds_per_heartbeat": round(server_cpu / len(latencies) * 1e6, 1),
        "server_heartbeats_per_cpu_second": round(len(latencies) / server_cpu)
        if server_cpu
        else None,
    }


# -- one run (child process) -----------------------------------------------------------------


def _cpus() -> tuple[int | None, set[int] | None]:
    """One core for the server, the rest for this process (shared if there is only one)."""
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[-1]
    client_cpus = set(cpus[:-1]) or {server_cpu}
    return server_cpu, client_cpus


async def run_async(quick: bool, server: Server) -> dict[str, Any]:
    size = sizes(quick)
    trace = ConnectionTrace()
    connector = aiohttp.TCPConnector(limit=CONNECTOR_LIMIT, keepalive_timeout=300)
    async with aiohttp.ClientSession(connector=connector, trace_configs=[trace.config]) as session:
        member = HttpTransport(server.url, server.member_token, session)
        admin = HttpTransport(server.url, server.admin_token, session)
        fleet = Fleet(member, size.members, server.topics, admin_transport=admin)
        formation = await measured_round(server, trace, fleet.form)
        heartbeat_members = len(fleet.members)
        heartbeats = [
            await heartbeat_load(
                session,
                server,
                fleet,
                concurrency,
                size.heartbeat_seconds,
                size.heartbeat_max_requests,
            )
            for concurrency in size.heartbeat_concurrency
        ]
        trace.take()
        rebalances = [
            await measured_round(server, trace, fleet.leave_and_rebalance)
            for _ in range(REBALANCE_RUNS)
        ]
    best = max(heartbeats, key=lambda level: level["heartbeats_per_second"])
    return {
        "setup": {
            "members": size.members,
            "static_members": True,
            "store": "SqliteStore (synchronous=FULL) in a temporary directory",
            "auth": "bearer tokens (member token for the group, admin token for the leave)",
            "initial_rebalance_delay_ms": INITIAL_REBALANCE_DELAY_MS,
            "assignor": "cooperative-sticky (real, run by the leader via coordinator.client)",
            "partitions": size.topics * size.partitions_per_topic,
            "client": f"one aiohttp ClientSession, TCPConnector(limit={CONNECTOR_LIMIT})",
            "server_listen_backlog": "aiohttp default (128); not configurable from the CLI",
        },
        "formation": formation,
        "full_rebalance": summarize_rebalances(rebalances),
        "heartbeats": {
            "members": heartbeat_members,
            "levels": heartbeats,
            "best_heartbeats_per_second": best["heartbeats_per_second"],
            "best_at_concurrency": best["concurrency"],
            "best_server_cpu_share": best["server_cpu_share"],
        },
    }


def run_case(quick: bool, profile_server: Path | None = None) -> dict[str, Any]:
    server_cpu, client_cpus = _cpus()
    if client_cpus is not None:
        os.sched_setaffinity(0, client_cpus)
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="staticfleet-http-bench-") as directory:
        size = sizes(quick)
        topics = {f"topic-{t:02d}": size.partitions_per_topic for t in range(size.topics)}
        server = Server(Path(directory), server_cpu, topics, profile_server)
        try:
            server.start()
            result = asyncio.run(run_async(quick, server))
            result["server_peak_rss_mib"] = server.status("VmHWM")
        finally:
            exit_code = server.stop()
            log_tail = server.log_tail()
    result["server_exit_code"] = exit_code
    result["server_log_tail"] = log_tail
    result["server_start_seconds"] = round(server.start_seconds, 3)
    result["server_cpu"] = server_cpu
    result["client_cpus"] = sorted(client_cpus) if client_cpus is not None else None
    result["client_peak_rss_mib"] = peak_rss_mib()
    result["load_average_before_after"] = [load_before, load_average()]
    return result


# -- parent side -----------------------------------------------------------------------------


def run(quick: bool) -> dict[str, Any]:
    """Run in a child process (it pins itself); the figures `bench.run` writes to JSON."""
    command = [sys.executable, "-m", "bench.http_bench"]
    if quick:
        command.append("--quick")
    completed = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
    )
    if completed.returncode != 0:
        error = completed.stderr.strip().splitlines()[-20:]
        print(f"  http: error {error[-1:]}", flush=True)
        return {"error": error}
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    median = result["full_rebalance"]["seconds_to_stable_median"]
    print(
        f"  http: formation {result['formation']['seconds_to_stable']} s, full rebalance "
        f"{result['full_rebalance']['seconds_to_stable_each']} s, heartbeats "
        f"{result['heartbeats']['best_heartbeats_per_second']}/s",
        flush=True,
    )
    return {
        "target": {
            "what": (
                "1,000 static members over HTTP on loopback, one full rebalance (one member "
                "leaves, 999 rejoin, leader assigns cooperative-sticky, all sync) until Stable, "
                "server on one core"
            ),
            "target_seconds": TARGET_SECONDS,
            "full_rebalance_seconds_median": median,
            "met": (median < TARGET_SECONDS) if not quick else None,
        },
        **result,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_bench")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--profile-server",
        type=Path,
        help="run the server under cProfile, stats to this file (slower: for profiles only)",
    )
    args = parser.parse_args(argv)
    result = run_case(args.quick, args.profile_server)
    if args.profile_server:
        result["profiled"] = True
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
