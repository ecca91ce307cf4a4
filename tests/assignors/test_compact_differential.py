"""The fast (numpy) path against the pure-Python reference: `assign_compact` (and `assign`,
which uses it when it applies) gives exactly `assign_reference`'s assignment, and
`assign_encoded` / `CompactAssignment.encode` exactly `encode_assignment` of it, byte for
byte (see coordinator/assignors/compact_engine.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    StickyAssignor,
)
from coordinator.assignors.base import REFERENCE_ENV
from coordinator.assignors.compact import CompactAssignment, CompactSpace
from coordinator.protocol import (
    HIGHEST_VERSION,
    Assignment,
    Subscription,
    TopicPartition,
    encode_assignment,
)

from .strategies import Group, groups


def _same_as_reference(
    assignor: PartitionAssignor, ppt: dict[str, int], subscriptions: dict[str, Subscription]
) -> bool:
    """Checks the fast path against `assign` when it applies; whether it applied."""
    reference = assignor.assign_reference(ppt, subscriptions)
    compact = assignor.assign_compact(ppt, subscriptions)
    encoded = assignor.assign_encoded(ppt, subscriptions)
    # `assign` takes the fast path when it applies: the same answer either way.
    assert assignor.assign(ppt, subscriptions) == reference
    assert encoded == {m: encode_assignment(a) for m, a in reference.items()}
    if compact is None:
        return False
    assert compact.to_assignments() == reference
    assert compact.sizes() == {m: len(a.partitions) for m, a in reference.items()}
    return True


@settings(max_examples=300, deadline=None)
@given(groups(equal_subscriptions=True))
def test_cooperative_sticky_fast_path_equals_the_reference(group: Group) -> None:
    _same_as_reference(
        CooperativeStickyAssignor(),
        group.partitions_per_topic,
        group.cooperative_subscriptions(),
    )


@settings(max_examples=300, deadline=None)
@given(groups(equal_subscriptions=True))
def test_sticky_fast_path_equals_the_reference(group: Group) -> None:
    _same_as_reference(StickyAssignor(), group.partitions_per_topic, group.sticky_subscriptions())


@settings(max_examples=300, deadline=None)
@given(groups(equal_subscriptions=False))
def test_range_fast_path_equals_the_reference(group: Group) -> None:
    assert _same_as_reference(
        RangeAssignor(), group.partitions_per_topic, group.cooperative_subscriptions()
    )


@settings(max_examples=200, deadline=None)
@given(groups(equal_subscriptions=True, conflicts=False), st.booleans())
def test_fast_path_is_taken_without_conflicting_claims(group: Group, sticky: bool) -> None:
    """Equal subscriptions and one claim per partition: the fast path applies (so the tests
    above do compare it, not only the fallback)."""
    if sticky:
        applied = _same_as_reference(
            StickyAssignor(), group.partitions_per_topic, group.sticky_subscriptions()
        )
    else:
        applied = _same_as_reference(
            CooperativeStickyAssignor(),
            group.partitions_per_topic,
            group.cooperative_subscriptions(),
        )
    assert applied


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=80), st.integers(0, 3))
def test_sticky_user_data_of_any_bytes_reads_like_the_reference(data: bytes, owned: int) -> None:
    """Garbage, truncated or v0/v1 user data: the same assignment as the reference."""
    ppt = {"a": 3, "b": 2}
    subscriptions = {
        "m1": Subscription(("a", "b"), user_data=data),
        "m2": Subscription(("a", "b"), user_data=None if owned == 0 else data[:owned]),
    }
    _same_as_reference(StickyAssignor(), ppt, subscriptions)


# Topic names of different lengths and encodings, so headers are of several widths.
_names = st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=5, unique=True)


@settings(max_examples=200, deadline=None)
@given(st.data(), _names, st.integers(0, HIGHEST_VERSION))
def test_encode_is_encode_assignment(data: st.DataObject, names: list[str], version: int) -> None:
    ppt = {t: data.draw(st.integers(0, 6)) for t in names}
    space = CompactSpace(ppt, names)
    members = data.draw(st.lists(st.text("xyz", min_size=1, max_size=3), unique=True, max_size=6))
    ids = [
        sorted(data.draw(st.sets(st.integers(0, max(0, space.size - 1)), max_size=space.size)))
        for _ in members
    ]
    import numpy as np

    compact = CompactAssignment(space, members, [np.array(i, dtype=np.int64) for i in ids])
    assignments = compact.to_assignments()
    assert compact.encode(version) == {
        m: encode_assignment(a, version) for m, a in assignments.items()
    }
    for member, numbers in zip(members, ids, strict=True):
        topics = space.topics
        expected = tuple(
            TopicPartition(topics[t], n - int(space.offsets[t]))
            for n in numbers
            for t in [int(np.searchsorted(space.offsets, n, side="right")) - 1]
        )
        assert assignments[member] == Assignment(expected)


def test_the_environment_forces_the_reference_path(monkeypatch: pytest.MonkeyPatch) -> None:
    ppt = {"a": 4}
    subscriptions = {"m1": Subscription(("a",)), "m2": Subscription(("a",))}
    for assignor in (CooperativeStickyAssignor(), StickyAssignor(), RangeAssignor()):
        assert assignor.assign_compact(ppt, subscriptions) is not None
    monkeypatch.setenv(REFERENCE_ENV, "reference")
    for assignor in (CooperativeStickyAssignor(), StickyAssignor(), RangeAssignor()):
        assert assignor.assign_compact(ppt, subscriptions) is None
        assert _same_as_reference(assignor, ppt, subscriptions) is False
