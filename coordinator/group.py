"""A classic group and its members: membership, selected protocol, generation.

Pure data and rules, no I/O and no timers (those are keyed in `coordinator.timers`), like
Kafka's ClassicGroup / ClassicGroupMember, including the invariants it checks: breaking one
is a bug in the caller and raises `GroupInvariantError`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field, replace

from coordinator.errors import ErrorCode
from coordinator.messages import JoinGroupResponse, JoinGroupResponseMember, SyncGroupResponse
from coordinator.records import GroupRecord, MemberRecord, StoreBatch
from coordinator.state import GroupState, assert_valid_transition
from coordinator.subscriptions import group_topics


class GroupInvariantError(Exception):
    """A change would break a group invariant (Kafka's IllegalStateException there)."""


@dataclass(eq=False, slots=True)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    # A parked JoinGroup / SyncGroup waiting for the join phase / the leader's assignment.
    join_future: asyncio.Future[JoinGroupResponse] | None = None
    sync_future: asyncio.Future[SyncGroupResponse] | None = None
    # The session timer (`heartbeat-<group>-<member>`) is re-armed lazily: a heartbeat only
    # records `last_heard_ms`; when the timer fires early it re-arms for the rest (cancel +
    # re-arm per heartbeat was the heartbeat's main cost).
    last_heard_ms: int = 0
    # Joined but not yet through a join phase: its parked JoinGroup does not keep it alive
    # (Kafka's ClassicGroupMember.isNew and NewMemberJoinTimeoutMs).
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol_name}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among the group's candidates."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def complete_join(self, response: JoinGroupResponse) -> None:
        if self.join_future is not None and not self.join_future.done():
            self.join_future.set_result(response)
        self.join_future = None

    def complete_sync(self, response: SyncGroupResponse) -> bool:
        """Answer the parked SyncGroup, if any; True if one was answered."""
        future, self.sync_future = self.sync_future, None
        if future is None or future.done():
            return False
        future.set_result(response)
        return True

    def to_record(self) -> MemberRecord:
        return MemberRecord(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            protocols=self.protocols,
            assignment=self.assignment,
        )

    @classmethod
    def from_record(cls, record: MemberRecord, protocol_type: str) -> ClassicMember:
        return cls(
            member_id=record.member_id,
            group_instance_id=record.group_instance_id,
            client_id=record.client_id,
            client_host=record.client_host,
            session_timeout_ms=record.session_timeout_ms,
            rebalance_timeout_ms=record.rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=record.protocols,
            assignment=record.assignment,
        )


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # Dynamic members told MEMBER_ID_REQUIRED that have not rejoined yet (KIP-394).
    pending_members: set[str] = field(default_factory=set)
    # Members of this generation that have not sent SyncGroup yet.
    pending_sync_members: set[str] = field(default_factory=set)
    last_assignment_by_instance: dict[str, bytes] = field(default_factory=dict)
    # Partition counts of the subscribed topics when the join phase ended: the leader
    # assigned with these (a later change starts another rebalance).
    assigned_topics: dict[str, int] = field(default_factory=dict)
    # Initial rebalance delay bookkeeping (Kafka's InitialDelayedJoin).
    initial_join_in_progress: bool = False
    initial_join_remaining_ms: int = 0
    new_member_added: bool = False
    # How many members offer each protocol name, kept up to date so checking a join against
    # the group's candidate protocols does not recount every member (O(n) per join).
    protocol_counts: Counter[str] = field(default_factory=Counter)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The records of the operation running under the lock; it takes them into its
    # CoordinatorResult (`CoordinatorContext.result`), written before the lock is released.
    pending_writes: StoreBatch = field(default_factory=StoreBatch)
    needs_persist: bool = False
    # The record as last written: what a restarted coordinator would load.
    persisted_record: GroupRecord | None = None

    # --- state -------------------------------------------------------------------------

    def transition_to(self, target: GroupState) -> None:
        assert_valid_transition(self.state, target)
        self.state = target

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # --- membership ---------------------------------------------------------------------

    def awaiting_join_count(self) -> int:
        return sum(1 for member in self.members.values() if member.is_awaiting_join)

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: ClassicMember) -> None:
        """Kafka's ClassicGroup.add: the same checks, in the same order."""
        instance_id = member.group_instance_id
        if instance_id is not None and instance_id in self.static_members:
            raise GroupInvariantError(
                f"static member {instance_id} cannot be added to group {self.group_id}:"
                " it is already a member"
            )
        if self.members and member.protocol_type != self.protocol_type:
            raise GroupInvariantError(
                f"member {member.member_id} has protocol type {member.protocol_type!r},"
                f" group {self.group_id} has {self.protocol_type!r}"
            )
        if not self.supports_protocols(member.protocol_type, member.protocol_names):
            raise GroupInvariantError(
                f"group {self.group_id} supports none of member {member.member_id}'s protocols"
            )
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.protocol_counts.update(member.protocol_names)
        if instance_id is not None:
            self.static_members[instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def add_pending_member(self, member_id: str) -> bool:
        """KIP-394: a dynamic member id handed out, not joined yet; False if already pending."""
        if member_id in self.members:
            raise GroupInvariantError(
                f"pending member {member_id} is already a member of group {self.group_id}"
            )
        if member_id in self.pending_members:
            return False
        self.pending_members.add(member_id)
        return True

    def remove_pending_member(self, member_id: str) -> bool:
        """False if `member_id` was not pending."""
        if member_id not in self.pending_members:
            return False
        self.pending_members.discard(member_id)
        return True

    def add_pending_sync_member(self, member_id: str) -> None:
        if member_id not in self.members:
            raise GroupInvariantError(f"{member_id} is not a member of group {self.group_id}")
        self.pending_sync_members.add(member_id)

    def remove_pending_sync_member(self, member_id: str) -> bool:
        """Kafka's removePendingSyncMember: only a member can have been pending sync."""
        if member_id not in self.members:
            raise GroupInvariantError(f"{member_id} is not a member of group {self.group_id}")
        if member_id not in self.pending_sync_members:
            return False
        self.pending_sync_members.discard(member_id)
        return True

    def remove(self, member_id: str) -> ClassicMember | None:
        """None for an unknown member id: Kafka's remove is lenient there too."""
        member = self.members.pop(member_id, None)
        if member is None:
            self.pending_members.discard(member_id)
            self.pending_sync_members.discard(member_id)
            return None
        self.protocol_counts.subtract(member.protocol_names)
        self.protocol_counts += Counter()  # drop names no member offers any more
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """KIP-345: the instance id is known but mapped to another member id."""
        mapped = self.static_member_id(instance_id)
        return mapped is not None and mapped != member_id

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's validateMember: an instance id must map to this member id."""
        if instance_id is not None:
            mapped = self.static_members.get(instance_id)
            if mapped is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if mapped != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def replace_static_member(
        self, instance_id: str, old_member_id: str, new_member_id: str
    ) -> ClassicMember:
        """Give a static instance a new member id; the old one is fenced from now on."""
        member = self.members.pop(old_member_id, None)
        if member is None:
            raise GroupInvariantError(f"cannot replace non-existing member id {old_member_id}")
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def elect_joined_leader(self) -> bool:
        """Keep a leader that has rejoined; else pick a member that has. False if none has."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def has_all_members_joined(self) -> bool:
        # Newest first: members rejoin about in the order they joined, so the first one not
        # yet rejoined is found at once, not after every member that has (a 1,000-member
        # rebalance scanned ~500,000 members over its 1,001 joins).
        return not self.pending_members and all(
            member.is_awaiting_join for member in reversed(self.members.values())
        )

    def rebalance_timeout_ms(self) -> int:
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    # --- protocols ------------------------------------------------------------------------

    def set_member_protocols(
        self, member: ClassicMember, protocols: tuple[tuple[str, bytes], ...]
    ) -> None:
        """Change what a member offers; every change goes through here to keep the counts."""
        if member.member_id in self.members:
            self.protocol_counts.subtract(member.protocol_names)
            self.protocol_counts.update(name for name, _ in protocols)
            self.protocol_counts += Counter()
        member.protocols = protocols

    def candidate_protocols(self) -> set[str]:
        """Protocol names every member supports."""
        size = len(self.members)
        return {name for name, count in self.protocol_counts.items() if count == size}

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocol_names)
        if protocol_type != self.protocol_type:
            return False
        candidates = self.candidate_protocols()
        return any(name in candidates for name in protocol_names)

    def select_protocol(self) -> str:
        """Each member votes for its first candidate; most votes wins.

        Kafka leaves ties to hash order; we break them by the oldest member's preference so
        the choice is deterministic.
        """
        if not self.members:
            raise ValueError(f"group {self.group_id} has no members to select a protocol")
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"members of group {self.group_id} share no protocol")
        votes = Counter(member.vote(candidates) for member in self.members.values())
        oldest_preference = next(iter(self.members.values())).protocol_names
        return max(
            votes,
            key=lambda name: (
                votes[name],
                -oldest_preference.index(name) if name in oldest_preference else -len(votes),
            ),
        )

    def member_list_for_leader(self) -> list[JoinGroupResponseMember]:
        """Every member's metadata for the selected protocol (sent to the leader only)."""
        assert self.protocol_name is not None
        return [
            JoinGroupResponseMember(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                metadata=member.metadata_for(self.protocol_name),
                last_assignment=self.last_assignment_for(member),
            )
            for member in self.members.values()
        ]

    def consumed_topics(self) -> frozenset[str]:
        """Every topic some member subscribes to with the selected protocol (consumer groups
        only; other protocol types' metadata is opaque)."""
        return group_topics(
            self.protocol_type,
            self.protocol_name,
            (member.protocols for member in self.members.values()),
        )

    def last_assignment_for(self, member: ClassicMember) -> bytes:
        if member.assignment:
            return member.assignment
        if member.group_instance_id is not None:
            return self.last_assignment_by_instance.get(member.group_instance_id, b"")
        return b""

    # --- persistence ------------------------------------------------------------------------

    def to_record(self) -> GroupRecord:
        persisted_state = GroupState.EMPTY if not self.members else GroupState.STABLE
        return GroupRecord(
            group_id=self.group_id,
            state=persisted_state.value,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader_id,
            members=tuple(member.to_record() for member in self.members.values()),
            last_assignment_by_instance=dict(self.last_assignment_by_instance),
            assigned_topics=dict(self.assigned_topics),
        )

    @classmethod
    def from_record(cls, record: GroupRecord) -> ClassicGroup:
        group = cls(group_id=record.group_id)
        group.generation_id = record.generation_id
        group.protocol_type = record.protocol_type
        group.protocol_name = record.protocol_name
        group.last_assignment_by_instance = dict(record.last_assignment_by_instance)
        group.assigned_topics = dict(record.assigned_topics)
        for member_record in record.members:
            group.add(ClassicMember.from_record(member_record, record.protocol_type or ""))
        group.leader_id = record.leader if record.leader in group.members else group.leader_id
        # Loading is not a transition: a stored group is Stable with members, else Empty.
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group

    def persist_static_replacement(self, instance_id: str, old_member_id: str) -> None:
        """Record a static member's new id in the last persisted generation.

        Kafka persists a replacement only when it happens in Stable; one made mid-rebalance
        is lost if the coordinator dies before the next sync, and the live process is then
        fenced by its own old id. We rewrite the persisted record with the new id instead,
        so a restart keeps the last stable generation and the member that now holds it.
        """
        record = self.persisted_record
        new_member_id = self.static_members[instance_id]
        if record is None or all(m.member_id != old_member_id for m in record.members):
            return
        members = tuple(
            replace(m, member_id=new_member_id) if m.member_id == old_member_id else m
            for m in record.members
        )
        leader = new_member_id if record.leader == old_member_id else record.leader
        self.pending_writes.groups.append(replace(record, members=members, leader=leader))

    def take_pending_writes(self) -> StoreBatch:
        batch = self.pending_writes
        if not self.needs_persist and batch.is_empty():
            return batch  # nothing to write (most heartbeats): keep the empty batch
        if self.needs_persist:
            batch.groups.append(self.to_record())
            self.needs_persist = False
        if batch.groups:
            self.persisted_record = batch.groups[-1]
        self.pending_writes = StoreBatch()
        return batch
