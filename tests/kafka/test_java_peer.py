"""The Java peer (a real KafkaConsumer) through the KIP-429 two-bounce on the real broker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from staticfleet.demo.ownership import all_holdings, commit_regressions, ownership_overlaps
from staticfleet.kafka.broker import KafkaBroker
from staticfleet.kafka.java_peer import JavaPeer

from .helpers import (
    complete_and_disjoint,
    group_assignor,
    member_logs,
    owned_now,
    produce,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400)]

PARTITIONS = 6
INSTANCES = ("peer-0", "peer-1", "peer-2")
# The KIP-429 upgrade: eager, then both (eager still selected until every member offers
# cooperative-sticky), then cooperative alone.
PHASES = (("range",), ("cooperative-sticky", "range"), ("cooperative-sticky",))


def test_java_members_upgrade_from_eager_to_cooperative_without_double_ownership(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(PARTITIONS)
    group = f"{topic}-group"
    every = {(topic, partition) for partition in range(PARTITIONS)}
    produce(kafka_broker.bootstrap, topic, PARTITIONS, per_partition=100)
    logs: list[tuple[str, Path]] = []
    peers: dict[str, JavaPeer] = {}

    def start(instance: str, phase: int) -> None:
        path = tmp_path / f"{instance}-phase{phase}.jsonl"
        logs.append((instance, path))
        peers[instance] = JavaPeer(
            kafka_broker.bootstrap,
            group,
            [topic],
            path,
            instance_id=instance,
            strategies=PHASES[phase],
        )
        peers[instance].start()

    def stable() -> bool:
        return complete_and_disjoint(owned_now(member_logs(logs)), every, len(INSTANCES))

    selected: list[str] = []
    try:
        for instance in INSTANCES:
            start(instance, 0)
        wait_for(stable, 90, "three Java members share the topic")
        selected.append(group_assignor(kafka_broker.bootstrap, group)[0])
        for phase in (1, 2):
            for instance in INSTANCES:  # one bounce: each member restarted in turn
                assert peers[instance].stop() == 0, peers[instance].stderr_path.read_text()
                start(instance, phase)
                wait_for(stable, 90, f"{instance} back in phase {phase}")
                produce(kafka_broker.bootstrap, topic, PARTITIONS, per_partition=20, start=100)
            selected.append(group_assignor(kafka_broker.bootstrap, group)[0])
        for peer in peers.values():
            assert peer.stop() == 0, peer.stderr_path.read_text()
    finally:
        for peer in peers.values():
            peer.kill()

    assert selected == ["range", "cooperative-sticky", "cooperative-sticky"]
    everything = member_logs(logs)
    end_ms = max(int(row["ts_ms"]) for log in everything for row in log.rows) + 1
    assert list(ownership_overlaps(all_holdings(everything), end_ms)) == []
    assert commit_regressions(everything) == []
    assert all(log.rows[-1]["event"] == "stopped" for log in everything)
