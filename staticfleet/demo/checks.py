"""What each scenario is expected to show, checked against what was measured.

A check never supplies a number: it compares a measured figure with an expectation and
says whether it held. The demo exits non-zero when one fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from staticfleet.demo.metrics import ScenarioMetrics


@dataclass(frozen=True, slots=True)
class Check:
    scenario: str
    name: str
    expected: str
    measured: str
    ok: bool


@dataclass(frozen=True, slots=True)
class ScenarioOutcome:
    """What the checks look at, per scenario."""

    number: str
    metrics: ScenarioMetrics
    figures: Mapping[str, Any]
    facts: Mapping[str, Any]
    error: str | None


def _ms(value: int | None) -> str:
    return "never" if value is None else f"{value} ms"


def evaluate(
    outcomes: Mapping[str, ScenarioOutcome],
    session_timeout_ms: int,
    heartbeat_interval_ms: int = 3_000,
) -> list[Check]:
    failed = {o.number: o.error for o in outcomes.values() if o.error}
    doubled = {
        o.number: o.metrics.max_owners
        for o in outcomes.values()
        if o.metrics.overlaps or o.metrics.max_owners > 1
    }
    checks: list[Check] = [
        Check(
            "all",
            "every scenario ran to the end",
            "yes",
            "; ".join(f"({n}) {e}" for n, e in failed.items()) or "yes",
            not failed,
        ),
        Check(
            "all",
            "no partition ever had two owners",
            "max 1 owner at a time",
            "max owners per scenario: "
            + ", ".join(f"{o.metrics.max_owners}" for o in outcomes.values()),
            not doubled,
        ),
    ]
    for key, outcome in outcomes.items():
        number = outcome.number
        if key == "static_restart":
            checks.append(
                Check(
                    number,
                    "static restarts cause no rebalance",
                    "0 rebalances, 0 moved",
                    f"{outcome.metrics.rebalances} rebalances, {outcome.metrics.moved} moved",
                    outcome.metrics.rebalances == 0 and outcome.metrics.moved == 0,
                )
            )
        if key == "upgrade":
            checks.extend(_upgrade_checks(number, outcome.facts))
        if key == "scale_up_expected_members":
            checks.append(
                Check(
                    number,
                    "a scale-up with expected members is one rebalance",
                    "1 rebalance",
                    f"{outcome.metrics.rebalances} rebalances, {outcome.metrics.moved} moved",
                    outcome.error is None and outcome.metrics.rebalances == 1,
                )
            )
    checks.extend(_scale_down_checks(outcomes, session_timeout_ms))
    checks.extend(_failover_checks(outcomes, heartbeat_interval_ms))
    crash = outcomes.get("coordinator_crash")
    if crash is not None:
        lost_members = crash.figures.get("static_members_lost", [])
        lost_offsets = crash.figures.get("offsets_lost", [])
        regressions = crash.figures.get("commit_regressions", [])
        checks.append(
            Check(
                crash.number,
                "no static member lost",
                "none",
                ", ".join(lost_members) or "none",
                crash.error is None and not lost_members,
            )
        )
        checks.append(
            Check(
                crash.number,
                "no committed offset lost",
                "stored >= acknowledged, no regression",
                f"{len(lost_offsets)} lost, {len(regressions)} regression(s) "
                f"over {crash.figures.get('acknowledged_partitions', 0)} partitions",
                crash.error is None and not lost_offsets and not regressions,
            )
        )
    return checks


def _upgrade_checks(number: str, facts: Mapping[str, Any]) -> list[Check]:
    bounce_1 = facts.get("bounce_1", {})
    bounce_2 = facts.get("bounce_2", {})
    return [
        Check(
            number,
            "after bounce 1 all offer cooperative, Stable",
            "all members, Stable",
            f"{len(bounce_1.get('members_offering_cooperative', []))} offering, "
            f"{bounce_1.get('group_state', '?')}",
            bool(bounce_1.get("all_offer_cooperative")) and bounce_1.get("group_state") == "Stable",
        ),
        Check(
            number,
            "after bounce 2 the group runs cooperative",
            "cooperative-sticky",
            str(bounce_2.get("selected_protocol", "not reached")),
            bounce_2.get("selected_protocol") == "cooperative-sticky",
        ),
    ]


def _scale_down_checks(
    outcomes: Mapping[str, ScenarioOutcome], session_timeout_ms: int
) -> list[Check]:
    timeout = outcomes.get("scale_down_timeout")
    batch = outcomes.get("scale_down_batch_leave")
    if batch is None:
        return []
    batch_ms = batch.figures.get("reassigned_after_ms")
    results = batch.facts.get("leave_results", {})
    checks = [
        Check(
            batch.number,
            "batch LeaveGroup accepted",
            "NONE for each member",
            ", ".join(f"{k}: {v}" for k, v in results.items()) or "not sent",
            bool(results) and all(v == "NONE" for v in results.values()),
        ),
        Check(
            batch.number,
            "batch leave reassigns well before the session timeout",
            f"< {session_timeout_ms // 2} ms",
            _ms(batch_ms),
            batch_ms is not None and batch_ms < session_timeout_ms // 2,
        ),
    ]
    if timeout is not None:
        timeout_ms = timeout.figures.get("reassigned_after_ms")
        checks.append(
            Check(
                batch.number,
                "batch leave is faster than waiting",
                f"< {_ms(timeout_ms)} (4a)",
                _ms(batch_ms),
                batch_ms is not None and timeout_ms is not None and batch_ms < timeout_ms,
            )
        )
    return checks


def _failover_checks(
    outcomes: Mapping[str, ScenarioOutcome], heartbeat_interval_ms: int
) -> list[Check]:
    """(7c) against (7a)/(7b): a promoted hot standby owns the killed member's partitions
    within a heartbeat interval of the promotion, with no rebalance, before either."""
    standby = outcomes.get("member_killed_standby")
    if standby is None:
        return []
    after_promotion = standby.figures.get("reassigned_after_promotion_ms")
    reassigned = standby.figures.get("reassigned_after_ms")
    checks = [
        Check(
            standby.number,
            "a promoted standby takes over without a rebalance",
            "0 rebalances",
            f"{standby.metrics.rebalances} rebalances, promote answered "
            f"{standby.facts.get('promote_error_code', 'nothing')}",
            standby.error is None
            and standby.metrics.rebalances == 0
            and standby.facts.get("promote_error_code") == 0,
        ),
        Check(
            standby.number,
            "its partitions are owned again within a heartbeat interval of the promotion",
            f"< {heartbeat_interval_ms} ms",
            _ms(after_promotion),
            after_promotion is not None and after_promotion < heartbeat_interval_ms,
        ),
    ]
    # Against the session timeout only: how long a plain static restart takes is the pod's
    # start time (a process start here), which the report shows beside it.
    for key in ("member_killed_timeout",):
        other = outcomes.get(key)
        if other is None:
            continue
        other_ms = other.figures.get("reassigned_after_ms")
        checks.append(
            Check(
                standby.number,
                f"the standby is faster than ({other.number})",
                f"< {_ms(other_ms)} ({other.number})",
                _ms(reassigned),
                reassigned is not None and other_ms is not None and reassigned < other_ms,
            )
        )
    return checks
