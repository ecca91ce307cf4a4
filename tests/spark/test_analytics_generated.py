"""The Spark analytics against the reference on a generated journal: many groups, eager and
cooperative rebalances, a user window shared by every group."""

from __future__ import annotations

import json
from dataclasses import astuple
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipeline import analytics, generate, options
from pipeline import reference as ref

pytestmark = pytest.mark.spark


def test_spark_equals_reference_on_a_generated_journal(spark: SparkSession, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    written = generate.generate(journal, events=12_000, groups=12, shards=3, workers=1, seed=7)
    assert written["events"] >= 12_000
    rows = [
        json.loads(line)
        for path in sorted(journal.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    start = min(row["ts_ms"] for row in rows)
    windows = [
        ref.Window("first-hour", start, start + 3_600_000),
        ref.Window("g3-day", start, start + 86_400_000, "group-000003"),
    ]
    output = tmp_path / "out"
    analytics.run(spark, str(journal), output, windows)
    assert (output / "report.png").stat().st_size > 0

    got = sorted(
        tuple(row.asDict().values())
        for row in spark.read.parquet(str(output / "windows")).drop("unowned_partition_s").collect()
    )
    expected = sorted(astuple(figures) for figures in ref.window_figures(rows, windows))
    assert len(expected) == 12 * 2 + 1
    assert got == expected
    generations = sorted(
        tuple(row.asDict().values())
        for row in spark.read.parquet(str(output / "generations")).collect()
    )
    assert generations == sorted(astuple(g) for g in ref.generation_figures(rows))
    assert sum(f.moved for f in ref.window_figures(rows)) > 0
    assert sum(f.unowned_partition_ms for f in ref.window_figures(rows)) > 0


def test_window_argument_parsing() -> None:
    assert options.parse_window("deploy=10:20") == ref.Window("deploy", 10, 20, None)
    assert options.parse_window("g-1/deploy=10:20") == ref.Window("deploy", 10, 20, "g-1")
