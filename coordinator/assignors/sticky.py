"""Kafka's StickyAssignor (eager): sticky assignment from the previous assignment that each
member carries in its user data (KIP-341)."""

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
    decode_sticky_user_data,
    encode_sticky_user_data,
)

if TYPE_CHECKING:
    from coordinator.assignors.compact import CompactAssignment, CompactSpace, IdArray


class StickyAssignor(FastPathAssignor):
    """Balanced and maximally sticky, for the eager protocol.

    Eager members revoke everything before joining, so their subscriptions own nothing;
    the previous assignment travels in the user data instead: v1 (previous partitions and
    their generation) from this assignor, v0 (no generation, ranked below every known one)
    from old clients. User data that does not parse counts as no previous assignment, as in
    Kafka.
    """

    name = "sticky"
    supported_protocols = (RebalanceProtocol.EAGER,)
    reads_last_assignment = False
    version = 0

    def __init__(self) -> None:
        self._partitions: tuple[TopicPartition, ...] | None = None
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        if self._partitions is None:
            return None
        return encode_sticky_user_data(self._partitions, self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._partitions = assignment.partitions
        self._generation = generation_id

    def assign_reference(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]:
        claims = {member_id: claim_from_user_data(sub) for member_id, sub in subscriptions.items()}
        return sticky_assign(partitions_per_topic, subscriptions, claims, cooperative=False)

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
        from coordinator.assignors.compact_engine import compact_sticky, sticky_user_data_ids

        def read_claim(space: CompactSpace, member_id: str) -> IdArray | None:
            claim = sticky_user_data_ids(space, subscriptions[member_id].user_data)
            return None if claim is None else claim[0]

        return compact_sticky(partitions_per_topic, subscriptions, read_claim, cooperative=False)


def claim_from_user_data(subscription: Subscription) -> Claim:
    """What a sticky member says it had: its user data's partitions and generation."""
    try:
        user_data = decode_sticky_user_data(subscription.user_data)
    except ProtocolError:
        return Claim(())
    generation = DEFAULT_GENERATION if user_data.generation is None else user_data.generation
    return Claim(user_data.partitions, generation)
