"""Our member processes and Java KafkaConsumers in one group on the broker, through the
KIP-429 two-bounce (eager -> compatible -> cooperative).

No Python Kafka client can take part in the compatible phase (librdkafka and kafka-python
refuse to offer eager and cooperative assignors together); ours offers both, so a fleet can
upgrade alongside Java members. Whichever member leads, it assigns for all of them with
Kafka's ConsumerProtocol bytes, and no partition is ever owned by two members at once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from staticfleet.demo.ownership import all_holdings, ownership_overlaps
from staticfleet.kafka.broker import KafkaBroker
from staticfleet.kafka.java_peer import JavaPeer
from staticfleet.member.runtime import EXIT_OK

from .helpers import (
    MemberProcess,
    complete_and_disjoint,
    group_assignor,
    member_logs,
    our_member,
    owned_now,
    produce,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(500)]

PARTITIONS = 8
OURS = ("ours-0", "ours-1")
JAVA = ("java-0", "java-1")
PHASES = ("eager", "compatible", "cooperative")
JAVA_STRATEGIES = {
    "eager": ("range",),
    "compatible": ("cooperative-sticky", "range"),
    "cooperative": ("cooperative-sticky",),
}


def test_our_members_and_java_members_upgrade_together_without_double_ownership(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = kafka_topic(PARTITIONS)
    group = f"{topic}-group"
    every = {(topic, partition) for partition in range(PARTITIONS)}
    produce(bootstrap, topic, PARTITIONS, per_partition=50)
    logs: list[tuple[str, Path]] = []
    members: dict[str, MemberProcess | JavaPeer] = {}

    def start(instance: str, phase: str) -> None:
        path = tmp_path / f"{instance}-{phase}.jsonl"
        logs.append((instance, path))
        if instance in OURS:
            members[instance] = our_member(bootstrap, group, topic, instance, phase, path)
        else:
            peer = JavaPeer(
                bootstrap,
                group,
                [topic],
                path,
                instance_id=instance,
                strategies=JAVA_STRATEGIES[phase],
            )
            peer.start()
            members[instance] = peer

    def stable() -> bool:
        return complete_and_disjoint(owned_now(member_logs(logs)), every, len(OURS + JAVA))

    selected: list[str] = []
    order = (OURS[0], JAVA[0], OURS[1], JAVA[1])
    try:
        for instance in order:
            start(instance, "eager")
        wait_for(stable, 120, "two of ours and two Java members share the topic")
        selected.append(group_assignor(bootstrap, group)[0])
        for phase in PHASES[1:]:
            for instance in order:
                assert members[instance].stop() == EXIT_OK, members[
                    instance
                ].stderr_path.read_text()
                start(instance, phase)
                wait_for(stable, 120, f"{instance} back in the {phase} phase")
                produce(bootstrap, topic, PARTITIONS, per_partition=10, start=50)
            selected.append(group_assignor(bootstrap, group)[0])
        for member in members.values():
            assert member.stop() == EXIT_OK, member.stderr_path.read_text()
    finally:
        for member in members.values():
            member.kill()

    # Range until every member offers cooperative-sticky first (the end of the compatible
    # bounce), cooperative-sticky from then on.
    assert selected == ["range", "cooperative-sticky", "cooperative-sticky"]
    everything = member_logs(logs)
    end_ms = max(int(row["ts_ms"]) for log in everything for row in log.rows) + 1
    assert list(ownership_overlaps(all_holdings(everything), end_ms)) == []
