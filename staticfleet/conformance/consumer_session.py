"""A scenario's view of a Kafka broker on the consumer protocol (KIP-848), answers as relations.

`ConsumerSession` is a `Session` (its classic requests, JoinGroup, SyncGroup, LeaveGroup...,
work as they do there, for a classic member in a consumer group) that also speaks
ConsumerGroupHeartbeat, ConsumerGroupDescribe and ListGroups v5. Our coordinator speaks none
of these, so its scenarios run against the broker alone, and each step's answer is pinned
(`Session.pin`) to what the operator relies on. Records are relational as in `session`:
member ids by logical name, partitions of the scenario's topic as sorted numbers. Member
epochs are kept as the broker answers them: every scenario has a fresh group, whose first
epoch is 1.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from coordinator.client.consumer_protocol_state import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    new_member_id,
)
from coordinator.client.kafka_groups import GroupType
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.errors import ErrorCode
from coordinator.protocol import Assignment, ProtocolError, TopicPartition, decode_assignment
from coordinator.protocol import encode_assignment as _encode_assignment
from staticfleet.conformance.session import CURRENT, Record, Session
from staticfleet.conformance.targets import KafkaTarget

# The rebalance timeout a consumer-protocol member announces when it joins (Kafka's
# max.poll.interval.ms stands in for it in the Java client; any positive value does here).
REBALANCE_TIMEOUT_MS = 5_000

__all__ = ["JOIN_EPOCH", "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "ConsumerMember", "ConsumerSession"]


@dataclass
class ConsumerMember:
    """A consumer-protocol member: the id it made itself (KIP-1082), its epoch, what it owns."""

    name: str
    instance_id: str | None
    member_id: str = field(default_factory=new_member_id)
    epoch: int = JOIN_EPOCH
    owned: tuple[int, ...] = ()


@dataclass
class ConsumerSession(Session):
    consumers: dict[str, ConsumerMember] = field(default_factory=dict)
    _topic_id: uuid.UUID | None = None

    def kafka(self, name: str) -> KafkaTransport:
        """The member's own connection to the broker (the only target these scenarios have)."""
        if not isinstance(self.target, KafkaTarget):
            raise TypeError("consumer-protocol scenarios run against a Kafka broker only")
        return self.target.transport(name)

    def consumer(self, name: str, instance_id: str | None = None) -> ConsumerMember:
        if name not in self.consumers:
            member = self.consumers[name] = ConsumerMember(name, instance_id)
            self._names[member.member_id] = name
        return self.consumers[name]

    def assignment(self, partitions: list[int] | tuple[int, ...]) -> bytes:
        """A classic leader's SyncGroup assignment for a member, as Kafka's ConsumerProtocol
        encodes it (the broker decodes it when it converts the group)."""
        return _encode_assignment(
            Assignment(tuple(TopicPartition(self.topic, p) for p in partitions))
        )

    async def topic_id(self) -> uuid.UUID:
        if self._topic_id is None:
            ids = await self.kafka("admin").topic_ids([self.topic])
            if self.topic not in ids:
                raise LookupError(
                    f"the broker has no topic {self.topic!r}: the consumer-protocol scenarios "
                    "need it (create it, 4 partitions)"
                )
            self._topic_id = ids[self.topic]
        return self._topic_id

    # ------------------------------------------------------------------ requests

    async def consumer_heartbeat(
        self,
        label: str,
        name: str,
        *,
        instance_id: str | None = None,
        epoch: int | None = None,
        member_id: object = CURRENT,
        owned: object = CURRENT,
        recorded: bool = True,
    ) -> Record:
        """One ConsumerGroupHeartbeat. Epoch 0 joins (subscribing to the topic); a heartbeat
        at the member's epoch acknowledges what it owns (what it was last given: these
        logical members take a new assignment at once). The member follows the answer."""
        member = self.consumer(name, instance_id)
        sent_epoch = member.epoch if epoch is None else epoch
        joining = sent_epoch == JOIN_EPOCH
        holding = member.owned if owned is CURRENT else owned
        topic_id = await self.topic_id()
        fields: dict[str, Any] = {
            "member_id": member.member_id if member_id is CURRENT else str(member_id),
            "member_epoch": sent_epoch,
            "instance_id": member.instance_id,
            "rack_id": None,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS if joining else -1,
            "subscribed_topic_names": [self.topic] if joining else None,
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": _owned(topic_id, holding, joining),
        }
        answer = await self._call(self.kafka(name).consumer_group_heartbeat(self.group_id, fields))
        if isinstance(answer, str):
            record: Record = {"failed": answer}
            if recorded:
                self.record(label, record)
            return record
        error = _error_name(answer.error_code)
        given: list[int] | None = None
        if answer.assignment is not None:
            given = sorted(p if t == topic_id else -1 for t, ps in answer.assignment for p in ps)
        if error == "NONE" and member_id is CURRENT:
            member.epoch = answer.member_epoch
            if given is not None:
                member.owned = tuple(given)
        record = {
            "error": error,
            "member": self.who(answer.member_id or ""),
            "member_epoch": answer.member_epoch,
            # None: unchanged since the member's last answer.
            "assignment": given,
        }
        if recorded:
            self.record(label, record)
        return record

    async def consumer_leave(self, label: str, name: str, *, static: bool) -> Record:
        """The closing heartbeat: epoch -2, a static member away for a restart (its instance
        id and partitions kept for the session), or -1, a leave."""
        member = self.consumers[name]
        epoch = STATIC_LEAVE_EPOCH if static else LEAVE_EPOCH
        record = await self.consumer_heartbeat(label, name, epoch=epoch, owned=None)
        if record.get("error") == "NONE":
            member.epoch, member.owned = JOIN_EPOCH, ()
        return record

    async def consumer_describe(self, label: str, *, recorded: bool = True) -> Record:
        """ConsumerGroupDescribe v1: the group's epochs and, per member, its epoch, protocol
        (MemberType) and assignment."""
        found = await self._call(self.kafka("admin").describe_consumer_group(self.group_id))
        if isinstance(found, str):
            refused: Record = {"failed": found}
            if recorded:
                self.record(label, refused)
            return refused
        record: Record = {
            "error": _error_name(found.error_code),
            "state": found.state,
            "group_epoch": found.group_epoch,
            "assignment_epoch": found.assignment_epoch,
            "converged": found.converged,
            "members": sorted(
                (
                    self.who(m.member_id),
                    m.instance_id,
                    m.member_epoch,
                    m.member_type.name.lower(),
                    [p for t, p in m.assignment if t == self.topic],
                )
                for m in found.members
            ),
        }
        if recorded:
            self.record(label, record)
        return record

    async def list_type(self, label: str) -> Record:
        """The group's type as ListGroups v5 lists it (None: not listed)."""
        listed = await self.kafka("admin").list_groups()
        types = {g.group_id: g.group_type for g in listed}
        found = types.get(self.group_id)
        consumer_only = await self.kafka("admin").list_groups([GroupType.CONSUMER])
        record: Record = {
            "type": None if found is None else found.value,
            "listed_as_consumer": self.group_id in {g.group_id for g in consumer_only},
        }
        self.record(label, record)
        return record

    async def finish_sync(self, label: str, task: Any) -> None:
        """As `Session.finish_sync`, with the assignment decoded: in a consumer group the
        broker, not a leader, writes a classic member's assignment."""
        await super().finish_sync(label, task)
        step = self.steps[-1]
        response = task.result()
        if isinstance(response, str):
            return
        try:
            decoded = decode_assignment(response.assignment)
            step.record["assignment"] = sorted(
                tp.partition for tp in decoded.partitions if tp.topic == self.topic
            )
        except ProtocolError:
            pass  # recorded as text, as the classic scenarios' markers are


def _owned(
    topic_id: uuid.UUID, holding: object, joining: bool
) -> list[tuple[uuid.UUID, list[int]]] | None:
    """The heartbeat's TopicPartitions: None (unchanged, or a leave), empty when joining (the
    broker refuses anything else), else the owned partitions of the topic."""
    if holding is None:
        return None
    partitions = list(holding) if isinstance(holding, (tuple, list)) else []
    return [(topic_id, partitions)] if partitions and not joining else []


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"kafka error {code}"
