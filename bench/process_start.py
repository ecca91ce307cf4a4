"""What starting a `staticfleet` process costs in CPU before it does anything (issue 26).

Every member pod, every member process of the tests and the demo, and every coordinator
starts the same interpreter and imports what its command needs. This runs each command's
`--help` (the parser is built and the command's module imported, as a real start does, then
it exits) RUNS times and reports the CPU it used (user + system, from the child's rusage),
beside `python -c pass`, the interpreter's own floor. Then the Kafka broker the Kafka tests
start (`KafkaBroker`, build/kafka/libs): its JVM's CPU from start to ready, without and with
class-data sharing (staticfleet/kafka/class_sharing.py), alternately, BROKER_RUNS times each.

    python -m bench.process_start [--runs 15] [--broker-runs 5] [--source DIR ...]
                                  [--output FILE]

`--source DIR` (repeatable) runs another checkout's code with the same virtualenv
(PYTHONPATH=DIR:DIR/operator, DIR as the working directory); the sources' runs are
interleaved, so a machine that slows down mid-run slows every source alike: before/after on
one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.child import process_cpu_seconds

REPO_ROOT = Path(__file__).resolve().parent.parent
# Not process_start.json, which `make bench` writes (bench/run.py): a comparison has its own file.
DEFAULT_OUTPUT = REPO_ROOT / "bench" / "results" / "process_start_compared.json"

# (name, the arguments after `python`)
COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass", ["-c", "pass"]),
    ("member run", ["-m", "staticfleet.cli", "member", "run", "--help"]),
    ("coordinator serve", ["-m", "staticfleet.cli", "coordinator", "serve", "--help"]),
    ("operator run", ["-m", "staticfleet.cli", "operator", "run", "--help"]),
]


def child_cpu_s(argv: list[str], source: Path) -> float:
    """User + system CPU seconds of one run of `argv` on `source`'s code (its rusage)."""
    # cwd too: `python -m` and `-c` put the working directory first on sys.path.
    process = subprocess.Popen(argv, cwd=source, env=source_env(source), stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{argv} exited {process.returncode}")
    return usage.ru_utime + usage.ru_stime


def source_env(source: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{source / 'operator'}"}


def revision(source: Path) -> str:
    """The source's commit, and whether its tree differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=source, capture_output=True, text=True, check=False
        ).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        " + changes" if git("status", "--porcelain") else ""
    )


def measure(sources: list[Path], runs: int) -> dict[str, dict[str, Any]]:
    samples: dict[str, dict[str, list[float]]] = {
        str(source): {name: [] for name, _args in COMMANDS} for source in sources
    }
    for _ in range(runs):
        for source in sources:
            for name, args in COMMANDS:
                samples[str(source)][name].append(child_cpu_s([sys.executable, *args], source))
    return {
        source: {
            name: {
                "median_cpu_s": round(statistics.median(values), 4),
                "min_cpu_s": round(min(values), 4),
                "runs": len(values),
            }
            for name, values in by_command.items()
        }
        for source, by_command in samples.items()
    }


def broker_starts(runs: int) -> dict[str, Any]:
    """The broker's JVM from start to ready, without and with class-data sharing (the first
    broker with it writes the archive if there is none yet: that run is reported apart)."""
    from staticfleet.kafka.broker import LIBS_DIR, KafkaBroker, ensure_installed
    from staticfleet.kafka.class_sharing import archive_path

    ensure_installed()
    archive = archive_path("kafka-broker", f"{LIBS_DIR}/*")
    samples: dict[str, dict[str, list[float]]] = {
        kind: {"cpu_s": [], "ready_s": []} for kind in ("without", "with")
    }
    archive_written: dict[str, float] | None = None
    for _ in range(runs):
        for kind in ("without", "with"):
            writes = kind == "with" and archive is not None and not archive.exists()
            with tempfile.TemporaryDirectory() as workdir:
                broker = KafkaBroker(workdir, class_sharing=kind == "with")
                broker.start()
                try:
                    ready_s = broker.wait_ready()
                    assert broker.pid is not None
                    cpu_s = process_cpu_seconds(broker.pid)
                finally:
                    broker.stop()
            if writes:
                archive_written = {"cpu_s": round(cpu_s, 3), "ready_s": round(ready_s, 3)}
                continue
            samples[kind]["cpu_s"].append(cpu_s)
            samples[kind]["ready_s"].append(ready_s)
    figures: dict[str, Any] = {
        kind: {
            f"median_{name}": round(statistics.median(values), 3)
            for name, values in by_name.items()
            if values
        }
        | {"runs": len(by_name["cpu_s"])}
        for kind, by_name in samples.items()
    }
    figures["archive_written_in"] = archive_written
    if samples["without"]["cpu_s"] and samples["with"]["cpu_s"]:
        figures["cpu_ratio_with_to_without"] = round(
            figures["with"]["median_cpu_s"] / figures["without"]["median_cpu_s"], 3
        )
    return figures


def report(sources: list[Path], runs: int, broker_runs: int) -> dict[str, Any]:
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = os.getloadavg()[0]
    figures = measure(sources, runs)
    brokers = broker_starts(broker_runs) if broker_runs else None
    return {
        "started": started,
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "revisions": {str(source): revision(source) for source in sources},
        "sources": figures,
        "broker_start": brokers,
    }


def run(quick: bool) -> dict[str, Any]:
    """`make bench` (bench/run.py): this checkout alone."""
    return report([REPO_ROOT], 3 if quick else 15, 1 if quick else 5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--broker-runs", type=int, default=5, help="0: no broker")
    parser.add_argument("--source", type=Path, action="append", default=[])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    sources = [path.resolve() for path in args.source] or [REPO_ROOT]
    document = {
        "benchmark": "process_start",
        "command": "python -m bench.process_start " + " ".join(argv or sys.argv[1:]),
        **report(sources, args.runs, args.broker_runs),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2) + "\n")
    for source, by_command in document["sources"].items():
        print(source, document["revisions"][source])
        for name, figure in by_command.items():
            median, least = figure["median_cpu_s"], figure["min_cpu_s"]
            print(f"  {name:20} median {median:.3f} CPU-s, min {least:.3f}")
    if document["broker_start"] is not None:
        print("broker start to ready:", json.dumps(document["broker_start"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
