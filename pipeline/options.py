"""Command-line options of the Spark jobs, free of PySpark imports (so `staticfleet --help`
stays fast): shared by `spark-submit pipeline/<job>.py` and `staticfleet spark <job>`."""

from __future__ import annotations

import argparse
import glob as globbing
import json
import sys
from pathlib import Path
from typing import Any

from pipeline.reference import Window as RolloutWindow


def parse_window(text: str) -> RolloutWindow:
    """LABEL=START_MS:END_MS or GROUP/LABEL=START_MS:END_MS."""
    name, _, span = text.partition("=")
    start, _, end = span.partition(":")
    if not name or not start or not end:
        raise argparse.ArgumentTypeError(f"expected LABEL=START_MS:END_MS, got {text!r}")
    group, _, label = name.rpartition("/")
    return RolloutWindow(label, int(start), int(end), group or None)


def load_windows(path: Path) -> list[RolloutWindow]:
    """A JSON list of {"label", "start_ms", "end_ms", "group_id"?}."""
    items: list[dict[str, Any]] = json.loads(path.read_text())
    return [
        RolloutWindow(
            str(i["label"]), int(i["start_ms"]), int(i["end_ms"]), i.get("group_id") or None
        )
        for i in items
    ]


def analytics_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="pipeline/analytics.py",
        description="Journal analytics: rebalances, moves, unowned partition-seconds, "
        "time to Stable and load skew per group, rollout window and generation.",
    )
    parser.add_argument("--journal", required=True, help="JSON-lines file, directory or glob")
    parser.add_argument("--output", required=True, type=Path, help="output directory")
    parser.add_argument(
        "--format", choices=("auto", "json", "parquet"), default="auto", help="journal format"
    )
    parser.add_argument(
        "--window",
        action="append",
        type=parse_window,
        default=[],
        metavar="[GROUP/]LABEL=START_MS:END_MS",
        help="a rollout window (repeatable); the whole journal is always window 'all'",
    )
    parser.add_argument(
        "--glob", default="*.jsonl", help="file names to read in a journal directory"
    )
    parser.add_argument(
        "--aliases",
        type=Path,
        help="JSON object member_id -> owner name (e.g. the demo's slots for dynamic members)",
    )
    parser.add_argument(
        "--demo-logs",
        type=Path,
        help="a demo logs directory: aliases from its member-*.jsonl logs",
    )
    parser.add_argument("--windows-file", type=Path, help="JSON list of windows")
    parser.add_argument(
        "--columnar",
        type=Path,
        help="convert JSON lines once to a Parquet journal in this directory and read that "
        "(reused while the JSON files are unchanged)",
    )
    parser.add_argument("--master", default=None, help="Spark master (default: spark-submit's)")
    parser.add_argument(
        "--shuffle-partitions", type=int, default=16, help="spark.sql.shuffle.partitions"
    )
    return parser


def generate_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="python -m pipeline.generate",
        description="Write a synthetic rebalance journal (JSON lines or the columnar journal, "
        "whole groups a file).",
    )
    parser.add_argument("--output", type=Path, required=True, help="directory to write")
    parser.add_argument("--events", type=int, default=10_000_000, help="at least this many")
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=16, help="files")
    parser.add_argument("--workers", type=int, default=2, help="processes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--format",
        choices=("jsonl", "parquet"),
        default="jsonl",
        help="JSON lines, or the columnar journal the analytics reads (no conversion)",
    )
    return parser


def members_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="pipeline/executor_members.py",
        description="Spark executors as static fleet members: one member task per executor.",
    )
    parser.add_argument("--executors", type=int, default=2, help="tasks = executors")
    parser.add_argument(
        "--slot-dir", type=Path, required=True, help="slot locks, stop file, event logs"
    )
    parser.add_argument("--duration-s", type=float, default=600.0, help="stop after this")
    parser.add_argument("--prefix", default="executor", help="instance id = PREFIX-<slot>")
    parser.add_argument("--output", type=Path, help="write the tasks' results (JSON) here")
    parser.add_argument("--master", default=None, help="Spark master (default: spark-submit's)")
    return parser


# --- checks before a job starts Spark (or writes anything) -------------------------------------
# One line per problem, exit 2: a bad argument must not cost a JVM start, end in a Py4J
# traceback, divide by zero or write a wrong journal.

EXIT_USAGE = 2


def _positive(args: argparse.Namespace, *names: str) -> list[str]:
    problems = []
    for name in names:
        value = getattr(args, name)
        if value is not None and value <= 0:
            flag = "--" + name.replace("_", "-")
            problems.append(f"{flag} must be positive, not {value}")
    return problems


def journal_problem(journal: str, fmt: str = "auto", pattern: str = "*.jsonl") -> str | None:
    """Why `journal` names no readable journal, or None. Only local paths are checked (a
    URI such as hdfs:// or s3a:// is Spark's to resolve)."""
    if "://" in journal:
        return None
    path = Path(journal)
    if path.is_file():
        return None
    if path.is_dir():
        wanted = ["*.parquet"] if fmt == "parquet" else [pattern, "*.parquet"]
        if fmt == "json":
            wanted = [pattern]
        if any(next(path.rglob(want), None) is not None for want in wanted):
            return None
        return f"--journal {journal}: a directory with no {' or '.join(wanted)} file in it"
    if any(Path(match).is_file() for match in globbing.glob(journal, recursive=True)):
        return None
    return f"--journal {journal}: no such file or directory, and no file matches it as a glob"


def analytics_problems(args: argparse.Namespace) -> list[str]:
    problems = _positive(args, "shuffle_partitions")
    problem = journal_problem(args.journal, args.format, args.glob)
    if problem:
        problems.append(problem)
    for name in ("aliases", "windows_file", "demo_logs"):
        value = getattr(args, name)
        if value is not None and not value.exists():
            problems.append(f"--{name.replace('_', '-')} {value}: no such file or directory")
    return problems


def generate_problems(args: argparse.Namespace) -> list[str]:
    return _positive(args, "events", "groups", "shards", "workers")


def members_problems(args: argparse.Namespace) -> list[str]:
    return _positive(args, "executors", "duration_s")


def report_problems(job: str, problems: list[str]) -> int:
    """Print each problem on one line (stderr); EXIT_USAGE when there is any, else 0."""
    for problem in problems:
        print(f"spark {job}: {problem}", file=sys.stderr)
    return EXIT_USAGE if problems else 0
