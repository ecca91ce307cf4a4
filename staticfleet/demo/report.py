"""The figures, for people (rich tables) and for programs (`report.json`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from staticfleet.demo.checks import Check
from staticfleet.demo.engine import MEMBER_LOG_NOTE, EngineOutcome
from staticfleet.demo.metrics import ScenarioMetrics
from staticfleet.demo.record import ScenarioRecord


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    record: ScenarioRecord
    metrics: ScenarioMetrics
    figures: Mapping[str, Any]


def _seconds(ms: int | None) -> str:
    return "never" if ms is None else f"{ms / 1000:.2f} s"


def scenario_table(results: Sequence[ScenarioResult]) -> Table:
    table = Table(title="Measured per scenario (journal + member event logs)", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("scenario")
    table.add_column("rebalances", justify="right")
    table.add_column("revoked", justify="right")
    table.add_column("released\nat stop", justify="right")
    table.add_column("moved", justify="right")
    table.add_column("partition-s\nno owner", justify="right")
    table.add_column("to Stable\n(slowest step)", justify="right")
    table.add_column("all owned\n(slowest step)", justify="right")
    table.add_column("max\nowners", justify="right")
    for result in results:
        m = result.metrics
        table.add_row(
            result.record.spec.number,
            result.record.spec.title + (" [red](failed)[/red]" if result.record.error else ""),
            str(m.rebalances),
            str(m.revoked),
            str(m.released_at_shutdown),
            str(m.moved),
            f"{m.unowned_partition_s:.1f}",
            _seconds(m.time_to_stable_ms),
            _seconds(m.all_owned_after_ms),
            str(m.max_owners) if m.max_owners <= 1 else f"[red]{m.max_owners}[/red]",
        )
    return table


def engine_line(engine: EngineOutcome) -> str:
    """Which engine produced the journal-derived columns (rebalances, moved, to Stable)."""
    line = f"numbers from the journal: {engine.line}"
    if engine.engine == "spark":
        line += f" in {engine.seconds:.0f} s"
    line += f"; {MEMBER_LOG_NOTE}"
    for difference in engine.differences:
        line += f"\n[red]Spark and Python differ: {difference}[/red]"
    return line


def scenario_notes(results: Sequence[ScenarioResult]) -> list[str]:
    """The scenario-specific figures, one line each."""
    notes = []
    for result in results:
        number = result.record.spec.number
        figures, facts = result.figures, result.record.facts
        if "reassigned_after_ms" in figures:
            # A journal that shows no new generation is a takeover without a rebalance.
            stable = figures["journal_stable_after_ms"]
            notes.append(
                f"({number}) members gone -> partitions reassigned: "
                f"{_seconds(figures['reassigned_after_ms'])} by the member logs, "
                + (
                    f"{_seconds(stable)} by the journal"
                    if stable is not None
                    else "no rebalance in the journal"
                )
            )
        if "reassigned_after_promotion_ms" in figures:
            notes.append(
                f"({number}) standby promoted -> its partitions owned: "
                f"{_seconds(figures['reassigned_after_promotion_ms'])}"
            )
        if "coordinator_down_ms" in figures:
            lost = figures["static_members_lost"]
            notes.append(
                f"({number}) coordinator down {_seconds(figures['coordinator_down_ms'])}; "
                f"static members lost: {', '.join(lost) or 'none'}; committed offsets lost: "
                f"{len(figures['offsets_lost'])} of {figures['acknowledged_partitions']} "
                f"partitions; commit regressions: {len(figures['commit_regressions'])}"
            )
        for bounce in (1, 2):
            state = facts.get(f"bounce_{bounce}")
            if state:
                notes.append(
                    f"({number}) after bounce {bounce}: protocol {state['selected_protocol']}, "
                    f"{len(state['members_offering_cooperative'])} member(s) offering "
                    f"cooperative-sticky, group {state['group_state']}, leader bounced last: "
                    f"{state['leader_bounced_last']}"
                )
        if result.record.error:
            notes.append(f"({number}) [red]stopped early: {result.record.error}[/red]")
    return notes


def checks_table(checks: Sequence[Check]) -> Table:
    table = Table(title="Checks (expected vs measured)", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("check")
    table.add_column("expected")
    table.add_column("measured")
    table.add_column("", justify="center")
    for check in checks:
        table.add_row(
            check.scenario,
            check.name,
            check.expected,
            check.measured,
            "[green]ok[/green]" if check.ok else "[red]FAILED[/red]",
        )
    return table


def print_report(
    console: Console,
    results: Sequence[ScenarioResult],
    checks: Sequence[Check],
    wall_time_s: float,
    output_dir: Path,
    engine: EngineOutcome | None = None,
) -> None:
    console.print(scenario_table(results))
    if engine is not None:
        console.print(engine_line(engine))
    for note in scenario_notes(results):
        console.print(note)
    console.print()
    console.print(checks_table(checks))
    failed = sum(1 for check in checks if not check.ok)
    verdict = (
        "[green]all checks passed[/green]" if not failed else f"[red]{failed} check(s) failed[/red]"
    )
    console.print(
        f"{verdict} — wall time {wall_time_s:.0f} s — "
        f"report: {output_dir / 'report.json'}, timeline: {output_dir / 'timeline.png'}"
    )


def scenario_json(result: ScenarioResult) -> dict[str, Any]:
    record, m = result.record, result.metrics
    return {
        "key": record.spec.key,
        "number": record.spec.number,
        "title": record.spec.title,
        "group_id": record.spec.group_id,
        "static": record.static,
        "protocol": record.protocol,
        "error": record.error,
        "window": {
            "fleet_start_ms": record.fleet_start_ms,
            "start_ms": record.window_start_ms,
            "end_ms": record.window_end_ms,
        },
        "metrics": {
            "rebalances": m.rebalances,
            "partitions_revoked": m.revoked,
            "partitions_released_at_shutdown": m.released_at_shutdown,
            "partitions_lost": m.lost,
            "partitions_moved": m.moved,
            "unowned_partition_seconds": round(m.unowned_partition_s, 3),
            "time_to_stable_ms": m.time_to_stable_ms,
            "all_owned_after_ms": m.all_owned_after_ms,
            "max_simultaneous_owners": m.max_owners,
            "ownership_overlaps": [
                {
                    "partition": list(o.partition),
                    "processes": list(o.processes),
                    "start_ms": o.start_ms,
                    "end_ms": o.end_ms,
                }
                for o in m.overlaps
            ],
        },
        "figures": dict(result.figures),
        "facts": record.facts,
        "steps": [asdict(step) for step in m.steps],
        "moves": [
            {
                "partition": list(move.partition),
                "from": move.from_owner,
                "to": move.to_owner,
                "generation_id": move.generation_id,
                "ts_ms": move.ts_ms,
            }
            for move in m.moves
        ],
        "markers": [asdict(marker) for marker in record.markers],
    }


def write_json(
    path: Path,
    *,
    settings: Mapping[str, Any],
    results: Sequence[ScenarioResult],
    checks: Sequence[Check],
    wall_time_s: float,
    started_at: str,
    extra: Mapping[str, Any],
) -> None:
    document = {
        "started_at": started_at,
        "wall_time_s": round(wall_time_s, 1),
        "settings": dict(settings),
        **extra,
        "scenarios": [scenario_json(result) for result in results],
        "checks": [asdict(check) for check in checks],
        "ok": all(check.ok for check in checks),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")


# The figures compared side by side, embedded coordinator vs Kafka broker.
COMPARED = ("rebalances", "moved", "unowned_partition_s", "reassigned_after_ms")


def _compared(result: ScenarioResult) -> dict[str, Any]:
    m = result.metrics
    return {
        "rebalances": m.rebalances,
        "moved": m.moved,
        "unowned_partition_s": round(m.unowned_partition_s, 1),
        "reassigned_after_ms": result.figures.get("reassigned_after_ms"),
        "max_owners": m.max_owners,
        "error": result.record.error,
    }


def comparison_rows(
    embedded: Sequence[ScenarioResult], kafka: Sequence[ScenarioResult]
) -> list[dict[str, Any]]:
    """One row per scenario: its figures on each side (None where it did not run)."""
    on_kafka = {r.record.spec.key: r for r in kafka}
    return [
        {
            "key": r.record.spec.key,
            "number": r.record.spec.number,
            "title": r.record.spec.title,
            "embedded": _compared(r),
            "kafka": (
                _compared(on_kafka[r.record.spec.key]) if r.record.spec.key in on_kafka else None
            ),
        }
        for r in embedded
    ]


def comparison_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(
        title="Embedded coordinator | Kafka 4.4 broker (same scenarios, same members)",
        title_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column("scenario")
    for name in ("rebalances", "moved", "partition-s\nno owner", "batch-leave /\ntimeout reassign"):
        table.add_column(name, justify="right")

    def cell(row: Mapping[str, Any], key: str) -> str:
        sides = []
        for side in ("embedded", "kafka"):
            figures = row[side]
            if figures is None:
                sides.append("skipped")
                continue
            value = figures[key]
            if key == "reassigned_after_ms":
                sides.append("-" if value is None else f"{value / 1000:.2f} s")
            elif key == "unowned_partition_s":
                sides.append(f"{value:.1f}")
            else:
                sides.append(str(value))
        return " | ".join(sides)

    for row in rows:
        failed = any(row[side] and row[side]["error"] for side in ("embedded", "kafka"))
        table.add_row(
            row["number"],
            row["title"] + (" [red](failed)[/red]" if failed else ""),
            *(cell(row, key) for key in COMPARED),
        )
    return table


def print_comparison(
    console: Console, rows: Sequence[Mapping[str, Any]], skipped: Mapping[str, str]
) -> None:
    console.print()
    console.print(comparison_table(rows))
    console.print(
        "embedded: figures from the coordinator's journal and the member logs; Kafka: from "
        "the member logs (generations as the broker's JoinGroup answered them) and the "
        "broker's DescribeGroups"
    )
    for key, reason in skipped.items():
        console.print(f"skipped on Kafka ({key}): {reason}")
