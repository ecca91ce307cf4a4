"""The leader assigns through `assign_encoded` (bytes from the assignor's fast path, no
per-partition tuples) with the cooperative handoffs deferred array-wise: what it sends is
byte for byte what it sent when it called `assign`, deferred the handoffs on `Assignment`s
and encoded them (`assign_before` below), for every assignor, eager and cooperative, on the
fast path and on the reference path."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.assignors import ASSIGNOR_NAMES, PartitionAssignor, get_assignor
from coordinator.assignors.base import REFERENCE_ENV
from coordinator.assignors.handoffs import defer_cooperative_handoffs
from coordinator.client.leader import ASSIGNMENT_VERSION, assign, decode_members
from coordinator.messages import JoinGroupResponseMember, SyncGroupRequestAssignment
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from tests.assignors.strategies import Group, groups


def assign_before(
    assignor: PartitionAssignor,
    members: Sequence[JoinGroupResponseMember],
    topic_metadata: Mapping[str, int],
) -> list[SyncGroupRequestAssignment]:
    """The leader as it was: `assign`, then the handoffs deferred, then encoded."""
    subscriptions, last_assignments = decode_members(members)
    subscribed = {topic for s in subscriptions.values() for topic in s.topics}
    partitions_per_topic = {t: n for t, n in topic_metadata.items() if t in subscribed}
    result = assignor.assign(
        partitions_per_topic, subscriptions, last_assignment_by_member=last_assignments or None
    )
    result = defer_cooperative_handoffs(subscriptions, result)
    return [
        SyncGroupRequestAssignment(
            member_id,
            encode_assignment(
                result.get(member_id, Assignment(partitions=())), version=ASSIGNMENT_VERSION
            ),
        )
        for member_id in subscriptions
    ]


def member_list(
    subscriptions: Mapping[str, Subscription], last: Mapping[str, bytes] | None = None
) -> list[JoinGroupResponseMember]:
    return [
        JoinGroupResponseMember(
            member_id,
            subscription.group_instance_id,
            encode_subscription(subscription),
            (last or {}).get(member_id, b""),
        )
        for member_id, subscription in subscriptions.items()
    ]


def same_bytes(name: str, group: Group) -> None:
    subscriptions = (
        group.sticky_subscriptions() if name == "sticky" else group.cooperative_subscriptions()
    )
    # The coordinator's last assignments too (only static-sticky reads them).
    last = {m: encode_assignment(Assignment(group.owned[m])) for m in subscriptions}
    members = member_list(subscriptions, last)
    before = assign_before(get_assignor(name), members, group.partitions_per_topic)
    after = assign(get_assignor(name), members, group.partitions_per_topic)
    assert after == before


@pytest.mark.parametrize("path", ["fast", "reference"])
@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
@settings(max_examples=80, deadline=None)
@given(group=groups(equal_subscriptions=True))
def test_leader_bytes_are_unchanged_with_equal_subscriptions(
    name: str, path: str, group: Group
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        if path == "reference":
            patch.setenv(REFERENCE_ENV, "reference")
        same_bytes(name, group)


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
@settings(max_examples=80, deadline=None)
@given(group=groups(equal_subscriptions=False))
def test_leader_bytes_are_unchanged_with_any_subscriptions(name: str, group: Group) -> None:
    same_bytes(name, group)


T = "t"


def tp(partition: int) -> TopicPartition:
    return TopicPartition(T, partition)


def test_range_handing_owned_partitions_over_is_deferred_on_the_fast_path() -> None:
    """Range (an eager assignor, fast path) given cooperative claims moves owned partitions:
    the leader withholds them from their new owner, the same bytes as before."""
    subscriptions = {
        "m1": Subscription((T,), owned_partitions=tuple(map(tp, range(6))), generation_id=3),
        "m2": Subscription((T,), generation_id=3),
        # A claim tied at the best generation: nobody owns partition 5 provably.
        "m3": Subscription((T,), owned_partitions=(tp(5), tp(7)), generation_id=3),
    }
    members = member_list(subscriptions)
    before = assign_before(get_assignor("range"), members, {T: 9})
    after = assign(get_assignor("range"), members, {T: 9})
    assert after == before
    given_ = {a.member_id: decode_assignment(a.assignment).partitions for a in after}
    # Range alone: m1 0-2, m2 3-5, m3 6-8; m2 may not take 3 and 4 while m1 owns them.
    assert given_ == {"m1": (tp(0), tp(1), tp(2)), "m2": (tp(5),), "m3": (tp(6), tp(7), tp(8))}


def test_a_member_claiming_a_partition_twice_owns_it_no_more_than_the_reference_says() -> None:
    subscriptions = {
        "m1": Subscription((T,), owned_partitions=(tp(0), tp(0), tp(1)), generation_id=2),
        "m2": Subscription((T,), owned_partitions=(tp(2),), generation_id=1),
    }
    members = member_list(subscriptions)
    for name in ("range", "cooperative-sticky"):
        before = assign_before(get_assignor(name), members, {T: 4})
        assert assign(get_assignor(name), members, {T: 4}) == before, name


@settings(max_examples=60, deadline=None)
@given(group=groups(equal_subscriptions=True), data=st.data())
def test_static_sticky_reads_the_same_last_assignments(group: Group, data: st.DataObject) -> None:
    subscriptions = group.cooperative_subscriptions()
    last = {
        m: encode_assignment(Assignment(data.draw(st.sampled_from([(), group.owned[m]]))))
        for m in subscriptions
    }
    members = member_list(subscriptions, last)
    before = assign_before(get_assignor("static-sticky"), members, group.partitions_per_topic)
    assert assign(get_assignor("static-sticky"), members, group.partitions_per_topic) == before


def test_last_assignments_are_decoded_only_for_an_assignor_that_reads_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    members = member_list({"m1": Subscription((T,))}, {"m1": b"\xff not an assignment"})
    with caplog.at_level(logging.WARNING, logger="coordinator.client.leader"):
        assign(get_assignor("range"), members, {T: 2})
        assert "unreadable last assignment" not in caplog.text
        assign(get_assignor("static-sticky"), members, {T: 2})
        assert "unreadable last assignment" in caplog.text
