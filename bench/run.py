"""Run the registered benchmarks and write `bench/results/<name>.json`.

    python -m bench.run                 # everything (what `make bench` does)
    python -m bench.run --only assignors --quick

A benchmark is a module `bench.<name>` with `def run(quick: bool) -> dict`; add its name to
BENCHMARKS. The JSON written for it holds what `run` returned, under "results", plus the
machine it ran on and when, so a figure quoted anywhere can be traced to a run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCHMARKS: tuple[str, ...] = (
    "assignors",
    "kafka_assignors",
    "coordinator",
    "http",
    "body_decode",
    "spark",
    "slow_clients",
    "kafka",
    "batch_leave",
    "conformance",
    "capacity",
    "operator_scale",
    "scale_flap",
    "reconnect_burst",
    "broker_side_by_side",
    "process_start",
)
# Benchmarks whose module is not `bench.<name>`.
MODULES: dict[str, str] = {
    "coordinator": "coordinator_bench",
    "http": "http_bench",
    "spark": "spark_bench",
    "kafka": "kafka_bench",
    "conformance": "conformance_bench",
}

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine_info() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
    }


def run_benchmark(name: str, quick: bool) -> Path:
    module = importlib.import_module(f"bench.{MODULES.get(name, name)}")
    started = datetime.now(UTC)
    clock = time.perf_counter()
    results = module.run(quick)
    document = {
        "benchmark": name,
        "timestamp": started.isoformat(timespec="seconds"),
        "quick": quick,
        "wall_seconds": round(time.perf_counter() - clock, 3),
        "machine": machine_info(),
        "results": results,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    # Quick runs must never replace the full figures the docs quote.
    path = RESULTS_DIR / (f"{name}.quick.json" if quick else f"{name}.json")
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument(
        "--only",
        action="append",
        choices=BENCHMARKS,
        metavar="NAME",
        help=f"run only this benchmark (repeatable); one of: {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args(argv)
    for name in args.only or BENCHMARKS:
        print(f"bench: running {name}{' (quick)' if args.quick else ''} ...", flush=True)
        path = run_benchmark(name, args.quick)
        print(f"bench: {name} -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
