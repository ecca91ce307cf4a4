"""e2e/results.py: a session's scenarios merge into results.json (0.01 s, no cluster)."""

from __future__ import annotations

from e2e.results import merged


def test_a_session_replaces_its_scenarios_and_keeps_the_others() -> None:
    previous = {
        "finished": "2026-11-28T01:15:06Z",
        "session_seconds": 763.1,
        "sources": {"1_crds": "the full run"},
        "first_build_cold": {"kubelet": 625},
        "scenarios": {
            "1_crds": {"outcome": "passed", "seconds": 1.0},
            "10_fleet_on_node": {"outcome": "failed", "seconds": 9.0, "old_figure": 1},
        },
    }
    session = {
        "finished": "2026-11-28T06:00:00Z",
        "session_seconds": 120.0,
        "first_build_cold": None,
        "scenarios": {
            "10_fleet_on_node": {"outcome": "passed", "seconds": 80.0},
            "11_faults_on_node": {"outcome": "passed", "seconds": 60.0},
        },
    }
    result = merged(previous, session)
    assert result["scenarios"] == {
        "10_fleet_on_node": {
            "outcome": "passed",
            "seconds": 80.0,
            "finished": "2026-11-28T06:00:00Z",
        },
        "11_faults_on_node": {
            "outcome": "passed",
            "seconds": 60.0,
            "finished": "2026-11-28T06:00:00Z",
        },
        "1_crds": {"outcome": "passed", "seconds": 1.0},
    }
    assert result["finished"] == "2026-11-28T06:00:00Z"
    assert result["session_seconds"] == 120.0
    assert result["sources"] == {"1_crds": "the full run"}  # kept as it was
    assert result["first_build_cold"] == {"kubelet": 625}  # not dropped for a None


def test_no_previous_file() -> None:
    result = merged(None, {"finished": "t", "scenarios": {"1_crds": {"outcome": "passed"}}})
    assert result == {
        "finished": "t",
        "scenarios": {"1_crds": {"outcome": "passed", "finished": "t"}},
    }


def test_a_removed_scenario_goes() -> None:
    previous = {"scenarios": {"1_crds": {"outcome": "passed"}, "12_gone": {"outcome": "passed"}}}
    result = merged(previous, {"finished": "t", "scenarios": {}}, known={"1_crds", "2_chart"})
    assert result["scenarios"] == {"1_crds": {"outcome": "passed"}}
