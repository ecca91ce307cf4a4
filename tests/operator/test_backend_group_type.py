"""`KafkaBackend.describe_typed`: which describe a pass sends, learned per group.

A fake transport stands in for the broker (the real one: tests/kafka/test_consumer_protocol.py)
and counts the requests: a classic group costs one DescribeGroups per pass; a consumer group
one ConsumerGroupDescribe once learned; a group that changes protocol is found again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator import DescribedGroup, DescribedGroupMember, ErrorCode
from coordinator.client.kafka_groups import ConsumerGroupDescription, ConsumerGroupMember
from staticfleet_operator.backends import KafkaBackend

GROUP = "orders"


def classic_group() -> DescribedGroup:
    member = DescribedGroupMember("m-0", "orders-0", "c", "h", b"", b"")
    return DescribedGroup(ErrorCode.NONE, GROUP, "Stable", "consumer", "range", [member])


# DescribeGroups v5's answer for a consumer group, and for a group that does not exist.
DEAD = DescribedGroup(ErrorCode.NONE, GROUP, "Dead", "", "")
NOT_CONSUMER = ConsumerGroupDescription(GROUP, int(ErrorCode.GROUP_ID_NOT_FOUND))


def consumer_group() -> ConsumerGroupDescription:
    member = ConsumerGroupMember(
        "m-0", "orders-0", 3, "c", "h", (GROUP,), ((GROUP, 0),), ((GROUP, 0),)
    )
    return ConsumerGroupDescription(GROUP, 0, None, "Stable", 3, 3, "uniform", (member,))


@dataclass
class FakeTransport:
    protocol: str  # "classic", "consumer" or "none"
    sent: list[str] = field(default_factory=list)

    async def describe_group(self, group_id: str) -> DescribedGroup:
        self.sent.append("DescribeGroups")
        return classic_group() if self.protocol == "classic" else DEAD

    async def describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        self.sent.append("ConsumerGroupDescribe")
        return consumer_group() if self.protocol == "consumer" else NOT_CONSUMER


def backend(transport: FakeTransport) -> KafkaBackend:
    return KafkaBackend("kafka:9092", transport=transport)  # type: ignore[arg-type]


async def test_a_classic_group_is_one_describe_groups_per_pass() -> None:
    transport = FakeTransport("classic")
    kafka = backend(transport)
    for _ in range(2):
        described, consumer = await kafka.describe_typed(GROUP)
        assert consumer is None and described.group_state == "Stable"
    assert transport.sent == ["DescribeGroups", "DescribeGroups"]


async def test_a_consumer_group_is_learned_then_one_consumer_group_describe_per_pass() -> None:
    transport = FakeTransport("consumer")
    kafka = backend(transport)
    for _ in range(2):
        described, consumer = await kafka.describe_typed(GROUP)
        assert consumer == consumer_group()
        assert (described.group_state, described.generation_id) == ("Stable", 3)
        assert described.protocol_type == "consumer" and described.protocol_data == "uniform"
        assert [m.group_instance_id for m in described.members] == ["orders-0"]
    assert transport.sent == ["DescribeGroups", "ConsumerGroupDescribe", "ConsumerGroupDescribe"]


async def test_a_group_that_changes_protocol_is_found_again_and_a_missing_one_reads_dead() -> None:
    transport = FakeTransport("consumer")
    kafka = backend(transport)
    await kafka.describe_typed(GROUP)
    transport.protocol, transport.sent = "classic", []
    described, consumer = await kafka.describe_typed(GROUP)
    assert consumer is None and described.group_state == "Stable"
    assert transport.sent == ["ConsumerGroupDescribe", "DescribeGroups"]
    transport.protocol, transport.sent = "none", []
    described, consumer = await kafka.describe_typed(GROUP)
    assert consumer is None and described == DEAD  # an observed empty group, as before
    assert transport.sent == ["DescribeGroups", "ConsumerGroupDescribe"]
