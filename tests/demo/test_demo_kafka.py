"""`staticfleet demo --coordinator both --quick`: the scenarios on our coordinator, then on
a real Kafka broker (members on `kafka://`, records from a real topic), side by side."""

from __future__ import annotations

import json

import pytest

from tests.conftest import QuickDemo

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.mark.timeout(900)  # the shared run (QUICK_DEMO_TIMEOUT_S), if this test is its first user
def test_quick_demo_embedded_and_kafka_side_by_side(quick_demo: QuickDemo) -> None:
    # The session's one `demo --quick --coordinator both` run (tests/conftest.py): its embedded
    # half is also what tests/demo/test_demo_command.py checks end to end, with Spark's figures.
    output = quick_demo.output
    assert quick_demo.returncode == 0, quick_demo.failure
    kafka_report = json.loads((output / "kafka" / "report.json").read_text())
    assert kafka_report["ok"] is True
    assert kafka_report["coordinator"] == "kafka"
    assert kafka_report["records_produced"] > 0
    assert json.loads((output / "embedded" / "report.json").read_text())["ok"] is True
    # The members really read the broker's topic: their consumed counts are there.
    assert any(
        row.get("event") == "stopped" and row.get("consumed", 0) > 0
        for path in (output / "kafka" / "logs" / "static_restart").glob("*.jsonl")
        for row in map(json.loads, path.read_text().splitlines())
    )

    comparison = json.loads((output / "comparison.json").read_text())
    assert comparison["embedded_ok"] and comparison["kafka_ok"]
    rows = {row["key"]: row for row in comparison["scenarios"]}
    assert list(rows) == [
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
    assert rows["upgrade"]["kafka"] is None  # skipped on Kafka, with its reason
    assert "upgrade" in comparison["skipped_on_kafka"]
    for key, row in rows.items():
        for side in ("embedded", "kafka"):
            if row[side] is not None:
                assert row[side]["error"] is None, (key, side)
                # The safety check, on both sides: never two owners of one partition.
                assert row[side]["max_owners"] == 1, (key, side)
    # KIP-345 on the broker too: a static rolling restart is no rebalance and no move.
    for side in ("embedded", "kafka"):
        assert rows["static_restart"][side]["rebalances"] == 0, side
        assert rows["static_restart"][side]["moved"] == 0, side
        assert rows["dynamic_restart"][side]["rebalances"] > 0, side
        batch = rows["scale_down_batch_leave"][side]["reassigned_after_ms"]
        waited = rows["scale_down_timeout"][side]["reassigned_after_ms"]
        assert batch is not None and waited is not None and batch < waited, side
    assert "Embedded coordinator | Kafka" in quick_demo.stdout
