"""The leader's job in a rebalance: read every member's subscription and assign.

Runs inside the member that the JoinGroup response names leader. The coordinator treats
the bytes as opaque; only here are they decoded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from coordinator.assignors import PartitionAssignor
from coordinator.messages import JoinGroupResponseMember, SyncGroupRequestAssignment
from coordinator.protocol import (
    Assignment,
    ProtocolError,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)

logger = logging.getLogger(__name__)

ASSIGNMENT_VERSION = 3


def decode_members(
    members: Sequence[JoinGroupResponseMember], *, read_last: bool = True
) -> tuple[dict[str, Subscription], dict[str, tuple[TopicPartition, ...]]]:
    """Subscriptions (with the instance id from the member list, KIP-345) and the
    coordinator's last assignment per member (our extension, for static-sticky; not decoded
    unless `read_last`: a partition tuple each is a second copy of the group's whole
    assignment)."""
    subscriptions: dict[str, Subscription] = {}
    last_assignments: dict[str, tuple[TopicPartition, ...]] = {}
    for member in members:
        try:
            subscription = decode_subscription(member.metadata)
        except ProtocolError as error:
            # One broken member must not stop the whole group: it subscribes to nothing
            # and so gets nothing, and the error names it.
            logger.error("member %s sent an unreadable subscription: %s", member.member_id, error)
            subscription = Subscription(topics=())
        subscriptions[member.member_id] = replace(
            subscription, group_instance_id=member.group_instance_id
        )
        if read_last and member.last_assignment:
            try:
                last_assignments[member.member_id] = decode_assignment(
                    member.last_assignment
                ).partitions
            except ProtocolError as error:
                logger.warning(
                    "ignoring unreadable last assignment of %s: %s", member.member_id, error
                )
    return subscriptions, last_assignments


def assign(
    assignor: PartitionAssignor,
    members: Sequence[JoinGroupResponseMember],
    topic_metadata: Mapping[str, int],
    remembered: Mapping[str, bytes] | None = None,
) -> list[SyncGroupRequestAssignment]:
    """Run the selected protocol's assignor and encode one assignment per member: the
    assignor's `assign_encoded`, bytes straight from its fast path when it has one, with
    the partitions another member still owns withheld (KIP-429, `assignors.handoffs`).

    Last assignments are decoded only for an assignor that reads them (static-sticky).
    `remembered` (group.instance.id -> assignment bytes) is what this leader assigned the
    last time it led: used only when the coordinator sent no last assignments at all (a
    Kafka broker has no such extension), so `static-sticky` stays sticky by instance id
    there as long as the leader keeps leading; one leader's memory is one generation, never
    mixed with the coordinator's.
    """
    reads_last = assignor.reads_last_assignment
    subscriptions, last_assignments = decode_members(members, read_last=reads_last)
    if reads_last and not last_assignments and remembered:
        present = {m.group_instance_id for m in members if m.group_instance_id}
        last_assignments = {
            instance: decode_assignment(data).partitions
            for instance, data in remembered.items()
            if instance in present
        }
    subscribed = {topic for subscription in subscriptions.values() for topic in subscription.topics}
    partitions_per_topic = {
        topic: count for topic, count in topic_metadata.items() if topic in subscribed
    }
    unknown = sorted(subscribed - partitions_per_topic.keys())
    if unknown:
        # As Kafka: a subscribed topic without metadata is simply not assigned (yet).
        logger.warning("no partition count known for subscribed topic(s) %s", ", ".join(unknown))
    encoded = assignor.assign_encoded(
        partitions_per_topic,
        subscriptions,
        last_assignment_by_member=last_assignments or None,
        version=ASSIGNMENT_VERSION,
        defer_handoffs=True,
    )
    nothing = encode_assignment(Assignment(partitions=()), version=ASSIGNMENT_VERSION)
    return [
        SyncGroupRequestAssignment(member_id=member_id, assignment=encoded.get(member_id, nothing))
        for member_id in subscriptions
    ]


def assignments_by_instance(
    members: Sequence[JoinGroupResponseMember], assignments: Sequence[SyncGroupRequestAssignment]
) -> dict[str, bytes]:
    """What a leader just assigned, by group.instance.id (static members only), as sent:
    decoded only if a later `assign` reads it."""
    instance_of = {m.member_id: m.group_instance_id for m in members}
    remembered: dict[str, bytes] = {}
    for assignment in assignments:
        instance = instance_of.get(assignment.member_id)
        if instance:
            remembered[instance] = assignment.assignment
    return remembered
