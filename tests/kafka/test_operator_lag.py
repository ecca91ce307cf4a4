"""Lag of a Kafka-coordinated ConsumerGroup against the real broker: the real Kopf operator
on kmock writes status.lag and its gauges; confluent-kafka's AdminClient is the witness
(`list_consumer_group_offsets`, `list_offsets`), a librdkafka consumer commits part."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # OffsetSpec: no __all__
    AdminClient,
    OffsetSpec,
)

from coordinator.client.kafka_transport import KafkaTransport
from staticfleet.kafka.broker import KafkaBroker
from staticfleet_operator.backends import KafkaBackend
from staticfleet_operator.lag import group_lag
from tests.kafka.helpers import produce
from tests.operator.kube_harness import NAMESPACE, managed_spec, running_cluster

pytestmark = pytest.mark.kafka


def consume_and_commit(bootstrap: str, group_id: str, topic: str, upto: dict[int, int]) -> None:
    """A librdkafka consumer of `group_id` reads partitions of `upto` and commits each
    partition's first `upto[p]` records (partitions not named get no commit)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in upto])
    done: dict[int, int] = dict.fromkeys(upto, 0)
    try:
        for _ in range(200):
            if done == upto:
                break
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            partition = message.partition()
            assert partition is not None
            if done[partition] < upto[partition]:
                consumer.commit(message=message, asynchronous=False)
                done[partition] += 1
    finally:
        consumer.close()
    assert done == upto


def witness_lag(bootstrap: str, group_id: str, topic: str, partitions: int) -> tuple[int, int]:
    """(total lag over committed partitions, partitions with no commit), as AdminClient reads."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    request = [ConsumerGroupTopicPartitions(group_id, wanted)]
    committed = admin.list_consumer_group_offsets(request)[group_id].result(10)
    offsets = {tp.partition: tp.offset for tp in committed.topic_partitions}
    ends = admin.list_offsets({tp: OffsetSpec.latest() for tp in wanted})
    log_ends = {tp.partition: future.result(10).offset for tp, future in ends.items()}
    total = sum(log_ends[p] - offsets[p] for p in range(partitions) if offsets.get(p, -1) >= 0)
    missing = sum(1 for p in range(partitions) if offsets.get(p, -1) < 0)
    return total, missing


async def test_backend_reads_what_admin_client_reads(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str]
) -> None:
    topic, other = kafka_topic(3), kafka_topic(1)
    bootstrap = kafka_broker.bootstrap
    group_id = f"lag-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, 3, per_partition=10)
    produce(bootstrap, other, 1, per_partition=5)
    consume_and_commit(bootstrap, group_id, topic, {0: 4, 1: 10})
    consume_and_commit(bootstrap, group_id, other, {0: 2})  # not among the spec's topics
    backend = KafkaBackend(bootstrap, transport=KafkaTransport(bootstrap))
    try:
        reading = await backend.lag_reading(group_id, [topic, "no-such-topic"])
    finally:
        await backend.close()
    assert reading.log_ends == {(topic, 0): 10, (topic, 1): 10, (topic, 2): 10}
    lag = group_lag(reading)
    assert (lag.total, lag.without_commit) == (6, 1)
    assert (lag.total, lag.without_commit) == witness_lag(bootstrap, group_id, topic, 3)


async def test_operator_status_and_metrics_show_the_lag(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str]
) -> None:
    topic = kafka_topic(3)
    bootstrap = kafka_broker.bootstrap
    group_id = f"lag-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, 3, per_partition=20)
    consume_and_commit(bootstrap, group_id, topic, {0: 5, 1: 20})
    expected = witness_lag(bootstrap, group_id, topic, 3)
    assert expected == (15, 1)
    spec = managed_spec(
        group_id=group_id,
        replicas=0,
        topics=[{"name": topic}],
        coordinator={"type": "kafka", "bootstrapServers": bootstrap},
    )
    async with running_cluster() as cluster:
        cluster.operator.metrics.partition_lag = True

        async def status() -> dict[str, Any] | None:
            body = await cluster.kube.get_group(NAMESPACE, "lagging")
            found = (body or {}).get("status") or {}
            return found if found.get("lag") is not None else None

        await cluster.create_group("lagging", spec)
        first = await cluster.eventually(status, timeout=60, what="status.lag")
        assert (first["lag"], first["lagPartitionsWithoutCommit"]) == expected
        labels = {"namespace": NAMESPACE, "group": "lagging"}

        def gauge(value: float) -> bool:
            # The actuator sets the gauges after it writes status.
            return cluster.metric("staticfleet_operator_group_lag", **labels) == value

        await cluster.eventually(lambda: gauge(15), what="the lag gauge at 15")
        partition = "staticfleet_operator_group_partition_lag"
        assert cluster.metric(partition, **labels, topic=topic, partition="0") == 15
        assert cluster.metric(partition, **labels, topic=topic, partition="1") == 0
        # No commit: no per-partition series (its lag is not known).
        assert cluster.metric(partition, **labels, topic=topic, partition="2") is None

        # More records: the next read (at most every 15 s) shows them; passes in between
        # keep the figure and its time.
        produce(bootstrap, topic, 3, per_partition=10)
        await cluster.passes(2)
        kept = await status()
        assert kept is not None and (kept["lag"], kept["lagTime"]) == (15, first["lagTime"])

        async def moved() -> dict[str, Any] | None:
            now = await status()
            return now if now is not None and now["lag"] != 15 else None

        later = await cluster.eventually(moved, timeout=40, what="a new lag reading")
        assert (later["lag"], later["lagPartitionsWithoutCommit"]) == witness_lag(
            bootstrap, group_id, topic, 3
        )
        assert later["lag"] == 35
        await cluster.eventually(lambda: gauge(35), what="the lag gauge at 35")
