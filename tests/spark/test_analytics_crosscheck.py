"""The Spark analytics against the pure-Python reference and the demo's own journal metrics,
on journals a real coordinator wrote (docs/spark.md)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore, SystemClock
from coordinator import journal_metrics as jm
from coordinator.client import GroupMember, InProcessTransport, MemberConfig
from coordinator.journal import write_jsonl
from coordinator.messages import UNKNOWN_MEMBER_ID, LeaveGroupRequest, MemberIdentity
from pipeline import analytics
from pipeline import reference as ref
from tests.conftest import QuickDemo

pytestmark = pytest.mark.spark

TOPIC = "events"
PARTITIONS = 12


def _config(group: str, instance: str | None, protocol: str) -> MemberConfig:
    return MemberConfig(
        group_id=group,
        topics=(TOPIC,),
        group_instance_id=instance,
        session_timeout_ms=6_000,
        rebalance_timeout_ms=5_000,
        heartbeat_interval_ms=30,
        retry_backoff_ms=20,
        retry_backoff_max_ms=200,
        rebalance_protocol=protocol,  # type: ignore[arg-type]
    )


def _settled(members: list[GroupMember]) -> bool:
    if not members or any(m.state != "stable" for m in members):
        return False
    if len({m.generation_id for m in members}) != 1:
        return False
    owned = [tp for m in members for tp in m.assignment]
    return len(owned) == len(set(owned)) == PARTITIONS


async def _wait_settled(members: list[GroupMember], within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not _settled(members):
        assert asyncio.get_running_loop().time() < deadline, "group did not settle"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)


def _now_ms() -> int:
    return SystemClock().now_ms()


async def _end_ms() -> int:
    """A step's end; the next step starts a little later, so that windows (closed at both
    ends, as the demo's) never share a millisecond."""
    end = _now_ms()
    await asyncio.sleep(0.02)
    return end


async def _scenario(tmp: Path) -> list[ref.Window]:
    """Two groups on one coordinator; returns the step windows. `fleet` (eager, static and
    one dynamic member): a static restart, a dynamic leave, a scale-down by two with one
    batch LeaveGroup. `coop` (cooperative): a member joins, then one leaves."""
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=150), SystemClock(), MemoryStore()
    )
    await coordinator.start()
    await coordinator.set_topic_metadata({TOPIC: PARTITIONS})
    started: list[GroupMember] = []
    windows: list[ref.Window] = []

    async def start(group: str, instance: str | None, protocol: str = "eager") -> GroupMember:
        member = GroupMember(InProcessTransport(coordinator), _config(group, instance, protocol))
        started.append(member)
        await member.start()
        return member

    try:
        fleet = [await start("fleet", f"m-{i}") for i in range(4)]
        fleet.append(await start("fleet", None))
        await _wait_settled(fleet)

        begin = _now_ms()
        restarted = fleet[1]
        await restarted.close()  # static: no LeaveGroup
        fleet[1] = await start("fleet", "m-1")
        await _wait_settled(fleet)
        windows.append(ref.Window("static-restart", begin, await _end_ms(), "fleet"))

        begin = _now_ms()
        dynamic = fleet.pop()
        await dynamic.close()  # dynamic: LeaveGroup
        await _wait_settled(fleet)
        windows.append(ref.Window("dynamic-leave", begin, await _end_ms(), "fleet"))

        begin = _now_ms()
        gone = fleet[2:]
        fleet = fleet[:2]
        for member in gone:
            await member.close()
        await coordinator.leave_group(
            LeaveGroupRequest(
                "fleet",
                [
                    MemberIdentity(UNKNOWN_MEMBER_ID, m.group_instance_id, "scale down")
                    for m in gone
                ],
            )
        )
        await _wait_settled(fleet)
        windows.append(ref.Window("scale-down", begin, await _end_ms(), "fleet"))

        coop = [await start("coop", f"c-{i}", "cooperative") for i in range(3)]
        await _wait_settled(coop)
        begin = _now_ms()
        coop.append(await start("coop", "c-3", "cooperative"))
        await _wait_settled(coop)
        windows.append(ref.Window("scale-up", begin, await _end_ms(), "coop"))
        begin = _now_ms()
        leaving = coop.pop(0)
        await leaving.close(leave=True)
        await _wait_settled(coop)
        windows.append(ref.Window("scale-in", begin, await _end_ms(), "coop"))

        journal = tmp / "journal"
        journal.mkdir()
        for group in ("fleet", "coop"):
            rows = await coordinator.journal_rows(group)
            write_jsonl(rows, journal / f"{group}.jsonl")
    finally:
        for member in started:
            await member.close()
        await coordinator.close()
    return windows


def _rows(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def _spark_windows(output: Path, spark: SparkSession) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (row["group_id"], row["window"]): row.asDict()
        for row in spark.read.parquet(str(output / "windows")).collect()
    }


async def test_spark_equals_reference_on_a_coordinator_journal(
    spark: SparkSession, tmp_path: Path
) -> None:
    windows = await _scenario(tmp_path)
    rows = _rows(tmp_path / "journal")
    output = tmp_path / "out"
    result = analytics.run(spark, str(tmp_path / "journal"), output, windows)
    assert (output / "report.txt").read_text().startswith("staticfleet journal analytics")

    expected = ref.window_figures(rows, windows)
    got = _spark_windows(output, spark)
    assert result["windows"] == len(expected) == len(got) == 2 + len(windows)
    for figures in expected:
        row = got[(figures.group_id, figures.window)]
        assert (
            row["start_ms"],
            row["end_ms"],
            row["rebalances"],
            row["moved"],
            row["unowned_partition_ms"],
            row["time_to_stable_ms"],
        ) == (
            figures.start_ms,
            figures.end_ms,
            figures.rebalances,
            figures.moved,
            figures.unowned_partition_ms,
            figures.time_to_stable_ms,
        ), figures

    # The reference is the demo's journal metrics for these three figures.
    by_key = {(f.group_id, f.window): f for f in expected}
    fleet = [row for row in rows if row["group_id"] == "fleet"]
    for window in windows:
        if window.group_id != "fleet":
            continue
        figures = by_key[("fleet", window.label)]
        assert figures.rebalances == jm.rebalance_count(fleet, window.start_ms, window.end_ms)
        assert figures.moved == len(jm.partition_moves(fleet, {}, window.start_ms, window.end_ms))
        assert figures.time_to_stable_ms == jm.time_to_stable_ms(
            fleet, window.start_ms, window.end_ms
        )

    # The scenario did what it says: a static restart costs nothing, the others do.
    assert by_key[("fleet", "static-restart")].rebalances == 0
    assert by_key[("fleet", "static-restart")].unowned_partition_ms == 0
    for key in [("fleet", "dynamic-leave"), ("fleet", "scale-down"), ("coop", "scale-up")]:
        assert by_key[key].rebalances >= 1, key
        assert by_key[key].moved >= 1, key
        assert by_key[key].unowned_partition_ms > 0, key

    generations = sorted(
        tuple(row.asDict().values())
        for row in spark.read.parquet(str(output / "generations")).collect()
    )
    assert generations == sorted(astuple(g) for g in ref.generation_figures(rows))
    assert any(g.skew > 0 for g in ref.generation_figures(rows))  # 12 over 5 members


@pytest.mark.slow
@pytest.mark.timeout(1080)  # the shared demo run, if this test is its first user, then Spark
def test_spark_equals_the_demo_report(
    spark: SparkSession, quick_demo: QuickDemo, tmp_path: Path
) -> None:
    """`staticfleet demo --quick` (the run the end-to-end test reads too), then the Spark job in
    this session over its journals with the windows and steps its report gives: rebalances,
    moved partitions and time to Stable equal what the demo reported."""
    out = quick_demo.embedded
    assert quick_demo.embedded_ok, quick_demo.failure
    report = json.loads((out / "report.json").read_text())
    logs = out / "logs"
    aliases: dict[str, str] = {}
    windows: list[ref.Window] = []
    for scenario in report["scenarios"]:
        group = scenario["group_id"]
        aliases.update(ref.demo_aliases(logs / scenario["key"]))
        window = scenario["window"]
        windows.append(ref.Window("window", window["start_ms"], window["end_ms"], group))
        for index, step in enumerate(scenario["steps"]):
            windows.append(ref.Window(f"step-{index}", step["start_ms"], step["end_ms"], group))
    result = analytics.run(
        spark, str(logs), tmp_path / "spark", windows, glob="journal.jsonl", aliases=aliases
    )
    assert result["windows"] == len(windows) + len(report["scenarios"])
    got = _spark_windows(tmp_path / "spark", spark)
    compared = 0
    for scenario in report["scenarios"]:
        group = scenario["group_id"]
        metrics = scenario["metrics"]
        row = got[(group, "window")]
        assert (row["rebalances"], row["moved"]) == (
            metrics["rebalances"],
            metrics["partitions_moved"],
        ), scenario["key"]
        for index, step in enumerate(scenario["steps"]):
            row = got[(group, f"step-{index}")]
            assert (row["rebalances"], row["moved"], row["time_to_stable_ms"]) == (
                step["rebalances"],
                step["moved"],
                step["time_to_stable_ms"],
            ), (scenario["key"], step["label"])
            compared += 1
    assert compared >= 5
