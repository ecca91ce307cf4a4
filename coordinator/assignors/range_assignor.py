"""Kafka's RangeAssignor: per topic, contiguous ranges of partitions to the subscribed members."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from coordinator.assignors.base import (
    FastPathAssignor,
    RebalanceProtocol,
    fast_path_enabled,
    java_string_key,
    ordered_members,
)
from coordinator.protocol import Assignment, Subscription, TopicPartition

if TYPE_CHECKING:
    from coordinator.assignors.compact import CompactAssignment


class RangeAssignor(FastPathAssignor):
    """For each topic, lay the subscribed members out in `MemberInfo` order (static members
    by instance id first) and give each `n // c` consecutive partitions, the first `n % c`
    members one more. Topics are independent, so with many topics the first members get
    more in total; that is Kafka's behaviour too.
    """

    name = "range"
    supported_protocols = (RebalanceProtocol.EAGER,)
    reads_last_assignment = False
    version = 0

    def assign_reference(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]:
        members_by_topic: dict[str, list[str]] = {}
        for member_id in ordered_members(subscriptions):
            for topic in set(subscriptions[member_id].topics):
                if topic in partitions_per_topic:
                    members_by_topic.setdefault(topic, []).append(member_id)

        partitions_by_member: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        for topic in sorted(members_by_topic, key=java_string_key):
            members = members_by_topic[topic]
            per_member, extra = divmod(max(0, partitions_per_topic[topic]), len(members))
            for position, member_id in enumerate(members):
                start = per_member * position + min(position, extra)
                length = per_member + (1 if position < extra else 0)
                partitions_by_member[member_id].extend(
                    TopicPartition(topic, partition) for partition in range(start, start + length)
                )
        return {m: Assignment(tuple(parts)) for m, parts in partitions_by_member.items()}

    def assign_compact(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> CompactAssignment | None:
        if not fast_path_enabled():
            return None
        # numpy is imported on the fast path's first use, not with the assignors.
        from coordinator.assignors.compact_engine import compact_range

        return compact_range(partitions_per_topic, subscriptions)
