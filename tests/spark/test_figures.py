"""The numpy pass (`pipeline.figures`) against the pure-Python reference, without Spark; and
its guards: whole groups per chunk, a group met twice refused."""

from __future__ import annotations

import json
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipeline import figures, generate
from pipeline import reference as ref

pytestmark = pytest.mark.spark


def _rows(journal: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(journal.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def _packed(row: dict[str, Any]) -> str | None:
    pairs = (row.get("detail") or {}).get("partitions")
    if pairs is None:
        return None
    topics: dict[str, list[str]] = {}
    for topic, partition in pairs:
        topics.setdefault(topic, []).append(str(partition))
    return ";".join(f"{topic}:{','.join(numbers)}" for topic, numbers in topics.items())


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    names = ["seq", "ts_ms", "group_id", "kind", "generation_id", "member_id"]
    columns: dict[str, list[Any]] = {name: [row[name] for row in rows] for name in names}
    columns["group_instance_id"] = [row["group_instance_id"] for row in rows]
    columns["assigned"] = [_packed(row) for row in rows]
    return pa.table(columns)


def _windows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(
        tuple(v for k, v in row.items() if k != "unowned_partition_s") for row in table.to_pylist()
    )


def _journal(tmp_path: Path) -> list[dict[str, Any]]:
    generate.generate(tmp_path / "j", events=8_000, groups=5, shards=2, workers=1, seed=21)
    rows = _rows(tmp_path / "j")
    # A second topic, named in the middle of some assignments, and an empty assignment.
    for index, row in enumerate(rows):
        if row["kind"] == "assignment" and index % 7 == 0:
            row["detail"]["partitions"].insert(1, ["audit", index % 3])
        if row["kind"] == "assignment" and index % 11 == 0:
            row["detail"]["partitions"] = []
    return rows


def test_figures_equal_the_reference_in_any_row_order(tmp_path: Path) -> None:
    rows = _journal(tmp_path)
    start = min(row["ts_ms"] for row in rows)
    windows = [
        ref.Window("first-hour", start, start + 3_600_000),
        ref.Window("one-group", start, start + 10**9, "group-000002"),
    ]
    aliases = {rows[0]["member_id"]: "first"}
    shuffled = _table(rows[::-1])

    tables = figures.compute(shuffled, windows, aliases)

    expected = sorted(astuple(f) for f in ref.window_figures(rows, windows, aliases))
    assert _windows(tables[figures.WINDOWS]) == expected
    assert sorted(tuple(r.values()) for r in tables[figures.GENERATIONS].to_pylist()) == sorted(
        astuple(g) for g in ref.generation_figures(rows, aliases)
    )
    assert sum(w.moved for w in ref.window_figures(rows) if w.window == ref.ALL_WINDOW) == (
        tables[figures.MOVES].num_rows
    )


def test_a_task_cuts_its_rows_into_whole_groups(tmp_path: Path) -> None:
    rows = sorted(_journal(tmp_path), key=lambda r: (r["group_id"], r["seq"]))
    table = _table(rows)
    batches = table.to_batches(max_chunksize=500)

    chunks = list(figures.whole_groups(batches, chunk_rows=1_000))

    assert len(chunks) > 1
    seen = [set(chunk.column("group_id").to_pylist()) for chunk in chunks]
    assert sum(len(names) for names in seen) == len(set().union(*seen)) == 5
    assert sum(chunk.num_rows for chunk in chunks) == len(rows)
    whole = figures.union(figures.compute(table))
    cut = pa.concat_tables(
        figures.union(figures.compute(chunk)) for chunk in figures.whole_groups(batches, 1_000)
    )
    assert sorted(map(str, whole.to_pylist())) == sorted(map(str, cut.to_pylist()))


def test_a_group_met_again_after_another_is_refused(tmp_path: Path) -> None:
    rows = sorted(_journal(tmp_path), key=lambda r: (r["group_id"], r["seq"]))
    first = [r for r in rows if r["group_id"] == "group-000000"]
    other = [r for r in rows if r["group_id"] == "group-000001"]
    split = _table(first[:100] + other + first[100:]).to_batches(max_chunksize=200)

    with pytest.raises(ValueError, match="not contiguous"):
        list(figures.whole_groups(split, chunk_rows=150))
