"""The project's own broker: installed by java/broker/pom.xml, started on loopback, real records."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from staticfleet.kafka.broker import PORT_RANGE, BrokerError, KafkaBroker, format_arguments

from .helpers import end_offsets, produce

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


def test_a_cluster_id_that_begins_with_a_dash_is_one_argument(tmp_path: Path) -> None:
    arguments = format_arguments("-CgGHoizROihcOYViBz3jg", tmp_path / "server.properties")
    assert "--cluster-id=-CgGHoizROihcOYViBz3jg" in arguments
    assert "--standalone" in arguments


def test_a_killed_broker_restarts_on_its_log_directory_with_its_records(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "broker")
    broker.start()
    try:
        broker.wait_ready(120)
        broker.create_topic("survivors", 2)
        produce(broker.bootstrap, "survivors", 2, per_partition=10)
        broker.kill()
        assert not broker.running()
        broker.start()  # the same ports, log directory and cluster id
        broker.wait_ready(120)
        assert end_offsets(broker.bootstrap, "survivors", 2) == {
            ("survivors", 0): 10,
            ("survivors", 1): 10,
        }
    finally:
        broker.stop()
    assert not broker.running()


def test_a_log_directory_keeps_its_ports_across_broker_objects(tmp_path: Path) -> None:
    first = KafkaBroker(tmp_path)
    first._write_config()
    again = KafkaBroker(tmp_path)
    assert (again.port, again.controller_port) == (first.port, first.controller_port)


def test_an_added_listener_is_advertised_as_asked_and_keeps_its_port(tmp_path: Path) -> None:
    """The soak's members reach the broker through a relay: the listener binds the bridge's
    address and is advertised at the relay's, which every client reconnects to."""
    first = KafkaBroker(tmp_path)
    port = first.add_listener("MEMBERS", "10.203.40.1", "10.203.40.1:40000")
    assert port not in (first.port, first.controller_port)
    properties = dict(line.split("=", 1) for line in first._write_config().read_text().splitlines())
    assert properties["listeners"].split(",") == [
        f"PLAINTEXT://127.0.0.1:{first.port}",
        f"CONTROLLER://127.0.0.1:{first.controller_port}",
        f"MEMBERS://10.203.40.1:{port}",
    ]
    assert properties["advertised.listeners"].split(",") == [
        f"PLAINTEXT://127.0.0.1:{first.port}",
        "MEMBERS://10.203.40.1:40000",
    ]
    assert "MEMBERS:PLAINTEXT" in properties["listener.security.protocol.map"].split(",")
    # A restart on the log directory (a new object, as after a kill -9) keeps it.
    again = KafkaBroker(tmp_path)
    assert again.add_listener("MEMBERS", "10.203.40.1", "10.203.40.1:40000") == port
    with pytest.raises(ValueError, match="taken"):
        again.add_listener("CONTROLLER", "10.203.40.1")
    with pytest.raises(BrokerError, match="secured"):
        KafkaBroker(tmp_path / "secured", secured=True).add_listener("MEMBERS", "10.203.40.1")


def test_a_brokers_listeners_never_draw_the_same_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each listener's port was picked on its own, so two could draw the same free port (it
    happened: CONTROLLER and SSL on one port, and Kafka refused to format its storage)."""
    draws = iter([21_000, 21_000, 21_000, 21_001, 21_001, 21_002, 21_003, 21_003, 21_004])
    monkeypatch.setattr("staticfleet.kafka.broker.random.randrange", lambda *_: next(draws))
    broker = KafkaBroker(tmp_path, secured=True)
    ports = [broker.port, broker.controller_port, broker.sasl_ssl_port, broker.ssl_port]
    assert sorted([*ports, broker.oidc_port]) == [21_000, 21_001, 21_002, 21_003, 21_004]
