"""Bad arguments to the Spark jobs stop them with one line, before Spark starts and before
anything is written (no Py4J traceback, no division by zero, no journal of the wrong size)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import analytics, options


def staticfleet(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [Path(sys.executable).parent / "staticfleet", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--groups", "0"), ("--shards", "0"), ("--events", "-5"), ("--workers", "0")],
)
def test_generate_refuses_a_non_positive_count(tmp_path: Path, flag: str, value: str) -> None:
    output = tmp_path / "journal"
    proc = staticfleet("spark", "generate", "--output", str(output), "--events", "100", flag, value)
    assert proc.returncode == options.EXIT_USAGE
    assert proc.stderr.splitlines() == [f"spark generate: {flag} must be positive, not {value}"]
    assert not output.exists()


def test_analytics_of_a_missing_journal_is_one_line_without_spark(tmp_path: Path) -> None:
    proc = staticfleet(
        "spark", "analytics", "--journal", "/nope", "--output", str(tmp_path / "out")
    )
    assert proc.returncode == options.EXIT_USAGE
    assert proc.stderr.splitlines() == [
        "spark analytics: --journal /nope: no such file or directory, "
        "and no file matches it as a glob"
    ]
    assert not (tmp_path / "out").exists()


def test_analytics_checks_before_it_starts_a_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_spark(*_: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(analytics, "session", no_spark)
    args = options.analytics_parser().parse_args(
        ["--journal", str(tmp_path), "--output", str(tmp_path / "out"), "--shuffle-partitions", "0"]
    )
    assert analytics.run_args(args) == options.EXIT_USAGE


def test_journal_problem_accepts_a_file_a_directory_with_journals_and_a_glob(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "a directory with no *.jsonl or *.parquet file" in str(
        options.journal_problem(str(empty))
    )
    (empty / "notes.txt").write_text("x")
    assert options.journal_problem(str(empty)) is not None
    nested = tmp_path / "runs" / "a"
    nested.mkdir(parents=True)
    (nested / "journal.jsonl").write_text("{}\n")
    assert options.journal_problem(str(tmp_path / "runs")) is None
    assert options.journal_problem(str(nested / "journal.jsonl")) is None
    assert options.journal_problem(str(tmp_path / "runs" / "*" / "*.jsonl")) is None
    assert options.journal_problem(str(tmp_path / "runs" / "*.parquet")) is not None
    assert options.journal_problem("hdfs://cluster/journals") is None  # Spark's to resolve
