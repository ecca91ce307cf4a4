"""What a Kafka cluster says about its groups beyond the classic DescribeGroups: each group's
type (ListGroups v5, KIP-848) and a consumer-protocol group's description
(ConsumerGroupDescribe). Typed results, decoded from kafka-python's messages; pure.

A consumer-protocol group (KIP-848) has no rebalance and no Stable: the broker bumps the
group epoch when membership or subscriptions change, computes a target assignment at that
epoch (the assignment epoch), and each member reconciles towards its target, its member
epoch reaching the group epoch when it holds its target. So "settled" is `converged`: every
member at the group epoch holding exactly its target assignment. A group converted from
classic, or joined by classic members, keeps them as members of the consumer group
(ConsumerGroupDescribe v1's MemberType, KIP-1099): `migrating` while any remains.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec


class GroupType(enum.StrEnum):
    """ListGroups' GroupType (v5+): the group's protocol on the broker."""

    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"
    STREAMS = "streams"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, raw: str | None) -> GroupType:
        try:
            return cls((raw or "").lower())
        except ValueError:
            return cls.UNKNOWN


class MemberType(enum.IntEnum):
    """ConsumerGroupDescribe v1's MemberType: which protocol the member speaks."""

    UNKNOWN = -1  # a v0 answer
    CLASSIC = 0
    CONSUMER = 1


class ListedGroup(msgspec.Struct, frozen=True):
    group_id: str
    group_type: GroupType
    state: str
    protocol_type: str


TopicPartitions = tuple[tuple[str, int], ...]  # sorted (topic, partition) pairs


class ConsumerGroupMember(msgspec.Struct, frozen=True):
    member_id: str
    instance_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    assignment: TopicPartitions
    target_assignment: TopicPartitions
    member_type: MemberType = MemberType.UNKNOWN

    def converged(self, group_epoch: int) -> bool:
        """At the group's epoch, holding exactly its target."""
        return self.member_epoch == group_epoch and self.assignment == self.target_assignment


class ConsumerGroupDescription(msgspec.Struct, frozen=True):
    """One group's ConsumerGroupDescribe answer. `error_code` is Kafka's raw code (0: none;
    GROUP_ID_NOT_FOUND, 69, for a group that is not a consumer-protocol group)."""

    group_id: str
    error_code: int
    error_message: str | None = None
    state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor: str = ""
    members: tuple[ConsumerGroupMember, ...] = ()

    @property
    def converged(self) -> bool:
        """The target assignment is computed for the group epoch and every member holds its
        target at that epoch (an empty group is converged: nothing to reconcile)."""
        return self.assignment_epoch == self.group_epoch and all(
            m.converged(self.group_epoch) for m in self.members
        )

    @property
    def migrating(self) -> bool:
        """Classic members remain in this consumer group (a migration under way)."""
        return any(m.member_type is MemberType.CLASSIC for m in self.members)

    @property
    def converged_members(self) -> int:
        return sum(1 for m in self.members if m.converged(self.group_epoch))


def _partitions(assignment: Any) -> TopicPartitions:
    return tuple(
        sorted(
            (str(tp.topic_name), int(p))
            for tp in assignment.topic_partitions
            for p in tp.partitions
        )
    )


def _member_type(raw: Any) -> MemberType:
    try:
        return MemberType(int(raw)) if raw is not None else MemberType.UNKNOWN
    except ValueError:
        return MemberType.UNKNOWN


def listed_groups(answer: Any) -> list[ListedGroup]:
    """A ListGroups answer (any version; before v5 every group reads as classic)."""
    return [
        ListedGroup(
            group_id=g.group_id,
            group_type=GroupType.parse(getattr(g, "group_type", None) or "classic"),
            state=str(getattr(g, "group_state", "") or ""),
            protocol_type=str(g.protocol_type or ""),
        )
        for g in answer.groups
    ]


def consumer_group_description(group: Any) -> ConsumerGroupDescription:
    """One `DescribedGroup` of a ConsumerGroupDescribe answer (v0 or v1)."""
    members = tuple(
        ConsumerGroupMember(
            member_id=str(m.member_id),
            instance_id=m.instance_id,
            member_epoch=int(m.member_epoch),
            client_id=str(m.client_id),
            client_host=str(m.client_host),
            subscribed_topics=tuple(sorted(m.subscribed_topic_names or ())),
            assignment=_partitions(m.assignment),
            target_assignment=_partitions(m.target_assignment),
            member_type=_member_type(getattr(m, "member_type", None)),
        )
        for m in group.members
    )
    return ConsumerGroupDescription(
        group_id=str(group.group_id),
        error_code=int(group.error_code),
        error_message=group.error_message,
        state=str(group.group_state or ""),
        group_epoch=int(group.group_epoch),
        assignment_epoch=int(group.assignment_epoch),
        assignor=str(group.assignor_name or ""),
        members=tuple(sorted(members, key=lambda m: (m.instance_id or "", m.member_id))),
    )


__all__ = [
    "ConsumerGroupDescription",
    "ConsumerGroupMember",
    "GroupType",
    "ListedGroup",
    "MemberType",
    "consumer_group_description",
    "listed_groups",
]
