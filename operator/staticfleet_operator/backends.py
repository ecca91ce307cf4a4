"""Where a ConsumerGroup's coordinator is: the embedded one, or a Kafka cluster's.

The glue (`reconcile.py`) asks a `GroupBackend` for the four things it needs — describe,
one batch LeaveGroup by instance id, the topics' partition counts, forgetting a deleted
group — and feeds the answers to the same pure rollout orchestrator either way.

`KafkaBackend` speaks Kafka's wire protocol through the member client's `KafkaTransport`
(kafka-python's protocol classes underneath): DescribeGroups, LeaveGroup v3+ naming
instance ids (what Kafka's `Admin.removeMembersFromConsumerGroup` sends), Metadata.

Kafka's DescribeGroups carries neither the generation, nor the leader, nor the protocols a
member offered (a member's metadata there is its subscription for the *selected* protocol
only). So: `supported_protocols` is the selected protocol (every member offered it, or the
broker could not have selected it) and the glue widens it with what each pod was created
with (`widen_offers`); the generation is read from the members' subscriptions (v2+ carry
the generation of their last assignment), a lower bound of the broker's; no leader is
known, so the rollout bounces in slot order.

A consumer-protocol group (KIP-848) is read with ConsumerGroupDescribe instead: DescribeGroups
v5 answers such a group as Dead with no members, as it answers a group that does not exist.
Each group's type is learned from the describe that answers and remembered, so a pass makes
one request: a remembered consumer group is described with ConsumerGroupDescribe (a
GROUP_ID_NOT_FOUND there: it went back to classic, or is gone, and DescribeGroups is asked);
a classic answer of Dead with no members is asked again with ConsumerGroupDescribe. (ListGroups
v5 names every group's type too, but lists every group a broker coordinates: one per pass
per group would read N groups N times.) docs/kafka.md, "The consumer protocol".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from kafka.protocol.admin import DescribeConfigsRequest
from kafka.protocol.metadata import MetadataRequest

from coordinator import (
    DescribedGroup,
    ErrorCode,
    GroupCoordinator,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
)
from coordinator.client.consumer_protocol_state import STATIC_LEAVE_EPOCH, leave_fields
from coordinator.client.kafka_connection import KafkaConnection
from coordinator.client.kafka_groups import ConsumerGroupDescription, GroupType
from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
from coordinator.client.kafka_transport import KafkaTransport, parse_bootstrap
from coordinator.client.transport import TransportError
from coordinator.messages import (
    NO_GENERATION,
    DescribedGroupMember,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from coordinator.protocol import ProtocolError, decode_subscription
from staticfleet_operator.lag import LagReading, TopicPartition
from staticfleet_operator.rollout import Assignors, CoordinatorView, GroupProtocol, MemberPod
from staticfleet_operator.rollout.migration import BROKER_CONFIGS, BrokerFacts, broker_facts
from staticfleet_operator.rollout.observation import consumer_group_state

log = logging.getLogger("staticfleet.operator")

LEAVE_REASON = "removed by the staticfleet operator"
# The operator's requests must not wait a member's long poll: short and retried next pass.
KAFKA_REQUEST_TIMEOUT_MS = 10_000


NOT_SERVING = "the embedded coordinator is not serving: this replica does not hold its store"


class CoordinatorUnreachable(Exception):
    """The group's coordinator did not answer; nothing is decided on a guess."""


class GroupBackend(Protocol):
    async def describe(self, group_id: str) -> DescribedGroup: ...

    async def leave(self, group_id: str, instance_ids: Sequence[str]) -> LeaveGroupResponse: ...

    async def topic_partitions(self, wanted: dict[str, int | None]) -> dict[str, int]:
        """The partition count of each wanted topic the coordinator knows."""
        ...

    async def forget(self, group_id: str) -> ErrorCode: ...


def topics_to_raise(known: Mapping[str, int], wanted: Mapping[str, int]) -> dict[str, int]:
    """The spec's partition counts that are above the coordinator's. Only raised, never
    lowered: a Kafka topic's partitions never shrink, and two ConsumerGroups naming one topic
    with different counts must not flip the metadata (and rebalance) on every pass."""
    return {topic: count for topic, count in wanted.items() if count > known.get(topic, 0)}


def leave_request(group_id: str, instance_ids: Sequence[str]) -> LeaveGroupRequest:
    return LeaveGroupRequest(
        group_id, [MemberIdentity("", instance_id, LEAVE_REASON) for instance_id in instance_ids]
    )


@dataclass
class EmbeddedBackend:
    """The operator's in-process coordinator: topic counts come from the spec."""

    coordinator: GroupCoordinator

    def serving(self) -> None:
        """Raises unless the coordinator serves: a replica that does not hold the store (not
        the active one, or not yet loaded: peering.py) has no state to decide on."""
        if not self.coordinator.is_ready:
            raise CoordinatorUnreachable(NOT_SERVING)

    async def describe(self, group_id: str) -> DescribedGroup:
        self.serving()
        [described] = await self.coordinator.describe_groups([group_id])
        return described

    async def leave(self, group_id: str, instance_ids: Sequence[str]) -> LeaveGroupResponse:
        self.serving()
        return await self.coordinator.leave_group(leave_request(group_id, instance_ids))

    async def topic_partitions(self, wanted: dict[str, int | None]) -> dict[str, int]:
        self.serving()
        counts = {topic: count for topic, count in wanted.items() if count is not None}
        raised = topics_to_raise(await self.coordinator.topic_metadata(), counts)
        if raised:
            # Each change rebalances the groups consuming the topic (docs/coordinator.md).
            await self.coordinator.set_topic_metadata(raised)
        known = await self.coordinator.topic_metadata()
        return {topic: known[topic] for topic in counts if topic in known}

    async def forget(self, group_id: str) -> ErrorCode:
        self.serving()
        results = await self.coordinator.delete_groups([group_id])
        return results.get(group_id, ErrorCode.NONE)


class KafkaBackend:
    """A Kafka cluster's group coordinator, reached with `settings` (TLS, SASL). A failure a
    retry can fix (`TransportError`) becomes `CoordinatorUnreachable`; a refusal
    (`KafkaAccessError`: authentication, TLS, a missing ACL) is raised as itself, for the
    group's Degraded reason. The transport reconnects on the next call."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
        transport: KafkaTransport | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.settings = settings
        # group id -> the type its last describe found (which describe to send first)
        self._types: dict[str, GroupType] = {}
        self.transport = transport or KafkaTransport(
            bootstrap_servers,
            client_id="staticfleet-operator",
            request_timeout_ms=KAFKA_REQUEST_TIMEOUT_MS,
            settings=settings,
        )

    async def describe(self, group_id: str) -> DescribedGroup:
        described, _ = await self.describe_typed(group_id)
        return described

    async def describe_typed(
        self, group_id: str
    ) -> tuple[DescribedGroup, ConsumerGroupDescription | None]:
        """The group as DescribeGroups shows it, and, for a consumer-protocol group, its
        ConsumerGroupDescribe answer (the DescribedGroup is then made from it)."""
        try:
            if self._types.get(group_id) is GroupType.CONSUMER:
                consumer = await self.transport.describe_consumer_group(group_id)
                if consumer.error_code == 0:
                    return described_from_consumer(consumer), consumer
                self._types.pop(group_id, None)
            classic = from_kafka(await self.transport.describe_group(group_id))
            if not _absent_or_other(classic):
                self._types[group_id] = GroupType.CLASSIC
                return classic, None
            consumer = await self.transport.describe_consumer_group(group_id)
        except TransportError as error:
            raise CoordinatorUnreachable(str(error)) from error
        if consumer.error_code != 0:
            return classic, None
        self._types[group_id] = GroupType.CONSUMER
        return described_from_consumer(consumer), consumer

    async def leave(self, group_id: str, instance_ids: Sequence[str]) -> LeaveGroupResponse:
        try:
            return await self.transport.leave_group(leave_request(group_id, instance_ids))
        except TransportError as error:
            raise CoordinatorUnreachable(str(error)) from error

    async def static_leave(self, group_id: str, member_id: str, instance_id: str) -> int:
        """A consumer-protocol static member's leave (epoch -2) on behalf of its dead
        process: the broker keeps the instance id and its partitions for a static rejoin
        (no group epoch bump, no reassignment), which a waiting standby then makes. Kafka's
        error code (0: done; UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID: `member_id` no longer
        holds `instance_id`). docs/kafka.md, "Hot standby"."""
        fields = leave_fields(member_id, instance_id, STATIC_LEAVE_EPOCH)
        try:
            answer = await self.transport.consumer_group_heartbeat(group_id, fields)
        except TransportError as error:
            raise CoordinatorUnreachable(str(error)) from error
        return int(answer.error_code)

    async def topic_partitions(self, wanted: dict[str, int | None]) -> dict[str, int]:
        try:
            cluster = await self.transport.topic_metadata()
        except TransportError as error:
            raise CoordinatorUnreachable(str(error)) from error
        return {topic: cluster[topic] for topic in wanted if topic in cluster}

    async def lag_reading(self, group_id: str, topics: Sequence[str]) -> LagReading:
        """The group's committed offsets (OffsetFetch, all partitions) and the log end
        offsets of `topics`' partitions (ListOffsets latest, from each leader): lag.py's
        input."""
        try:
            fetched = await self.transport.fetch_offsets(OffsetFetchRequest(group_id))
        except TransportError as error:
            raise CoordinatorUnreachable(str(error)) from error
        return LagReading(log_ends=await self.log_ends(topics), committed=committed_of(fetched))

    async def log_ends(self, topics: Sequence[str]) -> dict[TopicPartition, int]:
        """The log end offsets of `topics`' partitions (ListOffsets latest, from each
        leader): an embedded group's lag reads these here (its source cluster) and its
        commits from the embedded coordinator."""
        try:
            return await self.transport.log_end_offsets(topics)
        except TransportError as error:
            raise CoordinatorUnreachable(str(error)) from error

    async def forget(self, group_id: str) -> ErrorCode:
        # The group's committed offsets are the user's data on their cluster: a deleted
        # ConsumerGroup leaves them (Kafka removes an empty group after its offsets expire).
        return ErrorCode.NONE

    async def broker_facts(self) -> BrokerFacts:
        """What a consumer-protocol migration's pre-checks need from the cluster, from one
        bootstrap broker (brokers of one cluster share these settings): whether its
        ApiVersions lists ConsumerGroupHeartbeat, and DescribeConfigs of its
        group.consumer.migration.policy and group.consumer.max.size. A connection of its own,
        closed after: read only while a migration is ahead (rollout/migration.py)."""
        address = parse_bootstrap(self.bootstrap_servers)[0]
        connection = KafkaConnection(address, "staticfleet-operator", settings=self.settings)
        timeout_s = KAFKA_REQUEST_TIMEOUT_MS / 1000
        no_topics = {
            "topics": [],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        try:
            metadata = await connection.send(MetadataRequest, (10, 12), no_topics, timeout_s)
            try:
                connection.version(_ConsumerGroupHeartbeat, 0)
                heartbeat = True
            except TransportError:
                heartbeat = False
            resource = DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=BROKER_RESOURCE,
                resource_name=str(metadata.brokers[0].node_id),
                configuration_keys=list(BROKER_CONFIGS),
            )
            fields = {"resources": [resource], "include_synonyms": False}
            answer = await connection.send(DescribeConfigsRequest, (1, 4), fields, timeout_s)
        except TransportError as error:
            raise CoordinatorUnreachable(str(error)) from error
        finally:
            connection.close()
        configs = {c.name: c.value for result in answer.results for c in result.configs}
        refused = [f"error {r.error_code}" for r in answer.results if r.error_code]
        return broker_facts(heartbeat, configs, ", ".join(refused) or None)

    async def close(self) -> None:
        await self.transport.close()


BackendKey = tuple[str, str]  # (bootstrap servers, settings fingerprint)
BROKER_RESOURCE = 4  # DescribeConfigs' ConfigResource type BROKER


class _ConsumerGroupHeartbeat:
    """ConsumerGroupHeartbeat (KIP-848) as far as `KafkaConnection.version` asks: whether the
    broker's ApiVersions lists its key. The operator never sends one."""

    API_KEY = 68
    max_version = 1


class KafkaBackends:
    """One `KafkaBackend` per (bootstrap list, settings), shared by the groups that use
    both. Keyed by the settings' fingerprint: after a rotated password or certificate a
    group's next pass gets a new connection, and the old one is closed once no group uses
    it."""

    def __init__(self) -> None:
        self._backends: dict[BackendKey, KafkaBackend] = {}
        self._users: dict[str, BackendKey] = {}  # group key -> what it used last

    def get(
        self, bootstrap_servers: str, settings: KafkaClientSettings = PLAINTEXT_SETTINGS
    ) -> KafkaBackend:
        return self._get((bootstrap_servers, settings_fingerprint(settings)), settings)

    def _get(self, key: BackendKey, settings: KafkaClientSettings) -> KafkaBackend:
        backend = self._backends.get(key)
        if backend is None:
            backend = self._backends[key] = KafkaBackend(key[0], settings=settings)
        return backend

    async def for_group(
        self, group: str, bootstrap_servers: str, settings: KafkaClientSettings
    ) -> KafkaBackend:
        """The group's backend; one the group used before with other settings is closed
        when no other group uses it."""
        key = (bootstrap_servers, settings_fingerprint(settings))
        backend = self._get(key, settings)
        previous = self._users.get(group)
        self._users[group] = key
        if previous is not None and previous != key:
            await self._close_unused(previous)
        return backend

    async def release(self, group: str) -> None:
        """The group is gone: its backend closes when no other group uses it."""
        previous = self._users.pop(group, None)
        if previous is not None:
            await self._close_unused(previous)

    async def _close_unused(self, key: BackendKey) -> None:
        if key in self._users.values():
            return
        backend = self._backends.pop(key, None)
        if backend is not None:
            await backend.close()

    async def close(self) -> None:
        for backend in self._backends.values():
            await backend.close()
        self._backends.clear()
        self._users.clear()


def settings_fingerprint(settings: KafkaClientSettings) -> str:
    """A digest of every setting (secrets included, never shown): equal settings share a
    connection; a rotated password or certificate gets a new one."""
    material = json.dumps(settings.to_properties(), sort_keys=True).encode()
    return hashlib.sha256(material).hexdigest()[:16]


def from_kafka(group: DescribedGroup) -> DescribedGroup:
    """A Kafka DescribeGroups answer with what the rules read filled in from what it has."""
    if group.error_code is not ErrorCode.NONE:
        return group
    generations: list[int] = []
    members = []
    for member in group.members:
        # Not a consumer-protocol member (or empty while joining): no generation.
        with contextlib.suppress(ProtocolError):
            generations.append(decode_subscription(member.member_metadata).generation_id)
        offered = [group.protocol_data] if group.protocol_data else []
        members.append(replace(member, supported_protocols=offered))
    known = [g for g in generations if g >= 0]
    generation = max(known) + 1 if known else NO_GENERATION
    return replace(group, members=members, generation_id=generation)


def _absent_or_other(group: DescribedGroup) -> bool:
    """DescribeGroups (v5) answers a consumer-protocol group like a missing one."""
    return group.error_code is ErrorCode.GROUP_ID_NOT_FOUND or (
        group.error_code is ErrorCode.NONE and group.group_state == "Dead" and not group.members
    )


def described_from_consumer(group: ConsumerGroupDescription) -> DescribedGroup:
    """A consumer group's ConsumerGroupDescribe answer as the DescribedGroup the status and
    the rules read: the state in the classic vocabulary (`consumer_group_state`), the group
    epoch as the generation, the broker's assignor as the selected protocol; no member
    metadata (the broker assigns: members offer no classic assignor)."""
    return DescribedGroup(
        error_code=ErrorCode.NONE,
        group_id=group.group_id,
        group_state=consumer_group_state(group.state, group.converged).value,
        protocol_type="consumer",
        protocol_data=group.assignor,
        members=[
            DescribedGroupMember(m.member_id, m.instance_id, m.client_id, m.client_host, b"", b"")
            for m in group.members
        ],
        generation_id=group.group_epoch,
    )


def widen_offers(
    view: CoordinatorView, pods: Sequence[MemberPod], assignors: Assignors
) -> CoordinatorView:
    """Each member's offered protocols, from what its pod was created with, as long as the
    broker's selected protocol is among them (the broker proves a member offered that one);
    otherwise only what the broker proves. Kafka's describe does not list the offers.

    A consumer-protocol group's members offer no classic assignor (the broker assigns), so
    there is nothing to prove: a member with a pod is taken to offer what its pod was
    created with (its rejoin is proven by its epoch instead: `CoordinatorView.settled`)."""
    by_instance = {p.instance_id: p for p in pods if not p.deleting}
    consumer = view.protocol is GroupProtocol.CONSUMER
    members = []
    for member in view.members:
        pod = by_instance.get(member.instance_id) if member.instance_id else None
        offered = assignors.offered_by(pod.protocol) if pod is not None else frozenset()
        proven = bool(member.supported_protocols) and member.supported_protocols <= offered
        if proven or (consumer and pod is not None):
            members.append(replace(member, supported_protocols=offered))
        else:
            members.append(member)
    return replace(view, members=tuple(members))


def committed_of(fetched: OffsetFetchResponse) -> dict[TopicPartition, int]:
    """An OffsetFetch answer's committed offsets (Kafka's or the embedded coordinator's),
    as lag.py reads them: partitions answered with an error are left out."""
    return {
        (p.topic, p.partition): p.committed_offset
        for p in fetched.partitions
        if p.error_code is ErrorCode.NONE
    }


def leave_errors(response: LeaveGroupResponse) -> list[str]:
    """Per-member problems of a batch LeaveGroup, as `instance-id: ERROR` lines."""
    problems = [
        f"{m.group_instance_id or m.member_id}: {m.error_code.name}"
        for m in response.members
        if m.error_code is not ErrorCode.NONE
    ]
    if response.error_code is not ErrorCode.NONE:
        problems.insert(0, f"group: {response.error_code.name}")
    return problems


__all__ = [
    "CoordinatorUnreachable",
    "EmbeddedBackend",
    "GroupBackend",
    "KafkaBackend",
    "KafkaBackends",
    "committed_of",
    "described_from_consumer",
    "from_kafka",
    "leave_errors",
    "settings_fingerprint",
    "widen_offers",
]
