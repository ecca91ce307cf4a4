"""A scenario's figures, computed from its rows: the journal and the member event logs.

Everything is a pure function of (journal rows, member logs, partitions, time windows), so
the same figures can be recomputed — or cross-checked by the PySpark analytics — from the
JSON-lines files the demo writes next to `report.json`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator import journal_metrics as jm
from staticfleet.demo import ownership as om
from staticfleet.demo.ownership import Holding, MemberLog, Overlap, Partition
from staticfleet.demo.record import ScenarioRecord, Step

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StepMetrics:
    label: str
    start_ms: int
    end_ms: int
    rebalances: int
    moved: int
    time_to_stable_ms: int | None  # journal: to the end of the last rebalance (0: none)
    all_owned_after_ms: int | None  # member logs: until every partition had an owner again


@dataclass(frozen=True, slots=True)
class ScenarioMetrics:
    rebalances: int
    revoked: int
    released_at_shutdown: int
    lost: int
    moved: int
    unowned_partition_s: float
    time_to_stable_ms: int | None  # the slowest step
    all_owned_after_ms: int | None  # the slowest step
    max_owners: int
    overlaps: list[Overlap]
    steps: list[StepMetrics]
    moves: list[jm.Move]


def _slowest(values: Sequence[int | None]) -> int | None:
    if any(value is None for value in values):
        return None
    return max((value for value in values if value is not None), default=0)


def step_metrics(
    step: Step,
    journal: Sequence[Row],
    aliases: Mapping[str, str],
    held: Sequence[Holding],
    partitions: Sequence[Partition],
) -> StepMetrics:
    owned_again = om.all_owned_again_at(held, partitions, step.start_ms, step.end_ms)
    return StepMetrics(
        label=step.label,
        start_ms=step.start_ms,
        end_ms=step.end_ms,
        rebalances=jm.rebalance_count(journal, step.start_ms, step.end_ms),
        moved=len(jm.partition_moves(journal, aliases, step.start_ms, step.end_ms)),
        time_to_stable_ms=jm.time_to_stable_ms(journal, step.start_ms, step.end_ms),
        all_owned_after_ms=None if owned_again is None else owned_again - step.start_ms,
    )


def summarize(
    journal: Sequence[Row],
    logs: Sequence[MemberLog],
    partitions: Sequence[Partition],
    steps: Sequence[Step],
    window_start_ms: int,
    window_end_ms: int,
) -> ScenarioMetrics:
    """The figures of one scenario over its window [fleet settled, last step settled].

    The safety figures (overlaps, max owners) cover the whole logs, from the first process
    start to the last stop: a double owner is a bug whenever it happens.
    """
    aliases = om.member_aliases(logs)
    held = om.all_holdings(logs)
    # Open holdings (a process that never logged `stopped`) count as held until the last
    # moment anything was seen, or the window's end if later.
    log_end = max((int(row["ts_ms"]) for log in logs for row in log.rows), default=0)
    log_end = max(log_end, window_end_ms)
    counts = om.revocations(logs, window_start_ms, window_end_ms)
    per_step = [step_metrics(step, journal, aliases, held, partitions) for step in steps]
    moves = jm.partition_moves(journal, aliases, window_start_ms, window_end_ms)
    return ScenarioMetrics(
        rebalances=jm.rebalance_count(journal, window_start_ms, window_end_ms),
        revoked=counts.revoked,
        released_at_shutdown=counts.released,
        lost=counts.lost,
        moved=len(moves),
        unowned_partition_s=om.unowned_partition_seconds(
            held, partitions, window_start_ms, window_end_ms
        ),
        time_to_stable_ms=_slowest([s.time_to_stable_ms for s in per_step]),
        all_owned_after_ms=_slowest([s.all_owned_after_ms for s in per_step]),
        max_owners=om.max_simultaneous_owners(held, log_end),
        overlaps=om.ownership_overlaps(held, log_end),
        steps=per_step,
        moves=moves,
    )


def reassignment_figures(
    journal: Sequence[Row],
    logs: Sequence[MemberLog],
    partitions: Sequence[Partition],
    gone_ms: int,
    end_ms: int,
) -> dict[str, int | None]:
    """Scale-down: from the stopped members being gone (both processes exited) to their
    partitions having new owners — by the member logs (when consuming resumed) and by the
    journal (when the coordinator stored the new assignment)."""
    owned_again = om.all_owned_again_at(om.all_holdings(logs), partitions, gone_ms, end_ms)
    stable = jm.first_stable_after(journal, gone_ms)
    return {
        "reassigned_after_ms": None if owned_again is None else owned_again - gone_ms,
        "journal_stable_after_ms": None if stable is None else stable - gone_ms,
    }


def crash_figures(
    journal: Sequence[Row],
    logs: Sequence[MemberLog],
    members_before: Sequence[str],
    members_after: Sequence[str],
    offsets_after_restart: Mapping[Partition, int],
    kill_ms: int,
    ready_ms: int,
    window_start_ms: int,
    window_end_ms: int,
) -> dict[str, Any]:
    """Coordinator crash: static members and committed offsets that did not survive.

    An offset is lost when the store, read right after the restart, is behind a commit the
    coordinator had acknowledged before it was killed; a commit regression (a later commit
    lower than an earlier one) would show a member resuming from a lost offset.
    """
    acknowledged = om.acknowledged_offsets(logs, kill_ms)
    lost_offsets = om.offsets_lost(acknowledged, offsets_after_restart)
    departed = jm.static_departures(journal, window_start_ms, window_end_ms)
    missing = sorted(set(members_before) - set(members_after))
    return {
        "coordinator_down_ms": ready_ms - kill_ms,
        "static_members_lost": sorted(set(missing) | set(departed)),
        "acknowledged_partitions": len(acknowledged),
        "offsets_lost": [
            {"partition": list(p), "acknowledged": acked, "stored": stored}
            for p, (acked, stored) in lost_offsets.items()
        ],
        "commit_regressions": [
            {"partition": list(p), "ts_ms": ts, "previous": previous, "offset": offset}
            for p, ts, previous, offset in om.commit_regressions(logs)
        ],
    }


def record_figures(record: ScenarioRecord, partitions: Sequence[Partition]) -> dict[str, Any]:
    """The scenario-specific figures, from the facts the scenario recorded."""
    facts = record.facts
    if "gone_ms" in facts:
        figures: dict[str, Any] = reassignment_figures(
            record.journal, record.logs, partitions, int(facts["gone_ms"]), record.window_end_ms
        )
        if "promoted_ms" in facts:
            # Hot standby (7c): from the promotion call (the operator acting) to ownership.
            gone, reassigned = int(facts["gone_ms"]), figures["reassigned_after_ms"]
            figures["reassigned_after_promotion_ms"] = (
                None if reassigned is None else gone + reassigned - int(facts["promoted_ms"])
            )
        return figures
    if "kill_ms" in facts and "ready_ms" in facts:
        return crash_figures(
            record.journal,
            record.logs,
            facts.get("members_before", []),
            facts.get("members_after", []),
            {(str(t), int(p)): int(o) for t, p, o in facts.get("offsets_after_restart", [])},
            int(facts["kill_ms"]),
            int(facts["ready_ms"]),
            record.window_start_ms,
            record.window_end_ms,
        )
    return {}
