"""The columnar journal: JSON lines converted once to Parquet give the same figures as the
JSON (and the reference), and the cached copy is reused only while the JSON is unchanged."""

from __future__ import annotations

import json
import os
from dataclasses import astuple
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipeline import analytics, columnar, generate
from pipeline import reference as ref

pytestmark = pytest.mark.spark


def _windows(spark: SparkSession, output: Path) -> list[tuple[object, ...]]:
    frame = spark.read.parquet(str(output / "windows")).drop("unowned_partition_s")
    return sorted(tuple(row.asDict().values()) for row in frame.collect())


def test_analytics_over_the_columnar_journal_equals_the_reference(
    spark: SparkSession, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    generate.generate(journal, events=6_000, groups=6, shards=2, workers=1, seed=11)
    rows = [
        json.loads(line)
        for path in sorted(journal.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    parquet = tmp_path / "parquet"

    first = analytics.run(spark, str(journal), tmp_path / "out", columnar_dir=parquet)

    assert first["conversion"] is not None
    frame = spark.read.parquet(str(parquet))
    assert frame.schema.fieldNames() == analytics.COLUMNAR_SCHEMA.fieldNames()
    assert frame.count() == len(rows)
    expected = sorted(astuple(figures) for figures in ref.window_figures(rows))
    assert _windows(spark, tmp_path / "out") == expected
    generations = spark.read.parquet(str(tmp_path / "out" / "generations")).collect()
    assert sorted(tuple(r.asDict().values()) for r in generations) == sorted(
        astuple(g) for g in ref.generation_figures(rows)
    )

    # Unchanged JSON: the Parquet is reused, and reading it directly gives the same figures.
    again = analytics.run(spark, str(journal), tmp_path / "again", columnar_dir=parquet)
    assert again["conversion"] is None
    direct = analytics.run(spark, str(parquet), tmp_path / "direct")
    assert direct["conversion"] is None
    assert _windows(spark, tmp_path / "again") == _windows(spark, tmp_path / "direct") == expected


def test_a_changed_journal_is_converted_again(spark: SparkSession, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    generate.generate(journal, events=600, groups=2, shards=2, workers=1, seed=3)
    parquet = tmp_path / "parquet"
    assert columnar.ensure(spark, str(journal), parquet) is not None
    assert columnar.ensure(spark, str(journal), parquet) is None
    shard = sorted(journal.glob("*.jsonl"))[0]
    kept = shard.read_text().splitlines(keepends=True)
    shard.write_text("".join(kept[: len(kept) // 2]))
    os.utime(shard, ns=(1, 1))
    assert not columnar.is_current(str(journal), parquet)
    assert columnar.ensure(spark, str(journal), parquet) is not None
    assert spark.read.parquet(str(parquet)).count() == len(kept) // 2 + sum(
        len(p.read_text().splitlines()) for p in sorted(journal.glob("*.jsonl"))[1:]
    )
