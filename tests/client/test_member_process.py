"""`staticfleet member run` processes against a `staticfleet coordinator serve` process."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.protocol import TopicPartition
from staticfleet.demo.ownership import MemberLog, all_holdings, holdings, ownership_overlaps
from staticfleet.member.events import read_events
from staticfleet.member.runtime import EXIT_FENCED, EXIT_OK
from tests.serve import serve_coordinator, staticfleet

pytestmark = pytest.mark.slow

GROUP = "fleet"
TOPIC = "events"
PARTITIONS = {TopicPartition(TOPIC, p) for p in range(12)}
TOKEN = "member-token"


@pytest.fixture
def coordinator_url(tmp_path: Path) -> Iterator[str]:
    with serve_coordinator(
        tmp_path,
        "--store",
        f"sqlite:///{tmp_path / 'coordinator.db'}",
        "--member-token",
        f"{GROUP}:{TOKEN}",
        "--admin-token",
        "admin-token",
        "--topics",
        f"{TOPIC}=12",
        "--initial-rebalance-delay-ms",
        "300",
        "--log-level",
        "WARNING",
    ) as url:
        yield url


class Fleet:
    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.directory = directory
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: list[Path] = []

    def start(self, name: str, instance_id: str, protocol: str = "cooperative") -> Path:
        log = self.directory / f"{name}.jsonl"
        environment = {
            **os.environ,
            "STATICFLEET_COORDINATOR_URL": self.url,
            "STATICFLEET_GROUP_ID": GROUP,
            "STATICFLEET_INSTANCE_ID": instance_id,
            "STATICFLEET_TOPICS": TOPIC,
            "STATICFLEET_REBALANCE_PROTOCOL": protocol,
            "STATICFLEET_SESSION_TIMEOUT_MS": "6000",
            "STATICFLEET_REBALANCE_TIMEOUT_MS": "5000",
            "STATICFLEET_HEARTBEAT_INTERVAL_MS": "200",
            "STATICFLEET_TOKEN": TOKEN,
            "STATICFLEET_EVENT_LOG": str(log),
        }
        self.processes[name] = subprocess.Popen(
            staticfleet(
                "member", "run", "--commit-interval-ms", "300", "--records-per-second", "50"
            ),
            env=environment,
            stderr=open(self.directory / f"{name}.err", "w"),  # noqa: SIM115
        )
        self.logs.append(log)
        return log

    def events(self) -> list[list[dict[str, object]]]:
        return [read_events(log) if log.exists() else [] for log in self.logs]

    def member_logs(self) -> list[MemberLog]:
        return [
            MemberLog(owner=log.stem, process=log.stem, rows=events)
            for log, events in zip(self.logs, self.events(), strict=True)
        ]

    def owned_now(self) -> dict[str, set[TopicPartition]]:
        owned: dict[str, set[TopicPartition]] = {}
        for log in self.member_logs():
            for holding in holdings(log):
                if holding.end_ms is None:
                    owned.setdefault(holding.owner, set()).add(TopicPartition(*holding.partition))
        return owned

    def overlaps(self) -> list[object]:
        now_ms = int(time.time() * 1000)
        return list(ownership_overlaps(all_holdings(self.member_logs()), now_ms))

    def stop(self, name: str) -> int:
        process = self.processes[name]
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=20)

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def complete_and_disjoint(fleet: Fleet, members: int) -> bool:
    owned = fleet.owned_now()
    counts = sorted(len(partitions) for partitions in owned.values())
    union = set().union(*owned.values()) if owned else set()
    return len(owned) == members and union == PARTITIONS and sum(counts) == len(PARTITIONS)


def test_member_processes_share_the_partitions_without_overlap(coordinator_url, tmp_path):
    fleet = Fleet(coordinator_url, tmp_path)
    try:
        fleet.start("a", "s-0")
        fleet.start("b", "s-1")
        wait_for(lambda: complete_and_disjoint(fleet, 2))
        fleet.start("c", "s-2")  # cooperative scale-up: moves in two rebalances
        wait_for(lambda: complete_and_disjoint(fleet, 3))
        time.sleep(1.0)  # a few periodic commits
        assert fleet.overlaps() == []
        assert sorted(len(p) for p in fleet.owned_now().values()) == [4, 4, 4]

        for name in ("a", "b", "c"):
            assert fleet.stop(name) == EXIT_OK, (tmp_path / f"{name}.err").read_text()
        assert fleet.overlaps() == []
        logs = fleet.events()
        for events in logs:
            kinds = [event["event"] for event in events]
            assert kinds[0] == "started" and kinds[-1] == "stopped"
            assert "commit" in kinds
            assert all(event["instance_id"] and "member_id" in event for event in events)
            assert all(isinstance(event["ts_ms"], int) for event in events)
    finally:
        fleet.kill_all()


def test_a_fenced_member_process_exits_with_code_3(coordinator_url, tmp_path):
    fleet = Fleet(coordinator_url, tmp_path)
    try:
        fleet.start("original", "s-0")
        wait_for(lambda: complete_and_disjoint(fleet, 1))
        fleet.start("impostor", "s-0")
        assert fleet.processes["original"].wait(timeout=30) == EXIT_FENCED
        assert "fenced" in (tmp_path / "original.err").read_text()
        kinds = [event["event"] for event in read_events(tmp_path / "original.jsonl")]
        assert "lost" in kinds and "fatal" in kinds
        assert fleet.stop("impostor") == EXIT_OK
    finally:
        fleet.kill_all()
