"""The Kafka source inside one member, in process: the group decides, the group commits."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable

import pytest
from confluent_kafka import KafkaError

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore, SystemClock
from coordinator.client import GroupMember, InProcessTransport
from coordinator.client.kafka_errors import (
    KafkaAuthenticationFailed,
    KafkaSaslMechanismUnsupported,
)
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.protocol import TopicPartition
from staticfleet.kafka.broker import KafkaBroker
from staticfleet.kafka.source import KafkaReader, access_error, bootstrap_of, partition_counts
from staticfleet.member.cluster_metadata import ClusterTopicMetadata
from staticfleet.member.events import EventLog
from staticfleet.member.source_consumer import SourceConsumer
from tests.client.helpers import member_config

from .helpers import produce

pytestmark = pytest.mark.kafka


@pytest.fixture
async def coordinator() -> AsyncIterator[GroupCoordinator]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    coordinator = GroupCoordinator(config, SystemClock(), MemoryStore())
    await coordinator.start()
    yield coordinator
    await coordinator.close()


def test_a_kafka_source_url_names_the_bootstrap_servers() -> None:
    assert bootstrap_of("kafka://127.0.0.1:9092,127.0.0.1:9093") == "127.0.0.1:9092,127.0.0.1:9093"
    for wrong in ("http://x:1", "kafka://", "127.0.0.1:9092"):
        with pytest.raises(ValueError, match="kafka://"):
            bootstrap_of(wrong)


def test_a_sasl_client_on_a_listener_without_sasl_is_told_so() -> None:
    # librdkafka's words when a SASL_SSL client meets an SSL listener; the coordinator's own
    # handshake reports the same cause, and CI once saw the two race for the exit reason.
    text = (
        "sasl_ssl://127.0.0.1:1/bootstrap: SASL SCRAM-SHA-512 mechanism handshake failed: "
        "Broker: Request not valid in current SASL state: broker's supported mechanisms:  "
        "(after 8ms in state AUTH_HANDSHAKE)"
    )
    error = access_error(KafkaError(KafkaError._AUTHENTICATION, text), "127.0.0.1:1")
    assert isinstance(error, KafkaSaslMechanismUnsupported)
    assert "does not use SASL" in str(error)
    wrong_password = "SASL authentication error: Authentication failed during authentication"
    refused = access_error(KafkaError(KafkaError._AUTHENTICATION, wrong_password), "b:1")
    assert type(refused) is KafkaAuthenticationFailed


def test_partition_counts_come_from_the_cluster(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str]
) -> None:
    five, two = kafka_topic(5), kafka_topic(2)
    counts = partition_counts(kafka_broker.bootstrap, [five, two, "no-such-topic"])
    assert counts == {five: 5, two: 2}


async def consume_until(consumer: SourceConsumer, total: int) -> None:
    for _ in range(300):
        consumer.consume_available()
        if consumer.consumed >= total:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"consumed {consumer.consumed} of {total}")


async def test_a_fenced_zombie_that_read_further_cannot_commit(
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[[int], str],
    coordinator: GroupCoordinator,
) -> None:
    topic = kafka_topic(2)
    partitions = {TopicPartition(topic, p) for p in range(2)}
    produce(kafka_broker.bootstrap, topic, 2, per_partition=50)
    config = member_config("reader-0", topics=(topic,))
    events = EventLog(io.StringIO(), group_id=config.group_id, instance_id="reader-0")
    consumer = SourceConsumer(KafkaReader(kafka_broker.bootstrap, client_id="zombie"), events)

    def transport() -> ClusterTopicMetadata:
        # The coordinator knows no topics: the leader's counts come from the cluster.
        inner = InProcessTransport(coordinator)
        return ClusterTopicMetadata(inner, kafka_broker.bootstrap, [topic])

    zombie = GroupMember(transport(), config, consumer)
    consumer.member = events.member = zombie
    successor = GroupMember(transport(), config)
    try:
        await zombie.start()
        assert await zombie.wait_for_assignment(30) == partitions
        await consume_until(consumer, 100)
        await consumer.commit()
        assert await zombie.fetch_committed(partitions) == dict.fromkeys(partitions, 50)

        produce(kafka_broker.bootstrap, topic, 2, per_partition=25, start=50)
        await consume_until(consumer, 150)
        assert consumer.positions == dict.fromkeys(partitions, 75)

        # Another process takes the instance id: the first one is a zombie now.
        await successor.start()
        assert await successor.wait_for_assignment(30) == partitions
        with pytest.raises(CoordinatorError) as refused:
            await zombie.commit(dict.fromkeys(partitions, 75))
        assert refused.value.code is ErrorCode.FENCED_INSTANCE_ID
        await consumer.commit()  # what its loop would do next: refused or nothing to send
        # The group kept the last offsets its rightful member committed.
        assert await successor.fetch_committed(partitions) == dict.fromkeys(partitions, 50)
    finally:
        await zombie.close()
        await successor.close()
        consumer.reader.close()
