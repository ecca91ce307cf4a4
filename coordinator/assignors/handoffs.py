"""The leader's own check of KIP-429's promise: never give a partition to one member while
another still owns it.

A cooperative assignor already revokes first and assigns in the follow-up rebalance; this is
the check of that promise (Kafka's validateCooperativeAssignment) made safe instead of fatal:
the partition is withheld from its new owner now, its old owner revokes it (it is not in its
assignment), rejoins, and the follow-up rebalance hands it over. Eager members claim nothing,
so eager groups are unaffected.

Two forms of the same rule: `defer_cooperative_handoffs` over `Assignment`s (the reference)
and `defer_cooperative_handoffs_compact` over a `CompactAssignment` (numpy, no per-partition
Python object for the assignment), which `PartitionAssignor.assign_encoded` applies before it
encodes; tests/client/test_leader_encoded.py checks they give the same bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.protocol import Assignment, Subscription, TopicPartition

if TYPE_CHECKING:
    from coordinator.assignors.compact import CompactAssignment

logger = logging.getLogger("coordinator.client.leader")


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
    """Each member's assignment without the partitions another member still owns."""
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
            _log_withheld(member_id, set(assignment.partitions) - set(kept))
            assignment = replace(assignment, partitions=kept)
        safe[member_id] = assignment
    return safe


def defer_cooperative_handoffs_compact(
    subscriptions: Mapping[str, Subscription], compact: CompactAssignment
) -> CompactAssignment:
    """`defer_cooperative_handoffs` array-wise: the same partitions withheld, as numbers."""
    if not any(subscription.owned_partitions for subscription in subscriptions.values()):
        return compact
    import numpy as np

    from coordinator.assignors.compact import CompactAssignment

    space = compact.space
    members = list(subscriptions)
    # Per partition number: the generation of its best claim and its owner's index in
    # `members` (-1: unclaimed, or a tie at the best generation), as `current_owners`.
    best = np.full(space.size, np.iinfo(np.int64).min, dtype=np.int64)
    owner = np.full(space.size, -1, dtype=np.int64)
    for index, member_id in enumerate(members):
        subscription = subscriptions[member_id]
        # Claims outside the space (unknown topics, partitions past the count) can be in
        # nobody's assignment: they change nothing.
        ids, claims = np.unique(space.ids_of(subscription.owned_partitions), return_counts=True)
        if ids.size == 0:
            continue
        generation = subscription.generation_id
        current = best[ids]
        higher = generation > current
        tie = generation == current
        # A member claiming one partition twice ties with itself (as the reference does).
        twice = claims > 1
        best[ids[higher]] = generation
        owner[ids[higher & ~twice]] = index
        owner[ids[(higher & twice) | tie]] = -1
    position = {member_id: index for index, member_id in enumerate(members)}
    kept_ids = []
    for member_id, ids in zip(compact.members, compact.ids, strict=True):
        claimed_by = owner[ids]
        keep = (claimed_by == -1) | (claimed_by == position.get(member_id, -2))
        if not keep.all():
            withheld = ids[~keep]
            topics = space.names[space.topic_of(withheld)].tolist()
            numbers = (withheld - space.offsets[space.topic_of(withheld)]).tolist()
            _log_withheld(
                member_id,
                {TopicPartition(t, n) for t, n in zip(topics, numbers, strict=True)},
            )
            ids = ids[keep]
        kept_ids.append(ids)
    return CompactAssignment(space, compact.members, kept_ids)


def _log_withheld(member_id: str, withheld: set[TopicPartition]) -> None:
    partitions: Sequence[TopicPartition] = sorted(withheld)
    logger.warning(
        "assignor moved %d owned partition(s) to %s in one rebalance; deferring them "
        "to the follow-up rebalance: %s",
        len(partitions),
        member_id,
        partitions[:10],
    )
