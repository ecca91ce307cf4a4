"""The journal analytics job: rebalances, moves, unowned partition-seconds, time to Stable
and load skew, per group, per rollout window and per generation (docs/spark.md).

    spark-submit pipeline/analytics.py --journal DIR_OR_FILE --output DIR [--window L=S:E]
    staticfleet spark analytics --journal ... --output ...

Input: rebalance journals as JSON lines (`coordinator.journal.write_jsonl`, `/v1/journal`
exports; a file, a directory of them, or a glob), or Parquet written by
`pipeline.generate --format parquet`. The schema is given, never inferred. Everything is
DataFrame operations and window functions; only the small per-window table is collected,
for the text report.

Output (under --output): `windows/`, `generations/`, `moves/` (Parquet) and `report.txt`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from coordinator.journal import JournalKind
from pipeline import figures, options
from pipeline.reference import ALL_WINDOW, demo_aliases
from pipeline.reference import Window as RolloutWindow

JOURNAL_SCHEMA = StructType(
    [
        StructField("seq", LongType(), False),
        StructField("ts_ms", LongType(), False),
        StructField("group_id", StringType(), False),
        StructField("kind", StringType(), False),
        StructField("generation_id", LongType(), False),
        StructField("member_id", StringType(), True),
        StructField("group_instance_id", StringType(), True),
        StructField(
            "detail",
            StructType(
                [
                    # [[topic, partition], ...]: read as strings, the partition cast below.
                    StructField("partitions", ArrayType(ArrayType(StringType())), True),
                    StructField("reason", StringType(), True),
                ]
            ),
            True,
        ),
    ]
)

PARTITIONS_TYPE = ArrayType(
    StructType(
        [StructField("topic", StringType(), True), StructField("partition", IntegerType(), True)]
    )
)

# The columnar journal (`pipeline.columnar`): what the analytics reads, in Parquet. Every
# column is flat: an assignment's partitions are one string, "topic:0,1,2;other:5" (Kafka
# topic names never hold ";", ":" or ","), which moves from the JVM to Python as fast as
# a number column, where a list of structs costs ~5x the rest of the row (docs/spark.md).
COLUMNAR_SCHEMA = StructType(
    [
        StructField("seq", LongType(), False),
        StructField("ts_ms", LongType(), False),
        StructField("group_id", StringType(), False),
        StructField("kind", StringType(), False),
        StructField("generation_id", LongType(), False),
        StructField("member_id", StringType(), True),
        StructField("group_instance_id", StringType(), True),
        StructField("assigned", StringType(), True),
    ]
)

WINDOW_SCHEMA = "label string, start_ms long, end_ms long, group_id string"


JOURNAL_KINDS = tuple(kind.value for kind in JournalKind)


def read_journal(
    spark: SparkSession, path: str, fmt: str = "auto", glob: str = "*.jsonl"
) -> DataFrame:
    """Journal rows in the narrow columnar shape (`COLUMNAR_SCHEMA`) from JSON lines (a file,
    a directory searched recursively for `glob`, or a glob) or Parquet (the columnar journal
    `pipeline.columnar` writes, or rows shaped like `JOURNAL_SCHEMA`). Lines that are not
    journal rows (no seq, an unknown kind: e.g. member logs next to the journal) are
    dropped."""
    if fmt == "auto":
        fmt = "parquet" if _looks_parquet(Path(path)) else "json"
    if fmt == "parquet":
        frame = spark.read.parquet(path)
        if "assigned" in frame.columns:
            return frame.select(*COLUMNAR_SCHEMA.fieldNames())
        if "partitions" in frame.columns:  # the earlier columnar shape: list of structs
            return frame.select(
                *COLUMNAR_SCHEMA.fieldNames()[:-1],
                pack_partitions(F.col("partitions")).alias("assigned"),
            )
        frame = spark.read.schema(JOURNAL_SCHEMA).parquet(path)
    else:
        reader = spark.read.schema(JOURNAL_SCHEMA).option("mode", "FAILFAST")
        if Path(path).is_dir():
            reader = reader.option("recursiveFileLookup", "true").option("pathGlobFilter", glob)
        frame = reader.json(path)
    return narrow(
        frame.where(
            F.col("seq").isNotNull()
            & F.col("ts_ms").isNotNull()
            & F.col("group_id").isNotNull()
            & F.col("kind").isin(*JOURNAL_KINDS)
        )
    )


def _looks_parquet(local: Path) -> bool:
    return local.suffix == ".parquet" or (
        local.is_dir()
        and (any(local.glob("*.parquet")) or (local / "_SUCCESS").exists())
        and not any(local.glob("*.jsonl"))
    )


def narrow(frame: DataFrame) -> DataFrame:
    """JOURNAL_SCHEMA rows -> COLUMNAR_SCHEMA: the columns the analytics reads and nothing
    else, the partitions packed in one string (`pack_partitions`)."""
    partitions = F.transform(
        F.col("detail.partitions"),
        lambda tp: F.struct(tp[0].alias("topic"), tp[1].cast("int").alias("partition")),
    )
    return frame.select(
        "seq",
        "ts_ms",
        "group_id",
        "kind",
        "generation_id",
        "member_id",
        "group_instance_id",
        pack_partitions(partitions).alias("assigned"),
    )


def pack_partitions(partitions: Column) -> Column:
    """[(topic, partition), ...] -> "topic:0,1,2;other:5" (each topic once, in the order
    it first appears; partitions in their order); an empty list -> ""; null -> null."""
    topics = F.array_distinct(F.transform(partitions, lambda tp: tp["topic"]))

    def one_topic(topic: Column) -> Column:
        numbers = F.transform(
            F.filter(partitions, lambda tp: tp["topic"] == topic),
            lambda tp: tp["partition"].cast("string"),
        )
        return F.concat(topic, F.lit(":"), F.array_join(numbers, ","))

    return F.array_join(F.transform(topics, one_topic), ";")


def unpack_partitions(assigned: Column) -> Column:
    """The inverse of `pack_partitions`: [(topic, partition int), ...]."""
    topics = F.filter(F.split(assigned, ";"), lambda part: part != "")

    def one_topic(part: Column) -> Column:
        name, numbers = F.split(part, ":", 2)[0], F.split(part, ":", 2)[1]
        return F.transform(
            F.filter(F.split(numbers, ","), lambda n: n != ""),
            lambda n: F.struct(name.alias("topic"), n.cast("int").alias("partition")),
        )

    return F.flatten(F.transform(topics, one_topic)).cast(PARTITIONS_TYPE)


ALIAS_SCHEMA = "member_id string, alias string"


def assignment_rows(journal: DataFrame, aliases: DataFrame | None) -> DataFrame:
    """Assignment rows with `owner`: the member id's alias, else the instance id, else the
    member id (coordinator.journal_metrics.owner_of); and `next_rb` (seq, ts_ms): the
    group's first `rebalance_started` after the row, if any (one backwards scan of the
    group's assignment and rebalance rows)."""
    markers = journal.where(F.col("kind").isin("assignment", "rebalance_started"))
    backwards = (
        Window.partitionBy("group_id")
        .orderBy(F.col("seq").desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    rebalance = F.when(
        F.col("kind") == "rebalance_started",
        F.struct(F.col("seq").alias("seq"), F.col("ts_ms").alias("ts_ms")),
    )
    rows = (
        markers.withColumn("next_rb", F.last(rebalance, ignorenulls=True).over(backwards))
        .where(F.col("kind") == "assignment")
        .drop("kind")
    )
    if aliases is None:
        alias = F.lit(None).cast("string")
    else:
        rows = rows.join(F.broadcast(aliases), "member_id", "left")
        alias = F.when(F.col("alias") != "", F.col("alias"))
    instance = F.when(F.col("group_instance_id") != "", F.col("group_instance_id"))
    return rows.select(
        "group_id",
        "generation_id",
        "seq",
        "ts_ms",
        "partitions",
        "next_rb",
        F.coalesce(alias, instance, F.col("member_id"), F.lit("")).alias("owner"),
    )


def assigned_partitions(rows: DataFrame) -> DataFrame:
    """One row per assignment row and partition it names."""
    return rows.select(
        "group_id",
        "generation_id",
        "seq",
        "ts_ms",
        "owner",
        "next_rb",
        F.inline("partitions"),
    )


def assignments(rows: DataFrame, exploded: DataFrame) -> DataFrame:
    """One row per (group, generation, partition): the owner named by the last assignment
    row (by seq) naming it, and the generation's store time (its last assignment row)."""
    generation_ts = rows.groupBy("group_id", "generation_id").agg(
        F.max_by("ts_ms", "seq").alias("gen_ts_ms")
    )
    owners = exploded.groupBy("group_id", "generation_id", "topic", "partition").agg(
        F.max_by("owner", "seq").alias("owner")
    )
    return owners.join(generation_ts, ["group_id", "generation_id"])


def moves(owners: DataFrame) -> DataFrame:
    """Partitions whose owner differs from their owner in the previous generation that
    assigned them (coordinator.journal_metrics.partition_moves)."""
    history = Window.partitionBy("group_id", "topic", "partition").orderBy("generation_id")
    return (
        owners.withColumn("from_owner", F.lag("owner").over(history))
        .where(F.col("from_owner").isNotNull() & (F.col("from_owner") != F.col("owner")))
        .select(
            "group_id",
            "generation_id",
            "gen_ts_ms",
            "topic",
            "partition",
            "from_owner",
            F.col("owner").alias("to_owner"),
        )
    )


def group_bounds(journal: DataFrame) -> DataFrame:
    return journal.groupBy("group_id").agg(
        F.min("ts_ms").alias("group_start_ms"), F.max("ts_ms").alias("group_end_ms")
    )


def unowned_intervals(exploded: DataFrame, bounds: DataFrame) -> DataFrame:
    """Intervals [lo_ms, hi_ms) a partition had no owner as the coordinator sees it: from a
    rebalance_started that found it owned to the next assignment row naming it (or the
    group's last row). pipeline.reference.unowned_intervals is the same in Python.

    Linear in the assigned partitions: an interval starts at the first rebalance after an
    assignment naming the partition when that rebalance comes before the partition's next
    assignment (the partition was owned when the rebalance began), and ends at that next
    assignment."""
    timeline = Window.partitionBy("group_id", "topic", "partition").orderBy("seq")
    starts = (
        exploded.select("group_id", "topic", "partition", "seq", "ts_ms", "next_rb")
        .withColumn("next_seq", F.lead("seq").over(timeline))
        .withColumn("next_ts_ms", F.lead("ts_ms").over(timeline))
        .where(
            F.col("next_rb").isNotNull()
            & (F.col("next_seq").isNull() | (F.col("next_rb.seq") < F.col("next_seq")))
        )
    )
    return starts.join(bounds, "group_id").select(
        "group_id",
        "topic",
        "partition",
        F.col("next_rb.ts_ms").alias("lo_ms"),
        F.coalesce(F.col("next_ts_ms"), F.col("group_end_ms")).alias("hi_ms"),
    )


def rollout_windows(
    spark: SparkSession, bounds: DataFrame, windows: Sequence[RolloutWindow]
) -> DataFrame:
    """(group_id, label, start_ms, end_ms): the whole journal of each group, plus the user's
    windows (a window with no group applies to every group)."""
    whole = bounds.select(
        "group_id",
        F.lit(ALL_WINDOW).alias("label"),
        F.col("group_start_ms").alias("start_ms"),
        F.col("group_end_ms").alias("end_ms"),
    )
    if not windows:
        return whole
    given = spark.createDataFrame(
        [(w.label, w.start_ms, w.end_ms, w.group_id) for w in windows], WINDOW_SCHEMA
    )
    groups = bounds.select("group_id")
    everywhere = (
        given.where(F.col("group_id").isNull())
        .drop("group_id")
        .crossJoin(groups)
        .select("group_id", "label", "start_ms", "end_ms")
    )
    specific = given.where(F.col("group_id").isNotNull()).join(groups, "group_id")
    return whole.unionByName(everywhere).unionByName(
        specific.select("group_id", "label", "start_ms", "end_ms")
    )


def _in_window(ts: str) -> Column:
    return (F.col(ts) >= F.col("start_ms")) & (F.col(ts) <= F.col("end_ms"))


def window_figures(
    journal: DataFrame, windows: DataFrame, move_rows: DataFrame, intervals: DataFrame
) -> DataFrame:
    """Per group and window: rebalances, moved, unowned_partition_ms, time_to_stable_ms."""
    keys = ["group_id", "label"]
    wins = F.broadcast(windows)
    in_window = journal.select("group_id", "seq", "ts_ms", "kind").join(wins, "group_id")
    in_window = in_window.where(_in_window("ts_ms"))
    rebalances = in_window.groupBy(*keys).agg(
        F.count(F.when(F.col("kind") == "rebalance_started", 1)).alias("rebalances"),
        F.max(F.when(F.col("kind") == "rebalance_started", F.col("seq"))).alias("last_rb_seq"),
    )
    stables = in_window.where(F.col("kind") == "stable").select(
        *keys, F.col("seq").alias("stable_seq"), F.col("ts_ms").alias("stable_ts_ms")
    )
    settled = (
        rebalances.join(stables, keys)
        .where(F.col("stable_seq") > F.col("last_rb_seq"))
        .groupBy(*keys)
        .agg(F.min_by("stable_ts_ms", "stable_seq").alias("settled_ts_ms"))
    )
    moved = (
        move_rows.join(wins, "group_id")
        .where(_in_window("gen_ts_ms"))
        .groupBy(*keys)
        .agg(F.count(F.lit(1)).alias("moved"))
    )
    clipped = F.greatest(
        F.lit(0),
        F.least(F.col("hi_ms"), F.col("end_ms")) - F.greatest(F.col("lo_ms"), F.col("start_ms")),
    )
    unowned = (
        intervals.join(wins, "group_id")
        .where((F.col("lo_ms") <= F.col("end_ms")) & (F.col("hi_ms") >= F.col("start_ms")))
        .groupBy(*keys)
        .agg(F.sum(clipped).alias("unowned_partition_ms"))
    )
    return (
        windows.join(rebalances, keys, "left")
        .join(settled, keys, "left")
        .join(moved, keys, "left")
        .join(unowned, keys, "left")
        .select(
            "group_id",
            F.col("label").alias("window"),
            "start_ms",
            "end_ms",
            F.coalesce("rebalances", F.lit(0)).alias("rebalances"),
            F.coalesce("moved", F.lit(0)).alias("moved"),
            F.coalesce("unowned_partition_ms", F.lit(0)).alias("unowned_partition_ms"),
            (F.coalesce("unowned_partition_ms", F.lit(0)) / 1000.0).alias("unowned_partition_s"),
            F.when(F.coalesce("rebalances", F.lit(0)) == 0, F.lit(0))
            .otherwise(F.col("settled_ts_ms") - F.col("start_ms"))
            .alias("time_to_stable_ms"),
        )
    )


def generation_figures(
    journal: DataFrame, rows: DataFrame, owners: DataFrame, move_rows: DataFrame
) -> DataFrame:
    """Per group and generation: members, partitions, load skew, moves, time to Stable."""
    gen_keys = ["group_id", "generation_id"]
    members = rows.select(*gen_keys, "owner").distinct()
    per_owner = members.join(
        owners.groupBy(*gen_keys, "owner").agg(F.count(F.lit(1)).alias("n")),
        [*gen_keys, "owner"],
        "left",
    ).withColumn("n", F.coalesce("n", F.lit(0)))
    load = per_owner.groupBy(*gen_keys).agg(
        F.count(F.lit(1)).alias("members"),
        F.sum("n").alias("partitions"),
        F.min("n").alias("min_partitions"),
        F.max("n").alias("max_partitions"),
        F.avg("n").alias("mean_partitions"),
    )
    # The generation's store time: its last assignment row (rows with no partitions too).
    gen_ts_all = rows.groupBy(*gen_keys).agg(F.max_by("ts_ms", "seq").alias("assigned_ts_ms"))
    moved = move_rows.groupBy(*gen_keys).agg(F.count(F.lit(1)).alias("moved"))
    stable = (
        journal.where(F.col("kind") == "stable")
        .groupBy(*gen_keys)
        .agg(F.min_by("ts_ms", "seq").alias("stable_ts_ms"))
    )
    # The rebalance that led to a generation: the first rebalance_started after the previous
    # generation_started, i.e. the rebalance rows whose next generation_started is this one.
    markers = journal.where(F.col("kind").isin("rebalance_started", "generation_started"))
    order = Window.partitionBy("group_id").orderBy("seq")
    backwards = (
        Window.partitionBy("group_id")
        .orderBy(F.col("seq").desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    rebalance_of = (
        markers.withColumn(
            "next_generation",
            F.last(
                F.when(F.col("kind") == "generation_started", F.col("generation_id")),
                ignorenulls=True,
            ).over(backwards),
        )
        .withColumn("previous_kind", F.lag("kind").over(order))
        .where(
            (F.col("kind") == "rebalance_started")
            & (F.col("previous_kind").isNull() | (F.col("previous_kind") == "generation_started"))
            & F.col("next_generation").isNotNull()
        )
        .select(
            "group_id",
            F.col("next_generation").alias("generation_id"),
            F.col("ts_ms").alias("rebalance_ts_ms"),
        )
    )
    return (
        gen_ts_all.join(load, gen_keys, "left")
        .join(moved, gen_keys, "left")
        .join(rebalance_of, gen_keys, "left")
        .join(stable, gen_keys, "left")
        .select(
            *gen_keys,
            "assigned_ts_ms",
            "members",
            "partitions",
            "min_partitions",
            "max_partitions",
            (F.col("max_partitions") - F.col("min_partitions")).alias("skew"),
            F.when(F.col("mean_partitions") > 0, F.col("max_partitions") / F.col("mean_partitions"))
            .otherwise(F.lit(0.0))
            .alias("skew_ratio"),
            F.coalesce("moved", F.lit(0)).alias("moved"),
            "rebalance_ts_ms",
            "stable_ts_ms",
            (F.col("stable_ts_ms") - F.col("rebalance_ts_ms")).alias("time_to_stable_ms"),
        )
    )


def _ddl(schema: pa.Schema) -> str:
    names = {pa.int8(): "tinyint", pa.int32(): "int", pa.int64(): "bigint"}
    names |= {pa.float64(): "double", pa.string(): "string"}
    return ", ".join(f"`{field.name}` {names[field.type]}" for field in schema)


def compute(
    spark: SparkSession,
    journal: DataFrame,
    windows: Sequence[RolloutWindow] = (),
    aliases: Mapping[str, str] | None = None,
    clustered: bool = False,
) -> dict[str, DataFrame]:
    """The job's result tables (lazy): windows, generations, moves.

    One pass: every group's rows go to one task in seq order (a shuffle by group, unless
    the journal is `clustered`: files of whole groups in seq order, as `pipeline.columnar`
    writes them), and each task computes its groups' three tables in numpy
    (`pipeline.figures`); the result is cached so that the three writes read it once."""
    if not clustered:
        tasks = int(spark.conf.get("spark.sql.shuffle.partitions") or "16")
        journal = journal.repartition(tasks, "group_id").sortWithinPartitions("group_id", "seq")
    chosen = list(windows)
    names = dict(aliases or {})

    def per_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return figures.partition_figures(batches, chosen, names)

    rows = journal.mapInArrow(per_task, _ddl(figures.UNION_SCHEMA)).persist()
    return {
        name: rows.where(F.col("table") == key).select(
            *[field.name for field in figures.TABLE_FIELDS[key]]
        )
        for name, key in (
            ("windows", figures.WINDOWS),
            ("generations", figures.GENERATIONS),
            ("moves", figures.MOVES),
        )
    }


def compute_dataframe(
    spark: SparkSession,
    journal: DataFrame,
    windows: Sequence[RolloutWindow] = (),
    aliases: Mapping[str, str] | None = None,
) -> dict[str, DataFrame]:
    """The same tables as `compute`, as DataFrame operations and window functions only
    (shuffles and sorts per figure: ~4x slower at 10 million events; kept as a second
    Spark-side definition the tests compare `compute` with)."""
    journal = journal.withColumn("partitions", unpack_partitions(F.col("assigned")))
    journal = journal.repartition("group_id").persist()
    bounds = group_bounds(journal).persist()
    alias_frame = spark.createDataFrame(sorted(aliases.items()), ALIAS_SCHEMA) if aliases else None
    rows = assignment_rows(journal, alias_frame).persist()
    exploded = assigned_partitions(rows).persist()
    owners = assignments(rows, exploded).persist()
    move_rows = moves(owners).persist()
    intervals = unowned_intervals(exploded, bounds)
    wins = rollout_windows(spark, bounds, windows)
    return {
        "windows": window_figures(journal, wins, move_rows, intervals),
        "generations": generation_figures(journal, rows, owners, move_rows),
        "moves": move_rows,
    }


def report_text(windows: DataFrame, generations: DataFrame, limit: int = 40) -> str:
    """A short text report: totals, then the first `limit` group/window rows (collected:
    this table has one row per group and window, not per event)."""
    totals = windows.where(F.col("window") == ALL_WINDOW).agg(
        F.count(F.lit(1)).alias("groups"),
        F.sum("rebalances").alias("rebalances"),
        F.sum("moved").alias("moved"),
        F.sum("unowned_partition_ms").alias("unowned_ms"),
        F.max("time_to_stable_ms").alias("worst_tts"),
    )
    skew = generations.agg(
        F.count(F.lit(1)).alias("generations"),
        F.max("skew").alias("max_skew"),
        F.max("skew_ratio").alias("max_ratio"),
    )
    t = totals.first()
    s = skew.first()
    lines = ["staticfleet journal analytics (engine: pyspark)", ""]
    if t is not None:
        lines.append(
            f"groups {t['groups']}  rebalances {t['rebalances'] or 0}  moved {t['moved'] or 0}  "
            f"unowned partition-s {(t['unowned_ms'] or 0) / 1000:.3f}  "
            f"slowest time to stable {t['worst_tts']} ms"
        )
    if s is not None:
        lines.append(
            f"generations {s['generations']}  max skew {s['max_skew']}  "
            f"max max/mean {s['max_ratio'] or 0:.3f}"
        )
    lines += [
        "",
        f"{'group':<32} {'window':<16} {'rebal':>6} {'moved':>6} {'unowned_s':>10} {'tts_ms':>8}",
    ]
    for row in windows.orderBy("group_id", "start_ms", "window").limit(limit).collect():
        lines.append(
            f"{row['group_id'][:32]:<32} {row['window'][:16]:<16} {row['rebalances']:>6} "
            f"{row['moved']:>6} {row['unowned_partition_s']:>10.3f} "
            f"{'-' if row['time_to_stable_ms'] is None else row['time_to_stable_ms']:>8}"
        )
    return "\n".join(lines) + "\n"


def report_png(windows: DataFrame, path: Path, limit: int = 20) -> bool:
    """A bar chart of the `limit` groups with the most unowned partition-seconds (window
    `all`): rebalances and unowned partition-seconds. False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return False
    top = (
        windows.where(F.col("window") == ALL_WINDOW)
        .orderBy(F.col("unowned_partition_ms").desc(), "group_id")
        .limit(limit)
        .collect()
    )
    names = [row["group_id"] for row in top]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 0.3 * max(len(names), 4) + 1.5))
    left.barh(names, [row["unowned_partition_s"] for row in top], color="tab:red")
    left.set_xlabel("partition-seconds without an owner (coordinator's view)")
    left.invert_yaxis()
    right.barh(names, [row["rebalances"] for row in top], color="tab:blue")
    right.set_xlabel("rebalances")
    right.invert_yaxis()
    right.set_yticks([])
    figure.suptitle("staticfleet journal analytics (pyspark), whole journal per group")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def run(
    spark: SparkSession,
    journal_path: str,
    output: Path,
    windows: Sequence[RolloutWindow] = (),
    fmt: str = "auto",
    glob: str = "*.jsonl",
    aliases: Mapping[str, str] | None = None,
    columnar_dir: Path | None = None,
) -> dict[str, Any]:
    """Read (through the columnar journal in `columnar_dir` when given and the journal is
    JSON lines), compute, write Parquet and report.txt; returns timings and row counts."""
    clock = time.perf_counter()
    conversion = None
    from pipeline import columnar

    if columnar_dir is not None and fmt != "parquet" and not _looks_parquet(Path(journal_path)):
        conversion = columnar.ensure(spark, journal_path, columnar_dir, glob)
        journal_path, fmt = str(columnar_dir), "parquet"
    clustered = fmt in ("auto", "parquet") and columnar.is_clustered(Path(journal_path))
    saved = {key: spark.conf.get(key, None) for key in WHOLE_FILES}
    if clustered:
        # One task per file, never a file split between tasks: a group stays in one task.
        largest = max(columnar.largest_file(Path(journal_path)), 1 << 20)
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(largest))
        spark.conf.set("spark.sql.files.minPartitionNum", "1")
    try:
        tables = compute(
            spark, read_journal(spark, journal_path, fmt, glob), windows, aliases, clustered
        )
        result = _write(spark, tables, output)
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    return {"seconds": round(time.perf_counter() - clock, 3), "conversion": conversion, **result}


WHOLE_FILES = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.minPartitionNum")


def _write(spark: SparkSession, tables: Mapping[str, DataFrame], output: Path) -> dict[str, Any]:
    output.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        table.write.mode("overwrite").parquet(str(output / name))
    written = {name: spark.read.parquet(str(output / name)) for name in ("windows", "generations")}
    report = report_text(written["windows"], written["generations"])
    (output / "report.txt").write_text(report)
    report_png(written["windows"], output / "report.png")
    whole = written["windows"].where(F.col("window") == ALL_WINDOW)
    groups = whole.count()
    if whole.select("group_id").distinct().count() != groups:
        raise RuntimeError("a group's rows were split between tasks: figures are partial")
    return {
        "windows": written["windows"].count(),
        "generations": written["generations"].count(),
        "report": report,
    }


def session(master: str | None, app: str = "staticfleet-analytics") -> SparkSession:
    _local_workers_run_this_python(master)
    builder = SparkSession.builder.appName(app).config("spark.sql.session.timeZone", "UTC")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if master:
        builder = builder.master(master)
    return builder.getOrCreate()


def _local_workers_run_this_python(master: str | None) -> None:
    """In local mode the Python workers run this interpreter (it has numpy and pyarrow), not
    `python3` on PATH; a cluster's executors keep their image's PYSPARK_PYTHON."""
    if master is not None and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def small_local_session(app: str) -> SparkSession:
    """A local[2] session sized for small journals (the demo's report, the tests): two
    shuffle partitions instead of 200, no UI, quiet logs."""
    _local_workers_run_this_python("local[2]")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    args = options.analytics_parser().parse_args(argv)
    return run_args(args)


def run_args(args: argparse.Namespace) -> int:
    if code := options.report_problems("analytics", options.analytics_problems(args)):
        return code
    windows = list(args.window)
    if args.windows_file:
        windows += options.load_windows(args.windows_file)
    aliases: dict[str, str] = {}
    if args.demo_logs:
        for scenario in [args.demo_logs, *sorted(p for p in args.demo_logs.iterdir())]:
            if scenario.is_dir():
                aliases.update(demo_aliases(scenario))
    if args.aliases:
        aliases.update(json.loads(args.aliases.read_text()))
    spark = session(args.master)
    spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    try:
        result = run(
            spark,
            args.journal,
            args.output,
            windows,
            args.format,
            args.glob,
            aliases or None,
            args.columnar,
        )
    finally:
        spark.stop()
    print(result["report"], end="")
    if result["conversion"]:
        print(f"converted to Parquet in {result['conversion']['seconds']} s")
    print(f"written to {args.output} in {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
