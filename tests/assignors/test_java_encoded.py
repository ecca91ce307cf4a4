"""What the leader sends, ours against Kafka's: `assign_encoded` (the fast path) against
Kafka's `assign` plus `ConsumerProtocol.serializeAssignment`, in the harness JVM.

First assignments of the sticky assignors give the very same bytes; range gives the same
assignment, listed in another topic order (Kafka's RangeAssignor lists topics in hash order,
ours in name order; the order carries no meaning). Never skipped: the jar is built by
`make java-assignors` when missing or stale.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.assignors import get_assignor

from .differential import cooperative_subscriptions, plain_subscriptions, sticky_subscriptions
from .kafka_assignors import (
    Group,
    KafkaAssignors,
    Member,
    build_harness,
    serialized_digest,
    sorted_digest,
)

pytestmark = pytest.mark.java

SUBSCRIPTIONS = {
    "range": plain_subscriptions,
    "sticky": sticky_subscriptions,
    "cooperative-sticky": cooperative_subscriptions,
}
# (topics, partitions per topic, members): even and uneven shares, one topic and many.
SHAPES = [(5, 4, 2), (3, 7, 4), (10, 3, 7), (1, 10, 3)]


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaAssignors]:
    assignors = KafkaAssignors(build_harness())
    yield assignors
    assignors.close()


def _group(topics: int, partitions: int, members: int) -> Group:
    ppt = {f"topic-{t:04d}": partitions for t in range(topics)}
    return Group(ppt, tuple(Member(f"m{i}", None, tuple(ppt), (), -1) for i in range(members)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_first_assignment_bytes_equal_kafkas(
    kafka: KafkaAssignors, name: str, shape: tuple[int, int, int]
) -> None:
    group = _group(*shape)
    subscriptions = SUBSCRIPTIONS[name](group)
    ours = get_assignor(name).assign_encoded(group.partitions_per_topic, subscriptions)
    assert get_assignor(name).assign_compact(group.partitions_per_topic, subscriptions)
    assert serialized_digest(ours) == kafka.timed_serialized(group, name, 1).sha256


@pytest.mark.parametrize("shape", SHAPES)
def test_range_assignment_equals_kafkas(kafka: KafkaAssignors, shape: tuple[int, int, int]) -> None:
    group = _group(*shape)
    assignor = get_assignor("range")
    compact = assignor.assign_compact(group.partitions_per_topic, plain_subscriptions(group))
    assert compact is not None
    ours = {m: a.partitions for m, a in compact.to_assignments().items()}
    assert sorted_digest(ours) == kafka.timed_serialized(group, "range", 1).sorted_sha256
