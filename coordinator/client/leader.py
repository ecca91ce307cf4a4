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
    members: Sequence[JoinGroupResponseMember],
) -> tuple[dict[str, Subscription], dict[str, tuple[TopicPartition, ...]]]:
    """Subscriptions (with the instance id from the member list, KIP-345) and the
    coordinator's last assignment per member (our extension, for static-sticky)."""
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
        if member.last_assignment:
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
    remembered: Mapping[str, Sequence[TopicPartition]] | None = None,
) -> list[SyncGroupRequestAssignment]:
    """Run the selected protocol's assignor and encode one assignment per member.

    `remembered` (group.instance.id -> partitions) is what this leader assigned the last
    time it led: used only when the coordinator sent no last assignments at all (a Kafka
    broker has no such extension), so `static-sticky` stays sticky by instance id there as
    long as the leader keeps leading; one leader's memory is one generation, never mixed
    with the coordinator's.
    """
    subscriptions, last_assignments = decode_members(members)
    if not last_assignments and remembered:
        present = {m.group_instance_id for m in members if m.group_instance_id}
        last_assignments = {
            instance: tuple(partitions)
            for instance, partitions in remembered.items()
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
    result = assignor.assign(
        partitions_per_topic,
        subscriptions,
        last_assignment_by_member=last_assignments or None,
    )
    result = defer_cooperative_handoffs(subscriptions, result)
    return [
        SyncGroupRequestAssignment(
            member_id=member_id,
            assignment=encode_assignment(
                result.get(member_id, Assignment(partitions=())), version=ASSIGNMENT_VERSION
            ),
        )
        for member_id in subscriptions
    ]


def assignments_by_instance(
    members: Sequence[JoinGroupResponseMember], assignments: Sequence[SyncGroupRequestAssignment]
) -> dict[str, tuple[TopicPartition, ...]]:
    """What a leader just assigned, by group.instance.id (static members only)."""
    instance_of = {m.member_id: m.group_instance_id for m in members}
    remembered: dict[str, tuple[TopicPartition, ...]] = {}
    for assignment in assignments:
        instance = instance_of.get(assignment.member_id)
        if instance:
            remembered[instance] = decode_assignment(assignment.assignment).partitions
    return remembered


def current_owners(subscriptions: Mapping[str, Subscription]) -> dict[TopicPartition, str]:
    """Who owns each claimed partition, by KIP-792: the claim with the highest generation
    wins; a tie at the highest generation means nobody provably owns it."""
    best: dict[TopicPartition, tuple[int, str | None]] = {}
    for member_id, subscription in subscriptions.items():
        for partition in subscription.owned_partitions:
            previous = best.get(partition)
            if previous is None or subscription.generation_id > previous[0]:
                best[partition] = (subscription.generation_id, member_id)
            elif subscription.generation_id == previous[0]:
                best[partition] = (previous[0], None)
    return {partition: owner for partition, (_, owner) in best.items() if owner is not None}


def defer_cooperative_handoffs(
    subscriptions: Mapping[str, Subscription], assignments: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    """Never give a partition to one member while another still owns it (KIP-429).

    A cooperative assignor already revokes first and assigns in the follow-up rebalance;
    this is the leader's own check of that promise (Kafka's validateCooperativeAssignment)
    made safe instead of fatal: the partition is withheld from its new owner now, its old
    owner revokes it (it is not in its assignment), rejoins, and the follow-up rebalance
    hands it over. Eager members claim nothing, so eager groups are unaffected.
    """
    owners = current_owners(subscriptions)
    if not owners:
        return dict(assignments)
    safe: dict[str, Assignment] = {}
    for member_id, assignment in assignments.items():
        kept = tuple(
            partition
            for partition in assignment.partitions
            if owners.get(partition, member_id) == member_id
        )
        if len(kept) != len(assignment.partitions):
            withheld = sorted(set(assignment.partitions) - set(kept))
            logger.warning(
                "assignor moved %d owned partition(s) to %s in one rebalance; deferring them "
                "to the follow-up rebalance: %s",
                len(withheld),
                member_id,
                withheld[:10],
            )
            assignment = replace(assignment, partitions=kept)
        safe[member_id] = assignment
    return safe
