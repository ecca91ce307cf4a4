"""A `staticfleet member run --standby-id` process takes over a killed member's partitions,
promoted through the admin route, with no rebalance."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from coordinator.protocol import TopicPartition
from staticfleet.kafka.broker import free_port
from staticfleet.member.events import read_events
from staticfleet.member.runtime import EXIT_OK
from tests.client import test_member_process as processes
from tests.client.test_member_health_process import get
from tests.client.test_member_process import (
    GROUP,
    TOKEN,
    TOPIC,
    Fleet,
    complete_and_disjoint,
    wait_for,
)
from tests.serve import staticfleet

pytestmark = pytest.mark.slow

coordinator_url = processes.coordinator_url  # the same coordinator process fixture


def admin(url: str, method: str, path: str, body: object | None = None) -> dict[str, object]:
    request = urllib.request.Request(
        url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer admin-token", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, object] = json.loads(response.read())
    return answer


def start_standby(fleet: Fleet, name: str, standby_id: str, health_port: int = 0) -> Path:
    log = fleet.directory / f"{name}.jsonl"
    environment = {
        **os.environ,
        "STATICFLEET_COORDINATOR_URL": fleet.url,
        "STATICFLEET_GROUP_ID": GROUP,
        "STATICFLEET_STANDBY_ID": standby_id,
        "STATICFLEET_TOPICS": TOPIC,
        "STATICFLEET_REBALANCE_PROTOCOL": "cooperative",
        "STATICFLEET_SESSION_TIMEOUT_MS": "6000",
        "STATICFLEET_REBALANCE_TIMEOUT_MS": "5000",
        "STATICFLEET_HEARTBEAT_INTERVAL_MS": "200",
        "STATICFLEET_TOKEN": TOKEN,
        "STATICFLEET_EVENT_LOG": str(log),
        "STATICFLEET_HEALTH_PORT": str(health_port),
    }
    environment.pop("STATICFLEET_INSTANCE_ID", None)
    fleet.processes[name] = subprocess.Popen(
        staticfleet("member", "run", "--commit-interval-ms", "300", "--records-per-second", "50"),
        env=environment,
        stderr=open(fleet.directory / f"{name}.err", "w"),  # noqa: SIM115
    )
    fleet.logs.append(log)
    return log


def generation(url: str) -> int:
    return int(str(admin(url, "GET", f"/v1/groups/{GROUP}")["generation_id"]))


def test_a_standby_process_takes_over_a_killed_member_without_a_rebalance(
    coordinator_url: str, tmp_path: Path
) -> None:
    fleet = Fleet(coordinator_url, tmp_path)
    try:
        fleet.start("a", "s-0")
        fleet.start("b", "s-1")
        wait_for(lambda: complete_and_disjoint(fleet, 2))
        health_port = free_port()
        start_standby(fleet, "spare", "spare-0", health_port)
        wait_for(
            lambda: (
                admin(coordinator_url, "GET", f"/v1/groups/{GROUP}/standbys")["standby_ids"]
                == ["spare-0"]
            )
        )
        # A standby heartbeating is ready (it can take over at once) and holds nothing.
        wait_for(lambda: get(health_port, "/readyz")[1]["reason"] == "standby")
        status, body = get(health_port, "/readyz")
        assert (status, body["phase"], body["partitions"]) == (200, "standby", 0), body
        held_by_a = fleet.owned_now()["a"]
        before = generation(coordinator_url)
        fleet.processes["a"].send_signal(signal.SIGKILL)
        fleet.processes["a"].wait()
        answer = admin(
            coordinator_url,
            "POST",
            f"/v1/groups/{GROUP}/promotions",
            {"standby_id": "spare-0", "instance_id": "s-0"},
        )
        assert answer["error_code"] == 0, answer

        def spare_owns() -> set[TopicPartition]:
            owned: set[TopicPartition] = set()
            for event in read_events(tmp_path / "spare.jsonl"):
                if event["event"] == "assigned":
                    owned |= {TopicPartition(t, p) for t, p in event["partitions"]}
            return owned

        wait_for(lambda: spare_owns() == held_by_a, timeout=10)
        wait_for(lambda: any(e["event"] == "commit" for e in read_events(tmp_path / "spare.jsonl")))
        assert generation(coordinator_url) == before
        # Promoted: ready as the member it took over, in the same generation.
        wait_for(lambda: get(health_port, "/readyz")[1]["reason"] == "stable")
        status, body = get(health_port, "/readyz")
        assert (status, body["generation_id"]) == (200, before), body
        assert body["partitions"] == len(held_by_a), body
        events = read_events(tmp_path / "spare.jsonl")
        kinds = [e["event"] for e in events]
        assert kinds[:4] == ["standby", "started", "promoted", "assigned"]
        assert all(e["instance_id"] == "s-0" for e in events[2:])
        assert fleet.stop("spare") == EXIT_OK
        assert fleet.stop("b") == EXIT_OK
    finally:
        fleet.kill_all()
