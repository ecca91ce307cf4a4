"""`staticfleet member run --source kafka://…` consumes real topics, grouped by our coordinator.

The group lives on a `staticfleet coordinator serve` process that knows no topics at all:
the partition counts come from the cluster, the records from the broker, the offsets are
committed through the group.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from staticfleet.demo.ownership import (
    all_holdings,
    commit_regressions,
    ownership_overlaps,
)
from staticfleet.kafka.broker import KafkaBroker
from staticfleet.member.runtime import EXIT_OK
from tests.serve import serve_coordinator, staticfleet

from .helpers import MemberRuns, end_offsets, produce, wait_for

pytestmark = pytest.mark.kafka

GROUP = "readers"
PARTITIONS = 6


@pytest.fixture
def coordinator_url(tmp_path: Path) -> Iterator[str]:
    with serve_coordinator(
        tmp_path,
        "--store",
        "memory://",
        "--insecure",
        "--initial-rebalance-delay-ms",
        "500",
        "--min-session-timeout-ms",
        "1000",
        "--log-level",
        "WARNING",
    ) as url:
        yield url


class Members(MemberRuns):
    """Our members, grouped by the coordinator at `url`, reading records from `source`."""

    def __init__(self, url: str, source: str, topic: str, directory: Path) -> None:
        super().__init__(directory)
        self.url, self.source, self.topic = url, source, topic

    def start(self, name: str, instance_id: str) -> None:
        environment = {
            "STATICFLEET_COORDINATOR_URL": self.url,
            "STATICFLEET_SOURCE": self.source,
            "STATICFLEET_GROUP_ID": GROUP,
            "STATICFLEET_INSTANCE_ID": instance_id,
            "STATICFLEET_TOPICS": self.topic,
            "STATICFLEET_REBALANCE_PROTOCOL": "cooperative",
            "STATICFLEET_SESSION_TIMEOUT_MS": "10000",
            "STATICFLEET_REBALANCE_TIMEOUT_MS": "5000",
            "STATICFLEET_HEARTBEAT_INTERVAL_MS": "300",
            "STATICFLEET_EVENT_LOG": str(self.event_log(name)),
        }
        self.launch(name, staticfleet("member", "run", "--commit-interval-ms", "200"), environment)


def test_members_consume_a_real_topic_and_a_static_restart_causes_no_rebalance(
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[[int], str],
    coordinator_url: str,
    tmp_path: Path,
) -> None:
    topic = kafka_topic(PARTITIONS)
    every = {(topic, partition) for partition in range(PARTITIONS)}
    produce(kafka_broker.bootstrap, topic, PARTITIONS, per_partition=300)
    members = Members(coordinator_url, f"kafka://{kafka_broker.bootstrap}", topic, tmp_path)
    try:
        members.start("a", "reader-0")
        members.start("b", "reader-1")

        def split_evenly() -> bool:
            owned = members.owned_now()
            return (
                sorted(map(len, owned.values())) == [3, 3] and set().union(*owned.values()) == every
            )

        wait_for(split_evenly)
        ends = end_offsets(kafka_broker.bootstrap, topic, PARTITIONS)
        wait_for(lambda: members.committed() == ends)

        # A static restart of one member: same instance id, a new process, no rebalance.
        generations_before = {
            row["generation_id"]
            for log in members.logs()
            for row in log.rows
            if row["event"] == "assigned"
        }
        assert members.stop("a") == EXIT_OK, (tmp_path / "a.err").read_text()
        produce(kafka_broker.bootstrap, topic, PARTITIONS, per_partition=200, start=300)
        members.start("a-restarted", "reader-0")
        wait_for(split_evenly)
        ends = end_offsets(kafka_broker.bootstrap, topic, PARTITIONS)
        wait_for(lambda: members.committed() == ends)
        assert ends == {tp: 500 for tp in every}

        rows = {log.owner: log.rows for log in members.logs()}
        restarted_assigned = [row for row in rows["a-restarted"] if row["event"] == "assigned"]
        assert len(restarted_assigned) == 1
        # The restarted process rejoined the generation its predecessor left: no rebalance.
        assert restarted_assigned[0]["generation_id"] == max(generations_before)
        assert not [row for row in rows["b"] if row["event"] in ("revoked", "lost")]

        for name in ("b", "a-restarted"):
            assert members.stop(name) == EXIT_OK, (tmp_path / f"{name}.err").read_text()
        logs = members.logs()
        assert list(ownership_overlaps(all_holdings(logs), int(time.time() * 1000))) == []
        assert commit_regressions(logs) == []
        # Clean handovers (commit, then unassign): every record processed exactly once.
        consumed = sum(
            row["consumed"] for log in logs for row in log.rows if row["event"] == "stopped"
        )
        assert consumed == PARTITIONS * 500
    finally:
        members.kill_all()
