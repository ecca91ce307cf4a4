"""The two coordinators a scenario runs against, behind one small interface."""

from __future__ import annotations

from typing import Protocol

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore, SystemClock
from coordinator.client.inprocess import InProcessTransport
from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.transport import Transport
from coordinator.messages import DescribedGroup

# The broker settings the embedded coordinator mirrors (staticfleet.kafka.broker's
# FAST_TEST_SETTINGS): no initial rebalance delay, a 1 s minimum session timeout.
MIN_SESSION_TIMEOUT_MS = 1_000


class Target(Protocol):
    name: str

    def transport(self, member: str) -> Transport:
        """The transport of one logical member (a process of its own, with its connections)."""
        ...

    async def end_scenario(self) -> None:
        """Release what the scenario's members opened."""
        ...

    async def prepare(self, group_id: str, topics: dict[str, int]) -> None:
        """Make the group usable and the topics exist before a scenario starts."""
        ...

    async def describe(self, group_id: str) -> DescribedGroup: ...

    async def close(self) -> None: ...


class EmbeddedTarget:
    """Our `GroupCoordinator`, in process, on the wall clock (sessions expire for real)."""

    name = "embedded"

    def __init__(self) -> None:
        self.coordinator = GroupCoordinator(
            CoordinatorConfig(
                group_min_session_timeout_ms=MIN_SESSION_TIMEOUT_MS,
                group_initial_rebalance_delay_ms=0,
            ),
            SystemClock(),
            MemoryStore(),
        )
        self._transport = InProcessTransport(self.coordinator)
        self._started = False

    def transport(self, member: str) -> Transport:
        return self._transport

    async def end_scenario(self) -> None:
        return None

    async def prepare(self, group_id: str, topics: dict[str, int]) -> None:
        if not self._started:
            await self.coordinator.start()
            self._started = True
        known = await self.coordinator.topic_metadata()
        missing = {t: n for t, n in topics.items() if t not in known}
        if missing:
            await self.coordinator.set_topic_metadata({**known, **missing})

    async def describe(self, group_id: str) -> DescribedGroup:
        (described,) = await self.coordinator.describe_groups([group_id])
        return described

    async def close(self) -> None:
        await self.coordinator.close()


class KafkaTarget:
    """A Kafka cluster's group coordinator, over the wire (`KafkaTransport`)."""

    name = "kafka"

    def __init__(
        self,
        bootstrap: str,
        create_topic: object = None,
        *,
        settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
    ) -> None:
        self._bootstrap = bootstrap
        self._settings = settings
        self._transport = KafkaTransport(bootstrap, client_id="conformance", settings=settings)
        # A broker answers one request per connection at a time: members parked in
        # JoinGroup must not hold up each other's requests, so each has its own transport.
        self._members: dict[str, KafkaTransport] = {}
        # (name, partitions) -> None; creating topics is the broker harness's job.
        self._create_topic = create_topic
        self._topics: set[str] = set()

    def transport(self, member: str) -> KafkaTransport:
        if member not in self._members:
            self._members[member] = KafkaTransport(
                self._bootstrap, client_id=member, settings=self._settings
            )
        return self._members[member]

    async def end_scenario(self) -> None:
        for transport in self._members.values():
            await transport.close()
        self._members.clear()

    async def prepare(self, group_id: str, topics: dict[str, int]) -> None:
        for topic, partitions in topics.items():
            if topic not in self._topics and callable(self._create_topic):
                self._create_topic(topic, partitions)
                self._topics.add(topic)
        await self._transport.wait_for_coordinator(group_id)

    async def describe(self, group_id: str) -> DescribedGroup:
        return await self._transport.describe_group(group_id)

    async def close(self) -> None:
        await self.end_scenario()
        await self._transport.close()
