"""`staticfleet spark analytics|generate|members`: the PySpark jobs of `pipeline/` (docs/spark.md).

The same jobs run under `spark-submit pipeline/<job>.py`; here they start a local Spark
(`--master`, default `local[*]`). PySpark comes from the `spark` extra (`make install`).
"""

from __future__ import annotations

import argparse
from typing import Any

from pipeline import options


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "spark",
        help="PySpark jobs: journal analytics, synthetic journals",
        description="PySpark jobs over the rebalance journal (docs/spark.md).",
    )
    jobs = parser.add_subparsers(dest="spark_job", required=True)
    analytics = jobs.add_parser(
        "analytics",
        help="rebalances, moves, unowned partition-seconds, time to Stable, load skew",
        description=(
            "Read rebalance journals (JSON lines or Parquet) and write per group, window and "
            "generation figures as Parquet plus report.txt under --output."
        ),
    )
    options.analytics_parser(analytics)
    analytics.set_defaults(handler=_analytics, master="local[*]", extra="spark")
    generate = jobs.add_parser(
        "generate",
        help="write a synthetic journal (many groups) as JSON lines, for scale runs",
    )
    options.generate_parser(generate)
    generate.set_defaults(handler=_generate)
    members = jobs.add_parser(
        "members",
        help="executors as static members: one long-running member task per executor",
        description=(
            "Run one staticfleet member per Spark executor (STATICFLEET_* from the "
            "environment; the instance id from STATICFLEET_INSTANCE_ID or a slot lock)."
        ),
    )
    options.members_parser(members)
    members.set_defaults(handler=_members, master="local-cluster[2,1,1024]", extra="spark")


def _analytics(args: argparse.Namespace) -> int:
    from pipeline import analytics

    return analytics.run_args(args)


def _generate(args: argparse.Namespace) -> int:
    from pipeline import generate

    return generate.run_args(args)


def _members(args: argparse.Namespace) -> int:
    from pipeline import executor_members

    return executor_members.run_args(args)
