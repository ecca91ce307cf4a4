"""Which member validly owns which partition, from the members' claims (KIP-341, KIP-792).

Members report the partitions they own together with the generation in which they got
them. Claims can conflict: a member that was away during a rebalance reports partitions that
have since moved (an older generation), and a bug or a split brain can make two members of
the same generation claim one partition. The rules, as in Kafka's AbstractStickyAssignor:

- a partition claimed by one member only is owned by it, whatever its generation;
- among conflicting claims the highest generation wins;
- if two or more members claim it in that highest generation, nobody owns it: it is
  *contested*, dropped from every claimant, and under the cooperative protocol it is handed
  to nobody until the claimants have revoked it.

The outcome does not depend on the order in which claims are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.assignors.partition_space import PartitionSpace
from coordinator.protocol import TopicPartition

# Kafka's AbstractStickyAssignor.DEFAULT_GENERATION: "generation unknown", lower than any real one.
DEFAULT_GENERATION = -1
# Values of `Ownership.owner_of` that are not a member position.
NO_OWNER = -1
CONTESTED = -2


@dataclass(frozen=True, slots=True)
class Claim:
    """What one member says it owns, and since which generation."""

    partitions: Sequence[TopicPartition]
    generation: int = DEFAULT_GENERATION


@dataclass(frozen=True, slots=True)
class Ownership:
    # Per partition number: position of the member that validly owns it, NO_OWNER or CONTESTED.
    owner_of: list[int]
    # Per member position: the partition numbers it validly owns, in claim order, no duplicates.
    owned: list[list[int]]


def resolve_ownership(space: PartitionSpace, claims: Sequence[Claim]) -> Ownership:
    """Apply the claim rules above; claims outside `space` are ignored."""
    owner_of = [NO_OWNER] * space.size
    if not any(claim.partitions for claim in claims):
        return Ownership(owner_of, [[] for _ in claims])

    generation_of = [DEFAULT_GENERATION] * space.size
    claimed: list[list[int]] = []
    for position, claim in enumerate(claims):
        ids = space.ids_of(claim.partitions)
        generation = claim.generation
        for number in ids:
            owner = owner_of[number]
            if owner == NO_OWNER or generation > generation_of[number]:
                owner_of[number] = position
                generation_of[number] = generation
            elif generation == generation_of[number] and owner != position:
                owner_of[number] = CONTESTED
        claimed.append(ids)

    owned = [
        [number for number in dict.fromkeys(ids) if owner_of[number] == position]
        for position, ids in enumerate(claimed)
    ]
    return Ownership(owner_of, owned)
