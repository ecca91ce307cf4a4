"""A transport to a Kafka cluster's group coordinator, over Kafka's wire protocol.

`GroupMember` runs unchanged over it: the messages are Kafka's own, so this module only
translates field names, picks request versions the broker accepts (JoinGroup v5+ for
`group.instance.id`, LeaveGroup v3+ for batches of member identities) and finds the group's
coordinator (FindCoordinator), finding it again when the broker says it moved.

Connections, as Kafka's Java client has them: one to a bootstrap broker (Metadata,
FindCoordinator, DescribeGroups) and two to the coordinator, because a broker answers one
request per connection at a time and JoinGroup/SyncGroup long-poll for up to a rebalance
timeout: JoinGroup and SyncGroup go on one, Heartbeat, LeaveGroup and the offset requests on
the other, so heartbeats keep the session alive while a join is parked.

Security: `settings` (a `KafkaClientSettings`, or a `KafkaSettingsFile` read again for each
new connection, so a rotated password or certificate is used) puts TLS and SASL on every
connection (kafka_connection.py); one OAuth token provider serves all of them. A refusal is a
`KafkaAccessError` (kafka_errors.py), raised, never retried here: a failed TLS handshake or
SASL authentication, and an answer saying GROUP/TOPIC/CLUSTER_AUTHORIZATION_FAILED (as
`KafkaAuthorizationFailed` naming the request, the resource type and its name).

Errors: Kafka's codes become `ErrorCode`s (an unknown code becomes UNKNOWN_SERVER_ERROR);
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS make the
transport forget the coordinator and raise the retriable `TransportError`, as the member
then simply retries. An OffsetCommit answer whose partitions all carry the same error gets
that error as its top-level code too, as our own coordinator answers (Kafka's OffsetCommit
response has no top-level code).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest as KafkaHeartbeatRequest,
)
from kafka.protocol.consumer.group import (
    JoinGroupRequest as KafkaJoinGroupRequest,
)
from kafka.protocol.consumer.group import (
    LeaveGroupRequest as KafkaLeaveGroupRequest,
)
from kafka.protocol.consumer.group import (
    OffsetCommitRequest as KafkaOffsetCommitRequest,
)
from kafka.protocol.consumer.group import (
    OffsetFetchRequest as KafkaOffsetFetchRequest,
)
from kafka.protocol.consumer.group import (
    SyncGroupRequest as KafkaSyncGroupRequest,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, OffsetSpec
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from coordinator.client.consumer_protocol_state import HeartbeatAnswer
from coordinator.client.kafka_connection import BrokerAddress, KafkaConnection
from coordinator.client.kafka_errors import TOPIC_AUTHORIZATION_FAILED, authorization_failed
from coordinator.client.kafka_groups import (
    ConsumerGroupDescription,
    GroupType,
    ListedGroup,
    consumer_group_description,
    listed_groups,
)
from coordinator.client.kafka_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)
from coordinator.client.kafka_security import token_source
from coordinator.client.kafka_settings import (
    DEFAULT_REQUEST_TIMEOUT_MS,
    PLAINTEXT_SETTINGS,
    KafkaClientSettings,
    KafkaSettingsFile,
)
from coordinator.client.transport import TransportError
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.messages import (
    DescribedGroup,
    DescribedGroupMember,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator.standby import StandbyHeartbeatRequest, StandbyHeartbeatResponse

logger = logging.getLogger(__name__)

DEFAULT_PORT = 9092
# As Kafka's client: a JoinGroup may be parked for the whole rebalance timeout.
LONG_POLL_MARGIN_MS = 5_000

# The answers that mean "ask FindCoordinator again" (Kafka's AbstractCoordinator).
COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)

# Versions we send (the broker may lower them, never below the minimum we need).
# OffsetCommit/OffsetFetch v10 name topics by id; v9 is what Kafka's classic consumer sends.
JOIN_VERSIONS = (5, 9)
SYNC_VERSIONS = (3, 5)
HEARTBEAT_VERSIONS = (3, 4)
LEAVE_VERSIONS = (3, 5)
COMMIT_VERSIONS = (7, 9)
FETCH_VERSIONS = (8, 9)
FIND_COORDINATOR_VERSIONS = (4, 6)
METADATA_VERSIONS = (10, 12)
DESCRIBE_VERSIONS = (3, 5)
# ListGroups v5 filters by and answers each group's type (KIP-848); ConsumerGroupDescribe v1
# says which members still speak the classic protocol (KIP-1099).
LIST_GROUPS_VERSIONS = (5, 5)
CONSUMER_DESCRIBE_VERSIONS = (0, 1)
# v1: the member makes its own id (KIP-1082), as Kafka 4.x's consumer does.
CONSUMER_HEARTBEAT_VERSIONS = (1, 1)
# ListOffsets v1+ answers one offset per partition (v0's offset lists are gone in Kafka 4).
LIST_OFFSETS_VERSIONS = (1, 7)


def parse_bootstrap(url: str) -> list[BrokerAddress]:
    """`kafka://host:port[,host:port...]` (or a bare `host:port,...`) as broker addresses."""
    text = url.removeprefix("kafka://").strip().strip("/")
    addresses: list[BrokerAddress] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        split = urlsplit(f"//{part}")
        if not split.hostname:
            raise ValueError(f"not a broker address: {part!r} in {url!r}")
        addresses.append(BrokerAddress(split.hostname, split.port or DEFAULT_PORT))
    if not addresses:
        raise ValueError(f"no broker address in {url!r}")
    return addresses


def error_code(raw: int) -> ErrorCode:
    try:
        return ErrorCode(raw)
    except ValueError:
        logger.warning("broker answered Kafka error code %d, unknown here", raw)
        return ErrorCode.UNKNOWN_SERVER_ERROR


class KafkaTransport:
    def __init__(
        self,
        bootstrap: str | Sequence[BrokerAddress],
        *,
        client_id: str = "staticfleet",
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        settings: KafkaClientSettings | KafkaSettingsFile = PLAINTEXT_SETTINGS,
    ) -> None:
        self._bootstrap = (
            parse_bootstrap(bootstrap) if isinstance(bootstrap, str) else list(bootstrap)
        )
        self._client_id = client_id
        # A KafkaSettingsFile is read again for each new connection (rotated credentials).
        self._settings_source = settings
        self._settings = settings.current() if isinstance(settings, KafkaSettingsFile) else settings
        self._token_provider = token_source(self._settings)
        self._timeout_s = request_timeout_ms / 1000
        self._long_poll_s = self._timeout_s
        self._metadata_connection: KafkaConnection | None = None
        self._coordinators: dict[str, BrokerAddress] = {}
        # (coordinator address, "join" | "control") -> connection
        self._connections: dict[tuple[BrokerAddress, str], KafkaConnection] = {}
        # partition leader -> connection (ListOffsets goes to each partition's leader)
        self._leader_connections: dict[BrokerAddress, KafkaConnection] = {}
        self._find_lock = asyncio.Lock()

    # ------------------------------------------------------------------ group requests

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        self._long_poll_s = max(
            self._timeout_s, (request.rebalance_timeout_ms + LONG_POLL_MARGIN_MS) / 1000
        )
        protocol = KafkaJoinGroupRequest.JoinGroupRequestProtocol
        fields = {
            "group_id": request.group_id,
            "session_timeout_ms": request.session_timeout_ms,
            "rebalance_timeout_ms": request.rebalance_timeout_ms,
            "member_id": request.member_id,
            "group_instance_id": request.group_instance_id,
            "protocol_type": request.protocol_type,
            "protocols": [protocol(name=p.name, metadata=p.metadata) for p in request.protocols],
            "reason": request.reason,
        }
        answer = await self._group_call(
            request.group_id,
            "join",
            KafkaJoinGroupRequest,
            JOIN_VERSIONS,
            fields,
            self._long_poll_s,
        )
        code = error_code(answer.error_code)
        return JoinGroupResponse(
            error_code=code,
            generation_id=answer.generation_id,
            protocol_type=answer.protocol_type,
            protocol_name=answer.protocol_name,
            leader=answer.leader,
            skip_assignment=bool(answer.skip_assignment),
            member_id=answer.member_id,
            members=[
                JoinGroupResponseMember(m.member_id, m.group_instance_id, bytes(m.metadata))
                for m in answer.members
            ],
        )

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        assignment = KafkaSyncGroupRequest.SyncGroupRequestAssignment
        fields = {
            "group_id": request.group_id,
            "generation_id": request.generation_id,
            "member_id": request.member_id,
            "group_instance_id": request.group_instance_id,
            "protocol_type": request.protocol_type,
            "protocol_name": request.protocol_name,
            "assignments": [
                assignment(member_id=a.member_id, assignment=a.assignment)
                for a in request.assignments
            ],
        }
        answer = await self._group_call(
            request.group_id,
            "join",
            KafkaSyncGroupRequest,
            SYNC_VERSIONS,
            fields,
            self._long_poll_s,
        )
        return SyncGroupResponse(
            error_code=error_code(answer.error_code),
            protocol_type=answer.protocol_type,
            protocol_name=answer.protocol_name,
            assignment=bytes(answer.assignment or b""),
        )

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        fields = {
            "group_id": request.group_id,
            "generation_id": request.generation_id,
            "member_id": request.member_id,
            "group_instance_id": request.group_instance_id,
        }
        answer = await self._group_call(
            request.group_id, "control", KafkaHeartbeatRequest, HEARTBEAT_VERSIONS, fields
        )
        return HeartbeatResponse(error_code(answer.error_code))

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        identity = KafkaLeaveGroupRequest.MemberIdentity
        fields = {
            "group_id": request.group_id,
            "members": [
                identity(
                    member_id=m.member_id, group_instance_id=m.group_instance_id, reason=m.reason
                )
                for m in request.members
            ],
        }
        answer = await self._group_call(
            request.group_id, "control", KafkaLeaveGroupRequest, LEAVE_VERSIONS, fields
        )
        return LeaveGroupResponse(
            error_code(answer.error_code),
            [
                LeaveGroupMemberResponse(m.member_id, m.group_instance_id, error_code(m.error_code))
                for m in answer.members
            ],
        )

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        topic_class = KafkaOffsetCommitRequest.OffsetCommitRequestTopic
        partition_class = topic_class.OffsetCommitRequestPartition
        by_topic: dict[str, list[Any]] = {}
        for p in request.partitions:
            by_topic.setdefault(p.topic, []).append(
                partition_class(
                    partition_index=p.partition,
                    committed_offset=p.committed_offset,
                    committed_leader_epoch=-1,
                    committed_metadata=p.committed_metadata,
                )
            )
        fields = {
            "group_id": request.group_id,
            "generation_id_or_member_epoch": request.generation_id,
            "member_id": request.member_id,
            "group_instance_id": request.group_instance_id,
            "topics": [topic_class(name=t, partitions=ps) for t, ps in by_topic.items()],
        }
        answer = await self._group_call(
            request.group_id, "control", KafkaOffsetCommitRequest, COMMIT_VERSIONS, fields
        )
        for t in answer.topics:
            for p in t.partitions:
                self._check_access(
                    p.error_code,
                    KafkaOffsetCommitRequest,
                    t.name if p.error_code == TOPIC_AUTHORIZATION_FAILED else request.group_id,
                )
        partitions = [
            OffsetCommitPartitionResponse(t.name, p.partition_index, error_code(p.error_code))
            for t in answer.topics
            for p in t.partitions
        ]
        self._check_coordinator(request.group_id, (p.error_code for p in partitions))
        codes = {p.error_code for p in partitions}
        top = codes.pop() if len(codes) == 1 else ErrorCode.NONE
        return OffsetCommitResponse(top, partitions)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        group_class = KafkaOffsetFetchRequest.OffsetFetchRequestGroup
        topic_class = group_class.OffsetFetchRequestTopics
        topics: list[Any] | None = None
        if request.partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in request.partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [topic_class(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        group = group_class(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.generation_id,
            topics=topics,
        )
        fields = {"groups": [group], "require_stable": False}
        answer = await self._group_call(
            request.group_id, "control", KafkaOffsetFetchRequest, FETCH_VERSIONS, fields
        )
        result = answer.groups[0]
        # v8+ carries the group's error per group, not at the top level.
        self._check_access(result.error_code, KafkaOffsetFetchRequest, request.group_id)
        for t in result.topics:
            for p in t.partitions:
                self._check_access(p.error_code, KafkaOffsetFetchRequest, t.name)
        self._check_coordinator(request.group_id, [error_code(result.error_code)])
        return OffsetFetchResponse(
            error_code(result.error_code),
            [
                OffsetFetchPartition(
                    t.name,
                    p.partition_index,
                    p.committed_offset,
                    p.metadata,
                    error_code(p.error_code),
                )
                for t in result.topics
                for p in t.partitions
            ],
        )

    async def standby_heartbeat(self, request: StandbyHeartbeatRequest) -> StandbyHeartbeatResponse:
        """A Kafka broker has no hot standby (it is ours, beyond KIP-345): refused."""
        raise CoordinatorError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"standby {request.standby_id}: a Kafka broker has no hot standby "
            "(use the staticfleet coordinator's HTTP transport)",
        )

    # ------------------------------------------------------------------ cluster requests

    async def topic_metadata(self) -> dict[str, int]:
        """Partition counts of every (non-internal) topic of the cluster."""
        answer = await self._metadata_call(
            MetadataRequest,
            METADATA_VERSIONS,
            {
                "topics": None,
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        return {
            t.name: len(t.partitions)
            for t in answer.topics
            if t.error_code == 0 and t.name and not t.is_internal
        }

    async def log_end_offsets(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """The log end offset (ListOffsets "latest", read uncommitted, as Kafka's
        consumer-groups tool shows) of every partition of `topics`, asked of each
        partition's leader. A topic the cluster does not have is left out; a partition
        whose leader answers an error is left out too (its lag is unknown, not 0)."""
        if not topics:
            return {}
        metadata = await self._metadata_call(
            MetadataRequest,
            METADATA_VERSIONS,
            {
                "topics": [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        brokers = {b.node_id: BrokerAddress(b.host, b.port) for b in metadata.brokers}
        by_leader: dict[BrokerAddress, dict[str, list[int]]] = {}
        for topic in metadata.topics:
            self._check_access(topic.error_code, MetadataRequest, topic.name)
            if topic.error_code != 0:
                continue
            for p in topic.partitions:
                leader = brokers.get(p.leader_id)
                if leader is not None:
                    by_leader.setdefault(leader, {}).setdefault(topic.name, []).append(
                        p.partition_index
                    )
        topic_class = ListOffsetsRequest.ListOffsetsTopic
        partition_class = topic_class.ListOffsetsPartition
        found: dict[tuple[str, int], int] = {}
        for leader, wanted in by_leader.items():
            fields = {
                "replica_id": -1,
                "isolation_level": 0,
                "timeout_ms": int(self._timeout_s * 1000),
                "topics": [
                    topic_class(
                        name=name,
                        partitions=[
                            partition_class(partition_index=i, timestamp=OffsetSpec.LATEST)
                            for i in indexes
                        ],
                    )
                    for name, indexes in wanted.items()
                ],
            }
            connection = self._leader_connections.get(leader)
            if connection is None:
                connection = self._leader_connections[leader] = self._new_connection(leader)
            try:
                answer = await connection.send(
                    ListOffsetsRequest, LIST_OFFSETS_VERSIONS, fields, self._timeout_s
                )
            except TransportError:
                self._leader_connections.pop(leader, None)
                connection.close()
                raise
            for t in answer.topics:
                for r in t.partitions:
                    self._check_access(r.error_code, ListOffsetsRequest, t.name)
                    if r.error_code == 0 and r.offset >= 0:
                        found[(t.name, r.partition_index)] = r.offset
        return found

    async def describe_group(self, group_id: str) -> DescribedGroup:
        """DescribeGroups of one group, from its coordinator (tests, admin, conformance)."""
        answer = await self._group_call(
            group_id,
            "control",
            DescribeGroupsRequest,
            DESCRIBE_VERSIONS,
            {"groups": [group_id], "include_authorized_operations": False},
        )
        group = answer.groups[0]
        self._check_access(group.error_code, DescribeGroupsRequest, group_id)
        self._check_coordinator(group_id, [error_code(group.error_code)])
        return DescribedGroup(
            error_code=error_code(group.error_code),
            group_id=group.group_id,
            group_state=group.group_state,
            protocol_type=group.protocol_type,
            protocol_data=group.protocol_data,
            members=[
                DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=bytes(m.member_metadata),
                    member_assignment=bytes(m.member_assignment),
                )
                for m in group.members
            ],
        )

    async def list_groups(self, types: Sequence[GroupType] = ()) -> list[ListedGroup]:
        """ListGroups v5 of the bootstrap broker: the groups it coordinates, with their type,
        those of `types` only (none: every type). A cluster of several brokers answers per
        broker; this asks the one the metadata connection reaches (tests, conformance)."""
        answer = await self._metadata_call(
            ListGroupsRequest,
            LIST_GROUPS_VERSIONS,
            {"states_filter": [], "types_filter": [t.value for t in types]},
        )
        code = error_code(answer.error_code)
        if code is not ErrorCode.NONE:
            raise TransportError(f"ListGroups: {code.name}")
        return listed_groups(answer)

    async def describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        """ConsumerGroupDescribe of one group, from its coordinator. A group that is not a
        consumer-protocol group answers GROUP_ID_NOT_FOUND (its `error_code`, not raised)."""
        answer = await self._group_call(
            group_id,
            "control",
            ConsumerGroupDescribeRequest,
            CONSUMER_DESCRIBE_VERSIONS,
            {"group_ids": [group_id], "include_authorized_operations": False},
        )
        group = answer.groups[0]
        self._check_access(group.error_code, ConsumerGroupDescribeRequest, group_id)
        self._check_coordinator(group_id, [error_code(group.error_code)])
        return consumer_group_description(group)

    async def consumer_group_heartbeat(
        self, group_id: str, fields: dict[str, Any]
    ) -> HeartbeatAnswer:
        """One ConsumerGroupHeartbeat (KIP-848); `fields` as the request's JSON names them
        (consumer_protocol_member.py builds them), `topic_partitions` as (topic id,
        partitions) pairs or None. Its error code is returned, not raised."""
        owned = fields.get("topic_partitions")
        if owned is not None:
            topic = ConsumerGroupHeartbeatRequest.TopicPartitions
            owned = [topic(topic_id=i, partitions=list(ps)) for i, ps in owned]
        answer = await self._group_call(
            group_id,
            "control",
            ConsumerGroupHeartbeatRequest,
            CONSUMER_HEARTBEAT_VERSIONS,
            {"group_id": group_id, **fields, "topic_partitions": owned},
        )
        assignment = answer.assignment
        return HeartbeatAnswer(
            error_code=answer.error_code,
            error_message=answer.error_message,
            member_id=answer.member_id,
            member_epoch=answer.member_epoch,
            heartbeat_interval_ms=answer.heartbeat_interval_ms,
            assignment=None
            if assignment is None
            else tuple((t.topic_id, tuple(t.partitions)) for t in assignment.topic_partitions),
        )

    async def topic_ids(self, topics: Sequence[str]) -> dict[str, uuid.UUID]:
        """The topic id of each of `topics` the cluster has (the consumer protocol names
        topics by id in assignments)."""
        answer = await self._metadata_call(
            MetadataRequest,
            METADATA_VERSIONS,
            {
                "topics": [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        found: dict[str, uuid.UUID] = {}
        for t in answer.topics:
            self._check_access(t.error_code, MetadataRequest, t.name)
            if t.error_code == 0 and t.name:
                found[t.name] = t.topic_id
        return found

    async def wait_for_coordinator(self, group_id: str, timeout_s: float = 30.0) -> None:
        """Until the group's coordinator is known and loaded (a fresh cluster creates its
        offsets topic on the first FindCoordinator, answering COORDINATOR_NOT_AVAILABLE
        meanwhile); for callers that send raw requests rather than retrying as a member."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            try:
                described = await self.describe_group(group_id)
                if described.error_code is ErrorCode.NONE:
                    return
                problem = described.error_code.name
            except TransportError as error:
                problem = str(error)
            if asyncio.get_running_loop().time() > deadline:
                raise TransportError(f"no coordinator for group {group_id!r}: {problem}")
            await asyncio.sleep(0.1)

    async def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        for connection in self._leader_connections.values():
            connection.close()
        self._leader_connections.clear()
        if self._metadata_connection is not None:
            self._metadata_connection.close()
            self._metadata_connection = None

    # ------------------------------------------------------------------ plumbing

    def _new_connection(self, address: BrokerAddress) -> KafkaConnection:
        if isinstance(self._settings_source, KafkaSettingsFile):
            settings = self._settings_source.current()
            if settings != self._settings:
                self._settings = settings
                self._token_provider = token_source(settings)
        return KafkaConnection(
            address,
            self._client_id,
            settings=self._settings,
            token_provider=self._token_provider,
        )

    @staticmethod
    def _check_access(raw: int, request_class: Any, resource_name: str) -> None:
        """Raise `KafkaAuthorizationFailed` when an answer's code says an ACL is missing."""
        error = authorization_failed(
            raw, request_class.__name__.removesuffix("Request"), resource_name
        )
        if error is not None:
            raise error

    async def _group_call(
        self,
        group_id: str,
        role: str,
        request_class: Any,
        versions: tuple[int, int],
        fields: dict[str, Any],
        timeout_s: float | None = None,
    ) -> Any:
        address = await self._coordinator(group_id)
        key = (address, role)
        connection = self._connections.get(key)
        if connection is None:
            connection = self._connections[key] = self._new_connection(address)
        try:
            answer = await connection.send(
                request_class, versions, fields, timeout_s or self._timeout_s
            )
        except TransportError:
            if not connection.connected:
                self._forget_coordinator(group_id)
            raise
        top = getattr(answer, "error_code", None)
        if top is not None:
            self._check_access(top, request_class, group_id)
            self._check_coordinator(group_id, [error_code(top)])
        return answer

    def _check_coordinator(self, group_id: str, codes: Any) -> None:
        moved = next((code for code in codes if code in COORDINATOR_ERRORS), None)
        if moved is not None:
            self._forget_coordinator(group_id)
            raise TransportError(f"group {group_id!r}: {moved.name}; finding its coordinator again")

    def _forget_coordinator(self, group_id: str) -> None:
        address = self._coordinators.pop(group_id, None)
        if address is None or address in self._coordinators.values():
            return
        for role in ("join", "control"):
            connection = self._connections.pop((address, role), None)
            if connection is not None:
                connection.close()

    async def _coordinator(self, group_id: str) -> BrokerAddress:
        async with self._find_lock:
            address = self._coordinators.get(group_id)
            if address is not None:
                return address
            answer = await self._metadata_call(
                FindCoordinatorRequest,
                FIND_COORDINATOR_VERSIONS,
                {"key_type": 0, "coordinator_keys": [group_id]},
            )
            found = answer.coordinators[0]
            self._check_access(found.error_code, FindCoordinatorRequest, group_id)
            code = error_code(found.error_code)
            if code is not ErrorCode.NONE:
                raise TransportError(f"FindCoordinator for group {group_id!r}: {code.name}")
            address = BrokerAddress(found.host, found.port)
            self._coordinators[group_id] = address
            return address

    async def _metadata_call(
        self, request_class: Any, versions: tuple[int, int], fields: dict[str, Any]
    ) -> Any:
        errors: list[str] = []
        connections = (
            [self._metadata_connection]
            if self._metadata_connection is not None
            else [self._new_connection(a) for a in self._bootstrap]
        )
        for connection in connections:
            try:
                answer = await connection.send(request_class, versions, fields, self._timeout_s)
            except TransportError as error:
                connection.close()
                self._metadata_connection = None
                errors.append(str(error))
                continue
            self._metadata_connection = connection
            return answer
        raise TransportError("; ".join(errors) or "no bootstrap broker")
