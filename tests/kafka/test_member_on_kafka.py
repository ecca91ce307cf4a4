"""Our `GroupMember` with its group on a real Kafka broker (KafkaTransport).

The member logic is the one the embedded coordinator tests exercise; here the broker's
group coordinator answers, and what it says is read back from it (DescribeGroups, and
commits it validates against the generation).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable

import pytest

from coordinator.assignors import (
    PartitionAssignor,
    StaticStickyAssignor,
    decode_subscription_info,
    get_assignor,
)
from coordinator.client import GroupMember
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.messages import (
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from coordinator.protocol import (
    Subscription,
    TopicPartition,
    decode_subscription,
    encode_subscription,
)
from staticfleet.kafka.broker import KafkaBroker
from tests.client.helpers import Ledger, member_config, settled, wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 6
_groups = itertools.count()


class Fleet:
    """Members of one group on the broker, each with a transport of its own."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.ledger = Ledger()
        self.members: dict[str, GroupMember] = {}
        self.admin = KafkaTransport(bootstrap)

    async def start(
        self,
        instance_id: str,
        assignor_factory: Callable[[str], PartitionAssignor] = get_assignor,
        **settings: object,
    ) -> GroupMember:
        config = member_config(
            instance_id,
            group_id=self.group,
            topics=(self.topic,),
            session_timeout_ms=6_000,
            rebalance_timeout_ms=10_000,
            **settings,
        )
        member = GroupMember(
            KafkaTransport(self.bootstrap, client_id=instance_id),
            config,
            self.ledger.listener(instance_id),
            assignor_factory=assignor_factory,
        )
        await member.start()
        self.members[instance_id] = member
        return member

    async def stop(self, instance_id: str, leave: bool | None = None) -> None:
        member = self.members.pop(instance_id)
        await member.close(leave=leave)
        await member._transport.close()

    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset(TopicPartition(self.topic, p) for p in range(PARTITIONS))

    async def settle(self, within: float = 30.0) -> None:
        await wait_until(lambda: settled(self.members.values(), self.partitions()), within)

    async def close(self) -> None:
        for instance_id in list(self.members):
            await self.stop(instance_id)
        await self.admin.close()


@pytest.fixture
async def fleet(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str]
) -> AsyncIterator[Fleet]:
    fleet = Fleet(
        f"kafka://{kafka_broker.bootstrap}", f"kafka-fleet-{next(_groups)}", kafka_topic(PARTITIONS)
    )
    try:
        yield fleet
    finally:
        await fleet.close()


async def test_static_rolling_restart_on_kafka_keeps_generation_and_partitions(
    fleet: Fleet,
) -> None:
    ids = ["m0", "m1", "m2"]
    for instance_id in ids:
        await fleet.start(instance_id, eager_assignor="static-sticky")
    await fleet.settle()
    generation = fleet.members["m0"].generation_id
    before = {i: fleet.members[i].assignment for i in ids}

    for instance_id in ids:
        await fleet.stop(instance_id)
        member = await fleet.start(instance_id, eager_assignor="static-sticky")
        assert await member.wait_for_assignment(20) == before[instance_id]
        # The broker answered the static rejoin with the group's generation: no rebalance.
        assert member.generation_id == generation
    await fleet.settle()

    described = await fleet.admin.describe_group(fleet.group)
    assert described.group_state == "Stable"
    assert sorted(m.group_instance_id or "" for m in described.members) == ids
    # The broker still accepts the first generation: no rebalance happened on it.
    for instance_id, member in fleet.members.items():
        assert member.generation_id == generation
        await member.commit({tp: 1 for tp in member.assignment})
        assert before[instance_id] == member.assignment
    assert not fleet.ledger.violations


async def test_static_sticky_keeps_partitions_by_instance_on_kafka_in_eager_rebalances(
    fleet: Fleet,
) -> None:
    """Eager members revoke everything and a broker keeps no last assignments: the leader's
    memory of what it assigned, by instance id, keeps `static-sticky` sticky."""
    for instance_id in ("m0", "m1", "m2", "m3"):
        await fleet.start(instance_id, eager_assignor="static-sticky")
        await fleet.settle()
    before = {i: m.assignment for i, m in fleet.members.items()}
    # A member other than the leader leaves, the first one in instance order, so that an
    # assignment made from scratch would hand the survivors different partitions.
    leaving = min(i for i, m in fleet.members.items() if not m.is_leader)
    await fleet.stop(leaving, leave=True)
    await fleet.settle()
    for instance_id, member in fleet.members.items():
        assert before[instance_id] <= member.assignment, instance_id
    assert not fleet.ledger.violations


def static_sticky_v(version: int) -> Callable[[str], PartitionAssignor]:
    def factory(name: str) -> PartitionAssignor:
        return (
            StaticStickyAssignor(version=version) if name == "static-sticky" else get_assignor(name)
        )

    return factory


async def test_kip268_version_probing_on_kafka_downgrades_then_upgrades_after_leader_bounce(
    fleet: Fleet,
) -> None:
    async def start(instance_id: str, version: int) -> GroupMember:
        return await fleet.start(
            instance_id,
            static_sticky_v(version),
            rebalance_protocol="cooperative",
            cooperative_assignor="static-sticky",
        )

    leader = await start("m0", 1)
    await leader.wait_for_assignment(20)
    newer = await start("m1", 2)
    await fleet.settle()
    assert leader.is_leader
    newer_assignor = newer.assignor("static-sticky")
    assert isinstance(newer_assignor, StaticStickyAssignor)
    # The v1 leader could not read v2: it probed, the newer member downgraded.
    await wait_until(lambda: newer_assignor.used_version == 1, within=20)
    assert await subscription_versions(fleet) == {"m0": 1, "m1": 1}

    await fleet.stop("m0")
    upgraded = await start("m0", 2)
    await wait_until(
        lambda: (
            newer_assignor.used_version == 2
            and upgraded.assignor("static-sticky").used_version == 2  # type: ignore[attr-defined]
            and settled(fleet.members.values(), fleet.partitions())
        ),
        within=30,
    )
    await wait_until(lambda: not newer._rejoin_event.is_set())
    assert await subscription_versions(fleet) == {"m0": 2, "m1": 2}
    assert not fleet.ledger.violations


async def subscription_versions(fleet: Fleet) -> dict[str | None, int]:
    described = await fleet.admin.describe_group(fleet.group)
    versions: dict[str | None, int] = {}
    for m in described.members:
        info = decode_subscription_info(decode_subscription(m.member_metadata).user_data)
        assert info is not None
        versions[m.group_instance_id] = info.version
    return versions


async def test_fenced_zombie_commit_is_refused_by_the_broker(fleet: Fleet) -> None:
    zombie = await fleet.start("m0", heartbeat_interval_ms=3_000)
    await zombie.wait_for_assignment(20)
    zombie_id, zombie_generation = zombie.member_id, zombie.generation_id
    # A second process takes over the instance id (a pod restarted while the old one hangs).
    del fleet.members["m0"]
    successor = await fleet.start("m0")
    await successor.wait_for_assignment(20)
    assert successor.member_id != zombie_id

    answer = await fleet.admin.commit_offsets(
        OffsetCommitRequest(
            fleet.group,
            zombie_generation,
            zombie_id,
            "m0",
            [OffsetCommitPartition(fleet.topic, 0, 42)],
        )
    )
    assert answer.error_code is ErrorCode.FENCED_INSTANCE_ID
    with pytest.raises(CoordinatorError) as refused:
        await zombie.commit({TopicPartition(fleet.topic, 0): 42})
    assert refused.value.code is ErrorCode.FENCED_INSTANCE_ID
    await wait_until(lambda: zombie.state == "fatal")
    await zombie.close()
    await zombie._transport.close()
    assert await successor.fetch_committed([TopicPartition(fleet.topic, 0)]) == {}


async def test_two_bounce_upgrade_to_cooperative_on_kafka_never_double_owns(fleet: Fleet) -> None:
    ids = ["m0", "m1", "m2"]

    async def start(instance_id: str, phase: str) -> None:
        await fleet.start(
            instance_id,
            rebalance_protocol=phase,
            eager_assignor="range",
            cooperative_assignor="static-sticky",
        )

    for instance_id in ids:
        await start(instance_id, "eager")
    await fleet.settle()
    assert fleet.members["m0"].protocol_name == "range"

    for phase in ("compatible", "cooperative"):
        for instance_id in ids:
            await fleet.stop(instance_id)
            await start(instance_id, phase)
            await fleet.settle()
            assert not fleet.ledger.violations, fleet.ledger.violations
        if phase == "compatible":
            # Every member now offers static-sticky first: the broker's vote selects it.
            await wait_until(
                lambda: all(m.protocol_name == "static-sticky" for m in fleet.members.values()),
                within=30,
            )
            await fleet.settle()

    assert all(m.cooperative for m in fleet.members.values())
    described = await fleet.admin.describe_group(fleet.group)
    assert (described.group_state, described.protocol_data) == ("Stable", "static-sticky")
    owners = [tp for m in fleet.members.values() for tp in m.assignment]
    assert sorted(owners) == sorted(fleet.partitions())
    assert not fleet.ledger.violations


async def test_a_heartbeat_answers_while_the_same_transports_join_is_parked(
    fleet: Fleet,
) -> None:
    """JoinGroup long-polls on a connection of its own, as in Kafka's Java client."""
    a, b = KafkaTransport(fleet.bootstrap), KafkaTransport(fleet.bootstrap)
    try:
        await fleet.admin.wait_for_coordinator(fleet.group)
        first = await raw_join(a, fleet, "a")
        a_id = first.member_id
        await a.sync_group(
            SyncGroupRequest(fleet.group, first.generation_id, a_id, "a", "consumer", "range")
        )
        # b joins (the group rebalances), a rejoins: both in the next generation.
        b_joins = asyncio.ensure_future(raw_join(b, fleet, "b"))
        await asyncio.sleep(0.3)
        generation = (await raw_join(a, fleet, "a", a_id)).generation_id
        b_id = (await b_joins).member_id
        for transport, member_id, instance_id in ((a, a_id, "a"), (b, b_id, "b")):
            await transport.sync_group(
                SyncGroupRequest(
                    fleet.group, generation, member_id, instance_id, "consumer", "range"
                )
            )

        # a rejoins with new metadata and waits for b, which never rejoins.
        parked = asyncio.ensure_future(raw_join(a, fleet, "a", a_id, user_data=b"v2"))
        await asyncio.sleep(0.5)
        assert not parked.done()
        started = asyncio.get_running_loop().time()
        beat = await a.heartbeat(HeartbeatRequest(fleet.group, generation, a_id, "a"))
        assert beat.error_code is ErrorCode.REBALANCE_IN_PROGRESS
        assert asyncio.get_running_loop().time() - started < 1.0
        assert not parked.done()
        await b.leave_group(LeaveGroupRequest(fleet.group, [MemberIdentity(b_id, "b")]))
        assert (await parked).error_code is ErrorCode.NONE
    finally:
        await a.close()
        await b.close()


async def raw_join(
    transport: KafkaTransport,
    fleet: Fleet,
    instance_id: str,
    member_id: str = "",
    user_data: bytes | None = None,
) -> JoinGroupResponse:
    # New metadata from a known member makes the broker rebalance (and park the join).
    metadata = encode_subscription(Subscription(topics=(fleet.topic,), user_data=user_data))
    return await transport.join_group(
        JoinGroupRequest(
            group_id=fleet.group,
            session_timeout_ms=6_000,
            rebalance_timeout_ms=5_000,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocols=[JoinGroupProtocol("range", metadata)],
        )
    )
