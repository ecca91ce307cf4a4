"""`staticfleet demo` arguments, and one full `--quick` run end to end (slow)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from staticfleet.cli import build_parser
from staticfleet.commands.demo_cmd import settings_from
from staticfleet.demo.settings import DemoSettings
from tests.conftest import QuickDemo

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def parse(*argv):
    return build_parser().parse_args(["demo", *argv])


def test_defaults_and_quick():
    assert settings_from(parse()) == DemoSettings()
    quick = settings_from(parse("--quick", "--output-dir", "x"))
    assert (quick.members, quick.partitions, quick.quick, quick.output_dir) == (
        4,
        16,
        True,
        Path("x"),
    )
    assert settings_from(parse("--quick", "--members", "5")).members == 5
    assert settings_from(parse("--session-timeout-ms", "3000")).min_session_timeout_ms == 3000


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        settings_from(parse("--members", "2"))
    with pytest.raises(ValueError):
        settings_from(parse("--members", "8", "--partitions", "4"))
    assert parse("--members", "2").handler(parse("--members", "2")) == 2


@pytest.mark.slow
@pytest.mark.timeout(900)  # the shared run (QUICK_DEMO_TIMEOUT_S), if this test is its first user
def test_quick_demo_end_to_end(quick_demo: QuickDemo) -> None:
    # The embedded half of the shared `--coordinator both` run (tests/demo/test_demo_kafka.py
    # reads its Kafka half): the same run and files as `demo --quick` alone.
    output = quick_demo.embedded
    assert quick_demo.embedded_ok, quick_demo.failure
    report = json.loads((output / "report.json").read_text())
    scenarios = {s["key"]: s for s in report["scenarios"]}
    assert list(scenarios) == [
        "dynamic_restart",
        "static_restart",
        "upgrade",
        "scale_down_timeout",
        "scale_down_batch_leave",
        "coordinator_crash",
        "scale_up_plain",
        "scale_up_expected_members",
        "member_killed_timeout",
        "member_killed_restart",
        "member_killed_standby",
    ]
    for scenario in scenarios.values():
        assert scenario["error"] is None
        assert scenario["metrics"]["max_simultaneous_owners"] == 1, scenario["key"]
        assert scenario["metrics"]["ownership_overlaps"] == []

    static = scenarios["static_restart"]["metrics"]
    assert static["rebalances"] == 0
    assert static["partitions_moved"] == 0
    # Measured, not assumed: the dynamic restarts did rebalance.
    assert scenarios["dynamic_restart"]["metrics"]["rebalances"] > 0

    session_timeout_ms = report["settings"]["session_timeout_ms"]
    batch = scenarios["scale_down_batch_leave"]["figures"]["reassigned_after_ms"]
    waited = scenarios["scale_down_timeout"]["figures"]["reassigned_after_ms"]
    assert batch is not None and waited is not None
    # Issue 3: batch leave reassigns once the members are gone (about a second on a quiet
    # machine: the demo's report, not a timed test); without it only once the session timeout
    # has run out (counted from their last heartbeat, which can be up to one heartbeat
    # interval before they stopped). So the batch leave cannot have waited for a session.
    heartbeat_ms = report["settings"]["heartbeat_interval_ms"]
    assert batch < session_timeout_ms - heartbeat_ms
    assert waited >= session_timeout_ms - heartbeat_ms
    assert batch < waited

    crash = scenarios["coordinator_crash"]["figures"]
    assert crash["static_members_lost"] == []
    assert crash["offsets_lost"] == []
    assert crash["commit_regressions"] == []
    assert crash["acknowledged_partitions"] > 0

    # Issue 15: with expected members the doubling is one rebalance (the plain run: baseline).
    assert scenarios["scale_up_expected_members"]["metrics"]["rebalances"] == 1
    assert scenarios["scale_up_plain"]["metrics"]["rebalances"] >= 1

    # Issue 15: a promoted hot standby owns the killed member's partitions within a
    # heartbeat interval of the promotion, with no rebalance, long before the session timeout.
    standby = scenarios["member_killed_standby"]
    assert standby["metrics"]["rebalances"] == 0
    assert standby["figures"]["reassigned_after_promotion_ms"] < heartbeat_ms
    expired = scenarios["member_killed_timeout"]["figures"]["reassigned_after_ms"]
    assert standby["figures"]["reassigned_after_ms"] < expired
    assert scenarios["member_killed_timeout"]["metrics"]["rebalances"] >= 1

    upgrade = scenarios["upgrade"]["facts"]
    assert upgrade["bounce_1"]["all_offer_cooperative"]
    assert upgrade["bounce_2"]["selected_protocol"] == "cooperative-sticky"
    assert report["ok"] is True
    # The journal figures came from Spark's job, and equal the demo's own Python figures
    # (the check "engines agree"; tests/spark/test_analytics_crosscheck.py reads the same run).
    assert report["journal_engine"]["name"] == "spark"
    assert report["journal_engine"]["differences"] == []
    assert any(check["name"] == "engines agree" and check["ok"] for check in report["checks"])
    # The wall time is the run as a user waits for it, the journal engine (Spark) included.
    engine_s = report["journal_engine"]["seconds"] or 0
    assert report["wall_time_s"] >= report["scenarios_s"] + engine_s

    png = (output / "timeline.png").read_bytes()
    assert png[:8] == PNG_SIGNATURE and png[12:16] == b"IHDR"
    from matplotlib.image import imread

    pixels = imread(output / "timeline.png")
    assert pixels.shape[0] > 500 and pixels.shape[1] > 500


def test_engine_and_coordinator_flags_reach_the_runner(monkeypatch):
    seen: list[tuple[str, str]] = []

    def fake_run_demo(settings, console, engine="auto", coordinator="embedded"):
        seen.append((engine, coordinator))
        return 0

    monkeypatch.setattr("staticfleet.demo.runner.run_demo", fake_run_demo)
    args = parse("--quick", "--engine", "python")
    assert args.handler(args) == 0
    args = parse("--quick", "--coordinator", "both")
    assert args.handler(args) == 0
    assert seen == [("python", "embedded"), ("auto", "both")]
    assert parse().engine == "auto"
    # `make demo` keeps its embedded default.
    assert parse().coordinator == "embedded"


def test_coordinator_embedded_is_the_embedded_half_of_both(monkeypatch, tmp_path):
    # The quick demo the end-to-end test reads is `--coordinator both` (one run for the
    # Kafka side-by-side test too): its embedded half is the run `--coordinator embedded`
    # makes, only written to <output>/embedded.
    from rich.console import Console

    from staticfleet.demo import runner

    calls: list[tuple[DemoSettings, str, str]] = []

    def fake_run_one(settings, console, engine, mode):
        calls.append((settings, engine, mode))
        return (1 if mode == "embedded" else 0), []

    monkeypatch.setattr(runner, "_run_one", fake_run_one)
    settings = DemoSettings.quick_run(output_dir=tmp_path)
    console = Console(file=None, quiet=True)
    assert runner.run_demo(settings, console, engine="spark", coordinator="embedded") == 1
    assert calls == [(settings, "spark", "embedded")]
    calls.clear()
    assert runner.run_demo(settings, console, engine="spark", coordinator="both") == 1
    assert calls == [
        (dataclasses.replace(settings, output_dir=tmp_path / "embedded"), "spark", "embedded"),
        (dataclasses.replace(settings, output_dir=tmp_path / "kafka"), "python", "kafka"),
    ]
    assert json.loads((tmp_path / "comparison.json").read_text())["embedded_ok"] is False
