"""Capacity (issue 13): how many static members one `coordinator serve` core holds.

`staticfleet coordinator serve` (SQLite store, one member token per group) runs pinned to
core 0 under bench/serve_probe.py, which records every garbage-collection pause. The load
generator is a Go program (bench/loadgen, built into build/bin/loadgen), pinned to core 1:
it brings the members in as real ones join (admin expected-members, then each member's
JoinGroup and SyncGroup), then heartbeats them over keep-alive connections and measures
latency from each heartbeat's due time. Three cases, each run `REPEATS` times:

- steady: 20,000 static members (200 groups x 100), 3 s heartbeats, 45 s sessions, 256
  connections. Target: p99 < 50 ms, no session expired, no GC pause over 10 ms.
- ramp: the same, growing the fleet in steps until p99 crosses 50 ms: the member count at
  which it does.
- full: 5,000 members, every connection sending back to back: heartbeats/s the server
  answers (target >= 20,000). Their heartbeats start once all have joined (at full rate
  they would crowd out the joins), so the fleet is kept small enough to form well within
  a session timeout.

Other work on the machine competes for the server's core: each figure carries the load
average and the server's CPU use over its window, and the load generator's own;
`--priority -10` runs both at a higher priority (nice -10, as root) so that the server's
core is mostly its own (the figures in docs/performance.md say which was used).

    python -m bench.run --only capacity [--quick]
    python -m bench.capacity [--quick] [--case steady] [--server-source DIR]

`--server-source DIR` serves another checkout's coordinator (PYTHONPATH=DIR): how the
baseline figures of docs/performance.md were taken from the commit before this work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
LOADGEN_DIR = REPO_ROOT / "bench" / "loadgen"
LOADGEN = REPO_ROOT / "build" / "bin" / "loadgen"
SERVER_CPU = 0
LOADGEN_CPU = 1
P99_TARGET_MS = 50.0
PAUSE_TARGET_MS = 10.0
RATE_TARGET = 20_000
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Case:
    name: str
    mode: str
    steps: tuple[int, ...]  # group counts, 100 members each
    window_s: float
    settle_s: float
    stop_above_p99_ms: float = 5000.0


def cases(quick: bool) -> list[Case]:
    if quick:
        return [
            Case("steady", "steady", (10,), 5, 3),
            Case("full", "full", (10,), 5, 2),
        ]
    return [
        Case("steady", "steady", (200,), 30, 9),
        Case("ramp", "steady", (10, 50, 100, 200, 300, 400), 15, 6, P99_TARGET_MS),
        Case("full", "full", (50,), 20, 5),
    ]


REPEATS = 2
PRIORITY_ENV = "STATICFLEET_BENCH_PRIORITY"


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def build_loadgen() -> Path:
    """`go build` (the machine's Go); the Makefile's `loadgen` target does the same."""
    sources = [*LOADGEN_DIR.glob("*.go"), LOADGEN_DIR / "go.mod", LOADGEN_DIR / "go.sum"]
    if LOADGEN.exists() and all(
        LOADGEN.stat().st_mtime >= source.stat().st_mtime for source in sources
    ):
        return LOADGEN
    LOADGEN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(LOADGEN), "."], cwd=LOADGEN_DIR, check=True)
    return LOADGEN


def _pinned(cpu: int, priority: int) -> Any:
    def pin() -> None:
        os.sched_setaffinity(0, {cpu})
        if priority:
            os.setpriority(os.PRIO_PROCESS, 0, priority)

    return pin


def _status_mib(pid: int, key: str) -> float | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


@dataclass(frozen=True)
class CapacityServer:
    """A running `coordinator serve` of a capacity run (`capacity_server`)."""

    process: subprocess.Popen[bytes]
    port: int
    tokens_file: Path
    log_path: Path


@contextlib.contextmanager
def capacity_server(
    directory: Path,
    groups: int,
    *,
    launcher: Sequence[str] = ("-m", "staticfleet.cli"),
    extra: Sequence[str] = (),
    server_source: Path | None = None,
    priority: int = 0,
) -> Iterator[CapacityServer]:
    """`coordinator serve` on a SQLite file in `directory` with a member token for each of
    `groups` groups (cap-0000..), pinned to SERVER_CPU; stopped (SIGTERM, then kill) at the
    end. `launcher`: what runs the CLI (bench/serve_probe.py wraps it to record GC pauses);
    `server_source`: another checkout's coordinator (PYTHONPATH)."""
    tokens = {
        "admin": [secrets.token_urlsafe(24)],
        "members": {f"cap-{g:04d}": [secrets.token_urlsafe(24)] for g in range(groups)},
    }
    tokens_file = directory / "tokens.json"
    tokens_file.write_text(json.dumps(tokens))
    ready_file = directory / "ready"
    env = dict(os.environ)
    if server_source is not None:
        env["PYTHONPATH"] = str(server_source)
    command = [
        sys.executable,
        *launcher,
        "coordinator",
        "serve",
        "--store",
        f"sqlite://{directory / 'coordinator.db'}",
        "--port",
        "0",
        "--tokens-file",
        str(tokens_file),
        "--initial-rebalance-delay-ms",
        "100",
        "--ready-file",
        str(ready_file),
        "--log-level",
        "WARNING",
        *extra,
    ]
    log_path = directory / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            command,
            cwd=server_source or REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_pinned(SERVER_CPU, priority),
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (ready_file.exists() and ready_file.read_text().strip()):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        yield CapacityServer(server, int(ready_file.read_text()), tokens_file, log_path)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def run_case(case: Case, server_source: Path | None, priority: int = 0) -> dict[str, Any]:
    groups = max(case.steps)
    with tempfile.TemporaryDirectory(prefix="staticfleet-capacity-") as tmp:
        directory = Path(tmp)
        gc_report = directory / "gc.json"
        probe = (str(REPO_ROOT / "bench" / "serve_probe.py"), str(gc_report))
        with capacity_server(
            directory, groups, launcher=probe, server_source=server_source, priority=priority
        ) as running:
            server, port, tokens_file = running.process, running.port, running.tokens_file
            idle_rss = _status_mib(server.pid, "VmRSS")
            load_before = load_average()
            completed = subprocess.run(
                [
                    str(build_loadgen()),
                    "-url",
                    f"http://127.0.0.1:{port}",
                    "-tokens",
                    str(tokens_file),
                    "-mode",
                    case.mode,
                    "-steps",
                    ",".join(str(step) for step in case.steps),
                    "-members",
                    "100",
                    "-conns",
                    "256",
                    "-interval-ms",
                    "3000",
                    "-session-ms",
                    "45000",
                    "-window",
                    f"{case.window_s}s",
                    "-settle",
                    f"{case.settle_s}s",
                    "-server-pid",
                    str(server.pid),
                    "-stop-above-p99-ms",
                    str(case.stop_above_p99_ms),
                ],
                capture_output=True,
                text=True,
                preexec_fn=_pinned(LOADGEN_CPU, priority),
                check=False,
            )
            load_after = load_average()
            if completed.returncode != 0:
                raise RuntimeError(f"loadgen failed: {completed.stderr[-2000:]}")
            result: dict[str, Any] = json.loads(completed.stdout)
            peak_rss = _status_mib(server.pid, "VmHWM")
        gc = json.loads(gc_report.read_text()) if gc_report.exists() else None
    for window in result["windows"]:
        if gc is not None:
            inside = [
                pause
                for pause in gc["pauses_over_1ms"]
                if window["start_unix_ms"] <= pause["unix_ms"] <= window["end_unix_ms"]
            ]
            window["gc_pauses_over_1ms"] = len(inside)
            window["gc_longest_pause_ms"] = max((p["ms"] for p in inside), default=0.0)
            window["gc_longest_pause_cpu_ms"] = max(
                (p.get("cpu_ms", p["ms"]) for p in inside), default=0.0
            )
        rss = window.get("server_rss_mib")
        if rss is not None and idle_rss is not None:
            window["server_kib_per_member"] = round((rss - idle_rss) * 1024 / window["members"], 2)
    if gc is not None:
        gc["pauses_over_1ms"] = len(gc["pauses_over_1ms"])
    result.update(
        case=case.name,
        server_idle_rss_mib=idle_rss,
        server_peak_rss_mib=peak_rss,
        gc=gc,
        load_average_before_after=[load_before, load_after],
    )
    return result


def crossing(ramp: dict[str, Any]) -> int | None:
    """The first member count whose p99 is over the target (None: never, up to the last)."""
    for window in ramp["windows"]:
        if window["p99_ms"] > P99_TARGET_MS:
            return int(window["members"])
    return None


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    steady = [run["windows"][-1] for run in runs.get("steady", [])]
    if steady:
        summary["steady"] = {
            "members": steady[0]["members"],
            "groups": steady[0]["groups"],
            "connections": steady[0]["connections"],
            "heartbeats_per_second_each": [w["heartbeats_per_second"] for w in steady],
            "p50_ms_each": [w["p50_ms"] for w in steady],
            "p99_ms_each": [w["p99_ms"] for w in steady],
            "max_ms_each": [w["max_ms"] for w in steady],
            "session_expiries_each": [run["session_expiries"] for run in runs["steady"]],
            "gc_longest_pause_in_window_ms_each": [w.get("gc_longest_pause_ms") for w in steady],
            "gc_longest_pause_in_window_cpu_ms_each": [
                w.get("gc_longest_pause_cpu_ms") for w in steady
            ],
            "gc_longest_pause_whole_run_ms_each": [
                run["gc"]["longest_ms"] if run["gc"] else None for run in runs["steady"]
            ],
            "server_cpu_each": [w.get("server_cpu") for w in steady],
            "loadgen_cpu_each": [w["loadgen_cpu"] for w in steady],
            "server_rss_mib_each": [w.get("server_rss_mib") for w in steady],
            "server_kib_per_member_each": [w.get("server_kib_per_member") for w in steady],
            "load_average_each": [run["load_average_before_after"] for run in runs["steady"]],
        }
    if runs.get("ramp"):
        summary["p99_crosses_50ms_at_members_each"] = [crossing(run) for run in runs["ramp"]]
    full = [run["windows"][-1] for run in runs.get("full", [])]
    if full:
        summary["full_rate"] = {
            "members": full[0]["members"],
            "connections": full[0]["connections"],
            "heartbeats_per_second_each": [w["heartbeats_per_second"] for w in full],
            "p50_ms_each": [w["p50_ms"] for w in full],
            "p99_ms_each": [w["p99_ms"] for w in full],
            "server_cpu_each": [w.get("server_cpu") for w in full],
            "loadgen_cpu_each": [w["loadgen_cpu"] for w in full],
            "load_average_each": [run["load_average_before_after"] for run in runs["full"]],
        }
    return summary


def run(
    quick: bool,
    only: str | None = None,
    server_source: Path | None = None,
    partial: Path | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    """Every case REPEATS times; with `partial`, the runs so far are written there after each.
    `priority` (a nice value) defaults to $STATICFLEET_BENCH_PRIORITY, else 0; `make bench`
    passes none, so `STATICFLEET_BENCH_PRIORITY=-10 make bench` (as root) raises it."""
    if priority is None:
        priority = int(os.environ.get(PRIORITY_ENV, "0"))
    runs: dict[str, list[dict[str, Any]]] = {}
    for case in cases(quick):
        if only and case.name != only:
            continue
        for attempt in range(1 if quick else REPEATS):
            result = run_case(case, server_source, priority)
            runs.setdefault(case.name, []).append(result)
            if partial is not None:
                partial.write_text(json.dumps(runs, indent=2) + "\n")
            last = result["windows"][-1]
            print(
                f"  capacity {case.name} #{attempt + 1}: {last['members']} members, "
                f"{last['heartbeats_per_second']} hb/s, p99 {last['p99_ms']} ms, "
                f"server cpu {last.get('server_cpu')}, expiries {result['session_expiries']}, "
                f"load {result['load_average_before_after'][1]}",
                file=sys.stderr,
                flush=True,
            )
    return {
        "targets": {
            "steady_p99_ms": P99_TARGET_MS,
            "gc_pause_ms": PAUSE_TARGET_MS,
            "full_rate_heartbeats_per_second": RATE_TARGET,
        },
        "server_source": str(server_source) if server_source else None,
        "priority": priority,
        "summary": summarize(runs),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--case", choices=["steady", "ramp", "full"])
    parser.add_argument("--server-source", type=Path, help="serve this checkout's coordinator")
    parser.add_argument("--output", type=Path, help="write the JSON here too")
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="nice value for the server and the load generator (negative needs root): on a "
        "machine other work loads, so the server's core is mostly its own",
    )
    args = parser.parse_args(argv)
    partial = args.output.with_suffix(".partial.json") if args.output else None
    result = run(args.quick, args.case, args.server_source, partial, args.priority)
    text = json.dumps(result, indent=2)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
