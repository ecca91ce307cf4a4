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


def _tables(spark: SparkSession, output: Path) -> dict[str, list[tuple[object, ...]]]:
    return {
        name: sorted(tuple(row) for row in spark.read.parquet(str(output / name)).collect())
        for name in ("windows", "generations", "moves")
    }


def test_the_numpy_pass_equals_the_dataframe_plan(spark: SparkSession, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    generate.generate(journal, events=5_000, groups=4, shards=2, workers=1, seed=5)
    frame = analytics.read_journal(spark, str(journal))
    first = frame.agg({"ts_ms": "min"}).first()
    assert first is not None
    start = int(first[0])
    windows = [
        ref.Window("early", start, start + 1_800_000),
        ref.Window("one", start, start + 10**8, "group-000001"),
    ]
    member = frame.where("member_id is not null").first()
    assert member is not None
    aliases = {str(member["member_id"]): "renamed"}

    fast = analytics.compute(spark, frame, windows, aliases)
    plan = analytics.compute_dataframe(spark, frame, windows, aliases)

    for name in ("windows", "generations", "moves"):
        assert fast[name].schema.simpleString() == plan[name].schema.simpleString()
        got = sorted(tuple(row) for row in fast[name].collect())
        assert got == sorted(tuple(row) for row in plan[name].collect()), name
        assert got, name


def test_a_journal_generated_columnar_gives_the_json_figures(
    spark: SparkSession, tmp_path: Path
) -> None:
    generate.generate(tmp_path / "json", events=4_000, groups=5, shards=2, workers=1, seed=8)
    generate.generate(
        tmp_path / "parquet", events=4_000, groups=5, shards=2, workers=1, seed=8, fmt="parquet"
    )
    assert columnar.is_clustered(tmp_path / "parquet")

    analytics.run(spark, str(tmp_path / "json"), tmp_path / "from-json")
    analytics.run(spark, str(tmp_path / "parquet"), tmp_path / "from-parquet")

    assert _tables(spark, tmp_path / "from-json") == _tables(spark, tmp_path / "from-parquet")


def test_a_group_split_between_files_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    generate.generate(
        tmp_path / "parquet", events=3_000, groups=2, shards=1, workers=1, seed=8, fmt="parquet"
    )
    whole = spark.read.parquet(str(tmp_path / "parquet"))
    split = tmp_path / "split"
    # Each half of the rows in its own file: group-000000 sits in both.
    whole.where("seq % 2 = 0").coalesce(1).write.parquet(str(split / "a"))
    whole.where("seq % 2 = 1").coalesce(1).write.parquet(str(split / "b"))
    split.joinpath("all").mkdir()
    for index, part in enumerate(sorted(split.glob("[ab]/*.parquet"))):
        part.rename(split / "all" / f"part-{index}.parquet")
    columnar.mark_clustered(split / "all")

    with pytest.raises(RuntimeError, match="split between tasks"):
        analytics.run(spark, str(split / "all"), tmp_path / "out")


def test_partitions_packed_in_one_string_unpack_to_the_same_list(spark: SparkSession) -> None:
    rows = [([("a", 1), ("b", 7), ("a", 0), ("a", 1)],), ([],), (None,)]
    frame = spark.createDataFrame(rows, f"partitions {analytics.PARTITIONS_TYPE.simpleString()}")
    packed = frame.select(
        "partitions", analytics.pack_partitions(frame["partitions"]).alias("assigned")
    )
    back = packed.select(
        "partitions", "assigned", analytics.unpack_partitions(packed["assigned"]).alias("again")
    ).collect()
    assert [row["assigned"] for row in back] == ["a:1,0,1;b:7", "", None]
    assert [row["again"] for row in back] == [
        [("a", 1), ("a", 0), ("a", 1), ("b", 7)],
        [],
        None,
    ]
