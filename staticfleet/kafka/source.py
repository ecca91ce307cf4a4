"""Real Kafka topics as a member's source: librdkafka (confluent-kafka) with manual assignment.

The reader never joins a Kafka group of its own and never commits: the member's group (the
embedded coordinator or a Kafka cluster's, whichever `GroupMember` speaks to) decides which
partitions it reads, and offsets are committed through that group with the member's
generation, member id and instance id, so a fenced zombie's commit is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from coordinator.client.transport import TransportError
from coordinator.protocol import TopicPartition
from staticfleet.source import Record

logger = logging.getLogger(__name__)

SCHEME = "kafka://"


def bootstrap_of(url: str) -> str:
    """`kafka://host:port[,host:port]` -> the bootstrap servers list librdkafka takes."""
    if not url.startswith(SCHEME) or not url[len(SCHEME) :].strip("/"):
        raise ValueError(f"a Kafka source is kafka://host:port[,host:port...], not {url!r}")
    return url[len(SCHEME) :].strip("/")


def partition_counts(
    bootstrap: str, topics: Sequence[str], timeout: float = 10.0
) -> dict[str, int]:
    """Partition count per topic from the cluster's metadata (blocking: run it in a thread).

    Topics the cluster does not have are absent, as Kafka's consumer leaves them out of the
    assignment until they exist.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as error:
        raise TransportError(f"no metadata from Kafka at {bootstrap}: {error}") from error
    counts: dict[str, int] = {}
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is not None and topic.error is None and topic.partitions:
            counts[name] = len(topic.partitions)
    return counts


class KafkaReader:
    """`PartitionReader` over a librdkafka consumer with manual (incremental) assignment."""

    def __init__(
        self, bootstrap: str, *, client_id: str, settings: Mapping[str, Any] | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                # librdkafka wants a group id even for manual assignment; this one never joins
                # (no subscribe) and never commits, so it touches no group on the cluster.
                "group.id": f"staticfleet-reader-{client_id}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                **(settings or {}),
            }
        )
        self._assigned: set[TopicPartition] = set()

    def assign(self, start_offsets: Mapping[TopicPartition, int | None]) -> None:
        if not start_offsets:
            return
        self._consumer.incremental_assign(
            [
                KafkaTopicPartition(
                    tp.topic, tp.partition, OFFSET_BEGINNING if offset is None else offset
                )
                for tp, offset in sorted(start_offsets.items())
            ]
        )
        self._assigned.update(start_offsets)

    def unassign(self, partitions: Iterable[TopicPartition]) -> None:
        # librdkafka drops fetched records of unassigned partitions from its queue.
        gone = [tp for tp in partitions if tp in self._assigned]
        if not gone:
            return
        self._consumer.incremental_unassign(
            [KafkaTopicPartition(tp.topic, tp.partition) for tp in gone]
        )
        self._assigned.difference_update(gone)

    def poll(self, max_records: int) -> list[Record]:
        records: list[Record] = []
        for message in self._consumer.consume(max_records, 0):
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                if error.code() != KafkaError._PARTITION_EOF:
                    logger.warning("kafka source: %s", error)
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            if topic is None or partition is None or offset is None:
                continue
            tp = TopicPartition(topic, partition)
            if tp not in self._assigned:
                continue
            _, timestamp_ms = message.timestamp()
            records.append(
                Record(
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    timestamp_ms=timestamp_ms,
                    key=message.key() or b"",
                    value=message.value() or b"",
                )
            )
        return records

    def close(self) -> None:
        self._assigned.clear()
        self._consumer.close()
