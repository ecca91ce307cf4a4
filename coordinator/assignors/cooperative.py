"""The cooperative protocol's one rule for an assignment (KIP-429).

Under the cooperative protocol members keep consuming their partitions through a rebalance,
so a partition must never go from one member to another in a single rebalance: while the
old owner has not revoked it, two members would consume it. Kafka's CooperativeStickyAssignor
therefore leaves such a partition out of the new owner's assignment; the old owner, seeing it
missing from its own, revokes it and rejoins at once, and the follow-up rebalance hands it
over. A partition claimed by two members is withheld from everyone until both revoked it.

`adjust_for_cooperative` applies the rule to any assignment, so a member client can check
(or fix) a leader's assignment the way Kafka's ConsumerCoordinator validates it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from coordinator.assignors.ownership import NO_OWNER
from coordinator.protocol import TopicPartition

_SHARED = ""  # owner marker for a partition that several members claim (member ids are non-empty)


@dataclass(frozen=True, slots=True)
class CooperativeAdjustment:
    # The assignment to hand out now.
    assignment: dict[str, tuple[TopicPartition, ...]]
    # Partitions held back until their current owner revoked them -> the member meant to get them.
    pending: dict[TopicPartition, str]


def partitions_transferring_ownership(
    assignment: Mapping[str, Iterable[TopicPartition]],
    owned_by_member: Mapping[str, Iterable[TopicPartition]],
) -> dict[TopicPartition, str]:
    """Partitions that `assignment` gives to a member while another member (or several)
    still owns them, mapped to the member the assignment gives them to."""
    owner: dict[TopicPartition, str] = {}
    for member_id, owned in owned_by_member.items():
        for tp in owned:
            previous = owner.setdefault(tp, member_id)
            if previous != member_id:
                owner[tp] = _SHARED
    transferring: dict[TopicPartition, str] = {}
    for member_id, partitions in assignment.items():
        for tp in partitions:
            current = owner.get(tp)
            if current is not None and current != member_id:
                transferring[tp] = member_id
    return transferring


def adjust_for_cooperative(
    assignment: Mapping[str, Sequence[TopicPartition]],
    owned_by_member: Mapping[str, Iterable[TopicPartition]],
) -> CooperativeAdjustment:
    """`assignment` without the partitions that would change owner in this rebalance."""
    pending = partitions_transferring_ownership(assignment, owned_by_member)
    adjusted = {
        member_id: tuple(tp for tp in partitions if pending.get(tp) != member_id)
        for member_id, partitions in assignment.items()
    }
    return CooperativeAdjustment(adjusted, pending)


def without_transfers(member: int, ids: Iterable[int], owner_of: Sequence[int]) -> list[int]:
    """The same rule on partition numbers (see `ownership`): of the partitions given to
    `member`, those it owns itself or that nobody validly owns or contests."""
    return [n for n in ids if owner_of[n] == member or owner_of[n] == NO_OWNER]
