"""Which engine computes the demo's journal-derived figures: the PySpark analytics job
(`pipeline/analytics.py`) when PySpark is importable, else the demo's own Python functions.

The journal-derived figures are, per scenario, rebalances and moved partitions over the
window, and per step the time to Stable. The member-log figures (partition-seconds without
an owner, revocations, the safety check) are always Python: the Spark job reads journals
only. When Spark runs, its numbers are compared with the Python ones; any difference is
listed and fails the check "engines agree".

Spark runs in a child process (`python -m staticfleet.demo.engine SPEC RESULT`, local[2]),
so its JVM and console output stay out of the demo's; a child that fails or times out
means the Python numbers are used, and the report says why.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

Engine = Literal["auto", "spark", "python"]
ENGINES: tuple[str, ...] = ("auto", "spark", "python")
SPARK_TIMEOUT_S = 300.0
ANALYTICS = "pipeline/analytics.py"
MEMBER_LOG_NOTE = (
    "partition-s without owner, all owned and max owners: Python, from the member logs"
)


@dataclass(frozen=True, slots=True)
class JournalFigures:
    """One scenario's journal-derived figures."""

    rebalances: int
    moved: int
    steps_time_to_stable_ms: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class ScenarioWindows:
    """What the Spark job needs to know about one scenario."""

    key: str
    group_id: str
    start_ms: int
    end_ms: int
    steps: tuple[tuple[int, int], ...]  # (start_ms, end_ms) per step


@dataclass(frozen=True, slots=True)
class Selection:
    engine: Literal["spark", "python"]
    version: str | None = None
    reason: str | None = None  # why Python, when Spark was not used


@dataclass(frozen=True, slots=True)
class EngineOutcome:
    engine: Literal["spark", "python"]
    version: str | None
    reason: str | None
    figures: dict[str, JournalFigures]  # the figures the report shows, per scenario key
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def line(self) -> str:
        if self.engine == "spark":
            return f"Apache Spark {self.version} ({ANALYTICS})"
        return f"Python ({self.reason})" if self.reason else "Python"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.engine,
            "version": self.version,
            "description": self.line,
            "python_reason": self.reason,
            "journal_figures": ["rebalances", "partitions_moved", "steps.time_to_stable_ms"],
            "member_log_figures": "python",
            "differences": list(self.differences),
            "seconds": round(self.seconds, 1),
        }


def select(
    requested: Engine,
    import_module: Callable[[str], ModuleType] = importlib.import_module,
) -> Selection:
    """Spark when asked (auto or spark) and `pyspark` imports; otherwise Python with why."""
    if requested == "python":
        return Selection("python", reason="--engine python")
    try:
        pyspark = import_module("pyspark")
    except ImportError:
        return Selection("python", reason="PySpark not installed")
    return Selection("spark", version=str(getattr(pyspark, "__version__", "?")))


def differences(
    python: Mapping[str, JournalFigures], spark: Mapping[str, JournalFigures]
) -> list[str]:
    """Every figure where Spark and Python disagree, one line each (empty: they agree)."""
    found: list[str] = []
    for key in sorted(set(python) | set(spark)):
        p, s = python.get(key), spark.get(key)
        if p is None or s is None:
            found.append(f"{key}: only in {'spark' if p is None else 'python'}")
            continue
        if p.rebalances != s.rebalances:
            found.append(f"{key}: rebalances python {p.rebalances}, spark {s.rebalances}")
        if p.moved != s.moved:
            found.append(f"{key}: moved python {p.moved}, spark {s.moved}")
        if len(p.steps_time_to_stable_ms) != len(s.steps_time_to_stable_ms):
            found.append(
                f"{key}: steps python {len(p.steps_time_to_stable_ms)}, "
                f"spark {len(s.steps_time_to_stable_ms)}"
            )
            continue
        for index, (a, b) in enumerate(
            zip(p.steps_time_to_stable_ms, s.steps_time_to_stable_ms, strict=True)
        ):
            if a != b:
                found.append(f"{key}: step {index} time to Stable python {a} ms, spark {b} ms")
    return found


def spark_spec(
    logs_dir: Path, scenarios: Sequence[ScenarioWindows], aliases: Mapping[str, str]
) -> dict[str, Any]:
    windows: list[dict[str, Any]] = []
    for scenario in scenarios:
        windows.append(_window("window", scenario.start_ms, scenario.end_ms, scenario.group_id))
        for index, (start, end) in enumerate(scenario.steps):
            windows.append(_window(f"step-{index}", start, end, scenario.group_id))
    return {"logs_dir": str(logs_dir), "aliases": dict(aliases), "windows": windows}


def _window(label: str, start_ms: int, end_ms: int, group_id: str) -> dict[str, Any]:
    return {"label": label, "start_ms": start_ms, "end_ms": end_ms, "group_id": group_id}


def spark_figures(
    rows: Sequence[Mapping[str, Any]], scenarios: Sequence[ScenarioWindows]
) -> dict[str, JournalFigures]:
    """The Spark job's `windows` rows, back to per-scenario figures. A group with no
    journal rows has no Spark rows: nothing happened, as the Python functions say."""
    got = {(str(r["group_id"]), str(r["window"])): r for r in rows}
    empty: Mapping[str, Any] = {"rebalances": 0, "moved": 0, "time_to_stable_ms": 0}
    result: dict[str, JournalFigures] = {}
    for scenario in scenarios:
        whole = got.get((scenario.group_id, "window"), empty)
        steps = tuple(
            _optional_int(got.get((scenario.group_id, f"step-{i}"), empty)["time_to_stable_ms"])
            for i in range(len(scenario.steps))
        )
        result[scenario.key] = JournalFigures(int(whole["rebalances"]), int(whole["moved"]), steps)
    return result


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def run_spark(
    spec: Mapping[str, Any], timeout_s: float = SPARK_TIMEOUT_S
) -> tuple[str, list[dict[str, Any]]]:
    """The Spark job in a child process; (pyspark version, windows rows). Raises
    RuntimeError when the child fails (its last stderr line says why)."""
    with tempfile.TemporaryDirectory(prefix="staticfleet-spark-") as scratch:
        spec_path = Path(scratch) / "spec.json"
        result_path = Path(scratch) / "result.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        try:
            done = subprocess.run(
                [sys.executable, "-m", "staticfleet.demo.engine", str(spec_path), str(result_path)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise RuntimeError(f"Spark did not finish within {timeout_s:.0f} s") from error
        if done.returncode != 0 or not result_path.exists():
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            last = lines[-1].strip() if lines else f"exit code {done.returncode}"
            raise RuntimeError(f"Spark failed: {last[:200]}")
        result = json.loads(result_path.read_text(encoding="utf-8"))
    return str(result["version"]), list(result["windows"])


def compute(
    requested: Engine,
    python: Mapping[str, JournalFigures],
    logs_dir: Path,
    scenarios: Sequence[ScenarioWindows],
    aliases: Mapping[str, str],
    *,
    import_module: Callable[[str], ModuleType] = importlib.import_module,
    spark_runner: Callable[[Mapping[str, Any]], tuple[str, list[dict[str, Any]]]] = run_spark,
) -> EngineOutcome:
    """The figures the report shows, and which engine produced them. Spark failing (or not
    installed) falls back to the Python figures and says so; it never fails the demo."""
    clock = time.monotonic()
    chosen = select(requested, import_module)
    if chosen.engine == "python":
        return EngineOutcome("python", None, chosen.reason, dict(python))
    try:
        version, rows = spark_runner(spark_spec(logs_dir, scenarios, aliases))
    except (RuntimeError, OSError, ValueError, KeyError) as error:
        return EngineOutcome(
            "python",
            None,
            f"Spark not used: {error}",
            dict(python),
            seconds=time.monotonic() - clock,
        )
    figures = spark_figures(rows, scenarios)
    return EngineOutcome(
        "spark",
        version,
        None,
        figures,
        differences(python, figures),
        seconds=time.monotonic() - clock,
    )


def _child(spec_path: Path, result_path: Path) -> int:
    """The child process: run the analytics job's tables in local[2] and write the
    per-window rows as JSON (a few dozen rows)."""
    import pyspark

    from pipeline import analytics
    from pipeline.reference import Window

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    spark = analytics.small_local_session("staticfleet-demo-report")
    try:
        windows = [
            Window(w["label"], int(w["start_ms"]), int(w["end_ms"]), w["group_id"])
            for w in spec["windows"]
        ]
        journal = analytics.read_journal(spark, spec["logs_dir"], glob="journal.jsonl")
        tables = analytics.compute(spark, journal, windows, spec["aliases"] or None)
        rows = [
            {
                "group_id": row["group_id"],
                "window": row["window"],
                "rebalances": row["rebalances"],
                "moved": row["moved"],
                "time_to_stable_ms": row["time_to_stable_ms"],
            }
            for row in tables["windows"].collect()
        ]
    finally:
        spark.stop()
    result_path.write_text(
        json.dumps({"version": pyspark.__version__, "windows": rows}), encoding="utf-8"
    )
    return 0


if __name__ == "__main__":
    sys.exit(_child(Path(sys.argv[1]), Path(sys.argv[2])))
