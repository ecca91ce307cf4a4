"""Property tests of sticky and cooperative-sticky: validity, balance, stickiness,
generation rules, the cooperative rule and convergence."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings

from coordinator.assignors import (
    CooperativeStickyAssignor,
    StickyAssignor,
    adjust_for_cooperative,
)
from coordinator.protocol import Assignment, Subscription, TopicPartition

from .helpers import (
    check_valid,
    claims_of,
    counts,
    minimum_moves,
    moved_partitions,
    next_round,
    optimal_max_load,
    reference_owners,
    spread,
    subscribed_partitions,
)
from .strategies import Group, groups

SETTINGS = settings(max_examples=150, deadline=None)


def valid_owners(
    group: Group,
) -> tuple[dict[TopicPartition, str], set[TopicPartition]]:
    subs = group.cooperative_subscriptions()
    known = subscribed_partitions(group.partitions_per_topic, subs)
    return reference_owners(claims_of(subs), known)


def check_cooperative_rule(
    result: Mapping[str, Assignment],
    owners: Mapping[TopicPartition, str],
    contested: set[TopicPartition],
) -> None:
    """No member gets a partition another member validly owns, or a contested one."""
    for member_id, assignment in result.items():
        for tp in assignment.partitions:
            assert tp not in contested, (member_id, tp)
            assert owners.get(tp, member_id) == member_id, (member_id, tp, owners[tp])


def check_sticky(group: Group, result: Mapping[str, Assignment]) -> None:
    owners, _ = valid_owners(group)
    owned_counts = {m: 0 for m in group.topics}
    for owner in owners.values():
        owned_counts[owner] += 1
    subs = group.cooperative_subscriptions()
    total = len(subscribed_partitions(group.partitions_per_topic, subs))
    expected = minimum_moves(owned_counts.values(), total, len(result))
    assert len(moved_partitions(owners, result)) == expected


def check_locally_balanced(
    ppt: Mapping[str, int], subs: Mapping[str, Subscription], result: Mapping[str, Assignment]
) -> None:
    """No single partition can move to a subscriber with two fewer partitions (Kafka's
    isBalanced), and the busiest member has no more than the optimum."""
    size = counts(result)
    for member_id, assignment in result.items():
        for tp in assignment.partitions:
            for other, sub in subs.items():
                if tp.topic in sub.topics:
                    assert size[other] >= size[member_id] - 1, (tp, member_id, other)
    if result:
        assert max(size.values()) == optimal_max_load(ppt, subs)


# -- sticky (eager) --------------------------------------------------------------------------


@SETTINGS
@given(groups(equal_subscriptions=True))
def test_sticky_equal_subscriptions(group: Group) -> None:
    subs = group.sticky_subscriptions()
    result = StickyAssignor().assign(group.partitions_per_topic, subs)
    check_valid(group.partitions_per_topic, subs, result)
    assert spread(result) <= 1
    check_sticky(group, result)


@SETTINGS
@given(groups(equal_subscriptions=False))
def test_sticky_different_subscriptions(group: Group) -> None:
    subs = group.sticky_subscriptions()
    result = StickyAssignor().assign(group.partitions_per_topic, subs)
    check_valid(group.partitions_per_topic, subs, result)
    check_locally_balanced(group.partitions_per_topic, subs, result)
    # Deterministic whatever the order the subscriptions come in.
    reordered = dict(reversed(list(subs.items())))
    assert StickyAssignor().assign(group.partitions_per_topic, reordered) == result


# -- cooperative-sticky ----------------------------------------------------------------------


@SETTINGS
@given(groups(equal_subscriptions=True))
def test_cooperative_equal_subscriptions_converge_in_two_rounds(group: Group) -> None:
    ppt = group.partitions_per_topic
    subs = group.cooperative_subscriptions()
    owners, contested = valid_owners(group)

    first = CooperativeStickyAssignor().assign(ppt, subs)
    check_valid(ppt, subs, first, complete=False)
    check_cooperative_rule(first, owners, contested)
    check_sticky(group, first)
    # What is missing now is exactly what had to be revoked first.
    missing = subscribed_partitions(ppt, subs) - {tp for a in first.values() for tp in a.partitions}
    assert missing <= set(owners) | contested

    follow_up_subs = next_round(subs, first, max(group.generation.values()) + 1)
    second = CooperativeStickyAssignor().assign(ppt, follow_up_subs)
    check_valid(ppt, follow_up_subs, second)
    assert spread(second) <= 1
    # Nobody lost anything in the follow-up: only the revoked partitions were handed out.
    for member_id, assignment in first.items():
        assert set(assignment.partitions) <= set(second[member_id].partitions)
    # And it is stable.
    third_subs = next_round(follow_up_subs, second, max(group.generation.values()) + 2)
    assert CooperativeStickyAssignor().assign(ppt, third_subs) == second


@SETTINGS
@given(groups(equal_subscriptions=False))
def test_cooperative_different_subscriptions_converge(group: Group) -> None:
    ppt = group.partitions_per_topic
    subs = group.cooperative_subscriptions()
    owners, contested = valid_owners(group)
    generation = max(group.generation.values())
    result = CooperativeStickyAssignor().assign(ppt, subs)
    for _ in range(4):
        check_valid(ppt, subs, result, complete=False)
        check_cooperative_rule(result, owners, contested)
        generation += 1
        subs = next_round(subs, result, generation)
        owners = {tp: m for m, a in result.items() for tp in a.partitions}
        contested = set()
        following = CooperativeStickyAssignor().assign(ppt, subs)
        if following == result:
            break
        result = following
    else:
        raise AssertionError("cooperative rebalances did not converge")
    check_valid(ppt, subs, result)
    check_locally_balanced(ppt, subs, result)


@SETTINGS
@given(groups(equal_subscriptions=False))
def test_cooperative_is_sticky_minus_transfers(group: Group) -> None:
    """cooperative-sticky = sticky's assignment for the same claims, with the cooperative
    rule applied on top (and the rule's public helper agrees with the assignor)."""
    ppt = group.partitions_per_topic
    eager = StickyAssignor().assign(ppt, group.sticky_subscriptions())
    cooperative = CooperativeStickyAssignor().assign(ppt, group.cooperative_subscriptions())
    owners, contested = valid_owners(group)
    owned_by_member: dict[str, list[TopicPartition]] = {m: [] for m in group.topics}
    for tp, owner in owners.items():
        owned_by_member[owner].append(tp)
    for tp in contested:
        for member_id, owned in group.owned.items():
            if tp in owned:
                owned_by_member[member_id].append(tp)
    adjusted = adjust_for_cooperative(
        {m: a.partitions for m, a in eager.items()}, owned_by_member
    ).assignment
    assert {m: a.partitions for m, a in cooperative.items()} == adjusted


@SETTINGS
@given(groups(equal_subscriptions=True, conflicts=False))
def test_cooperative_without_owned_partitions_is_balanced_and_complete(group: Group) -> None:
    subs = {m: Subscription(t) for m, t in group.topics.items()}
    result = CooperativeStickyAssignor().assign(group.partitions_per_topic, subs)
    check_valid(group.partitions_per_topic, subs, result)
    assert spread(result) <= 1
