"""Checks compare measured figures with expectations, and can fail."""

from __future__ import annotations

from typing import Any

from staticfleet.demo.checks import ScenarioOutcome, evaluate
from staticfleet.demo.metrics import ScenarioMetrics
from staticfleet.demo.ownership import Overlap


def scenario_metrics(**changes) -> ScenarioMetrics:
    values: dict[str, Any] = {
        "rebalances": 0,
        "revoked": 0,
        "released_at_shutdown": 0,
        "lost": 0,
        "moved": 0,
        "unowned_partition_s": 0.0,
        "time_to_stable_ms": 0,
        "all_owned_after_ms": 0,
        "max_owners": 1,
        "overlaps": [],
        "steps": [],
        "moves": [],
    }
    values.update(changes)
    return ScenarioMetrics(**values)


def outcome(number, metrics=None, figures=None, facts=None, error=None):
    return ScenarioOutcome(number, metrics or scenario_metrics(), figures or {}, facts or {}, error)


def by_name(checks):
    return {(c.scenario, c.name): c for c in checks}


def test_a_double_owner_fails_the_safety_check():
    overlap = Overlap(("t", 0), ("member-0#1", "member-1#1"), 10, 20)
    checks = by_name(
        evaluate(
            {
                "dynamic_restart": outcome("1"),
                "static_restart": outcome("2", scenario_metrics(max_owners=2, overlaps=[overlap])),
            },
            10_000,
        )
    )
    safety = checks[("all", "no partition ever had two owners")]
    assert not safety.ok
    assert "1, 2" in safety.measured


def test_static_restart_with_a_rebalance_fails():
    checks = by_name(
        evaluate({"static_restart": outcome("2", scenario_metrics(rebalances=1))}, 10_000)
    )
    assert not checks[("2", "static restarts cause no rebalance")].ok


def test_scale_down_checks_compare_batch_leave_with_waiting():
    leave = {"leave_results": {"member-4": "NONE", "member-5": "NONE"}}
    fast = evaluate(
        {
            "scale_down_timeout": outcome("4a", figures={"reassigned_after_ms": 9500}),
            "scale_down_batch_leave": outcome(
                "4b", figures={"reassigned_after_ms": 400}, facts=leave
            ),
        },
        10_000,
    )
    assert all(check.ok for check in fast)
    slow = by_name(
        evaluate(
            {
                "scale_down_timeout": outcome("4a", figures={"reassigned_after_ms": 6000}),
                "scale_down_batch_leave": outcome(
                    "4b", figures={"reassigned_after_ms": 7000}, facts=leave
                ),
            },
            10_000,
        )
    )
    assert not slow[("4b", "batch leave reassigns well before the session timeout")].ok
    assert not slow[("4b", "batch leave is faster than waiting")].ok


def test_crash_checks_fail_on_lost_members_or_offsets():
    figures = {
        "static_members_lost": ["member-2"],
        "offsets_lost": [{"partition": ["t", 1], "acknowledged": 20, "stored": 3}],
        "commit_regressions": [],
        "acknowledged_partitions": 4,
    }
    checks = by_name(evaluate({"coordinator_crash": outcome("5", figures=figures)}, 10_000))
    assert not checks[("5", "no static member lost")].ok
    assert not checks[("5", "no committed offset lost")].ok


def test_an_aborted_scenario_fails():
    checks = by_name(evaluate({"upgrade": outcome("3", error="did not settle")}, 10_000))
    assert not checks[("all", "every scenario ran to the end")].ok
    assert not checks[("3", "after bounce 1 all offer cooperative, Stable")].ok


def test_failover_checks_fail_on_a_rebalance_or_a_slow_standby():
    def standby(rebalances=0, after_promotion=200, reassigned=300, code=0):
        return outcome(
            "7c",
            scenario_metrics(rebalances=rebalances),
            figures={
                "reassigned_after_ms": reassigned,
                "reassigned_after_promotion_ms": after_promotion,
            },
            facts={"promote_error_code": code},
        )

    waited = outcome("7a", figures={"reassigned_after_ms": 10_000})
    name = "a promoted standby takes over without a rebalance"
    fast = "its partitions are owned again within a heartbeat interval of the promotion"
    good = by_name(
        evaluate(
            {"member_killed_standby": standby(), "member_killed_timeout": waited}, 10_000, 1_000
        )
    )
    assert all(c.ok for c in good.values())
    assert ("7c", "the standby is faster than (7a)") in good
    assert not by_name(evaluate({"member_killed_standby": standby(rebalances=1)}, 10_000, 1_000))[
        ("7c", name)
    ].ok
    assert not by_name(evaluate({"member_killed_standby": standby(code=25)}, 10_000, 1_000))[
        ("7c", name)
    ].ok
    slow = standby(after_promotion=1_500)
    assert not by_name(evaluate({"member_killed_standby": slow}, 10_000, 1_000))[("7c", fast)].ok
    late = by_name(
        evaluate(
            {"member_killed_standby": standby(reassigned=12_000), "member_killed_timeout": waited},
            10_000,
            1_000,
        )
    )
    assert not late[("7c", "the standby is faster than (7a)")].ok
