"""The demo's group on a real Kafka broker: the broker process, the admin calls the
scenarios make (DescribeGroups, batch LeaveGroup by instance id, OffsetFetch) over Kafka's
wire protocol, and the topic the members read, created and filled by a producer.

The admin calls go through `KafkaTransport` (the members' own Kafka layer), one event
loop kept for the whole run so its connections are reused between the many describes.

With `--kafka-listener SASL_SSL` or `SSL` the demo starts the secured test broker and the
members and admin calls use that listener, as its `admin` user (SCRAM-SHA-512) or with
admin's client certificate, through a settings file written next to the broker
(docs/kafka.md, "Secured clusters"); topics are still created and filled on PLAINTEXT.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.transport import TransportError
from coordinator.messages import LeaveGroupRequest, MemberIdentity, OffsetFetchRequest
from staticfleet.demo.admin import AdminError
from staticfleet.kafka.broker import BrokerError, KafkaBroker, Listener

T = TypeVar("T")
Partition = tuple[str, int]
KAFKA_SCHEME = "kafka://"


class KafkaCoordinator:
    """The broker in the role the embedded coordinator process plays in the scenarios:
    members get its URL, scenario 5 kills it with SIGKILL and starts it again on the same
    log directory and ports."""

    def __init__(self, workdir: Path, listener: Listener = "PLAINTEXT") -> None:
        self.broker = KafkaBroker(workdir, secured=listener != "PLAINTEXT")
        self.listener: Listener = listener
        self.restarts = 0
        # Written at start for a secured listener: the members' --kafka-config.
        self.client_config: Path | None = None
        self.client_settings = PLAINTEXT_SETTINGS

    @property
    def member_bootstrap(self) -> str:
        """The listener the members and the admin calls use."""
        return self.broker.listener_bootstrap(self.listener)

    @property
    def url(self) -> str:
        return KAFKA_SCHEME + self.member_bootstrap

    @property
    def pid(self) -> int | None:
        return self.broker.pid

    def start(self, timeout_s: float = 90.0) -> None:
        try:
            self.broker.start()
            self.broker.wait_ready(timeout_s)
        except BrokerError as error:
            raise RuntimeError(str(error)) from error
        if self.listener != "PLAINTEXT" and self.client_config is None:
            properties = self.broker.client_properties(self.listener)
            self.client_settings = KafkaClientSettings.from_properties(properties)
            self.client_config = write_client_config(
                self.broker.workdir / "demo-client.properties", properties
            )

    def kill(self) -> None:
        self.broker.kill()
        self.restarts += 1

    def stop(self) -> None:
        self.broker.stop()


def write_client_config(path: Path, properties: dict[str, str]) -> Path:
    """A .properties file only its owner reads (it holds a password or a key's path)."""
    text = "".join(
        f"{key}={value.replace(chr(92), chr(92) * 2)}\n" for key, value in properties.items()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    return path


def fill_topic(bootstrap: str, topic: str, partitions: int, records_per_partition: int) -> int:
    """Produce `records_per_partition` small records into every partition; returns the
    number produced (acknowledged)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    for index in range(records_per_partition):
        for partition in range(partitions):
            producer.produce(topic, value=f"record-{index}".encode(), partition=partition)
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} record(s) not acknowledged by the broker")
    return records_per_partition * partitions


class KafkaAdmin:
    """What the scenarios ask the coordinator, asked of the broker's group coordinator.
    Same methods as `AdminClient`; failures raise `AdminError` so the scenarios' retries
    and settle loop treat a broker coming back like a coordinator coming back."""

    def __init__(self, bootstrap: str, settings: KafkaClientSettings = PLAINTEXT_SETTINGS) -> None:
        self._loop = asyncio.new_event_loop()
        self._transport = KafkaTransport(
            bootstrap, client_id="staticfleet-demo-admin", settings=settings
        )

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        try:
            return self._loop.run_until_complete(asyncio.wait_for(call, 10.0))
        except (TransportError, OSError, TimeoutError) as error:
            raise AdminError(f"kafka: {error or type(error).__name__}") from error

    def close(self) -> None:
        self._loop.run_until_complete(self._transport.close())
        self._loop.close()

    def set_topics(self, topics: dict[str, int]) -> dict[str, int]:
        # The cluster's metadata is the topic list; nothing to set.
        return topics

    def describe(self, group_id: str) -> dict[str, Any]:
        """DescribeGroups in the shape of the admin API's describe. Kafka's answer has no
        generation and no leader: the generation comes from the members' logs (what the
        broker's JoinGroup answered them)."""
        described = self._run(self._transport.describe_group(group_id))
        if described.error_code.name != "NONE":
            raise AdminError(f"describe {group_id}: {described.error_code.name}")
        return {
            "group_id": described.group_id,
            "group_state": described.group_state,
            "generation_id": -1,
            "protocol_data": described.protocol_data,
            "leader": "",
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id}
                for m in described.members
            ],
        }

    def journal(self, group_id: str) -> list[dict[str, Any]]:
        # A broker keeps none; the runner derives one from the member logs (log_journal).
        return []

    def leave(self, group_id: str, instance_ids: Iterable[str], reason: str) -> dict[str, Any]:
        """Batch LeaveGroup (v3+) naming instance ids, as the operator sends on scale-down."""
        answer = self._run(
            self._transport.leave_group(
                LeaveGroupRequest(
                    group_id,
                    [MemberIdentity("", instance_id, reason) for instance_id in instance_ids],
                )
            )
        )
        if answer.error_code.name != "NONE":
            raise AdminError(f"leave {group_id}: {answer.error_code.name}")
        return {
            "members": [
                {"group_instance_id": m.group_instance_id, "error": m.error_code.name}
                for m in answer.members
            ]
        }

    def committed_offsets(self, group_id: str) -> dict[Partition, int]:
        answer = self._run(self._transport.fetch_offsets(OffsetFetchRequest(group_id)))
        if answer.error_code.name != "NONE":
            raise AdminError(f"offset fetch for {group_id}: {answer.error_code.name}")
        return {
            (p.topic, p.partition): p.committed_offset
            for p in answer.partitions
            if p.error_code.name == "NONE" and p.committed_offset >= 0
        }
