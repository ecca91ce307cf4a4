"""The soak's command-line arguments: light to import (`staticfleet --help` loads them)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")


def parse_duration(text: str) -> float:
    """`90`, `90s`, `30m`, `1h` -> seconds."""
    match = _DURATION.match(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (say 90s, 30m or 1h)")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, required=True, help="the faults' random seed")
    parser.add_argument("--duration", type=parse_duration, required=True, help="e.g. 60s, 30m")
    parser.add_argument("--report", type=Path, help="write the JSON report here too")
    parser.add_argument("--run-dir", type=Path, help="an empty directory (default: a new temp one)")
    parser.add_argument(
        "--check-only", action="store_true", help="judge an existing --run-dir, inject nothing"
    )
    parser.add_argument(
        "--coordinator",
        choices=("embedded", "kafka"),
        default="embedded",
        help="what holds the groups: our coordinator (embedded) or a Kafka broker from "
        "build/kafka, with the broker's fault kinds (docs/soak.md) [embedded]",
    )
