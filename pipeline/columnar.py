"""The columnar journal: JSON-lines journals converted once to Parquet in the narrow shape the
analytics reads (`pipeline.analytics.COLUMNAR_SCHEMA`), and reused while the JSON is unchanged.

    spark-submit pipeline/columnar.py --journal DIR_OR_FILE --output PARQUET_DIR [--glob ...]
    spark-submit pipeline/analytics.py --journal DIR --columnar PARQUET_DIR --output OUT

Parsing JSON is most of what a JSON-lines run costs (docs/spark.md, "Scale"); Parquet keeps
the numbers as numbers, the kinds and ids dictionary-encoded, and the partitions as
(topic, partition int) structs, so the analytics reads a few hundred MB instead of GBs of
text. The output directory holds `_source.json`: the JSON files' paths, sizes and
modification times; `ensure` reconverts when they differ.
"""

from __future__ import annotations

import argparse
import glob as globbing
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import SparkSession

from pipeline import analytics

SOURCE = "_source.json"
# Written with the Parquet: every group's rows sit in one file, in seq order, so the
# analytics can give each task whole files and skip its shuffle (analytics.compute).
CLUSTERED = "_clustered_by_group"


def fingerprint(journal: str, glob: str = "*.jsonl") -> list[list[Any]]:
    """[path, size, mtime_ns] of every JSON file a JSON read of `journal` would see."""
    local = Path(journal)
    if local.is_dir():
        files = sorted(p for p in local.rglob(glob) if p.is_file())
    elif local.exists():
        files = [local]
    else:
        files = sorted(Path(p) for p in globbing.glob(journal))
    return [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def convert(
    spark: SparkSession,
    journal: str,
    output: Path,
    glob: str = "*.jsonl",
    files: int | None = None,
) -> dict[str, Any]:
    """Parse the JSON lines once, write them as Parquet (the narrow schema) to `output`,
    grouped by group and ordered by seq within each file; `files` Parquet files (default:
    spark.sql.shuffle.partitions)."""
    clock = time.perf_counter()
    source = fingerprint(journal, glob)
    frame = analytics.read_journal(spark, journal, "json", glob)
    count = files or int(spark.conf.get("spark.sql.shuffle.partitions") or "16")
    (
        frame.repartition(count, "group_id")
        .sortWithinPartitions("group_id", "seq")
        .write.mode("overwrite")
        .option("compression", "zstd")
        .parquet(str(output))
    )
    (output / SOURCE).write_text(json.dumps(source))
    mark_clustered(output)
    return {
        "seconds": round(time.perf_counter() - clock, 3),
        "json_bytes": sum(size for _, size, _ in source),
        "parquet_bytes": sum(p.stat().st_size for p in output.glob("*.parquet")),
    }


def mark_clustered(directory: Path) -> None:
    (directory / CLUSTERED).write_text(json.dumps({"by": "group_id", "order": "seq"}))


def is_clustered(directory: Path) -> bool:
    """Whether `directory` is a columnar journal written clustered by group (see CLUSTERED)."""
    return directory.is_dir() and (directory / CLUSTERED).exists()


def largest_file(directory: Path) -> int:
    return max((p.stat().st_size for p in directory.glob("*.parquet")), default=0)


def is_current(journal: str, output: Path, glob: str = "*.jsonl") -> bool:
    marker = output / SOURCE
    if not marker.exists():
        return False
    stored: list[list[Any]] = json.loads(marker.read_text())
    return stored == fingerprint(journal, glob)


def ensure(
    spark: SparkSession, journal: str, output: Path, glob: str = "*.jsonl"
) -> dict[str, Any] | None:
    """Convert unless `output` already holds this journal; the conversion's figures, or None
    when the cached copy was used."""
    if is_current(journal, output, glob):
        return None
    return convert(spark, journal, output, glob)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pipeline/columnar.py",
        description="Convert a JSON-lines rebalance journal to the analytics' Parquet journal.",
    )
    p.add_argument("--journal", required=True, help="JSON-lines file, directory or glob")
    p.add_argument("--output", required=True, type=Path, help="Parquet directory to write")
    p.add_argument("--glob", default="*.jsonl", help="file names to read in a directory")
    p.add_argument("--files", type=int, default=None, help="Parquet files to write")
    p.add_argument("--master", default=None, help="Spark master (default: spark-submit's)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark = analytics.session(args.master, "staticfleet-columnar")
    try:
        result = convert(spark, args.journal, args.output, args.glob, args.files)
    finally:
        spark.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
