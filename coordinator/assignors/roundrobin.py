"""Kafka's RoundRobinAssignor: all partitions in order, dealt to the members in a circle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from coordinator.assignors.base import (
    PartitionAssignor,
    RebalanceProtocol,
    java_string_key,
    ordered_members,
)
from coordinator.protocol import Assignment, Subscription, TopicPartition


class RoundRobinAssignor(PartitionAssignor):
    """Partitions sorted by (topic, partition) go one by one to the members in a circle
    (`MemberInfo` order: static members by instance id first); a member not subscribed to
    the partition's topic is skipped. Balanced when all subscriptions are equal, possibly
    not otherwise, exactly as in Kafka.
    """

    name = "roundrobin"
    supported_protocols = (RebalanceProtocol.EAGER,)
    reads_last_assignment = False
    version = 0

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]:
        members = ordered_members(subscriptions)
        topics_by_position = [frozenset(subscriptions[m].topics) for m in members]
        subscribed_topics = {
            topic
            for topics in topics_by_position
            for topic in topics
            if topic in partitions_per_topic
        }

        partitions_by_member: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        position = 0
        for topic in sorted(subscribed_topics, key=java_string_key):
            for partition in range(max(0, partitions_per_topic[topic])):
                # Terminates: at least one member subscribes to every topic in this loop.
                while topic not in topics_by_position[position]:
                    position = (position + 1) % len(members)
                partitions_by_member[members[position]].append(TopicPartition(topic, partition))
                position = (position + 1) % len(members)
        return {m: Assignment(tuple(parts)) for m, parts in partitions_by_member.items()}
