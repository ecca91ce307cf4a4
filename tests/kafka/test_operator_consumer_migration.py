"""A classic Java fleet migrated to Kafka's consumer protocol (KIP-848) by the operator, and
back, against the real 4.4 broker: the real Kopf operator on kmock, the Java KafkaConsumer
peer in each member pod (kafka-clients 4.4), the consumers' own event logs as the witness
of ownership. Prints each direction's duration and unowned partition-seconds (docs/operator.md,
"Migrating a fleet to the consumer protocol")."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator.client.kafka_groups import MemberType
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.protocol import TopicPartition
from staticfleet.demo.ownership import (
    MemberLog,
    all_holdings,
    ownership_overlaps,
    unowned_partition_seconds,
)
from staticfleet.kafka.broker import KafkaBroker
from staticfleet_operator.backends import KafkaBackend
from staticfleet_operator.rollout.migration import BrokerFacts, MigrationPolicy
from tests.kafka.helpers import member_logs
from tests.operator.kube_harness import Cluster, env_of, managed_spec, running_cluster

pytestmark = pytest.mark.kafka

PARTITIONS = 6


async def migrate(cluster: Cluster, protocol: str, group_protocol: str) -> tuple[float, float]:
    """Change spec.rebalance.protocol; wait for the rollout's end on the group protocol
    wanted. The wall-clock window (ms since the epoch) of the migration."""
    start = time.time()
    await cluster.update_spec("mig", {"rebalance": {"protocol": protocol}})

    async def done() -> dict[str, Any] | None:
        status = (await cluster.get_group("mig")).get("status") or {}
        rollout = status.get("rollout") or {}
        finished = rollout.get("phase") == "Completed" and rollout.get("toProtocol") == protocol
        settled = status.get("groupProtocol") == group_protocol and status.get("members") == 3
        return status if finished and settled else None

    await cluster.eventually(done, timeout=240, what=f"migration to {protocol}")
    return start * 1000, time.time() * 1000


async def bounce_reasons(cluster: Cluster, since: int) -> list[str]:
    bounced = [e for e in await cluster.events() if e.get("reason") == "MemberBounced"]
    return [str(e["message"]) for e in bounced][since:]


def judge(
    logs: Path, topic: str, up: tuple[float, float], down: tuple[float, float], fleet: str
) -> list[MemberLog]:
    """Every member process's event log in `logs`: no partition ever held by two processes;
    prints each direction's duration and unowned partition-seconds. The logs."""
    everything = member_logs([(path.stem.rsplit("-", 1)[0], path) for path in logs.glob("*.jsonl")])
    holdings = all_holdings(everything)
    end_ms = max(int(row["ts_ms"]) for log in everything for row in log.rows) + 1
    assert list(ownership_overlaps(holdings, end_ms)) == []
    partitions = [(topic, p) for p in range(PARTITIONS)]
    for name, (start, stop) in (("classic -> consumer", up), ("consumer -> classic", down)):
        gap = unowned_partition_seconds(holdings, partitions, int(start), int(stop))
        print(
            f"{fleet}, {name}: {(stop - start) / 1000:.1f} s, {gap:.1f} unowned partition-seconds"
        )
    return everything


async def test_java_fleet_migrates_to_the_consumer_protocol_and_back_without_double_ownership(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(PARTITIONS)
    bootstrap = kafka_broker.bootstrap
    group_id = f"mig-{int(time.time() * 1000) % 10**8}"
    spec = managed_spec(
        group_id=group_id,
        replicas=3,
        topics=[{"name": topic}],
        coordinator={"type": "kafka", "bootstrapServers": bootstrap, "clientFamily": "java"},
    )  # eager with range: the classic default
    logs = tmp_path / "java"
    transport = KafkaTransport(bootstrap)
    try:
        async with running_cluster(java_logs=logs) as cluster:
            await cluster.create_group("mig", spec)
            await cluster.eventually(lambda: cluster.group_settled("mig", 3), timeout=120)

            up = await migrate(cluster, "consumer", "consumer")
            pods = await cluster.pods("mig")
            assert {env_of(p).get("KAFKA_GROUP_PROTOCOL") for p in pods} == {"consumer"}
            assert {env_of(p).get("KAFKA_GROUP_REMOTE_ASSIGNOR") for p in pods} == {"range"}
            described = await transport.describe_consumer_group(group_id)
            assert described.converged and len(described.members) == 3
            assert {m.member_type for m in described.members} == {MemberType.CONSUMER}
            upgrade = await bounce_reasons(cluster, 0)
            assert len(upgrade) == 3 and all("to consumer" in r for r in upgrade)
            # Each next step was taken only once the member before was back and the group
            # converged (the orchestrator's "is back" note).
            assert all("is back" in reason for reason in upgrade[1:]), upgrade

            down = await migrate(cluster, "cooperative", "classic")
            classic = await transport.describe_group(group_id)
            assert classic.group_state == "Stable" and classic.protocol_data == "cooperative-sticky"
            downgrade = await bounce_reasons(cluster, 3)
            assert len(downgrade) == 3 and all("to cooperative" in r for r in downgrade)
            assert all("is back" in reason for reason in downgrade[1:]), downgrade
    finally:
        await transport.close()

    everything = judge(logs, topic, up, down, "java")
    assert len(everything) == 3 + 3 + 3  # the fleet, then one bounce each way


async def test_the_broker_facts_the_pre_checks_read(kafka_broker: KafkaBroker) -> None:
    """ApiVersions and DescribeConfigs on the 4.4 test broker, with its defaults."""
    backend = KafkaBackend(kafka_broker.bootstrap)
    try:
        facts = await backend.broker_facts()
    finally:
        await backend.close()
    assert facts == BrokerFacts(True, MigrationPolicy.BIDIRECTIONAL, facts.max_size)
    assert facts.max_size >= 3


async def test_a_kafka_python_fleet_is_refused_and_left_alone(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str]
) -> None:
    """kafka-python has no KIP-848: Degraded ProtocolChangeRefused with the way out, one
    Warning Event, no pod replaced (the harness plays kafka-python with our member)."""
    spec = managed_spec(
        group_id=f"kp-{int(time.time() * 1000) % 10**8}",
        replicas=2,
        topics=[{"name": kafka_topic(2)}],
        coordinator={
            "type": "kafka",
            "bootstrapServers": kafka_broker.bootstrap,
            "clientFamily": "kafka-python",
        },
    )
    async with running_cluster() as cluster:
        await cluster.create_group("kp", spec)
        await cluster.eventually(lambda: cluster.group_settled("kp", 2), timeout=60)
        started = len(cluster.kubelet.history)
        await cluster.update_spec("kp", {"rebalance": {"protocol": "consumer"}})

        async def refused() -> dict[str, Any] | None:
            status = (await cluster.get_group("kp")).get("status") or {}
            conditions: list[dict[str, Any]] = status.get("conditions", [])
            degraded = next((c for c in conditions if c["type"] == "Degraded"), {})
            return degraded if degraded.get("reason") == "ProtocolChangeRefused" else None

        degraded = await cluster.eventually(refused, timeout=30, what="the refusal")
        assert "kafka-python" in degraded["message"] and "KIP-848" in degraded["message"]

        async def refusals() -> list[dict[str, Any]]:
            events = await cluster.events()
            return [e for e in events if e.get("reason") == "ProtocolChangeRefused"]

        # The actuator posts Events after it writes the status that showed the refusal.
        await cluster.eventually(refusals, timeout=30, what="the refusal's Event")
        await cluster.passes(3)  # and not again on the passes after it
        assert len(await refusals()) == 1
        assert len(cluster.kubelet.history) == started  # no member stopped or started


class EventRows:
    """Our in-process members' callbacks, as event-log rows: one file per member process
    (each start of a pod's member asks for a new listener), in `member run`'s shape, so the
    same ownership code as for the Java peers' logs judges them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started = 0

    def for_pod(self, pod: str) -> Any:
        self.started += 1
        path = self.directory / f"{pod}-{self.started}.jsonl"

        def write(event: str, partitions: frozenset[TopicPartition]) -> None:
            row = {
                "event": event,
                "ts_ms": int(time.time() * 1000),
                "partitions": [[tp.topic, tp.partition] for tp in sorted(partitions)],
            }
            with path.open("a", encoding="utf-8") as stream:
                stream.write(json.dumps(row) + "\n")

        class Listener:
            def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
                write("revoked", partitions)

            def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
                write("assigned", partitions)

            def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
                write("lost", partitions)

        return Listener()


async def test_our_members_migrate_to_the_consumer_protocol_and_back_without_double_ownership(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    """The same migration with our own member in every pod (client family `staticfleet`:
    `member run --coordinator kafka://`, classic `GroupMember` before, `ConsumerProtocolMember`
    after, in the harness's kubelet)."""
    topic = kafka_topic(PARTITIONS)
    bootstrap = kafka_broker.bootstrap
    group_id = f"mig-ours-{int(time.time() * 1000) % 10**8}"
    spec = managed_spec(
        group_id=group_id,
        replicas=3,
        topics=[{"name": topic}],
        coordinator={"type": "kafka", "bootstrapServers": bootstrap, "clientFamily": "staticfleet"},
    )
    rows = EventRows(tmp_path)
    transport = KafkaTransport(bootstrap)
    try:
        async with running_cluster() as cluster:
            cluster.kubelet.listener_for = rows.for_pod
            await cluster.create_group("mig", spec)
            await cluster.eventually(lambda: cluster.group_settled("mig", 3), timeout=120)

            up = await migrate(cluster, "consumer", "consumer")
            pods = await cluster.pods("mig")
            assert {env_of(p).get("STATICFLEET_REBALANCE_PROTOCOL") for p in pods} == {"consumer"}
            described = await transport.describe_consumer_group(group_id)
            assert described.converged and len(described.members) == 3
            assert {m.member_type for m in described.members} == {MemberType.CONSUMER}
            assert sorted(str(m.instance_id) for m in described.members) == [
                f"{group_id}-{slot}" for slot in range(3)
            ]
            upgrade = await bounce_reasons(cluster, 0)
            assert len(upgrade) == 3 and all("to consumer" in r for r in upgrade)

            down = await migrate(cluster, "cooperative", "classic")
            classic = await transport.describe_group(group_id)
            assert classic.group_state == "Stable" and len(classic.members) == 3
            assert sorted(str(m.group_instance_id) for m in classic.members) == [
                f"{group_id}-{slot}" for slot in range(3)
            ]
    finally:
        await transport.close()

    judge(tmp_path, topic, up, down, "ours")
