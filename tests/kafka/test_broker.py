"""The project's own broker: installed by kafka/pom.xml, started on loopback, real records."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from staticfleet.kafka.broker import PORT_RANGE, KafkaBroker

pytestmark = pytest.mark.kafka


def test_broker_listens_below_the_ephemeral_range(kafka_broker: KafkaBroker) -> None:
    low, high = PORT_RANGE
    assert low <= kafka_broker.port < high
    assert low <= kafka_broker.controller_port < high
    assert kafka_broker.bootstrap == f"127.0.0.1:{kafka_broker.port}"


def test_records_produced_are_consumed_from_their_partitions(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str]
) -> None:
    topic = kafka_topic(3)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    sent = {(partition, f"{partition}-{n}".encode()) for partition in range(3) for n in range(5)}
    for partition, value in sorted(sent):
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0) for partition in range(3)])
    received: set[tuple[int, bytes]] = set()
    try:
        for _ in range(100):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got_partition, payload = message.partition(), message.value()
                assert got_partition is not None and payload is not None
                received.add((got_partition, payload))
            if received == sent:
                break
    finally:
        consumer.close()
    assert received == sent
