"""Command-line options of the Spark jobs, free of PySpark imports (so `staticfleet --help`
stays fast): shared by `spark-submit pipeline/<job>.py` and `staticfleet spark <job>`."""

from __future__ import annotations

import argparse
import json
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
        description="Write a synthetic rebalance journal (JSON lines, whole groups a file).",
    )
    parser.add_argument("--output", type=Path, required=True, help="directory to write")
    parser.add_argument("--events", type=int, default=10_000_000, help="at least this many")
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=16, help="files")
    parser.add_argument("--workers", type=int, default=2, help="processes")
    parser.add_argument("--seed", type=int, default=1)
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
