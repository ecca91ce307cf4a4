"""Side by side with the Kafka broker (issue 26): the same fleet against both, in one run.

The fleet: static members each on a keep-alive connection of its own, 3 s heartbeats, 45 s
sessions, in groups of 100 plus one group of 1,000 whose full rebalance is timed. The load
generator's fleet mode (bench/loadgen/fleet.go, pinned to core 1) runs the same member code
against each side, in its protocol:

- ours: `coordinator serve` (SQLite) pinned to core 0 (`capacity_server`), over its HTTP API;
  the groups' expected members are set first (the operator's way to form a fleet at once);
- the broker: Kafka 4.4 from build/kafka (`KafkaBroker`) under `taskset -c 0`, the JVM told
  it has one processor (-XX:ActiveProcessorCount=1) and a fixed heap, over the Kafka
  protocol (classic groups: JoinGroup v9 with group.instance.id, SyncGroup v5, Heartbeat
  v4); its own defaults otherwise, the initial rebalance delay (3 s) included: the broker's
  way to form a group at once.

Per side: formation time (members start at START_RATE a second; from the first start until
every group has a generation all its members synced), a window of heartbeats (rate, latency
from each one's due time, the server's CPU over the window: heartbeats per core-second), then
the rebalance (a new static member joins the 1,000-member group; the others learn it at their
next heartbeat and rejoin; until all 1,001 synced the new generation), and RSS. The ratios
are ours / the broker's.

    python -m bench.run --only broker_side_by_side [--quick]
    python -m bench.broker_side_by_side [--quick] [--groups N] [--output FILE]

The default fleet is 40 groups of 100 plus the 1,000-member group (5,000 members): the size
both sides form on this shared machine. `--groups 188` is the largest that fits the 20,000
descriptors per process here (19,800 members and the joiner, each a descriptor in the load
generator and in the server); neither side formed it (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.capacity import (
    LOADGEN_CPU,
    PRIORITY_ENV,
    SERVER_CPU,
    _pinned,
    _status_mib,
    build_loadgen,
    capacity_server,
    load_average,
)
from staticfleet.kafka.broker import KafkaBroker

# A heap well above what 20,000 connections' coordinator state needs (the fixture's 512 MiB
# is for tests), started small as the fixture's so RSS shows what is used.
BROKER_HEAP_MIB = 1024
BROKER_JVM_OPTIONS = (
    f"-Xmx{BROKER_HEAP_MIB}m",
    "-XX:ActiveProcessorCount=1",
    # The full JIT (the fixture stops at C1 for a fast start).
    "-XX:TieredStopAtLevel=4",
)
# The broker's own defaults where the test fixture changes them for fast tests.
BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "3000",
    "num.network.threads": "3",
    "num.io.threads": "8",
}
INTERVAL_MS = 3000
SESSION_MS = 45000
SOURCE_ADDRESSES = 250
# Members started per second, on both sides: at once, 20,000 connections overflow our
# server's listen queue (docs/performance.md, "A fleet reconnecting at once"); that burst is
# measured there, not here.
START_RATE = 1000


@dataclass(frozen=True)
class Fleet:
    groups: int  # of 100 members
    rebalance_members: int  # the one big group's
    window_s: int
    settle_s: int


def fleet(quick: bool) -> Fleet:
    return Fleet(10, 200, 10, 4) if quick else Fleet(40, 1000, 30, 9)


def loadgen_command(size: Fleet, protocol: str, target: list[str], server_pid: int) -> list[str]:
    return [
        str(build_loadgen()),
        "-mode",
        "fleet",
        "-protocol",
        protocol,
        *target,
        "-groups",
        str(size.groups),
        "-members",
        "100",
        "-rebalance-members",
        str(size.rebalance_members),
        "-interval-ms",
        str(INTERVAL_MS),
        "-session-ms",
        str(SESSION_MS),
        "-window",
        f"{size.window_s}s",
        "-settle",
        f"{size.settle_s}s",
        "-burst-addrs",
        str(SOURCE_ADDRESSES),
        "-start-rate",
        str(START_RATE),
        "-server-pid",
        str(server_pid),
    ]


def _drive(command: list[str], server_pid: int, priority: int) -> dict[str, Any]:
    idle_rss = _status_mib(server_pid, "VmRSS")
    load_before = load_average()
    completed = subprocess.run(
        command,
        capture_output=True,
        text=True,
        preexec_fn=_pinned(LOADGEN_CPU, priority),
        check=False,
    )
    load_after = load_average()
    if completed.returncode != 0:
        return {"failed": completed.stderr[-3000:], "server_idle_rss_mib": idle_rss}
    result: dict[str, Any] = json.loads(completed.stdout)
    result.update(
        server_idle_rss_mib=idle_rss,
        server_peak_rss_mib=_status_mib(server_pid, "VmHWM"),
        load_average_before_after=[load_before, load_after],
    )
    return result


def ours(size: Fleet, priority: int) -> dict[str, Any]:
    # One token per group, the rebalance group's (the last) included.
    with (
        tempfile.TemporaryDirectory(prefix="staticfleet-side-by-side-") as tmp,
        capacity_server(Path(tmp), size.groups + 1, priority=priority) as server,
    ):
        command = loadgen_command(
            size,
            "http",
            ["-url", f"http://127.0.0.1:{server.port}", "-tokens", str(server.tokens_file)],
            server.process.pid,
        )
        return _drive(command, server.process.pid, priority)


def broker(size: Fleet, priority: int) -> dict[str, Any]:
    launcher = ["taskset", "-c", str(SERVER_CPU)]
    if priority:
        launcher = ["nice", "-n", str(priority), *launcher]
    with tempfile.TemporaryDirectory(prefix="staticfleet-side-by-side-broker-") as tmp:
        kafka = KafkaBroker(
            Path(tmp),
            settings=BROKER_SETTINGS,
            jvm_options=BROKER_JVM_OPTIONS,
            launcher=launcher,
            class_sharing=False,  # as a user's broker starts (our CDS archive maps ~50 MiB)
        )
        with kafka:
            assert kafka.pid is not None
            command = loadgen_command(size, "kafka", ["-bootstrap", kafka.bootstrap], kafka.pid)
            result = _drive(command, kafka.pid, priority)
            if "failed" in result:
                result["broker_log_tail"] = kafka.tail()
            return result


def per_core(side: dict[str, Any]) -> float | None:
    """Heartbeats answered per second of the server's CPU over the window."""
    window = side.get("window")
    if not window or not window.get("server_cpu"):
        return None
    return round(float(window["heartbeats_per_second"]) / float(window["server_cpu"]), 1)


def figures(side: dict[str, Any]) -> dict[str, Any]:
    if "failed" in side:
        return {"failed": True}
    window = side["window"]
    return {
        "members": side["members"],
        "heartbeats_per_second": window["heartbeats_per_second"],
        "server_cpu": window.get("server_cpu"),
        # Seconds per second of the window the server's threads ran, and waited runnable for
        # a CPU: waiting well above zero means the machine, not the server, set the pace.
        "server_threads_running": side.get("server_threads_running_per_second"),
        "server_threads_runnable_waiting": side.get("server_threads_runnable_waiting_per_second"),
        "heartbeats_per_core_second": per_core(side),
        "p50_ms": window["p50_ms"],
        "p99_ms": window["p99_ms"],
        "max_ms": window["max_ms"],
        "error_codes_in_window": window["error_codes"],
        "transport_errors_in_window": window["transport_errors"],
        "formation_seconds": side["formation_seconds"],
        "rebalance_seconds": side["rebalance_seconds"],
        # Per phase, from the members' own timestamps (bench/loadgen/phases.go).
        "rebalance_phases": side.get("rebalance_phases"),
        "rebalance_server_phases_ms": side.get("rebalance_server_phases_ms"),
        "session_expiries": side.get("session_expiries"),
        "server_rss_mib_in_window": window.get("server_rss_mib"),
        "server_peak_rss_mib": side["server_peak_rss_mib"],
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def ratios(ours_: dict[str, Any], broker_: dict[str, Any]) -> dict[str, float | None]:
    """Ours / the broker's (above 1 is better for per-core; below 1 for the rest)."""
    if ours_.get("failed") or broker_.get("failed"):
        return {}
    keys = (
        "heartbeats_per_core_second",
        "p99_ms",
        "formation_seconds",
        "rebalance_seconds",
        "server_peak_rss_mib",
    )
    return {key: ratio(ours_[key], broker_[key]) for key in keys}


def run(quick: bool, groups: int | None = None, priority: int | None = None) -> dict[str, Any]:
    """Both sides, ours first; `priority` (a nice value) defaults to $STATICFLEET_BENCH_PRIORITY."""
    if priority is None:
        priority = int(os.environ.get(PRIORITY_ENV, "0"))
    size = fleet(quick)
    if groups is not None:
        size = Fleet(groups, size.rebalance_members, size.window_s, size.settle_s)
    sides = {"ours": ours(size, priority), "broker": broker(size, priority)}
    summary = {name: figures(side) for name, side in sides.items()}
    for name, side in summary.items():
        print(f"  broker_side_by_side {name}: {side}", file=sys.stderr, flush=True)
    return {
        "fleet": {
            "groups_of_100": size.groups,
            "rebalance_group_members": size.rebalance_members,
            "members": size.groups * 100 + size.rebalance_members,
            "interval_ms": INTERVAL_MS,
            "session_timeout_ms": SESSION_MS,
            "window_s": size.window_s,
            "source_addresses": SOURCE_ADDRESSES,
            "members_started_per_second": START_RATE,
        },
        "broker": {
            "jvm_options": list(BROKER_JVM_OPTIONS),
            "settings": BROKER_SETTINGS,
            "cpu": SERVER_CPU,
        },
        "priority": priority,
        "summary": summary,
        "ratios_ours_over_broker": ratios(summary["ours"], summary["broker"]),
        "runs": sides,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broker_side_by_side")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--groups", type=int, help="groups of 100 (besides the big one)")
    parser.add_argument("--output", type=Path, help="write the JSON here too")
    args = parser.parse_args(argv)
    result = run(args.quick, args.groups)
    text = json.dumps(result, indent=2)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
