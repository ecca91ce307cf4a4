"""New partitions and new subscriptions reach the group (docs/coordinator.md, "Topic metadata
and subscription changes").

Kafka's consumer leader refreshes metadata and rejoins when a subscribed topic's partition
count changes (ConsumerCoordinator.rejoinNeededOrPending: the metadata snapshot differs from
the one it assigned with). Here the metadata lives in the coordinator, so the coordinator
starts that rebalance itself; members learn of it as Kafka members do, through
REBALANCE_IN_PROGRESS on their heartbeat.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from coordinator import (
    ErrorCode,
    JoinGroupResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    SqliteStore,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from coordinator.clock import settle
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    encode_assignment,
    encode_subscription,
)
from coordinator.subscriptions import (
    changed_topics,
    subscribed_topics,
    subscription_changed,
    unowned_partitions,
)
from tests.coordinator.harness import GROUP, Harness, join_request

TOPIC = "orders"


def subscription(*topics: str, owned: Sequence[TopicPartition] = (), generation: int = -1) -> bytes:
    return encode_subscription(
        Subscription(topics=topics, owned_partitions=tuple(owned), generation_id=generation)
    )


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = await Harness().start()
    yield h
    await h.coordinator.close()


async def form(
    harness: Harness,
    instance_ids: Sequence[str],
    topics: Sequence[str] = (TOPIC,),
    protocol_type: str = "consumer",
) -> list[JoinGroupResponse]:
    """Static members subscribing to `topics`, joined and synced: a Stable generation 1."""
    tasks = [
        harness.join(
            join_request(
                instance_id=instance,
                metadata=subscription(*topics),
                protocol_type=protocol_type,
            )
        )
        for instance in instance_ids
    ]
    responses = await harness.finish_join(tasks)
    leader = next(r for r in responses if r.leader == r.member_id)
    assignments = [SyncGroupRequestAssignment(m.member_id, b"") for m in leader.members]
    syncs = [
        harness.coordinator.sync_group(
            SyncGroupRequest(
                GROUP,
                r.generation_id,
                r.member_id,
                None,
                protocol_type,
                r.protocol_name,
                assignments if r is leader else [],
            )
        )
        for r in responses
    ]
    assert all(s.error_code == ErrorCode.NONE for s in await asyncio.gather(*syncs))
    assert await harness.state() == "Stable"
    return responses


async def kinds_since(harness: Harness, seq: int) -> list[str]:
    return [e.kind for e in await harness.coordinator.journal_rows(GROUP, seq)]


async def last_seq(harness: Harness) -> int:
    return max((e.seq for e in await harness.coordinator.journal_rows(GROUP)), default=0)


@pytest.mark.parametrize(("before", "after"), [(0, 12), (24, 32), (32, 24)])
async def test_partition_count_change_of_a_subscribed_topic_rebalances_the_group(
    harness: Harness, before: int, after: int
) -> None:
    if before:
        await harness.coordinator.set_topic_metadata({TOPIC: before})
    responses = await form(harness, ["i-0", "i-1"])
    since = await last_seq(harness)

    await harness.coordinator.set_topic_metadata({TOPIC: after})

    assert await harness.state() == "PreparingRebalance"
    rows = await harness.coordinator.journal_rows(GROUP, since)
    assert [e.kind for e in rows] == ["topic_metadata_changed", "rebalance_started"]
    assert rows[0].detail == {"topics": {TOPIC: [before, after]}}
    assert "topic metadata changed" in rows[1].detail["reason"]
    # Members learn of it on their next heartbeat, as Kafka members do.
    for response in responses:
        code = await harness.heartbeat(response.member_id, 1)
        assert code == ErrorCode.REBALANCE_IN_PROGRESS
    rejoins = [
        harness.join(join_request(r.member_id, f"i-{n}", metadata=subscription(TOPIC)))
        for n, r in enumerate(responses)
    ]
    await settle()
    results = [await task for task in rejoins]
    assert {r.generation_id for r in results} == {2}
    leader = next(r for r in results if r.leader == r.member_id)
    assert len(leader.members) == 2
    assert not leader.skip_assignment
    # The leader assigns with what the coordinator now knows.
    assert await harness.coordinator.topic_metadata() == {TOPIC: after}


async def test_metadata_change_during_completing_rebalance_starts_over(harness: Harness) -> None:
    # The leader may have read the metadata before the change: its assignment is void.
    await harness.coordinator.set_topic_metadata({TOPIC: 6})
    tasks = [
        harness.join(join_request(instance_id=f"i-{n}", metadata=subscription(TOPIC)))
        for n in range(2)
    ]
    responses = await harness.finish_join(tasks)
    follower = next(r for r in responses if r.leader != r.member_id)
    follower_sync = harness.sync(follower.member_id, 1)
    await settle()
    assert await harness.state() == "CompletingRebalance"

    await harness.coordinator.set_topic_metadata({TOPIC: 9})
    await settle()

    assert follower_sync.done(), "the parked follower must be told to rejoin"
    assert follower_sync.result().error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert await harness.state() == "PreparingRebalance"


async def test_metadata_change_of_a_topic_nobody_subscribes_changes_nothing(
    harness: Harness,
) -> None:
    await harness.coordinator.set_topic_metadata({TOPIC: 6, "payments": 3})
    await form(harness, ["i-0", "i-1"])
    since = await last_seq(harness)

    await harness.coordinator.set_topic_metadata({"payments": 8, "audit": 4})
    await harness.coordinator.set_topic_metadata({TOPIC: 6})  # the same count again

    assert await harness.state() == "Stable"
    assert await kinds_since(harness, since) == []
    assert harness.coordinator.generation_of(GROUP) == 1


async def test_metadata_change_while_preparing_adds_no_second_rebalance(harness: Harness) -> None:
    # In PreparingRebalance the leader reads the metadata after the join phase anyway.
    await harness.coordinator.set_topic_metadata({TOPIC: 6})
    first = harness.join(join_request(instance_id="i-0", metadata=subscription(TOPIC)))
    await settle()
    assert await harness.state() == "PreparingRebalance"
    since = await last_seq(harness)

    await harness.coordinator.set_topic_metadata({TOPIC: 9})

    assert await kinds_since(harness, since) == []
    [joined] = await harness.finish_join([first])
    assert joined.generation_id == 1


async def test_group_of_another_protocol_type_is_not_read_as_consumer_subscriptions(
    harness: Harness,
) -> None:
    # Only the consumer protocol's bytes are known; a connect group's metadata is opaque.
    await harness.coordinator.set_topic_metadata({TOPIC: 6})
    await form(harness, ["i-0", "i-1"], protocol_type="connect")

    await harness.coordinator.set_topic_metadata({TOPIC: 9})

    assert await harness.state() == "Stable"


async def test_static_follower_restarting_with_other_topics_rebalances_beyond_kafka(
    harness: Harness,
) -> None:
    # Kafka serves such a member the current generation (the selected protocol is the same)
    # and its new topic stays unassigned until something else rebalances the group. We
    # hold every subscription, so we rebalance: deliberate (docs/coordinator.md).
    await harness.coordinator.set_topic_metadata({TOPIC: 6, "payments": 4})
    responses = await form(harness, ["i-0", "i-1"])
    leader = next(r for r in responses if r.leader == r.member_id)
    instances = {m.member_id: m.group_instance_id for m in leader.members}
    leader_instance = instances.pop(leader.member_id)
    [instance] = instances.values()
    assert instance is not None
    since = await last_seq(harness)

    restarted = harness.join(
        join_request(instance_id=instance, metadata=subscription(TOPIC, "payments"))
    )
    await settle()

    assert not restarted.done(), "a rebalance, not the current generation"
    assert await harness.state() == "PreparingRebalance"
    rows = await harness.coordinator.journal_rows(GROUP, since)
    assert [e.kind for e in rows] == ["member_replaced", "rebalance_started"]
    assert "different topics" in rows[1].detail["reason"]
    assert await harness.heartbeat(leader.member_id, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoin = harness.join(
        join_request(leader.member_id, leader_instance, metadata=subscription(TOPIC))
    )
    await settle()
    results = [await restarted, await rejoin]
    assert {r.generation_id for r in results} == {2}
    [new_leader] = [r for r in results if r.leader == r.member_id]
    assert sorted(m.metadata for m in new_leader.members) == sorted(
        [subscription(TOPIC), subscription(TOPIC, "payments")]
    )


async def test_static_restart_with_same_topics_but_new_owned_partitions_does_not_rebalance(
    harness: Harness,
) -> None:
    # Owned partitions and generation change on every restart (KIP-345 must stay quiet).
    await harness.coordinator.set_topic_metadata({TOPIC: 6})
    await form(harness, ["i-0", "i-1"])
    rejoin = await harness.coordinator.join_group(
        join_request(
            instance_id="i-0",
            metadata=subscription(TOPIC, owned=[TopicPartition(TOPIC, 0)], generation=1),
        )
    )
    assert rejoin.error_code == ErrorCode.NONE
    assert rejoin.generation_id == 1
    assert await harness.state() == "Stable"


@pytest.mark.parametrize("raised", [True, False])
async def test_restart_after_a_metadata_change_rebalances_a_group_assigned_with_old_counts(
    tmp_path: Path, raised: bool
) -> None:
    # The change was written, then the coordinator died before the group's new generation:
    # the stored group is Stable with an assignment made for 6 partitions. Kafka's leader
    # would notice on its next metadata refresh; ours notices when it loads the group.
    path = tmp_path / "coordinator.db"
    first = await Harness(store=SqliteStore(path)).start()
    await first.coordinator.set_topic_metadata({TOPIC: 6})
    await form(first, ["i-0", "i-1"])
    if raised:
        await first.coordinator.set_topic_metadata({TOPIC: 9})
    # No close(): the process "dies" here; a new coordinator opens the same file.
    second = await Harness(store=SqliteStore(path)).start()
    try:
        if not raised:
            assert await second.state() == "Stable"
            return
        assert await second.state() == "PreparingRebalance"
        rows = await second.coordinator.journal_rows(GROUP)
        changed = [e for e in rows if e.kind == "topic_metadata_changed"]
        # One row from the first coordinator (its rebalance), one from the restart.
        assert [e.detail for e in changed] == [{"topics": {TOPIC: [6, 9]}}] * 2
        assert rows[-1].kind == "rebalance_started"
    finally:
        await second.coordinator.close()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscribed_topics_reads_only_the_topics_of_every_subscription_version(
    version: int,
) -> None:
    data = encode_subscription(
        Subscription(
            topics=("orders", "audit"),
            user_data=b"u",
            owned_partitions=(TopicPartition("orders", 1),),
            generation_id=4,
            rack_id="r",
        ),
        version,
    )
    assert subscribed_topics("consumer", data) == frozenset({"orders", "audit"})
    assert subscribed_topics("connect", data) is None  # another protocol type: opaque
    assert subscribed_topics("consumer", b"range") is None  # not a subscription
    assert subscribed_topics("consumer", data[:5]) is None  # truncated


def test_only_topics_count_as_a_subscription_change() -> None:
    before = (("range", subscription(TOPIC)),)
    assert not subscription_changed(
        "consumer", "range", before, (("range", subscription(TOPIC, generation=7)),)
    )
    assert subscription_changed("consumer", "range", before, (("range", subscription("x")),))
    # Unreadable on either side: nothing is inferred (Kafka's rule applies).
    assert not subscription_changed("consumer", "range", before, (("range", b"?"),))
    assert changed_topics({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 1}) == {
        "b": (2, 3),
        "c": (0, 1),
    }


@pytest.mark.parametrize("complete", [True, False])
async def test_restart_that_finds_subscribed_partitions_unowned_rebalances_beyond_kafka(
    tmp_path: Path, complete: bool
) -> None:
    # A cooperative rebalance held partitions 4-5 back for its follow-up rebalance, which
    # lived only in memory; the coordinator died before it. Loaded as Stable, with restarted
    # members that rejoin statically, nobody would ever ask for it: the load does.
    path = tmp_path / "coordinator.db"
    first = await Harness(store=SqliteStore(path)).start()
    await first.coordinator.set_topic_metadata({TOPIC: 6})
    responses = await form_with_assignments(
        first,
        {
            "i-0": [TopicPartition(TOPIC, p) for p in (0, 1, 2)],
            "i-1": [TopicPartition(TOPIC, p) for p in ((3, 4, 5) if complete else (3,))],
        },
    )
    assert len(responses) == 2
    second = await Harness(store=SqliteStore(path)).start()
    try:
        if complete:
            assert await second.state() == "Stable"
            return
        assert await second.state() == "PreparingRebalance"
        rows = await second.coordinator.journal_rows(GROUP)
        assert rows[-1].kind == "rebalance_started"
        assert "2 subscribed partition(s) unowned" in str(rows[-1].detail)
    finally:
        await second.coordinator.close()


def test_unowned_partitions_infers_nothing_from_missing_or_unreadable_assignments() -> None:
    counts = {TOPIC: 3}
    full = encode_assignment(Assignment(tuple(TopicPartition(TOPIC, p) for p in range(3))))
    part = encode_assignment(Assignment((TopicPartition(TOPIC, 0),)))
    assert unowned_partitions(counts, [full]) == 0
    assert unowned_partitions(counts, [part]) == 2
    assert unowned_partitions(counts, [part, b""]) == 0  # a member the leader gave nothing
    assert unowned_partitions(counts, [part, b"\x00"]) == 0  # unreadable


async def form_with_assignments(
    harness: Harness, assignment_by_instance: dict[str, list[TopicPartition]]
) -> list[JoinGroupResponse]:
    """Static members on TOPIC, joined and synced with the given (encoded) assignments."""
    tasks = [
        harness.join(join_request(instance_id=instance, metadata=subscription(TOPIC)))
        for instance in assignment_by_instance
    ]
    responses = await harness.finish_join(tasks)
    leader = next(r for r in responses if r.leader == r.member_id)
    instance_by_member = {m.member_id: m.group_instance_id for m in leader.members}
    assignments = [
        SyncGroupRequestAssignment(
            member_id,
            encode_assignment(Assignment(tuple(assignment_by_instance[str(instance)]))),
        )
        for member_id, instance in instance_by_member.items()
    ]
    syncs = [
        harness.coordinator.sync_group(
            SyncGroupRequest(
                GROUP,
                r.generation_id,
                r.member_id,
                None,
                "consumer",
                r.protocol_name,
                assignments if r is leader else [],
            )
        )
        for r in responses
    ]
    assert all(s.error_code == ErrorCode.NONE for s in await asyncio.gather(*syncs))
    assert await harness.state() == "Stable"
    return responses


async def test_static_replacement_that_rebalances_is_stored_so_a_restart_fences_the_old_id(
    tmp_path: Path,
) -> None:
    # A static member restarting with other topics starts a rebalance (above); the rebalance
    # lives in memory until its sync. A coordinator that dies before then must still know
    # the new member id, or it would revive the old one and let a zombie commit. (The
    # Hypothesis stateful test found this.)
    path = tmp_path / "coordinator.db"
    first = await Harness(store=SqliteStore(path)).start()
    await first.coordinator.set_topic_metadata({TOPIC: 6, "audit": 2})
    formed = await form(first, ["i-0", "i-1"])
    old_id = next(r.member_id for r in formed if r.member_id.startswith("i-0"))
    rejoin = first.join(join_request(instance_id="i-0", metadata=subscription(TOPIC, "audit")))
    await settle()
    assert not rejoin.done()  # parked: the group is rebalancing
    assert await first.state() == "PreparingRebalance"
    rejoin.cancel()
    # No close(): the process "dies" here; a new coordinator opens the same file.
    second = await Harness(store=SqliteStore(path)).start()
    try:
        committed = await second.coordinator.commit_offsets(
            OffsetCommitRequest(
                GROUP,
                second.coordinator.generation_of(GROUP),
                old_id,
                "i-0",
                [OffsetCommitPartition(TOPIC, 0, 1)],
            )
        )
        assert committed.partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    finally:
        await second.coordinator.close()
