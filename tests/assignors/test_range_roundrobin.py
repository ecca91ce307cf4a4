"""Range and round-robin: Kafka's documented examples, KIP-345 ordering, edge cases."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.assignors import RangeAssignor, RoundRobinAssignor
from coordinator.protocol import Assignment, Subscription, TopicPartition

from .helpers import check_valid


def tps(*names: str) -> tuple[TopicPartition, ...]:
    """tps("t0p1", "t1p0") -> partitions, for reading examples as Kafka's javadoc writes them."""
    result = []
    for name in names:
        topic, partition = name.split("p")
        result.append(TopicPartition(topic, int(partition)))
    return tuple(result)


def partitions(result: dict[str, Assignment]) -> dict[str, set[TopicPartition]]:
    return {m: set(a.partitions) for m, a in result.items()}


# -- range -------------------------------------------------------------------------------


def test_range_javadoc_example() -> None:
    subs = {"C0": Subscription(("t0", "t1")), "C1": Subscription(("t0", "t1"))}
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, subs)
    assert result["C0"].partitions == tps("t0p0", "t0p1", "t1p0", "t1p1")
    assert result["C1"].partitions == tps("t0p2", "t1p2")


def test_range_per_topic_only_subscribers() -> None:
    subs = {
        "C0": Subscription(("t0",)),
        "C1": Subscription(("t0", "t1")),
        "C2": Subscription(("t1",)),
    }
    result = RangeAssignor().assign({"t0": 3, "t1": 4}, subs)
    assert partitions(result) == {
        "C0": set(tps("t0p0", "t0p1")),
        "C1": set(tps("t0p2", "t1p0", "t1p1")),
        "C2": set(tps("t1p2", "t1p3")),
    }


def test_range_orders_static_members_by_instance_id_first() -> None:
    # Member ids sort the other way round; instance ids decide, static before dynamic.
    subs = {
        "a-dynamic": Subscription(("t",)),
        "z-member": Subscription(("t",), group_instance_id="i1"),
        "y-member": Subscription(("t",), group_instance_id="i2"),
    }
    result = RangeAssignor().assign({"t": 3}, subs)
    assert result["z-member"].partitions == tps("tp0")
    assert result["y-member"].partitions == tps("tp1")
    assert result["a-dynamic"].partitions == tps("tp2")


def test_range_same_assignment_after_restart_with_new_member_ids() -> None:
    before = {f"C{i}": Subscription(("t0", "t1"), group_instance_id=f"I{i}") for i in range(3)}
    after = {
        "C5": Subscription(("t0", "t1"), group_instance_id="I0"),
        "C3": Subscription(("t0", "t1"), group_instance_id="I1"),
        "C4": Subscription(("t0", "t1"), group_instance_id="I2"),
    }
    first = RangeAssignor().assign({"t0": 4, "t1": 5}, before)
    second = RangeAssignor().assign({"t0": 4, "t1": 5}, after)
    assert first["C0"] == second["C5"]
    assert first["C1"] == second["C3"]
    assert first["C2"] == second["C4"]


def test_range_unknown_and_empty_topics_and_members_without_topics() -> None:
    subs = {
        "C0": Subscription(("t0", "missing")),
        "C1": Subscription(("t0", "empty")),
        "C2": Subscription(()),
    }
    result = RangeAssignor().assign({"t0": 2, "empty": 0, "unsubscribed": 5}, subs)
    assert partitions(result) == {"C0": set(tps("t0p0")), "C1": set(tps("t0p1")), "C2": set()}


def test_range_no_members() -> None:
    assert RangeAssignor().assign({"t0": 3}, {}) == {}


# -- round robin ---------------------------------------------------------------------------


def test_roundrobin_javadoc_example_equal_subscriptions() -> None:
    subs = {"C0": Subscription(("t0", "t1")), "C1": Subscription(("t0", "t1"))}
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, subs)
    assert result["C0"].partitions == tps("t0p0", "t0p2", "t1p1")
    assert result["C1"].partitions == tps("t0p1", "t1p0", "t1p2")


def test_roundrobin_javadoc_example_different_subscriptions() -> None:
    subs = {
        "C0": Subscription(("t0",)),
        "C1": Subscription(("t0", "t1")),
        "C2": Subscription(("t0", "t1", "t2")),
    }
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    assert result["C0"].partitions == tps("t0p0")
    assert result["C1"].partitions == tps("t1p0")
    assert result["C2"].partitions == tps("t1p1", "t2p0", "t2p1", "t2p2")


def test_roundrobin_javadoc_static_membership_example() -> None:
    # The javadoc: dynamic members C0..C2 bounce to C3..C5 and get shuffled; with instance
    # ids I1..I3 the assignment follows the instance ids instead.
    ppt = {"t0": 3, "t1": 3}
    before = {
        "C0": Subscription(("t0", "t1"), group_instance_id="I1"),
        "C1": Subscription(("t0", "t1"), group_instance_id="I2"),
        "C2": Subscription(("t0", "t1"), group_instance_id="I3"),
    }
    after = {
        "C5": Subscription(("t0", "t1"), group_instance_id="I1"),
        "C3": Subscription(("t0", "t1"), group_instance_id="I2"),
        "C4": Subscription(("t0", "t1"), group_instance_id="I3"),
    }
    first = RoundRobinAssignor().assign(ppt, before)
    assert first["C0"].partitions == tps("t0p0", "t1p0")
    assert first["C1"].partitions == tps("t0p1", "t1p1")
    assert first["C2"].partitions == tps("t0p2", "t1p2")
    second = RoundRobinAssignor().assign(ppt, after)
    assert second["C5"] == first["C0"]
    assert second["C3"] == first["C1"]
    assert second["C4"] == first["C2"]


def test_roundrobin_dynamic_members_shuffle_on_new_ids() -> None:
    # The javadoc's counter-example: without instance ids the member ids decide.
    ppt = {"t0": 3, "t1": 3}
    result = RoundRobinAssignor().assign(
        ppt, {m: Subscription(("t0", "t1")) for m in ("C5", "C3", "C4")}
    )
    assert result["C3"].partitions == tps("t0p0", "t1p0")
    assert result["C5"].partitions == tps("t0p2", "t1p2")


def test_roundrobin_unknown_and_empty_topics_and_members_without_topics() -> None:
    subs = {
        "C0": Subscription(("t0", "missing")),
        "C1": Subscription(("t0", "empty")),
        "C2": Subscription(()),
    }
    result = RoundRobinAssignor().assign({"t0": 3, "empty": 0, "unsubscribed": 5}, subs)
    assert partitions(result) == {
        "C0": set(tps("t0p0", "t0p2")),
        "C1": set(tps("t0p1")),
        "C2": set(),
    }


# -- properties ----------------------------------------------------------------------------

TOPICS = ("a", "b", "c", "d")


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Subscription]]:
    ppt = {t: draw(st.integers(0, 7)) for t in draw(st.sets(st.sampled_from(TOPICS)))}
    member_ids = draw(st.lists(st.text("xyz", min_size=1, max_size=3), max_size=6, unique=True))
    subs = {}
    for member_id in member_ids:
        topics = draw(st.sets(st.sampled_from((*TOPICS, "unknown"))))
        instance = draw(st.one_of(st.none(), st.text("ij", min_size=1, max_size=2)))
        subs[member_id] = Subscription(tuple(sorted(topics)), group_instance_id=instance)
    return ppt, subs


@settings(max_examples=150, deadline=None)
@given(groups())
def test_range_property(group: tuple[dict[str, int], dict[str, Subscription]]) -> None:
    ppt, subs = group
    result = RangeAssignor().assign(ppt, subs)
    check_valid(ppt, subs, result)
    for topic, count in ppt.items():
        per_member = [
            sum(1 for tp in result[m].partitions if tp.topic == topic)
            for m, s in subs.items()
            if topic in s.topics
        ]
        if per_member:
            assert max(per_member) - min(per_member) <= 1
            assert sum(per_member) == count


@settings(max_examples=150, deadline=None)
@given(groups())
def test_roundrobin_property(group: tuple[dict[str, int], dict[str, Subscription]]) -> None:
    ppt, subs = group
    result = RoundRobinAssignor().assign(ppt, subs)
    check_valid(ppt, subs, result)
    # Deterministic whatever the order the subscriptions come in.
    assert RoundRobinAssignor().assign(ppt, dict(reversed(list(subs.items())))) == result
    if len({frozenset(t for t in s.topics if t in ppt) for s in subs.values()}) == 1:
        sizes = [len(a.partitions) for a in result.values()]
        assert max(sizes) - min(sizes) <= 1
