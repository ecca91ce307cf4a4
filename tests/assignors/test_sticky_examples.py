"""Example-based tests of sticky and cooperative-sticky: generation rules, user data,
joins and leaves, and a larger group."""

from __future__ import annotations

from coordinator.assignors import CooperativeStickyAssignor, StickyAssignor
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_cooperative_sticky_user_data,
    decode_sticky_user_data,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
)

from .helpers import check_valid, moved_partitions, next_round, spread

T0 = tuple(TopicPartition("t", p) for p in range(6))


def coop(owned: tuple[TopicPartition, ...] = (), generation: int = -1) -> Subscription:
    return Subscription(("t",), owned_partitions=owned, generation_id=generation)


def sticky(owned: tuple[TopicPartition, ...], generation: int | None) -> Subscription:
    return Subscription(("t",), user_data=encode_sticky_user_data(owned, generation))


def test_higher_generation_wins_a_double_claim() -> None:
    # "a" was away and still reports t-0..t-2 from generation 1; "b" got them in generation 2.
    subs = {"a": coop(T0[:3], 1), "b": coop(T0[:3] + T0[3:4], 2), "c": coop(T0[4:], 2)}
    result = CooperativeStickyAssignor().assign({"t": 6}, subs)
    assert set(T0[:2]) <= set(result["b"].partitions)
    check_valid({"t": 6}, subs, result, complete=False)


def test_same_generation_double_claim_is_dropped_and_withheld() -> None:
    subs = {"a": coop(T0[:3], 2), "b": coop(T0[2:4], 2), "c": coop(T0[4:], 2)}
    result = CooperativeStickyAssignor().assign({"t": 6}, subs)
    assigned = {tp for a in result.values() for tp in a.partitions}
    # Nobody may get t-2 until both claimants revoked it ...
    assert T0[2] not in assigned
    assert assigned == set(T0) - {T0[2]}
    # ... and after they have, it is assigned.
    second = CooperativeStickyAssignor().assign({"t": 6}, next_round(subs, result, 3))
    check_valid({"t": 6}, subs, second)
    assert spread(second) == 0


def test_sticky_same_generation_double_claim_goes_to_one_member() -> None:
    subs = {"a": sticky(T0[:3], 2), "b": sticky(T0[2:4], 2), "c": sticky(T0[4:], 2)}
    result = StickyAssignor().assign({"t": 6}, subs)
    check_valid({"t": 6}, subs, result)
    assert spread(result) == 0


def test_stale_claims_without_conflict_still_count() -> None:
    # Kafka (since KAFKA-13419) keeps an older generation's claim when nobody contests it.
    subs = {"a": coop(T0[:3], 1), "b": coop(T0[3:], 5)}
    result = CooperativeStickyAssignor().assign({"t": 6}, subs)
    assert result["a"].partitions == T0[:3]
    assert result["b"].partitions == T0[3:]


def test_sticky_v0_user_data_ranks_below_any_generation() -> None:
    subs = {"old": sticky(T0[:4], None), "new": sticky(T0[2:4], 0)}
    result = StickyAssignor().assign({"t": 6}, subs)
    assert set(T0[2:4]) <= set(result["new"].partitions)
    assert set(T0[:2]) <= set(result["old"].partitions)


def test_garbage_user_data_counts_as_no_previous_assignment() -> None:
    subs = {
        "a": Subscription(("t",), user_data=b"\x00\x00\x00\x05garbage"),
        "b": Subscription(("t",), user_data=b"\x01"),
    }
    result = StickyAssignor().assign({"t": 6}, subs)
    check_valid({"t": 6}, subs, result)
    coop_subs = {m: Subscription(("t",), user_data=b"\x01", owned_partitions=()) for m in "ab"}
    check_valid({"t": 6}, coop_subs, CooperativeStickyAssignor().assign({"t": 6}, coop_subs))


def test_cooperative_generation_from_user_data_for_old_subscriptions() -> None:
    # v0/v1 subscriptions carry no generation field: the user data's int32 decides.
    subs = {
        "a": Subscription(("t",), encode_cooperative_sticky_user_data(1), T0[:3]),
        "b": Subscription(("t",), encode_cooperative_sticky_user_data(2), T0[:4]),
    }
    result = CooperativeStickyAssignor().assign({"t": 6}, subs)
    assert set(T0[:3]) <= set(result["b"].partitions)
    assert not set(T0[:4]) & set(result["a"].partitions)


def test_member_side_user_data() -> None:
    assignor = StickyAssignor()
    assert assignor.subscription_user_data(["t"]) is None
    assignor.on_assignment(Assignment(T0[:2]), 7)
    data = decode_sticky_user_data(assignor.subscription_user_data(["t"]))
    assert (data.partitions, data.generation) == (T0[:2], 7)

    cooperative = CooperativeStickyAssignor()
    assert decode_cooperative_sticky_user_data(cooperative.subscription_user_data(["t"])) == -1
    cooperative.on_assignment(Assignment(T0[:2]), 9)
    assert decode_cooperative_sticky_user_data(cooperative.subscription_user_data(["t"])) == 9


def test_leave_hands_partitions_over_at_once() -> None:
    first = CooperativeStickyAssignor().assign({"t": 6}, {m: coop() for m in "abc"})
    subs = next_round({m: coop() for m in "ab"}, first, 1)
    result = CooperativeStickyAssignor().assign({"t": 6}, subs)
    # c's partitions were nobody's any more: nothing to revoke, nothing withheld.
    check_valid({"t": 6}, subs, result)
    assert spread(result) == 0
    for m in "ab":
        assert set(first[m].partitions) <= set(result[m].partitions)


def test_topic_nobody_subscribes_to_is_not_assigned() -> None:
    subs = {"a": coop(), "b": Subscription(("t", "u"))}
    result = CooperativeStickyAssignor().assign({"t": 2, "u": 2, "other": 4}, subs)
    check_valid({"t": 2, "u": 2, "other": 4}, subs, result)
    assert all(tp.topic != "other" for a in result.values() for tp in a.partitions)


def test_large_group_join_then_leave() -> None:
    ppt = {f"topic-{t}": 1000 for t in range(10)}
    topics = tuple(ppt)
    subs = {f"m{i:03d}": Subscription(topics) for i in range(100)}
    first = CooperativeStickyAssignor().assign(ppt, subs)
    assert spread(first) == 0

    joined = next_round(subs, first, 1)
    joined.update({f"n{i}": Subscription(topics) for i in range(7)})
    second = CooperativeStickyAssignor().assign(ppt, joined)
    owners = {tp: m for m, a in first.items() for tp in a.partitions}
    # 10,000 over 107: quota 93 (49 members get 94); each old member gives up 6 or 7.
    assert len(moved_partitions(owners, second)) == 100 * 100 - (100 * 93 + 49)
    assert all(not second[f"n{i}"].partitions for i in range(7))
    third = CooperativeStickyAssignor().assign(ppt, next_round(joined, second, 2))
    check_valid(ppt, joined, third)
    assert spread(third) <= 1

    left = next_round({m: s for m, s in joined.items() if m != "m000"}, third, 3)
    fourth = CooperativeStickyAssignor().assign(ppt, left)
    check_valid(ppt, left, fourth)
    assert spread(fourth) <= 1
