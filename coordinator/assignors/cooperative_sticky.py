"""Kafka's CooperativeStickyAssignor: the sticky assignment under the cooperative protocol."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from coordinator.assignors.base import FastPathAssignor, RebalanceProtocol, fast_path_enabled
from coordinator.assignors.ownership import DEFAULT_GENERATION, Claim
from coordinator.assignors.sticky_engine import sticky_assign
from coordinator.protocol import (
    Assignment,
    ProtocolError,
    Subscription,
    TopicPartition,
    decode_cooperative_sticky_user_data,
    encode_cooperative_sticky_user_data,
)

if TYPE_CHECKING:
    from coordinator.assignors.compact import CompactAssignment, CompactSpace, IdArray


class CooperativeStickyAssignor(FastPathAssignor):
    """Sticky and balanced like `sticky`, plus the cooperative rule: a partition another
    member still owns is left out of its new owner's assignment until revoked (see
    `cooperative`). Owned partitions come from the subscription itself; their generation
    from the subscription (v2, KIP-792) or else from this assignor's user data (an int32
    generation, for v0/v1 subscriptions).

    Like Kafka's, it applies the cooperative rule whatever protocol the group runs: eager
    members own nothing when they join, so under eager the rule never withholds anything.
    """

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)
    reads_last_assignment = False
    version = 0

    def __init__(self) -> None:
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        return encode_cooperative_sticky_user_data(self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._generation = generation_id

    def assign_reference(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]:
        claims = {
            member_id: Claim(sub.owned_partitions, owned_generation(sub))
            for member_id, sub in subscriptions.items()
        }
        return sticky_assign(partitions_per_topic, subscriptions, claims, cooperative=True)

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
        from coordinator.assignors.compact_engine import compact_sticky

        def read_claim(space: CompactSpace, member_id: str) -> IdArray:
            return space.ids_of(subscriptions[member_id].owned_partitions)

        return compact_sticky(partitions_per_topic, subscriptions, read_claim, cooperative=True)


def owned_generation(subscription: Subscription) -> int:
    """The generation of a subscription's owned partitions: the v2 field when set, else the
    user data's; unknown (-1) when neither says, or when the user data is garbage."""
    if subscription.generation_id != DEFAULT_GENERATION:
        return subscription.generation_id
    try:
        return decode_cooperative_sticky_user_data(subscription.user_data)
    except ProtocolError:
        return DEFAULT_GENERATION
