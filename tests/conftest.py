"""Fixtures shared by every test directory: the Apache Kafka broker (tests marked `kafka`)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator

import pytest

from staticfleet.kafka.broker import KafkaBroker


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One KRaft broker for the session, installed by scripts/install-kafka.sh if absent.

    Tests share it, so each one uses topics and groups of its own (`kafka_topic`). A test
    that stops or kills a broker starts its own (`KafkaBroker(tmp_path)`), not this one.
    """
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    try:
        broker.wait_ready(timeout=120)
        yield broker
    finally:
        broker.stop()


_topic_numbers = itertools.count()


@pytest.fixture
def kafka_topic(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> Callable[[int], str]:
    """Creates a topic unique to this test with the given number of partitions; returns its name."""

    def create(partitions: int) -> str:
        # Kafka topic names allow [a-zA-Z0-9._-]; parametrized test names have more.
        base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:60]
        name = f"{base}-{next(_topic_numbers)}"
        kafka_broker.create_topic(name, partitions)
        return name

    return create
