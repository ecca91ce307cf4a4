"""The assignor interface every partition assignor implements, and Kafka's member ordering.

An assignor runs on the group leader: it turns the members' subscriptions and the topic
metadata into one assignment per member. It is a pure function of its input (no I/O, no
clock, no reliance on dict or set iteration order), which is what lets the assignors be
property-tested and benchmarked. The member-side half (`subscription_user_data`,
`on_assignment`) is the only state an assignor keeps.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from coordinator.assignors.handoffs import (
    defer_cooperative_handoffs,
    defer_cooperative_handoffs_compact,
)
from coordinator.protocol import (
    HIGHEST_VERSION,
    Assignment,
    Subscription,
    TopicPartition,
    encode_assignment,
)

if TYPE_CHECKING:
    from coordinator.assignors.compact import CompactAssignment

# STATICFLEET_ASSIGNOR_PATH=reference turns the fast (numpy) path off: every assignor then
# runs its pure-Python reference code only.
REFERENCE_ENV = "STATICFLEET_ASSIGNOR_PATH"


def fast_path_enabled() -> bool:
    """False when the environment forces the pure-Python reference path."""
    return os.environ.get(REFERENCE_ENV, "") != "reference"


class RebalanceProtocol(StrEnum):
    """The member-side rebalance behaviour (KIP-429): what an assignor can work with, and
    what a fleet runs once a rollout is done (a ConsumerGroup's spec.rebalance.protocol).

    A `StrEnum` (a `str` and an `Enum`), so values compare equal to "eager"/"cooperative".
    """

    EAGER = "eager"
    COOPERATIVE = "cooperative"


class PartitionAssignor(ABC):
    """A named assignment strategy, as offered in JoinGroup under its `name`."""

    name: str
    supported_protocols: tuple[RebalanceProtocol, ...]
    # The assignor's own metadata/algorithm version (KIP-429); 0 for Kafka's built-in ones.
    version: int = 0
    # Whether `assign` reads `last_assignment_by_member` (the leader decodes it only then;
    # Kafka's own assignors do not, nor does any other built-in one but static-sticky). A
    # subclass of one of those whose `assign` reads it sets this back to True.
    reads_last_assignment: bool = True

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        """Assignor-specific bytes this member puts in its subscription; None for none."""
        return None

    @abstractmethod
    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]:
        """Assign partitions to members (leader side).

        `partitions_per_topic` maps topic to partition count; subscribed topics missing
        from it are ignored, as Kafka ignores unknown topics. Every member id of
        `subscriptions` is a key of the result, possibly with no partitions.
        `last_assignment_by_member` is the coordinator's last assignment per member, an
        extension that only the static-sticky assignor reads.
        """

    def assign_reference(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]:
        """The pure-Python reference: `assign` for assignors without a fast path, and what
        the fast path is tested against for those with one."""
        return self.assign(
            partitions_per_topic,
            subscriptions,
            last_assignment_by_member=last_assignment_by_member,
        )

    def assign_compact(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> CompactAssignment | None:
        """The same assignment as `assign`, as arrays of partition numbers, when this
        assignor has a fast path for this input (see `compact_engine`); None otherwise, and
        always None when STATICFLEET_ASSIGNOR_PATH=reference."""
        return None

    def assign_encoded(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
        version: int = HIGHEST_VERSION,
        defer_handoffs: bool = False,
    ) -> dict[str, bytes]:
        """What the group leader sends in SyncGroup: each member's ConsumerProtocol Assignment
        bytes, `encode_assignment` of `assign`'s result. Built from `assign_compact` when
        there is a fast path (no per-partition Python objects), else from `assign`.
        `defer_handoffs`: first withhold from each member the partitions another member
        still owns (the leader's check of KIP-429's promise, `assignors.handoffs`)."""
        if type(self).assign is not FastPathAssignor.assign:
            # `assign` is not the fast path's (no fast path, or a subclass changed `assign`):
            # what it answers is what is encoded.
            assignment = self.assign(
                partitions_per_topic,
                subscriptions,
                last_assignment_by_member=last_assignment_by_member,
            )
        else:
            compact = self.assign_compact(
                partitions_per_topic,
                subscriptions,
                last_assignment_by_member=last_assignment_by_member,
            )
            if compact is not None:
                if defer_handoffs:
                    compact = defer_cooperative_handoffs_compact(subscriptions, compact)
                return compact.encode(version)
            assignment = self.assign_reference(
                partitions_per_topic,
                subscriptions,
                last_assignment_by_member=last_assignment_by_member,
            )
        if defer_handoffs:
            assignment = defer_cooperative_handoffs(subscriptions, assignment)
        return {m: encode_assignment(a, version) for m, a in assignment.items()}

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Member side: remember what this member was given, for its next user data."""
        return None


class FastPathAssignor(PartitionAssignor):
    """An assignor with a fast path: `assign` answers from `assign_compact` when it
    applies and falls back to `assign_reference`, the pure-Python reference."""

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]:
        compact = self.assign_compact(partitions_per_topic, subscriptions)
        if compact is not None:
            return compact.to_assignments()
        return self.assign_reference(partitions_per_topic, subscriptions)

    @abstractmethod
    def assign_reference(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]: ...


def java_string_key(value: str) -> bytes:
    """A sort key that orders strings the way Java's `String.compareTo` does.

    Java compares UTF-16 code units; Python compares code points. They disagree only
    when characters outside the Basic Multilingual Plane meet ones above U+E000, but an
    assignment that must equal Kafka's should not depend on that. Big-endian UTF-16
    bytes compare exactly like the code units.
    """
    return value.encode("utf-16-be", "surrogatepass")


def member_order_key(member_id: str, group_instance_id: str | None) -> tuple[int, bytes, bytes]:
    """Kafka's `MemberInfo` order: static members first by instance id, then by member id.

    Ordering by `group.instance.id` keeps range and round-robin assignments identical
    across restarts even though member ids change (KIP-345).
    """
    if group_instance_id is not None:
        return (0, java_string_key(group_instance_id), java_string_key(member_id))
    return (1, java_string_key(member_id), b"")


def ordered_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Member ids in Kafka's `MemberInfo` order (see `member_order_key`)."""
    return sorted(
        subscriptions,
        key=lambda member_id: member_order_key(
            member_id, subscriptions[member_id].group_instance_id
        ),
    )


def known_topic_sets(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    member_ids: Sequence[str],
) -> list[frozenset[str]]:
    """Per member (in `member_ids` order) the subscribed topics the metadata knows; unknown
    topics are ignored, as Kafka ignores them. Members of one group usually share one topics
    tuple, so the filtering is done once per distinct tuple."""
    cache: dict[tuple[str, ...], frozenset[str]] = {}
    result: list[frozenset[str]] = []
    for member_id in member_ids:
        topics = tuple(subscriptions[member_id].topics)
        known = cache.get(topics)
        if known is None:
            known = frozenset(t for t in topics if t in partitions_per_topic)
            cache[topics] = known
        result.append(known)
    return result
