"""One demo run, end to end: coordinator up, the scenarios one after another with a
progress display, then the figures, the checks, `report.json` and the timeline PNG."""

from __future__ import annotations

import dataclasses
import datetime
import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from coordinator.journal import JournalEvent, write_jsonl
from staticfleet.demo import checks as demo_checks
from staticfleet.demo import engine as journal_engine
from staticfleet.demo import metrics, report, timeline
from staticfleet.demo import ownership as om
from staticfleet.demo.admin import AdminClient, AdminError
from staticfleet.demo.fleet import CoordinatorProcess, FleetError, now_ms
from staticfleet.demo.kafka_mode import KafkaAdmin, KafkaCoordinator, fill_topic
from staticfleet.demo.log_journal import journal_from_logs
from staticfleet.demo.ownership import Partition
from staticfleet.demo.record import ScenarioRecord, ScenarioSpec
from staticfleet.demo.scenarios import (
    KAFKA_SKIPPED,
    DemoContext,
    ScenarioPlan,
    ScenarioRun,
    kafka_plans,
    plans,
)
from staticfleet.demo.settings import DemoSettings
from staticfleet.demo.settle import SettleTimeout

LOGS_DIR = "logs"
# Only a logs directory carrying this marker is ours to wipe at the start of a run.
LOGS_MARKER = ".staticfleet-demo"


class DemoError(RuntimeError):
    """The demo could not run at all (as opposed to a scenario failing a check)."""


class ProgressNarrator:
    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress = progress
        self._task = task

    def status(self, text: str) -> None:
        self._progress.update(self._task, description=text)

    def advance(self) -> None:
        self._progress.advance(self._task)


def prepare_logs_dir(output_dir: Path) -> Path:
    """A fresh `logs/` (member logs are appended to, so old ones must not linger)."""
    logs = output_dir / LOGS_DIR
    if logs.exists():
        if not (logs / LOGS_MARKER).exists():
            raise DemoError(
                f"{logs} exists and was not made by the demo; choose another --output-dir"
            )
        shutil.rmtree(logs)
    logs.mkdir(parents=True)
    (logs / LOGS_MARKER).write_text("written by staticfleet demo; wiped on the next run\n")
    return logs


def specs(run_id: str, scenario_plans: Sequence[ScenarioPlan]) -> list[ScenarioSpec]:
    # A fresh group per scenario, each with its own member token: numbers cannot mix.
    return [
        ScenarioSpec(
            key=plan.key,
            number=plan.number,
            title=plan.title,
            group_id=f"demo-{run_id}-{plan.number}",
            token=secrets.token_urlsafe(18),
        )
        for plan in scenario_plans
    ]


Mode = Literal["embedded", "kafka", "both"]
# Records produced into every partition of the Kafka topic before the scenarios: enough
# that the members are still reading during the whole run at the demo's pace.
KAFKA_RECORDS_PER_PARTITION = 2_000


def run_demo(
    settings: DemoSettings,
    console: Console,
    engine: journal_engine.Engine = "auto",
    coordinator: Mode = "embedded",
) -> int:
    """Returns 0 when every check held, 1 otherwise. `engine`: what computes the
    journal-derived figures (staticfleet.demo.engine). `coordinator`: where the group
    lives: ours (embedded), a real Kafka broker, or both one after the other, compared."""
    if coordinator == "embedded":
        return _run_one(settings, console, engine, "embedded")[0]
    if coordinator == "kafka":
        # The journal figures come from the member logs on Kafka: Python computes them.
        return _run_one(settings, console, "python", "kafka")[0]
    out = settings.output_dir
    console.print("[bold]embedded coordinator[/bold]")
    embedded = _run_one(
        dataclasses.replace(settings, output_dir=out / "embedded"), console, engine, "embedded"
    )
    console.print("[bold]Kafka broker[/bold]")
    kafka = _run_one(
        dataclasses.replace(settings, output_dir=out / "kafka"), console, "python", "kafka"
    )
    rows = report.comparison_rows(embedded[1], kafka[1])
    report.print_comparison(console, rows, KAFKA_SKIPPED)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(
        json.dumps(
            {
                "embedded_ok": embedded[0] == 0,
                "kafka_ok": kafka[0] == 0,
                "skipped_on_kafka": dict(KAFKA_SKIPPED),
                "scenarios": rows,
            },
            indent=2,
        )
        + "\n"
    )
    return max(embedded[0], kafka[0])


def _run_one(
    settings: DemoSettings,
    console: Console,
    engine: journal_engine.Engine,
    mode: Literal["embedded", "kafka"],
) -> tuple[int, list[report.ScenarioResult]]:
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    output_dir = settings.output_dir
    logs_dir = prepare_logs_dir(output_dir)
    run_id = secrets.token_hex(3)
    scenario_plans = [
        plan
        for plan in (kafka_plans() if mode == "kafka" else plans())
        if settings.runs(plan.number)
    ]
    scenario_specs = specs(run_id, scenario_plans)
    partitions: list[Partition] = [(settings.topic, p) for p in range(settings.partitions)]
    records: list[ScenarioRecord] = []
    extra: dict[str, object] = {"coordinator": mode}

    with tempfile.TemporaryDirectory(prefix="staticfleet-demo-") as scratch:
        coordinator: CoordinatorProcess | KafkaCoordinator
        if mode == "kafka":
            coordinator = KafkaCoordinator(Path(scratch) / "kafka", settings.kafka_listener)
        else:
            coordinator = CoordinatorProcess(
                settings=settings,
                db_path=Path(scratch) / "coordinator.db",
                run_dir=Path(scratch),
                log_path=logs_dir / "coordinator.log",
                admin_token=secrets.token_urlsafe(24),
                member_tokens={spec.group_id: spec.token for spec in scenario_specs},
            )
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        total = sum(plan.steps(settings) for plan in scenario_plans)
        current: ScenarioRun | None = None
        admin: AdminClient | KafkaAdmin | None = None
        try:
            with progress:
                task = progress.add_task(f"starting the {mode} coordinator", total=total)
                coordinator.start()
                source_url: str | None = None
                if isinstance(coordinator, KafkaCoordinator):
                    broker = coordinator.broker
                    progress.update(task, description="creating and filling the topic")
                    broker.create_topic(settings.topic, settings.partitions)
                    extra["records_produced"] = fill_topic(
                        broker.bootstrap,
                        settings.topic,
                        settings.partitions,
                        KAFKA_RECORDS_PER_PARTITION,
                    )
                    admin = KafkaAdmin(coordinator.member_bootstrap, coordinator.client_settings)
                    source_url = coordinator.url
                else:
                    admin = AdminClient(coordinator.url, coordinator.admin_token)
                admin.set_topics({settings.topic: settings.partitions})
                context = DemoContext(
                    settings=settings,
                    coordinator=coordinator,
                    admin=admin,
                    partitions=partitions,
                    log_root=logs_dir,
                    source_epoch_ms=now_ms(),
                    narrator=ProgressNarrator(progress, task),
                    source_url=source_url,
                    kafka_config=(
                        coordinator.client_config
                        if isinstance(coordinator, KafkaCoordinator)
                        else None
                    ),
                )
                for plan, spec in zip(scenario_plans, scenario_specs, strict=True):
                    current = ScenarioRun(context, spec, static=plan.static, protocol=plan.protocol)
                    try:
                        plan.body(current)
                        record = current.finish()
                    except (SettleTimeout, FleetError, AdminError, RuntimeError) as error:
                        record = current.abort(error)
                    current = None
                    if mode == "kafka":
                        # No journal on a broker: the members' logs stand in for it.
                        record.journal = journal_from_logs(spec.group_id, record.logs)
                    records.append(record)
                    progress.console.print(_one_line(record, partitions))
                progress.update(task, description="done")
        finally:
            if current is not None:  # interrupted mid-scenario
                current.fleet.stop_all()
            if isinstance(admin, KafkaAdmin):
                admin.close()
            coordinator.stop()
        extra["coordinator_restarts"] = coordinator.restarts

    if mode == "kafka":
        extra["skipped"] = dict(KAFKA_SKIPPED)
        for key, reason in KAFKA_SKIPPED.items():
            console.print(f"[yellow]skipped on Kafka[/yellow] ({key}): {reason}")
    return _conclude(
        console,
        settings,
        records,
        partitions,
        logs_dir,
        started=started,
        started_at=started_at,
        extra={
            **extra,
            "logs_dir": str(logs_dir),
            "scenarios_s": round(time.monotonic() - started, 1),
        },
        engine=engine,
    )


def _one_line(record: ScenarioRecord, partitions: Sequence[Partition]) -> str:
    m = _metrics(record, partitions)
    mark = "[red]x[/red]" if record.error else "[green]✓[/green]"
    return (
        f"{mark} ({record.spec.number}) {record.spec.title}: {m.rebalances} rebalance(s), "
        f"{m.moved} moved, {m.unowned_partition_s:.1f} partition-s without owner"
        + (f" — [red]{record.error}[/red]" if record.error else "")
    )


def _metrics(record: ScenarioRecord, partitions: Sequence[Partition]) -> metrics.ScenarioMetrics:
    return metrics.summarize(
        record.journal,
        record.logs,
        partitions,
        record.steps,
        record.window_start_ms,
        record.window_end_ms,
    )


def _conclude(
    console: Console,
    settings: DemoSettings,
    records: Sequence[ScenarioRecord],
    partitions: Sequence[Partition],
    logs_dir: Path,
    *,
    started: float,
    started_at: str,
    extra: dict[str, object],
    engine: journal_engine.Engine = "auto",
) -> tuple[int, list[report.ScenarioResult]]:
    results = [
        report.ScenarioResult(
            record, _metrics(record, partitions), metrics.record_figures(record, partitions)
        )
        for record in records
    ]
    for record in records:
        # The journal next to the member logs: everything needed to recompute the figures.
        write_jsonl(
            (JournalEvent.from_row(row) for row in record.journal),
            logs_dir / record.spec.key / "journal.jsonl",
        )
    if engine != "python":
        console.print("computing the journal figures with the analytics engine ...")
    engine_outcome = journal_engine.compute(
        engine,
        {r.record.spec.key: _journal_figures(r.metrics) for r in results},
        logs_dir,
        [_scenario_windows(r.record) for r in results],
        {k: v for r in results for k, v in om.member_aliases(r.record.logs).items()},
    )
    if extra.get("coordinator") == "kafka":
        engine_outcome = dataclasses.replace(
            engine_outcome,
            reason="on Kafka: a journal rebuilt from the member logs, demo/log_journal.py",
        )
    results = [_with_engine_figures(r, engine_outcome) for r in results]
    outcomes = {
        r.record.spec.key: demo_checks.ScenarioOutcome(
            r.record.spec.number, r.metrics, r.figures, r.record.facts, r.record.error
        )
        for r in results
    }
    checks = demo_checks.evaluate(
        outcomes, settings.session_timeout_ms, settings.heartbeat_interval_ms
    )
    if engine_outcome.engine == "spark":
        checks.append(_engines_agree(engine_outcome))
    timeline.render(
        [
            timeline.TimelinePanel(
                title=(
                    f"({r.record.spec.number}) {r.record.spec.title} — {r.metrics.rebalances} "
                    f"rebalance(s), {r.metrics.moved} moved, "
                    f"{r.metrics.unowned_partition_s:.1f} partition-s without owner"
                ),
                logs=r.record.logs,
                partitions=partitions,
                fleet_start_ms=r.record.fleet_start_ms,
                window_start_ms=r.record.window_start_ms,
                window_end_ms=r.record.window_end_ms,
                steps=r.record.steps,
                markers=r.record.markers,
            )
            for r in results
        ],
        settings.output_dir / "timeline.png",
    )
    # The whole run as a user waits for it: scenarios, the journal engine (Spark's JVM and
    # job) and the timeline.
    wall_time_s = time.monotonic() - started
    report.write_json(
        settings.output_dir / "report.json",
        settings={
            k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(settings).items()
        },
        results=results,
        checks=checks,
        wall_time_s=wall_time_s,
        started_at=started_at,
        extra={**extra, "journal_engine": engine_outcome.to_json()},
    )
    report.print_report(
        console, results, checks, wall_time_s, settings.output_dir, engine=engine_outcome
    )
    return (0 if all(check.ok for check in checks) else 1), results


def _journal_figures(m: metrics.ScenarioMetrics) -> journal_engine.JournalFigures:
    return journal_engine.JournalFigures(
        m.rebalances, m.moved, tuple(step.time_to_stable_ms for step in m.steps)
    )


def _scenario_windows(record: ScenarioRecord) -> journal_engine.ScenarioWindows:
    return journal_engine.ScenarioWindows(
        key=record.spec.key,
        group_id=record.spec.group_id,
        start_ms=record.window_start_ms,
        end_ms=record.window_end_ms,
        steps=tuple((step.start_ms, step.end_ms) for step in record.steps),
    )


def _with_engine_figures(
    result: report.ScenarioResult, outcome: journal_engine.EngineOutcome
) -> report.ScenarioResult:
    """The scenario's metrics with the journal-derived figures of the chosen engine."""
    figures = outcome.figures.get(result.record.spec.key)
    m = result.metrics
    if figures is None or len(figures.steps_time_to_stable_ms) != len(m.steps):
        return result
    steps = [
        dataclasses.replace(step, time_to_stable_ms=tts)
        for step, tts in zip(m.steps, figures.steps_time_to_stable_ms, strict=True)
    ]
    tts_values = [step.time_to_stable_ms for step in steps]
    slowest = (
        None
        if any(value is None for value in tts_values)
        else max((value for value in tts_values if value is not None), default=0)
    )
    return dataclasses.replace(
        result,
        metrics=dataclasses.replace(
            m,
            rebalances=figures.rebalances,
            moved=figures.moved,
            time_to_stable_ms=slowest,
            steps=steps,
        ),
    )


def _engines_agree(outcome: journal_engine.EngineOutcome) -> demo_checks.Check:
    return demo_checks.Check(
        "all",
        "engines agree",
        "Spark = Python: rebalances, moved, time to Stable",
        "; ".join(outcome.differences) or "equal",
        not outcome.differences,
    )
