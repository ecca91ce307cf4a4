"""The assignment shared by `sticky` and `cooperative-sticky` (Kafka's AbstractStickyAssignor).

Goals, in order: every partition of a subscribed topic assigned exactly once; balanced
(counts differ by at most one when all subscriptions are equal, as balanced as the
subscriptions allow otherwise); sticky (a validly owned partition moves only when balance
requires it). The two assignors differ only in where owned partitions come from (user data
for `sticky`, the subscription's owned partitions for `cooperative-sticky`) and in the
cooperative rule applied at the end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from coordinator.assignors.base import java_string_key, known_topic_sets
from coordinator.assignors.constrained import constrained_assign
from coordinator.assignors.cooperative import without_transfers
from coordinator.assignors.general import general_assign
from coordinator.assignors.ownership import Claim, Ownership, resolve_ownership
from coordinator.assignors.partition_space import PartitionSpace
from coordinator.protocol import Assignment, Subscription


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    claims: Mapping[str, Claim],
    *,
    cooperative: bool,
) -> dict[str, Assignment]:
    """Assign, starting from each member's claim (`claims[member_id]`); with `cooperative`,
    partitions another member still owns are withheld (see `cooperative`)."""
    # Kafka orders members by member id here (ties, unfilled lists); only range and
    # round-robin need instance ids, because only they are not sticky.
    members = sorted(subscriptions, key=java_string_key)
    topic_sets = known_topic_sets(partitions_per_topic, subscriptions, members)
    space = PartitionSpace(partitions_per_topic, set().union(*topic_sets))
    member_claims = [claims[m] for m in members]
    ownership = resolve_ownership(space, member_claims)

    # Equal subscriptions (after dropping unknown topics) take Kafka's fast constrained path;
    # Kafka compares the raw topic lists, which sends a few more groups down the slow path.
    if all(topics == topic_sets[0] for topics in topic_sets):
        assigned = constrained_assign(space, ownership.owned)
    else:
        assigned = _general(space, topic_sets, ownership, member_claims)

    if cooperative:
        owner_of = ownership.owner_of
        assigned = [without_transfers(m, ids, owner_of) for m, ids in enumerate(assigned)]
    return {
        member_id: Assignment(space.to_partitions(sorted(assigned[m])))
        for m, member_id in enumerate(members)
    }


def _general(
    space: PartitionSpace,
    topic_sets: Sequence[frozenset[str]],
    ownership: Ownership,
    claims: Sequence[Claim],
) -> list[list[int]]:
    topic_indices = [space.topic_indices(topics) for topics in topic_sets]
    topic_of = space.topic_of
    # A member keeps owned partitions only of topics it still subscribes to.
    kept = [
        [n for n in owned if topic_of[n] in topic_indices[m]]
        for m, owned in enumerate(ownership.owned)
    ]
    weights = [1] * len(topic_sets)
    previous_owner = _owners_in_older_generations(space, claims)
    return general_assign(space, topic_indices, weights, kept, previous_owner)


def _owners_in_older_generations(space: PartitionSpace, claims: Sequence[Claim]) -> dict[int, int]:
    """Kafka's "prevAssignment": for partitions claimed in a generation older than the
    newest one seen, the member with the newest such claim (earliest member on ties). The
    balancing prefers handing a partition back to it."""
    if not claims:
        return {}
    newest = max(claim.generation for claim in claims)
    best: dict[int, tuple[int, int]] = {}
    for member, claim in enumerate(claims):
        if claim.generation >= newest:
            continue
        for number in space.ids_of(claim.partitions):
            current = best.get(number)
            if current is None or claim.generation > current[0]:
                best[number] = (claim.generation, member)
    return {number: member for number, (_, member) in best.items()}
