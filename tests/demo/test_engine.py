"""The demo's journal engine: selection, fallback, the disagreement check, and (marker
`spark`) the Spark path equal to the Python path on a small hand-made journal."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from coordinator import journal_metrics as jm
from coordinator.journal import JournalEvent, write_jsonl
from staticfleet.demo import engine
from staticfleet.demo.engine import JournalFigures, ScenarioWindows
from staticfleet.demo.report import engine_line

PYTHON = {"s": JournalFigures(2, 3, (0, 120))}
SCENARIOS = [ScenarioWindows("s", "g", 1_000, 2_000, ((1_000, 1_400), (1_500, 2_000)))]


def _no_pyspark(name: str) -> types.ModuleType:
    raise ModuleNotFoundError(f"No module named {name!r}")


def _fake_pyspark(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__version__ = "9.9.9"  # type: ignore[attr-defined]
    return module


def test_selection():
    assert engine.select("auto", _no_pyspark) == engine.Selection(
        "python", reason="PySpark not installed"
    )
    assert engine.select("spark", _no_pyspark).engine == "python"
    assert engine.select("python", _fake_pyspark).engine == "python"
    assert engine.select("auto", _fake_pyspark) == engine.Selection("spark", version="9.9.9")


def test_python_when_pyspark_does_not_import():
    def never(spec):
        raise AssertionError("Spark must not run")

    outcome = engine.compute(
        "auto", PYTHON, Path("."), SCENARIOS, {}, import_module=_no_pyspark, spark_runner=never
    )
    assert (outcome.engine, outcome.figures, outcome.differences) == ("python", PYTHON, [])
    assert outcome.line == "Python (PySpark not installed)"
    line = engine_line(outcome)
    assert line.startswith("numbers from the journal: Python (PySpark not installed)")
    assert "member logs" in line


def test_python_when_spark_fails_to_start():
    def broken(spec):
        raise RuntimeError("Spark failed: JAVA_HOME is not set")

    outcome = engine.compute(
        "auto", PYTHON, Path("."), SCENARIOS, {}, import_module=_fake_pyspark, spark_runner=broken
    )
    assert outcome.engine == "python" and outcome.figures == PYTHON
    assert outcome.reason is not None and "JAVA_HOME" in outcome.reason


def test_spark_figures_used_and_compared():
    rows = [
        {"group_id": "g", "window": "window", "rebalances": 2, "moved": 4, "time_to_stable_ms": 0},
        {"group_id": "g", "window": "step-0", "rebalances": 0, "moved": 0, "time_to_stable_ms": 0},
        {
            "group_id": "g",
            "window": "step-1",
            "rebalances": 2,
            "moved": 4,
            "time_to_stable_ms": 120,
        },
    ]
    outcome = engine.compute(
        "auto",
        PYTHON,
        Path("."),
        SCENARIOS,
        {},
        import_module=_fake_pyspark,
        spark_runner=lambda spec: ("9.9.9", rows),
    )
    assert outcome.engine == "spark"
    assert outcome.line == "Apache Spark 9.9.9 (pipeline/analytics.py)"
    assert outcome.figures == {"s": JournalFigures(2, 4, (0, 120))}
    assert outcome.differences == ["s: moved python 3, spark 4"]
    assert outcome.to_json()["differences"] == ["s: moved python 3, spark 4"]
    assert "Spark and Python differ" in engine_line(outcome)


def test_differences_is_empty_only_when_everything_agrees():
    assert engine.differences(PYTHON, PYTHON) == []
    assert engine.differences(PYTHON, {"s": JournalFigures(1, 3, (0, None))}) == [
        "s: rebalances python 2, spark 1",
        "s: step 1 time to Stable python 120 ms, spark None ms",
    ]
    assert engine.differences(PYTHON, {}) == ["s: only in python"]


def _row(seq, ts, kind, generation, member=None, instance=None, partitions=None):
    return {
        "seq": seq,
        "ts_ms": ts,
        "group_id": "hand",
        "kind": kind,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": instance,
        "detail": {"partitions": partitions} if partitions is not None else {},
    }


def _hand_journal():
    """Two members, then a third joins (rebalance), then one leaves (rebalance)."""
    p = [["t", i] for i in range(6)]
    return [
        _row(1, 1_000, "rebalance_started", 0),
        _row(2, 1_100, "generation_started", 1),
        _row(3, 1_100, "assignment", 1, "a", "m-0", p[:3]),
        _row(4, 1_100, "assignment", 1, "b", "m-1", p[3:]),
        _row(5, 1_150, "stable", 1),
        _row(6, 2_000, "rebalance_started", 1),
        _row(7, 2_300, "generation_started", 2),
        _row(8, 2_300, "assignment", 2, "a", "m-0", p[:2]),
        _row(9, 2_300, "assignment", 2, "b", "m-1", p[2:4]),
        _row(10, 2_300, "assignment", 2, "c", None, p[4:]),
        _row(11, 2_350, "stable", 2),
        _row(12, 3_000, "rebalance_started", 2),
        _row(13, 3_200, "generation_started", 3),
        _row(14, 3_200, "assignment", 3, "a", "m-0", p[:3]),
        _row(15, 3_200, "assignment", 3, "c", None, p[3:]),
        _row(16, 3_400, "stable", 3),
    ]


@pytest.mark.spark
@pytest.mark.timeout(600)  # a hang guard: Spark on a busy machine (parallel workers)
def test_spark_path_equals_python_on_a_hand_made_journal(tmp_path):
    rows = _hand_journal()
    logs = tmp_path / "logs"
    (logs / "hand").mkdir(parents=True)
    write_jsonl((JournalEvent.from_row(r) for r in rows), logs / "hand" / "journal.jsonl")
    (logs / "hand" / "member-0.1.jsonl").write_text('{"member_id": "a", "kind": "started"}\n')
    aliases = {"c": "member-2"}
    steps = ((1_900, 2_500), (2_900, 3_500), (3_600, 3_700))
    scenario = ScenarioWindows("hand", "hand", 1_900, 3_700, steps)
    python = {
        "hand": JournalFigures(
            jm.rebalance_count(rows, 1_900, 3_700),
            len(jm.partition_moves(rows, aliases, 1_900, 3_700)),
            tuple(jm.time_to_stable_ms(rows, s, e) for s, e in steps),
        )
    }
    assert python["hand"].rebalances == 2 and python["hand"].moved > 0
    outcome = engine.compute("spark", python, logs, [scenario], aliases)
    assert outcome.engine == "spark", outcome.reason
    assert outcome.differences == []
    assert outcome.figures == python
    assert outcome.line.startswith("Apache Spark 4.")
