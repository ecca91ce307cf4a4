"""A fleet reconnecting at once (issue 26): after a coordinator restart every member opens a
new connection together. How long until all are answered, and do the members already
connected keep getting their heartbeats answered meanwhile?

`staticfleet coordinator serve` (SQLite store, a member token per group) runs pinned to core
0; the Go load generator (bench/loadgen, built into build/bin/loadgen) runs pinned to core 1
as two processes. One (`-mode steady`) forms 1,000 static members (100 per group), each
heartbeating every 3 s on a connection of its own, and measures their latency from each
heartbeat's due time. The other (`-mode burst`), started 3 s into that measured window,
opens N connections at once, spread over 250 loopback source addresses 127.0.0.2.. (the
server caps connections per address), each sending one member's heartbeat (the first
process hands over the pre-encoded requests) and staying open until all are answered. Two
processes, so the members whose latency is measured do not queue behind the burst's
goroutines on the generator's core. Reported: the time until every burst connection was
answered, the answer rate, and the connected members' heartbeat latency for heartbeats
due while the burst was being answered. The kernel's listen-queue overflows
(/proc/net/netstat, machine-wide) over the run are recorded too: a SYN dropped there costs
its client a retransmission a second or more later.

    python -m bench.run --only reconnect_burst [--quick]
    python -m bench.reconnect_burst [--quick] [--burst 5000] [--priority -10]
        [--server-source DIR] [--output FILE]

`--server-source DIR` serves another checkout's coordinator (PYTHONPATH=DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.capacity import (
    LOADGEN_CPU,
    PRIORITY_ENV,
    READY_TIMEOUT_S,
    _pinned,
    _status_mib,
    build_loadgen,
    capacity_server,
    load_average,
)

CONNECTED_GROUPS = 10  # 1,000 members, each on its own connection
# The hard open-file limit here is 20,000 per process (server and generator alike): the
# connected members, the burst, the server's own descriptors and its reserve must fit.
FULL_BURSTS = (5_000, 18_000)
SETTLE_S = 4.0
BURST_AFTER_S = 3.0
QUICK_BURSTS = (1_000,)


def listen_overflows() -> dict[str, int]:
    """TcpExt ListenOverflows and ListenDrops, machine-wide (loopback included)."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=True))
            return {key: int(table[key]) for key in ("ListenOverflows", "ListenDrops")}
    return {}


def connection_series(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    series: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("staticfleet_coordinator_connections"):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                series[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return series


def run_case(
    burst: int,
    groups: int,
    window_s: float,
    server_source: Path | None = None,
    priority: int = 0,
    backlog: int | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="staticfleet-burst-") as tmp:
        directory = Path(tmp)
        with capacity_server(
            directory,
            groups,
            extra=["--backlog", str(backlog)] if backlog is not None else [],
            server_source=server_source,
            priority=priority,
        ) as running:
            server, port, log_path = running.process, running.port, running.log_path
            tokens_file = running.tokens_file
            load_before = load_average()
            overflows_before = listen_overflows()
            requests_file = directory / "requests.json"
            loadgen = str(build_loadgen())
            url = f"http://127.0.0.1:{port}"
            members = subprocess.Popen(
                [
                    loadgen,
                    "-url",
                    url,
                    "-tokens",
                    str(tokens_file),
                    "-mode",
                    "steady",
                    "-groups",
                    str(groups),
                    "-members",
                    "100",
                    "-conns",
                    str(groups * 100),  # a connection of its own per member
                    "-interval-ms",
                    "3000",
                    "-session-ms",
                    "45000",
                    "-window",
                    f"{window_s}s",
                    "-settle",
                    f"{SETTLE_S}s",
                    "-server-pid",
                    str(server.pid),
                    "-requests-out",
                    str(requests_file),
                    "-samples",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=_pinned(LOADGEN_CPU, priority),
            )
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not requests_file.exists():
                if members.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"members did not form: {members.communicate()[1][-2000:]}")
                time.sleep(0.05)
            # Into the members' measured window (it opens after the settle time).
            time.sleep(SETTLE_S + BURST_AFTER_S)
            bursting = subprocess.run(
                [
                    loadgen,
                    "-url",
                    url,
                    "-mode",
                    "burst",
                    "-burst",
                    str(burst),
                    "-requests",
                    str(requests_file),
                ],
                capture_output=True,
                text=True,
                preexec_fn=_pinned(LOADGEN_CPU, priority),
                check=False,
            )
            if bursting.returncode != 0:
                raise RuntimeError(f"burst failed: {bursting.stderr[-2000:]}")
            result_burst: dict[str, Any] = json.loads(bursting.stdout)
            series = connection_series(port)
            stdout, stderr = members.communicate(timeout=window_s * 4 + 60)
            overflows_after = listen_overflows()
            load_after = load_average()
            if members.returncode != 0:
                raise RuntimeError(f"loadgen failed: {stderr[-2000:]}")
            result: dict[str, Any] = json.loads(stdout)
            result["burst"] = result_burst
            result["server_connection_series_after_burst"] = series
            result["server_peak_rss_mib"] = _status_mib(server.pid, "VmHWM")
        warnings = [line for line in log_path.read_text().splitlines() if "refusing" in line][:5]
    window = result["windows"][-1]
    samples = window.pop("samples", None) or []
    start = result["burst"]["start_unix_ms"]
    end = start + result["burst"]["seconds_until_all_answered"] * 1000
    during = sorted(ms for due, ms in samples if start <= due <= end)
    result["burst"].update(
        connected_heartbeats_due_during=len(during),
        connected_p50_ms_during=quantile(during, 0.5),
        connected_p99_ms_during=quantile(during, 0.99),
        connected_max_ms_during=quantile(during, 1.0),
    )
    result.update(
        connected_members=groups * 100,
        listen_overflows_during_run={
            key: overflows_after[key] - overflows_before.get(key, 0) for key in overflows_after
        },
        server_refusal_log_lines=warnings,
        load_average_before_after=[load_before, load_after],
    )
    return result


def quantile(ordered: list[float], q: float) -> float | None:
    """The loadgen's quantile: the value at index q * (n - 1) of the sorted list."""
    return ordered[int(q * (len(ordered) - 1))] if ordered else None


def summarize(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        burst = case["burst"]
        rows.append(
            {
                "connected_members": case["connected_members"],
                "burst_connections": burst["connections"],
                "answered": burst["answered"],
                "failed": burst["failed"],
                "seconds_until_all_answered": burst["seconds_until_all_answered"],
                "answered_per_second": burst["answered_per_second"],
                "answer_p50_ms": burst["answer_p50_ms"],
                "answer_p99_ms": burst["answer_p99_ms"],
                "connected_heartbeats_during_burst": burst["connected_heartbeats_due_during"],
                "connected_p50_ms_during_burst": burst["connected_p50_ms_during"],
                "connected_p99_ms_during_burst": burst["connected_p99_ms_during"],
                "connected_max_ms_during_burst": burst["connected_max_ms_during"],
                "connected_p99_ms_whole_window": case["windows"][-1]["p99_ms"],
                "burst_loadgen_cpu_seconds": burst["loadgen_cpu_seconds"],
                "listen_overflows": case["listen_overflows_during_run"].get("ListenOverflows"),
                "session_expiries": case["session_expiries"],
            }
        )
    return rows


def run(
    quick: bool,
    bursts: tuple[int, ...] | None = None,
    server_source: Path | None = None,
    priority: int | None = None,
    backlog: int | None = None,
) -> dict[str, Any]:
    """`priority` (a nice value for the server and the generator; -10 needs root) defaults
    to $STATICFLEET_BENCH_PRIORITY, else 0, as in bench/capacity.py."""
    if priority is None:
        priority = int(os.environ.get(PRIORITY_ENV, "0"))
    sizes = bursts or (QUICK_BURSTS if quick else FULL_BURSTS)
    groups = 2 if quick else CONNECTED_GROUPS
    cases = []
    for burst in sizes:
        # Long enough for the burst to be answered well inside the window.
        window_s = 15.0 if quick else 20.0 + burst / 500
        print(f"reconnect_burst: {groups * 100} connected, burst of {burst}", flush=True)
        cases.append(run_case(burst, groups, window_s, server_source, priority, backlog))
    return {"summary": summarize(cases), "priority": priority, "backlog": backlog, "cases": cases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reconnect_burst", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--burst", type=int, action="append", help="burst size (repeatable)")
    parser.add_argument(
        "--server-source", type=Path, help="serve another checkout's coordinator (PYTHONPATH)"
    )
    parser.add_argument("--output", type=Path, help="also write the whole result here")
    parser.add_argument("--priority", type=int, default=None, help="nice value (-10: as root)")
    parser.add_argument("--backlog", type=int, help="the server's --backlog (default: its own)")
    args = parser.parse_args(argv)
    bursts = tuple(args.burst) if args.burst else None
    result = run(args.quick, bursts, args.server_source, args.priority, args.backlog)
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
