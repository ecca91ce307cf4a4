"""Real Kafka topics as a member's source: librdkafka (confluent-kafka) with manual assignment.

The reader never joins a Kafka group of its own and never commits: the member's group (the
embedded coordinator or a Kafka cluster's, whichever `GroupMember` speaks to) decides which
partitions it reads, and offsets are committed through that group with the member's
generation, member id and instance id, so a fenced zombie's commit is refused.

Security: both clients take the member's `KafkaClientSettings` (`librdkafka_config()`), and
librdkafka's refusals (`_AUTHENTICATION`, `_SSL`, TOPIC_AUTHORIZATION_FAILED) become the same
typed `KafkaAccessError`s as our own transport's (`access_error`), so a member stops on them
instead of logging them for ever (docs/kafka.md, "Secured clusters").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from coordinator.client.kafka_errors import (
    NOT_A_SASL_LISTENER,
    KafkaAccessError,
    KafkaAuthenticationFailed,
    KafkaAuthorizationFailed,
    KafkaSaslMechanismUnsupported,
    KafkaTLSHostnameMismatch,
    KafkaTLSVerificationFailed,
)
from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
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


def access_error(error: KafkaError, where: str) -> KafkaAccessError | None:
    """The typed access error a librdkafka error means (None: not an access error).

    librdkafka reports TLS and SASL refusals as text under two codes; the text is OpenSSL's
    or the broker's, so this reads it for the cases a user must tell apart.
    """
    code, text = error.code(), str(error.str())
    lowered = text.lower()
    if code == KafkaError._AUTHENTICATION:
        if "mechanism" in lowered and ("not enabled" in lowered or "unsupported" in lowered):
            return KafkaSaslMechanismUnsupported(f"Kafka at {where}: {text}")
        # librdkafka's words for ILLEGAL_SASL_STATE. The coordinator's own handshake names
        # the same cause; whichever client meets the listener first reports it, so both
        # must give the same reason.
        if "not valid in current sasl state" in lowered:
            return KafkaSaslMechanismUnsupported(f"Kafka at {where}: {NOT_A_SASL_LISTENER}: {text}")
        return KafkaAuthenticationFailed(f"Kafka at {where}: {text}")
    if code == KafkaError._SSL:
        if "mismatch" in lowered and ("hostname" in lowered or "ip address" in lowered):
            return KafkaTLSHostnameMismatch(f"Kafka at {where}: {text}")
        if ("alert" in lowered and "certificate" in lowered) or "unknown ca" in lowered:
            return KafkaTLSVerificationFailed(
                f"Kafka at {where} refused our client certificate: {text}"
            )
        return KafkaTLSVerificationFailed(f"Kafka at {where}: {text}")
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return KafkaAuthorizationFailed("Fetch", "Topic", _topic_of(text), text)
    return None


def _topic_of(text: str) -> str:
    for word in text.replace('"', " ").replace("'", " ").split():
        if "[" in word and word.endswith("]"):
            return word.split("[", 1)[0]
    return "?"


class _AccessErrors:
    """librdkafka's `error_cb`: keeps the first access error it reports."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.first: KafkaAccessError | None = None

    def __call__(self, error: KafkaError) -> None:
        access = access_error(error, self.where)
        if access is None:
            # With an error_cb, librdkafka hands its errors here instead of to consume().
            logger.warning("kafka source: %s", error)
        elif self.first is None:
            self.first = access

    def raise_first(self) -> None:
        if self.first is not None:
            raise self.first


def partition_counts(
    bootstrap: str,
    topics: Sequence[str],
    timeout: float = 10.0,
    *,
    settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
) -> dict[str, int]:
    """Partition count per topic from the cluster's metadata (blocking: run it in a thread).

    Topics the cluster does not have are absent, as Kafka's consumer leaves them out of the
    assignment until they exist. A topic the client may not describe is a
    `KafkaAuthorizationFailed`.
    """
    errors = _AccessErrors(bootstrap)
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "log_level": 3,
        "error_cb": errors,
        **settings.librdkafka_config(),
    }
    admin = AdminClient(config)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as error:
        admin.poll(0)  # serves error_cb: the refusal behind a timeout, if there was one
        errors.raise_first()
        access = access_error(error.args[0], bootstrap) if error.args else None
        if access is not None:
            raise access from None
        raise TransportError(f"no metadata from Kafka at {bootstrap}: {error}") from error
    counts: dict[str, int] = {}
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None and settings.security_protocol != "PLAINTEXT":
            # A listing leaves out what the principal may not describe: ask for the topic by
            # name, which the broker answers TOPIC_AUTHORIZATION_FAILED then.
            try:
                topic = admin.list_topics(name, timeout=timeout).topics.get(name)
            except KafkaException as error:
                raise TransportError(f"no metadata from Kafka at {bootstrap}: {error}") from error
        refusal = topic.error if topic is not None else None
        if refusal is not None and refusal.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise KafkaAuthorizationFailed("Metadata", "Topic", name)
        if topic is not None and topic.error is None and topic.partitions:
            counts[name] = len(topic.partitions)
    return counts


class KafkaReader:
    """`PartitionReader` over a librdkafka consumer with manual (incremental) assignment."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        group_id: str | None = None,
        settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self._errors = _AccessErrors(bootstrap)
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "error_cb": self._errors,
                **settings.librdkafka_config(),
                # librdkafka wants a group id even for manual assignment, and looks up its
                # coordinator: the member's own group, so the member's ACLs (READ on its
                # group, docs/kafka.md) cover it. It never joins (no subscribe) and never
                # commits, so the group's membership is the member's alone.
                "group.id": group_id or f"staticfleet-reader-{client_id}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                **(extra_config or {}),
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
        """The records fetched so far; raises a `KafkaAccessError` when the cluster refused
        us (credentials, certificates, a topic's ACL)."""
        records: list[Record] = []
        messages = self._consumer.consume(max_records, 0)
        self._errors.raise_first()
        for message in messages:
            error = message.error()
            if error is not None:
                access = access_error(error, self.bootstrap)
                if access is not None:
                    if isinstance(access, KafkaAuthorizationFailed) and message.topic():
                        access = KafkaAuthorizationFailed(
                            "Fetch", "Topic", str(message.topic()), str(error.str())
                        )
                    raise access
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
