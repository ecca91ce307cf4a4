"""static-sticky: identity stickiness, capacity weights, draining, version probing, codec."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.assignors import (
    VERSION_PROBING,
    StaticStickyAssignmentInfo,
    StaticStickyAssignor,
    StaticStickySubscriptionInfo,
    decode_assignment_info,
    decode_subscription_info,
    encode_assignment_info,
    encode_subscription_info,
)
from coordinator.protocol import Assignment, ProtocolError, Subscription, TopicPartition

from .helpers import check_valid, counts, next_round, optimal_max_load, spread

PPT = {"t0": 4, "t1": 4}
TOPICS = ("t0", "t1")


def member_data(capacity: int = 1, draining: bool = False, version: int = 2) -> bytes:
    user_data = StaticStickyAssignor(version, capacity, draining).subscription_user_data(TOPICS)
    assert user_data is not None
    return user_data


def static(
    instance: str,
    owned: tuple[TopicPartition, ...] = (),
    generation: int = -1,
    user_data: bytes | None = None,
) -> Subscription:
    return Subscription(
        TOPICS,
        user_data=member_data() if user_data is None else user_data,
        owned_partitions=owned,
        generation_id=generation,
        group_instance_id=instance,
    )


def partitions(result: dict[str, Assignment]) -> dict[str, tuple[TopicPartition, ...]]:
    return {m: a.partitions for m, a in result.items()}


# -- identity stickiness ---------------------------------------------------------------------


def settled_history() -> dict[str, tuple[TopicPartition, ...]]:
    """Partitions per instance id after i0..i2 started and i3 joined later: a sticky
    layout, not the one a fresh assignment would produce."""
    subs = {f"old-{i}": static(f"i{i}") for i in range(3)}
    result = StaticStickyAssignor().assign(PPT, subs)
    subs = next_round(subs, result, 1)
    subs["old-3"] = static("i3")
    for generation in (2, 3):
        result = StaticStickyAssignor().assign(PPT, subs)
        subs = next_round(subs, result, generation)
    return {f"i{i}": result[f"old-{i}"].partitions for i in range(4)}


def restarted(by_instance: dict[str, tuple[TopicPartition, ...]]) -> dict[str, Subscription]:
    subs = {"old-3": static("i3", by_instance["i3"], 4)}
    subs.update({f"new-{9 - i}": static(f"i{i}") for i in range(3)})
    return subs


@pytest.mark.parametrize("keyed_by", ["instance id", "new member id"])
def test_restarted_members_get_their_partitions_back(keyed_by: str) -> None:
    by_instance = settled_history()
    # i3 keeps running; i0..i2 restarted with new member ids that sort the other way round
    # and no memory of what they owned.
    subs = restarted(by_instance)
    if keyed_by == "instance id":
        last = by_instance
    else:
        last = {"old-3": by_instance["i3"]}
        last.update({f"new-{9 - i}": by_instance[f"i{i}"] for i in range(3)})
    result = StaticStickyAssignor().assign(PPT, subs, last_assignment_by_member=last)
    assert result["old-3"].partitions == by_instance["i3"]
    for i in range(3):
        assert result[f"new-{9 - i}"].partitions == by_instance[f"i{i}"]


def test_without_last_assignment_restarted_members_may_swap() -> None:
    # Why last_assignment_by_member exists: the same restart without it moves partitions.
    by_instance = settled_history()
    result = StaticStickyAssignor().assign(PPT, restarted(by_instance))
    assert any(result[f"new-{9 - i}"].partitions != by_instance[f"i{i}"] for i in range(3))


def test_owned_partitions_beat_last_assignment() -> None:
    tp = TopicPartition("t0", 0)
    subs = {"a": static("ia", (tp,), 3), "b": static("ib")}
    result = StaticStickyAssignor().assign(PPT, subs, last_assignment_by_member={"ib": [tp]})
    assert tp in result["a"].partitions
    assert tp not in result["b"].partitions


def test_dynamic_members_are_keyed_by_member_id() -> None:
    tp = TopicPartition("t1", 3)
    subs = {
        "x": Subscription(TOPICS, user_data=member_data()),
        "y": Subscription(TOPICS, user_data=member_data()),
    }
    result = StaticStickyAssignor().assign(PPT, subs, last_assignment_by_member={"y": [tp]})
    assert tp in result["y"].partitions


# -- weights and draining --------------------------------------------------------------------


def test_capacity_two_gets_twice_the_partitions() -> None:
    subs = {
        "a": static("ia", user_data=member_data(capacity=2)),
        "b": static("ib"),
        "c": static("ic", user_data=member_data(capacity=1)),
    }
    assert counts(StaticStickyAssignor().assign(PPT, subs)) == {"a": 4, "b": 2, "c": 2}


@pytest.mark.parametrize("version", [1, 2])
def test_draining_member_gets_nothing_and_hands_over_cooperatively(version: int) -> None:
    first = StaticStickyAssignor().assign(PPT, {m: static("i" + m) for m in "abc"})
    subs = next_round({m: static("i" + m) for m in "abc"}, first, 1)
    subs["c"] = static("ic", first["c"].partitions, 1, member_data(draining=True, version=version))
    second = StaticStickyAssignor().assign(PPT, subs)
    assert second["c"].partitions == ()
    # c's partitions are revoked now and reach a and b in the follow-up, nothing else moves.
    assigned = {tp for a in second.values() for tp in a.partitions}
    assert assigned == set(first["a"].partitions) | set(first["b"].partitions)
    third_subs = next_round(subs, second, 2)
    third = StaticStickyAssignor().assign(PPT, third_subs)
    check_valid(PPT, third_subs, third)
    assert counts(third) == {"a": 4, "b": 4, "c": 0}


def test_everyone_draining_still_consumes_everything() -> None:
    subs = {m: static("i" + m, user_data=member_data(draining=True)) for m in "ab"}
    result = StaticStickyAssignor().assign(PPT, subs)
    check_valid(PPT, subs, result)


def test_topic_only_draining_members_subscribe_to_stays_consumed() -> None:
    subs = {
        "a": Subscription(("t0",), user_data=member_data()),
        "b": Subscription(("t0", "t1"), user_data=member_data(draining=True)),
    }
    result = StaticStickyAssignor().assign(PPT, subs)
    check_valid(PPT, subs, result)
    assert {tp.topic for tp in result["b"].partitions} == {"t1"}


@st.composite
def weighted_groups(
    draw: st.DrawFn, equal: bool
) -> tuple[dict[str, int], dict[str, Subscription], dict[str, tuple[TopicPartition, ...]]]:
    ppt = {t: draw(st.integers(0, 12)) for t in ("a", "b", "c")}
    names = draw(st.lists(st.sampled_from("pqrstuv"), min_size=1, max_size=6, unique=True))
    common = draw(st.sets(st.sampled_from(("a", "b", "c")), min_size=1))
    subs: dict[str, Subscription] = {}
    last: dict[str, tuple[TopicPartition, ...]] = {}
    all_tps = [TopicPartition(t, p) for t, n in ppt.items() for p in range(n)]
    for name in names:
        topics = common if equal else draw(st.sets(st.sampled_from(("a", "b", "c"))))
        capacity = draw(st.integers(0, 4))
        draining = draw(st.booleans()) and draw(st.booleans())
        owned = tuple(draw(st.lists(st.sampled_from(all_tps), max_size=5))) if all_tps else ()
        subs["m-" + name] = Subscription(
            tuple(sorted(topics)),
            user_data=member_data(capacity, draining),
            owned_partitions=owned,
            generation_id=draw(st.integers(-1, 2)),
            group_instance_id="i-" + name,
        )
        if all_tps:
            last["i-" + name] = tuple(draw(st.lists(st.sampled_from(all_tps), max_size=5)))
    return ppt, subs, last


def settle(
    ppt: dict[str, int],
    subs: dict[str, Subscription],
    last: dict[str, tuple[TopicPartition, ...]],
) -> tuple[dict[str, Subscription], dict[str, Assignment]]:
    """Cooperative rebalances until nothing changes (at most four)."""
    result = StaticStickyAssignor().assign(ppt, subs, last_assignment_by_member=last)
    for generation in range(3, 8):
        check_valid(ppt, subs, result, complete=False)
        subs = next_round(subs, result, generation)
        following = StaticStickyAssignor().assign(ppt, subs)
        if following == result:
            return subs, result
        result = following
    raise AssertionError("static-sticky rebalances did not converge")


def weight_of(sub: Subscription) -> int:
    info = decode_subscription_info(sub.user_data)
    return 0 if info.draining else info.capacity


@settings(max_examples=120, deadline=None)
@given(weighted_groups(equal=True))
def test_weights_respected_with_equal_subscriptions(
    group: tuple[dict[str, int], dict[str, Subscription], dict[str, tuple[TopicPartition, ...]]],
) -> None:
    ppt, subs, last = group
    subs, result = settle(ppt, subs, last)
    check_valid(ppt, subs, result)
    weights = {m: weight_of(s) for m, s in subs.items()}
    if not any(weights.values()):
        return
    total = sum(len(a.partitions) for a in result.values())
    for member_id, assignment in result.items():
        share = Fraction(total * weights[member_id], sum(weights.values()))
        assert share.__floor__() <= len(assignment.partitions) <= share.__ceil__(), member_id


@settings(max_examples=120, deadline=None)
@given(weighted_groups(equal=False))
def test_weights_with_different_subscriptions(
    group: tuple[dict[str, int], dict[str, Subscription], dict[str, tuple[TopicPartition, ...]]],
) -> None:
    ppt, subs, last = group
    first = StaticStickyAssignor().assign(ppt, subs, last_assignment_by_member=last)
    reordered = dict(reversed(list(subs.items())))
    assert StaticStickyAssignor().assign(ppt, reordered, last_assignment_by_member=last) == first
    subs, result = settle(ppt, subs, last)
    check_valid(ppt, subs, result)
    weights = {m: weight_of(s) for m, s in subs.items()}
    receivers = {m for m, w in weights.items() if w > 0}
    for member_id, assignment in result.items():
        for tp in assignment.partitions:
            if member_id not in receivers:
                # Only topics no receiver subscribes to stay with weight-0 members.
                assert not any(tp.topic in subs[r].topics for r in receivers)
                continue
            # No single move lowers sum(count^2 / weight).
            for other in receivers - {member_id}:
                if tp.topic in subs[other].topics:
                    mine, theirs = len(assignment.partitions), len(result[other].partitions)
                    assert (2 * theirs + 1) * weights[member_id] >= (2 * mine - 1) * weights[other]
    if receivers and all(weights[m] == 1 for m in receivers) and len(receivers) == len(subs):
        assert max(counts(result).values()) == optimal_max_load(ppt, subs)


def test_equal_weights_balanced_like_kafka() -> None:
    subs = {f"m{i}": static(f"i{i}") for i in range(3)}
    assert spread(StaticStickyAssignor().assign(PPT, subs)) == 1


# -- version probing (KIP-268) -----------------------------------------------------------------


def member_state(member: StaticStickyAssignor) -> dict[str, object]:
    return {
        "probing": member.probing_requested,
        "upgrade": member.should_upgrade,
        "version": member.used_version,
    }


def test_version_probing_round_trip() -> None:
    leader = StaticStickyAssignor(version=1)
    member = StaticStickyAssignor(version=2)
    owned = (TopicPartition("t0", 0), TopicPartition("t1", 0))
    leader_owned = (TopicPartition("t0", 1),)

    def subscriptions() -> dict[str, Subscription]:
        return {
            "leader": static("il", leader_owned, 4, leader.subscription_user_data(TOPICS)),
            "member": static("im", owned, 4, member.subscription_user_data(TOPICS)),
        }

    # 1. The new member speaks v2 to a v1 leader: probing, nothing moves.
    subs = subscriptions()
    assert decode_subscription_info(subs["member"].user_data).version == 2
    probe = leader.assign(PPT, subs)
    assert probe["member"].partitions == owned
    assert probe["leader"].partitions == leader_owned
    assert decode_assignment_info(probe["member"].user_data) == StaticStickyAssignmentInfo(
        1, 1, VERSION_PROBING
    )
    member.on_assignment(probe["member"], 4)
    assert member_state(member) == {"probing": True, "upgrade": False, "version": 1}

    # 2. It rejoins with v1: a normal assignment, v1, leader supports 1.
    subs = subscriptions()
    assert decode_subscription_info(subs["member"].user_data).version == 1
    normal = leader.assign(PPT, subs)
    check_valid(PPT, subs, normal)
    assert decode_assignment_info(normal["member"].user_data) == StaticStickyAssignmentInfo(1, 1, 0)
    member.on_assignment(normal["member"], 5)
    assert member_state(member) == {"probing": False, "upgrade": False, "version": 1}

    # 3. The leader is upgraded: it assigns in v1 (lowest present) but says it supports 2.
    leader = StaticStickyAssignor(version=2)
    subs = subscriptions()
    upgraded = leader.assign(PPT, subs)
    assert decode_assignment_info(upgraded["member"].user_data) == StaticStickyAssignmentInfo(
        1, 2, 0
    )
    member.on_assignment(upgraded["member"], 6)
    assert member_state(member) == {"probing": False, "upgrade": True, "version": 2}

    # 4. The member rejoins with v2; everyone is on v2 now.
    subs = subscriptions()
    assert decode_subscription_info(subs["member"].user_data).version == 2
    final = leader.assign(PPT, subs)
    assert decode_assignment_info(final["member"].user_data) == StaticStickyAssignmentInfo(2, 2, 0)
    member.on_assignment(final["member"], 7)
    assert member_state(member) == {"probing": False, "upgrade": False, "version": 2}


def test_probing_is_triggered_by_versions_newer_than_the_leader_knows() -> None:
    future = encode_assignment_info(StaticStickyAssignmentInfo(3, 3))[:8] + b"\x00" * 10
    subs = {"a": static("ia", user_data=future), "b": static("ib")}
    result = StaticStickyAssignor().assign(PPT, subs)
    info = decode_assignment_info(result["a"].user_data)
    assert (info.version, info.error) == (2, VERSION_PROBING)


def test_garbage_user_data_counts_as_a_plain_member() -> None:
    subs = {"a": static("ia", user_data=b"\xff"), "b": static("ib", user_data=b"")}
    result = StaticStickyAssignor().assign(PPT, subs)
    check_valid(PPT, subs, result)
    assert counts(result) == {"a": 4, "b": 4}
    assert decode_assignment_info(result["a"].user_data).version == 2


def test_member_ignores_assignment_user_data_it_cannot_read() -> None:
    member = StaticStickyAssignor()
    member.on_assignment(Assignment((), b"junk"), 1)
    assert member.used_version == 2
    assert not member.probing_requested


# -- codec ---------------------------------------------------------------------------------


def test_codec_round_trips() -> None:
    for info in (
        StaticStickySubscriptionInfo(1, 2, 5, False),
        StaticStickySubscriptionInfo(2, 2, 0, True),
        StaticStickySubscriptionInfo(2, 7, 3, False),
    ):
        assert decode_subscription_info(encode_subscription_info(info)) == info
    assignment = StaticStickyAssignmentInfo(1, 2, VERSION_PROBING)
    assert decode_assignment_info(encode_assignment_info(assignment)) == assignment
    assert encode_subscription_info(StaticStickySubscriptionInfo(2, 2, 3, True)) == (
        b"\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x03\x01"
    )


def test_codec_newer_version_reads_header_and_ignores_unknown_flags() -> None:
    data = b"\x00\x00\x00\x09\x00\x00\x00\x09whatever"
    assert decode_subscription_info(data) == StaticStickySubscriptionInfo(9, 9)
    flags = encode_subscription_info(StaticStickySubscriptionInfo(2, 2, 1))[:-1] + b"\xfe"
    assert not decode_subscription_info(flags).draining


@pytest.mark.parametrize(
    "data",
    [
        None,
        b"",
        b"\x00\x00\x00\x01",
        b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01",  # version 0
        b"\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x01\x00",  # latest < version
        b"\x00\x00\x00\x01\x00\x00\x00\x01\xff\xff\xff\xff",  # negative capacity
        b"\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x01",  # v2 without flags
    ],
)
def test_codec_rejects_garbage(data: bytes | None) -> None:
    with pytest.raises(ProtocolError):
        decode_subscription_info(data)


def test_assignment_codec_rejects_garbage() -> None:
    with pytest.raises(ProtocolError):
        decode_assignment_info(b"\x00\x00\x00\x01\x00\x00\x00\x01")


def test_constructor_validates() -> None:
    with pytest.raises(ValueError):
        StaticStickyAssignor(version=3)
    with pytest.raises(ValueError):
        StaticStickyAssignor(capacity=-1)
    with pytest.raises(ValueError):
        encode_subscription_info(StaticStickySubscriptionInfo(1, 1, 1, True))
