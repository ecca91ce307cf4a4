"""The leader's memory of its last assignment, by instance id (for coordinators without
last assignments, such as a Kafka broker)."""

from __future__ import annotations

from coordinator.assignors import get_assignor
from coordinator.client.leader import assign
from coordinator.client.leader import assignments_by_instance as encoded_by_instance
from coordinator.messages import JoinGroupResponseMember, SyncGroupRequestAssignment
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)

TOPIC = "t"


def member(member_id: str, instance: str, last: tuple[int, ...] = ()) -> JoinGroupResponseMember:
    assignor = get_assignor("static-sticky")
    metadata = encode_subscription(
        Subscription(topics=(TOPIC,), user_data=assignor.subscription_user_data((TOPIC,)))
    )
    last_assignment = (
        encode_assignment(Assignment(tuple(TopicPartition(TOPIC, p) for p in last)))
        if last
        else b""
    )
    return JoinGroupResponseMember(member_id, instance, metadata, last_assignment)


def partitions(*numbers: int) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(TOPIC, p) for p in numbers)


def remember(**by_instance: tuple[TopicPartition, ...]) -> dict[str, bytes]:
    """A leader's memory: what it sent, by instance id."""
    return {i: encode_assignment(Assignment(p)) for i, p in by_instance.items()}


def assignments_by_instance(
    members: list[JoinGroupResponseMember], assignments: list[SyncGroupRequestAssignment]
) -> dict[str, tuple[TopicPartition, ...]]:
    """The leader's memory, decoded (it keeps the bytes it sent)."""
    encoded = encoded_by_instance(members, assignments)
    assert encoded == {
        m.group_instance_id: a.assignment
        for m, a in zip(members, assignments, strict=True)
        if m.group_instance_id
    }
    return {i: decode_assignment(data).partitions for i, data in encoded.items()}


def test_remembered_assignment_keeps_instances_on_their_partitions() -> None:
    members = [member("x1", "b"), member("x2", "c"), member("x3", "d")]
    memory = {
        "a": partitions(0, 1),
        "b": partitions(2, 3),
        "c": partitions(4),
        "d": partitions(5),
    }
    remembered = remember(**memory)
    result = assignments_by_instance(
        members, assign(get_assignor("static-sticky"), members, {TOPIC: 6}, remembered)
    )
    for instance in ("b", "c", "d"):
        assert set(memory[instance]) <= set(result[instance]), instance
    fresh = assignments_by_instance(
        members, assign(get_assignor("static-sticky"), members, {TOPIC: 6})
    )
    assert fresh != result  # without the memory the survivors would move


def test_the_coordinators_last_assignments_win_over_the_leaders_memory() -> None:
    members = [member("x1", "b", last=(0, 1, 2)), member("x2", "c", last=(3, 4, 5))]
    remembered = remember(b=partitions(3, 4, 5), c=partitions(0, 1, 2))
    result = assignments_by_instance(
        members, assign(get_assignor("static-sticky"), members, {TOPIC: 6}, remembered)
    )
    assert result == {"b": partitions(0, 1, 2), "c": partitions(3, 4, 5)}
