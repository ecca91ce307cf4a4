"""The load generator's fleet mode (bench/loadgen/fleet.go) against both servers, small.

The same member code forms the groups, heartbeats and times one group's full rebalance over
the Kafka protocol (the real broker) and over our HTTP API (a real `coordinator serve`): what
bench/broker_side_by_side.py compares at 20,000 members.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench.capacity import LOADGEN_DIR, capacity_server
from staticfleet.kafka.broker import KafkaBroker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

GROUPS, MEMBERS, BIG = 2, 3, 4


@pytest.fixture(scope="module")
def loadgen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("loadgen") / "loadgen"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=LOADGEN_DIR, check=True)
    return binary


def fleet(loadgen: Path, protocol: str, target: list[str], prefix: str) -> dict[str, Any]:
    completed = subprocess.run(
        [
            str(loadgen),
            "-mode",
            "fleet",
            "-protocol",
            protocol,
            *target,
            "-group-prefix",
            prefix,
            "-groups",
            str(GROUPS),
            "-members",
            str(MEMBERS),
            "-rebalance-members",
            str(BIG),
            "-interval-ms",
            "300",
            "-session-ms",
            "10000",
            "-window",
            "2s",
            "-settle",
            "500ms",
            "-burst-addrs",
            "4",
            "-formation-timeout",
            "90s",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    report: dict[str, Any] = json.loads(completed.stdout)
    return report


def assert_formed_held_and_rebalanced(report: dict[str, Any]) -> None:
    assert report["members"] == GROUPS * MEMBERS + BIG
    assert report["groups"] == GROUPS + 1
    assert report["formation_seconds"] > 0
    window = report["window"]
    # Every member heartbeats about 3 times a second: the window saw them, all answered NONE.
    assert window["heartbeats"] >= report["members"] * 2
    assert window["error_codes"] == {}
    assert window["transport_errors"] == 0
    assert report["session_expiries"] == 0
    assert report["rebalance_seconds"] is not None, report.get("rebalance_error")
    # The big group's members learned of the rebalance from a heartbeat and rejoined.
    assert report["rejoins_by_code"].get("27", 0) >= BIG
    assert_phases_in_order(report)


def assert_phases_in_order(report: dict[str, Any]) -> None:
    """The rebalance's phases, timestamped by the members (bench/loadgen/phases.go)."""
    phases = report["rebalance_phases"]
    # Each existing member's first REBALANCE_IN_PROGRESS heartbeat answer is its notice.
    assert phases["notice_answered"]["count"] == BIG
    assert phases["join_sent"]["count"] >= BIG
    assert phases["joiner_join_sent"]["count"] == 1
    assert phases["leader_sync_sent"]["count"] >= 1
    # Every member but the leader synced as a follower (the joiner included).
    assert phases["follower_sync_answered"]["count"] >= BIG
    # Instants in ms since the joiner's connection opened; the max is the last.
    last = {name: summary["max_ms"] for name, summary in phases.items()}
    assert last["joiner_join_sent"] <= last["notice_answered"] <= last["join_sent"]
    assert last["join_sent"] <= last["join_answered"]
    assert last["leader_sync_sent"] <= last["leader_sync_answered"] <= last["all_synced"]
    assert last["follower_sync_answered"] <= last["all_synced"]
    assert last["all_synced"] == pytest.approx(report["rebalance_seconds"] * 1000, abs=1)
    # A notice comes at a heartbeat's due time or after it, never before.
    assert phases["notice_after_due"]["p50_ms"] >= 0


def test_fleet_over_the_kafka_protocol(loadgen: Path, kafka_broker: KafkaBroker) -> None:
    report = fleet(loadgen, "kafka", ["-bootstrap", kafka_broker.bootstrap], "fleet-test-")
    assert report["protocol"] == "kafka"
    assert_formed_held_and_rebalanced(report)


def test_fleet_over_our_http_api(loadgen: Path, tmp_path: Path) -> None:
    with capacity_server(tmp_path, GROUPS + 1) as server:
        report = fleet(
            loadgen,
            "http",
            [
                "-url",
                f"http://127.0.0.1:{server.port}",
                "-tokens",
                str(server.tokens_file),
                "-server-pid",
                str(server.process.pid),
            ],
            "cap-",
        )
    assert report["protocol"] == "http"
    assert_formed_held_and_rebalanced(report)
    # The server's threads' time over the window, from its schedstat: it ran.
    assert report["server_threads_running_per_second"] > 0
    assert report["server_threads_runnable_waiting_per_second"] >= 0
    # The coordinator's journal splits the rebalance by the server's clock (ms resolution).
    server = report["rebalance_server_phases_ms"]
    rebalance_ms = report["rebalance_seconds"] * 1000
    assert -1 <= server["server_rebalance_started"] <= server["server_generation_started"]
    assert server["server_generation_started"] <= server["server_stable"] <= rebalance_ms + 1


def test_broker_command_runs_under_the_launcher_with_later_jvm_options(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path, jvm_options=("-Xmx1g",), launcher=("taskset", "-c", "0"))
    command = broker._java_command("kafka.Kafka", "server.properties")
    assert command[:4] == ["taskset", "-c", "0", "java"]
    # A later -Xmx wins over the default heap.
    assert command.index("-Xmx1g") > command.index("-Xmx512m")
    assert command[-2:] == ["kafka.Kafka", "server.properties"]
