"""`staticfleet demo`: the local fleet demo (see docs/demo.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from staticfleet.demo.settings import DEFAULT_OUTPUT_DIR, DemoSettings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run a local fleet and measure static membership, cooperative rebalancing "
        "and batch LeaveGroup",
        description=(
            "Start a coordinator and member processes on loopback, run the scenarios "
            "(dynamic vs static rolling restart, the eager -> cooperative upgrade, scale-down "
            "with and without batch LeaveGroup, a coordinator crash, scale-up with and without "
            "expected members, a killed member with and without a hot standby) and report what was "
            "measured: a table, OUTPUT_DIR/report.json and OUTPUT_DIR/timeline.png. With "
            "--coordinator kafka the groups live on a real Kafka broker the demo starts, "
            "and --coordinator both compares the two."
        ),
    )
    parser.add_argument("--members", type=int, help="member processes (default 6; --quick 4)")
    parser.add_argument("--partitions", type=int, help="partitions (default 48; --quick 16)")
    parser.add_argument(
        "--session-timeout-ms",
        type=int,
        help="members' session timeout (default 10000; --quick 6000)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        help="where report.json, timeline.png and the logs go (default: %(default)s)",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        dest="scenarios",
        metavar="NUMBER",
        help="run only this scenario (e.g. 7 for 7a-7c, or 6b); repeatable (default: all)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smaller, faster run (4 members, 16 partitions)"
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "spark", "python"),
        default="auto",
        help="what computes the journal figures: PySpark's pipeline/analytics.py when it is "
        "installed (auto), or plain Python (default: %(default)s)",
    )
    parser.add_argument(
        "--coordinator",
        choices=("embedded", "kafka", "both"),
        default="embedded",
        help="where the groups live: our coordinator process (embedded), a real Kafka broker "
        "started by the demo (kafka; members read real topics), or both one after the other "
        "with the figures side by side (default: %(default)s)",
    )
    parser.add_argument(
        "--kafka-listener",
        choices=("PLAINTEXT", "SASL_SSL", "SSL"),
        help="with --coordinator kafka/both: SASL_SSL (SCRAM-SHA-512) or SSL (client "
        "certificates) start the secured broker and give the members a --kafka-config for "
        "that listener (default: PLAINTEXT)",
    )
    parser.set_defaults(handler=demo_command, extra="demo")


def settings_from(args: argparse.Namespace) -> DemoSettings:
    overrides: dict[str, object] = {"output_dir": args.output_dir}
    if getattr(args, "scenarios", None):
        overrides["scenarios"] = tuple(args.scenarios)
    for name in ("members", "partitions", "session_timeout_ms", "kafka_listener"):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    if args.quick:
        return DemoSettings.quick_run(**overrides)
    return DemoSettings(**overrides)  # type: ignore[arg-type]


def demo_command(args: argparse.Namespace) -> int:
    # Imported here: `staticfleet --help` imports this module and must stay fast.
    from rich.console import Console

    from staticfleet.demo.runner import DemoError, run_demo

    try:
        settings = settings_from(args)
    except ValueError as error:
        print(f"staticfleet demo: {error}", file=sys.stderr)
        return 2
    console = Console()
    if not console.is_terminal:
        # Piped into a file or CI log: wide enough that the tables do not wrap.
        console = Console(width=140)
    try:
        return run_demo(settings, console, args.engine, args.coordinator)
    except DemoError as error:
        print(f"staticfleet demo: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("staticfleet demo: interrupted; processes stopped", file=sys.stderr)
        return 130
