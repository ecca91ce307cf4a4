"""What the coordinator persists: group metadata, committed offsets, journal rows, topics,
expected members and standby promotions; one `StoreBatch` is one operation's records.

Kafka writes a group's metadata record when a generation's assignment is stored, when a
static member is replaced, and when the group becomes empty; we persist at the same points.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from coordinator.expected_members import ExpectedMembers
from coordinator.journal import JournalEvent
from coordinator.standby import StandbyPromotion


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocols": [[name, _b64(metadata)] for name, metadata in self.protocols],
            "assignment": _b64(self.assignment),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MemberRecord:
        return cls(
            member_id=data["member_id"],
            group_instance_id=data["group_instance_id"],
            client_id=data["client_id"],
            client_host=data["client_host"],
            session_timeout_ms=int(data["session_timeout_ms"]),
            rebalance_timeout_ms=int(data["rebalance_timeout_ms"]),
            protocols=tuple((name, _unb64(metadata)) for name, metadata in data["protocols"]),
            assignment=_unb64(data["assignment"]),
        )


@dataclass(frozen=True, slots=True)
class GroupRecord:
    group_id: str
    state: str  # "Empty" or "Stable": the only states Kafka persists a group in
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    members: tuple[MemberRecord, ...]
    # Last assignment per static instance id, kept after the member is gone (static-sticky).
    last_assignment_by_instance: dict[str, bytes] = field(default_factory=dict)
    # Partition counts of the subscribed topics the assignment was made with: a restart
    # finding other counts rebalances (empty: not known, as in records from before).
    assigned_topics: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "state": self.state,
            "generation_id": self.generation_id,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "leader": self.leader,
            "members": [member.to_json() for member in self.members],
            "last_assignment_by_instance": {
                instance: _b64(data) for instance, data in self.last_assignment_by_instance.items()
            },
            "assigned_topics": dict(self.assigned_topics),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupRecord:
        return cls(
            group_id=data["group_id"],
            state=data["state"],
            generation_id=int(data["generation_id"]),
            protocol_type=data["protocol_type"],
            protocol_name=data["protocol_name"],
            leader=data["leader"],
            members=tuple(MemberRecord.from_json(member) for member in data["members"]),
            last_assignment_by_instance={
                instance: _unb64(text)
                for instance, text in data.get("last_assignment_by_instance", {}).items()
            },
            assigned_topics={
                str(topic): int(count) for topic, count in data.get("assigned_topics", {}).items()
            },
        )


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    topic: str
    partition: int
    committed_offset: int
    metadata: str | None
    commit_ts_ms: int


@dataclass(slots=True)
class StoreBatch:
    """One operation's records (Kafka's CoordinatorResult records), written in one
    transaction."""

    groups: list[GroupRecord] = field(default_factory=list)
    deleted_groups: list[str] = field(default_factory=list)
    offsets: list[tuple[str, OffsetRecord]] = field(default_factory=list)
    journal: list[JournalEvent] = field(default_factory=list)
    topics: dict[str, int] | None = None  # the whole topic map, when it changed
    # (group id, expected members): set, or with None cleared.
    expected_members: list[tuple[str, ExpectedMembers | None]] = field(default_factory=list)
    # (group id, standby id, promotion): set, or with None cleared (hot standby).
    promotions: list[tuple[str, str, StandbyPromotion | None]] = field(default_factory=list)

    def is_empty(self) -> bool:
        return (
            not (
                self.groups
                or self.deleted_groups
                or self.offsets
                or self.journal
                or self.expected_members
                or self.promotions
            )
            and self.topics is None
        )


@dataclass(slots=True)
class StoreSnapshot:
    groups: list[GroupRecord]
    offsets: dict[str, dict[tuple[str, int], OffsetRecord]]
    topics: dict[str, int]
    last_journal_seq: int
