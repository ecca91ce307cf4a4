"""One write path (issue 13, Kafka's CoordinatorResult): every operation decides under its
lock and returns its records with its response; `CoordinatorContext.write` alone persists
them, then answers. A store that checks every write proves no operation writes on its own."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from coordinator import (
    ErrorCode,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    StoreError,
)
from coordinator.clock import settle
from coordinator.coordinator import GroupCoordinator
from coordinator.journal import JournalEvent
from coordinator.protocol import Subscription, encode_subscription
from coordinator.records import StoreBatch
from coordinator.standby import StandbyHeartbeatRequest
from coordinator.state import GroupState
from coordinator.store import MemoryStore
from tests.coordinator.harness import GROUP, SESSION_MS, Harness, join_request


class WritePathStore(MemoryStore):
    """Checks that each batch is written under the lock its operation holds, records every
    batch, and can fail the next write."""

    def __init__(self) -> None:
        super().__init__()
        self.coordinator: GroupCoordinator | None = None
        self.batches: list[StoreBatch] = []
        self.fail_next = False

    async def write(self, batch: StoreBatch) -> None:
        assert self.coordinator is not None
        context = self.coordinator._ctx
        group_ids = (
            {record.group_id for record in batch.groups}
            | set(batch.deleted_groups)
            | {group_id for group_id, _ in batch.offsets}
            | {event.group_id for event in batch.journal}
            | {group_id for group_id, _ in batch.expected_members}
            | {group_id for group_id, _, _ in batch.promotions}
        )
        assert len(group_ids) <= 1, f"one operation, one group: {group_ids}"
        group = context.groups.get(next(iter(group_ids))) if group_ids else None
        held = group.lock.locked() if group is not None else context.lock.locked()
        assert held, f"a write outside the write path: {batch}"
        self.batches.append(batch)
        if self.fail_next:
            self.fail_next = False
            raise StoreError("disk full")
        await super().write(batch)


async def started() -> tuple[Harness, WritePathStore]:
    store = WritePathStore()
    harness = Harness(store=store)
    store.coordinator = harness.coordinator
    return await harness.start(), store


SUBSCRIPTION = encode_subscription(Subscription(topics=("t",)))


def standby_beat(standby_id: str = "s-0") -> StandbyHeartbeatRequest:
    return StandbyHeartbeatRequest(GROUP, standby_id, SESSION_MS)


async def test_every_operation_writes_through_the_one_write_path() -> None:
    harness, store = await started()
    coordinator = harness.coordinator
    # Expected members of a group that does not exist yet: records of no group.
    await coordinator.set_expected_members(GROUP, ["i-0", "i-1", "i-2"], 10_000)
    await coordinator.set_topic_metadata({"t": 3})
    joins = [
        harness.join(join_request(instance_id=i, metadata=SUBSCRIPTION))
        for i in ("i-0", "i-1", "i-2")
    ]
    formed = await harness.finish_join(joins)  # join, and the join-phase timer
    await harness.complete_sync(formed)
    await coordinator.clear_expected_members(GROUP)
    member = formed[0]
    assert await harness.heartbeat(member.member_id, 1, "i-0") == ErrorCode.NONE
    commit = OffsetCommitRequest(
        GROUP, 1, member.member_id, "i-0", [OffsetCommitPartition("t", 0, 5)]
    )
    assert (await coordinator.commit_offsets(commit)).error_code == ErrorCode.NONE
    assert (await coordinator.standby_heartbeat(standby_beat())).error_code == ErrorCode.NONE
    promoted = await coordinator.promote(GROUP, "s-0", "i-2")
    assert promoted.error_code == ErrorCode.NONE
    # A static member replaced in Stable with no rebalance (written, then answered).
    rejoined = await coordinator.join_group(join_request(instance_id="i-1", metadata=SUBSCRIPTION))
    assert rejoined.error_code == ErrorCode.NONE and rejoined.generation_id == 1
    await coordinator.set_topic_metadata({"t": 6})  # a metadata rebalance
    assert harness.coordinator.group_state(GROUP) is GroupState.PREPARING_REBALANCE
    await harness.clock.advance(SESSION_MS * 10)  # the join deadline, sessions expire
    leave = LeaveGroupRequest(GROUP, [MemberIdentity("", "i-0")])
    await coordinator.leave_group(leave)
    await coordinator.forget_standbys(GROUP)
    assert await coordinator.delete_groups([GROUP]) == {GROUP: ErrorCode.NONE}
    await coordinator.close()
    kinds = {event.kind for batch in store.batches for event in batch.journal}
    assert {"member_replaced", "static_rejoin", "topic_metadata_changed", "group_deleted"} <= kinds
    assert any(batch.promotions for batch in store.batches)
    assert any(batch.expected_members for batch in store.batches)
    assert any(batch.topics is not None for batch in store.batches)


async def test_a_promotion_is_one_write_with_its_group_record() -> None:
    harness, store = await started()
    await harness.form_group(["i-0", "i-1"])
    await harness.coordinator.standby_heartbeat(standby_beat())
    store.batches.clear()
    result = await harness.coordinator.promote(GROUP, "s-0", "i-1")
    assert result.error_code == ErrorCode.NONE and result.promotion is not None
    (batch,) = store.batches
    assert batch.promotions == [(GROUP, "s-0", result.promotion)]
    (record,) = batch.groups
    assert result.promotion.member_id in {m.member_id for m in record.members}
    assert [event.kind for event in batch.journal] == ["member_replaced"]
    await harness.coordinator.close()


async def test_a_failed_promotion_writes_nothing_and_keeps_the_old_holder() -> None:
    harness, store = await started()
    formed = await harness.form_group(["i-0", "i-1"])
    old = next(r for r in formed if r.member_id.startswith("i-1-"))
    await harness.coordinator.standby_heartbeat(standby_beat())
    store.fail_next = True
    result = await harness.coordinator.promote(GROUP, "s-0", "i-1")
    assert result.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert await store.promotions() == {}
    assert harness.coordinator.standbys(GROUP).promotions == []
    assert (await harness.coordinator.standby_heartbeat(standby_beat())).promoted is None
    assert await harness.heartbeat(old.member_id, 1, "i-1") == ErrorCode.NONE
    # Tried again, it holds.
    again = await harness.coordinator.promote(GROUP, "s-0", "i-1")
    assert again.error_code == ErrorCode.NONE
    assert await harness.heartbeat(old.member_id, 1, "i-1") == ErrorCode.FENCED_INSTANCE_ID
    await harness.coordinator.close()


async def test_a_failed_assignment_write_answers_everyone_and_starts_over() -> None:
    """Kafka's appendFuture of the leader's SyncGroup: the parked followers are answered
    only after the write; when it fails, everyone gets COORDINATOR_NOT_AVAILABLE, no member
    keeps the unwritten assignment, and the group prepares a rebalance."""
    harness, store = await started()
    tasks = [harness.join(join_request(instance_id=i)) for i in ("i-0", "i-1")]
    responses = await harness.finish_join(tasks)
    leader = next(r for r in responses if r.leader == r.member_id)
    follower = next(r for r in responses if r is not leader)
    parked = harness.sync(follower.member_id, 1)
    await settle()
    assert not parked.done()
    store.fail_next = True
    assignments = {r.member_id: b"x" for r in responses}
    led = await harness.sync(leader.member_id, 1, assignments)
    assert led.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (await parked).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.coordinator.group_state(GROUP) is GroupState.PREPARING_REBALANCE
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert all(m.member_assignment == b"" for m in described.members)
    await harness.coordinator.close()


async def test_a_sync_is_answered_only_once_the_assignment_is_written() -> None:
    harness, store = await started()
    tasks = [harness.join(join_request(instance_id=i)) for i in ("i-0", "i-1")]
    responses = await harness.finish_join(tasks)
    leader = next(r for r in responses if r.leader == r.member_id)
    follower = next(r for r in responses if r is not leader)
    parked = harness.sync(follower.member_id, 1)
    gate = asyncio.Event()
    write = store.write

    async def slow_write(batch: StoreBatch) -> None:
        await gate.wait()
        await write(batch)

    store.write = slow_write  # type: ignore[method-assign]
    led = harness.sync(leader.member_id, 1, {r.member_id: b"x" for r in responses})
    await settle()
    assert not led.done() and not parked.done()
    assert harness.coordinator.group_state(GROUP) is GroupState.COMPLETING_REBALANCE
    gate.set()
    assert (await led).assignment == b"x"
    assert (await parked).assignment == b"x"
    assert harness.coordinator.group_state(GROUP) is GroupState.STABLE
    await harness.coordinator.close()


async def test_a_failed_delete_keeps_the_group() -> None:
    harness, store = await started()
    commit = OffsetCommitRequest(GROUP, -1, "", None, [OffsetCommitPartition("t", 0, 3)])
    assert (await harness.coordinator.commit_offsets(commit)).error_code == ErrorCode.NONE
    store.fail_next = True
    with pytest.raises(StoreError):
        await harness.coordinator.delete_groups([GROUP])
    assert harness.coordinator.group_state(GROUP) is GroupState.EMPTY
    fetched = await harness.coordinator.fetch_offsets(OffsetFetchRequest(GROUP, [("t", 0)]))
    assert fetched.partitions[0].committed_offset == 3
    await harness.coordinator.close()


def test_a_numbered_journal_event_keeps_every_other_field() -> None:
    # JournalEvent.numbered spells the fields out (the write path numbers 1,002 rows at
    # once); a field added later must be carried too.
    values = {field.name: f"{field.name}-value" for field in dataclasses.fields(JournalEvent)}
    event = JournalEvent(**values)  # type: ignore[arg-type]
    assert event.numbered(7, 1_000) == dataclasses.replace(event, seq=7, ts_ms=1_000)
