"""What the coordinator reads from members' consumer subscriptions: which topics a group
consumes, so that a change of topic metadata or of a restarted static member's topics starts
the rebalance that assigns new partitions.

Kafka's consumer leader watches metadata itself and rejoins when a subscribed topic's
partition count changes; here topic metadata lives in the coordinator, so the coordinator
notices (docs/coordinator.md, "Topic metadata and subscription changes"). Pure functions:
the handlers in `coordinator.coordinator` and `coordinator.membership` decide with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coordinator.protocol import ProtocolError, decode_assignment, decode_subscription_topics

CONSUMER_PROTOCOL_TYPE = "consumer"

Protocols = tuple[tuple[str, bytes], ...]


def changed_topics(
    before: Mapping[str, int], after: Mapping[str, int]
) -> dict[str, tuple[int, int]]:
    """Topic -> (old count, new count) for every topic whose partition count differs; a
    topic that is absent counts 0 partitions (created or deleted)."""
    return {
        topic: (before.get(topic, 0), after.get(topic, 0))
        for topic in sorted(set(before) | set(after))
        if before.get(topic, 0) != after.get(topic, 0)
    }


def subscribed_topics(protocol_type: str | None, metadata: bytes) -> frozenset[str] | None:
    """The topics of one consumer subscription; None when the group is not a consumer group
    or the bytes are not a readable subscription (then nothing is inferred from them)."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not metadata:
        return None
    try:
        return frozenset(decode_subscription_topics(metadata))
    except ProtocolError:
        return None


def topic_counts(topics: Iterable[str], metadata: Mapping[str, int]) -> dict[str, int]:
    """Each topic's partition count in `metadata` (0: unknown), sorted by topic."""
    return {topic: metadata.get(topic, 0) for topic in sorted(topics)}


def group_topics(
    protocol_type: str | None, protocol_name: str | None, members: Iterable[Protocols]
) -> frozenset[str]:
    """Every topic some member subscribes to with the selected protocol; unreadable
    subscriptions add nothing."""
    if protocol_name is None:
        return frozenset()
    topics: set[str] = set()
    for protocols in members:
        topics |= subscribed_topics(protocol_type, _metadata_for(protocols, protocol_name)) or set()
    return frozenset(topics)


def subscription_changed(
    protocol_type: str | None, protocol_name: str | None, old: Protocols, new: Protocols
) -> bool:
    """Whether a member's topics for the selected protocol differ between two protocol
    lists. Only topics count: owned partitions, generation and user data change on every
    restart and must not start a rebalance (KIP-345)."""
    if protocol_name is None:
        return False
    before = subscribed_topics(protocol_type, _metadata_for(old, protocol_name))
    after = subscribed_topics(protocol_type, _metadata_for(new, protocol_name))
    return before is not None and after is not None and before != after


def unowned_partitions(counts: Mapping[str, int], assignments: Iterable[bytes]) -> int:
    """How many partitions of `counts`' topics no assignment names; 0 when an assignment is
    missing (b"": the leader gave none) or unreadable: nothing is inferred from bytes we do
    not have or cannot read."""
    owned: set[tuple[str, int]] = set()
    for data in assignments:
        if not data:
            return 0
        try:
            owned.update(decode_assignment(data).partitions)
        except ProtocolError:
            return 0
    return sum(
        1
        for topic, count in counts.items()
        for partition in range(count)
        if (topic, partition) not in owned
    )


def _metadata_for(protocols: Protocols, name: str) -> bytes:
    return next((metadata for protocol, metadata in protocols if protocol == name), b"")
