"""The coordinator is composed (issue 13): `GroupCoordinator` owns its managers, each given
one `CoordinatorContext`, and requests that decide without I/O go through the context's
one write path."""

from __future__ import annotations

import asyncio

from coordinator import (
    CoordinatorConfig,
    ErrorCode,
    GroupCoordinator,
    ManualClock,
    MemoryStore,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    StoreError,
)
from coordinator.clock import settle
from coordinator.group import ClassicGroup
from coordinator.journal import JournalKind
from coordinator.membership import MembershipManager
from coordinator.messages import HeartbeatRequest
from coordinator.records import StoreBatch
from coordinator.runtime import CoordinatorContext, CoordinatorResult
from coordinator.timers import heartbeat_key, sync_key
from tests.coordinator.harness import GROUP, INITIAL_DELAY_MS, REBALANCE_MS, join_request


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.fail_next = False

    async def write(self, batch: StoreBatch) -> None:
        self.writes += 1
        if self.fail_next:
            self.fail_next = False
            raise StoreError("disk full")
        await super().write(batch)


def test_group_coordinator_owns_its_managers_instead_of_inheriting_them() -> None:
    coordinator = GroupCoordinator()
    assert GroupCoordinator.__mro__ == (GroupCoordinator, object)
    context = coordinator._ctx
    assert coordinator._membership._ctx is context
    assert coordinator._offsets._ctx is context
    assert coordinator._standby._ctx is context
    assert coordinator._offsets._membership is coordinator._membership
    assert coordinator._standby._membership is coordinator._membership
    assert coordinator.timers is context.timers
    assert coordinator._groups is context.groups


async def test_membership_manager_runs_on_a_context_alone() -> None:
    clock = ManualClock()
    store = MemoryStore()
    await store.open()
    context = CoordinatorContext(
        CoordinatorConfig(group_initial_rebalance_delay_ms=INITIAL_DELAY_MS), clock, store
    )
    membership = MembershipManager(context)
    joining = asyncio.ensure_future(membership.join_group(join_request(instance_id="i-0")))
    await settle()
    await clock.advance(INITIAL_DELAY_MS)
    joined = await joining
    assert joined.error_code is ErrorCode.NONE
    assert joined.generation_id == 1
    context.timers.assert_timer(sync_key(GROUP), INITIAL_DELAY_MS + REBALANCE_MS)
    answer = await membership.heartbeat(
        HeartbeatRequest(GROUP, joined.generation_id, joined.member_id, "i-0")
    )
    # Heartbeat is allowed while the group awaits its assignment (CompletingRebalance).
    assert answer.error_code is ErrorCode.NONE
    assert context.timers.is_scheduled(heartbeat_key(GROUP, joined.member_id))
    kinds = [row.kind for row in await store.journal_rows(GROUP, 0, None)]
    assert JournalKind.GENERATION_STARTED.value in kinds
    await store.close()


async def test_write_runs_the_decision_under_the_lock_and_persists_once() -> None:
    store = CountingStore()
    await store.open()
    context = CoordinatorContext(CoordinatorConfig(), ManualClock(), store)
    group = ClassicGroup(GROUP)
    context.groups[GROUP] = group

    def decide() -> CoordinatorResult[str]:
        assert group.lock.locked()
        context.journal(group, JournalKind.GROUP_EMPTY, None)
        context.journal(group, JournalKind.STABLE, None)
        return context.result(group, "answer")

    assert await context.write(group, decide) == "answer"
    assert not group.lock.locked()
    assert store.writes == 1
    rows = await store.journal_rows(GROUP, 0, None)
    assert [row.seq for row in rows] == [1, 2]
    await store.close()


async def test_a_commit_is_served_only_once_written() -> None:
    """OffsetCommit decides, the write path persists, and only then is the offset cached."""
    store = CountingStore()
    coordinator = GroupCoordinator(CoordinatorConfig(), ManualClock(), store)
    await coordinator.start()

    def commit(offset: int) -> OffsetCommitRequest:
        return OffsetCommitRequest(GROUP, -1, "", None, [OffsetCommitPartition("t", 0, offset)])

    async def fetched() -> int:
        response = await coordinator.fetch_offsets(OffsetFetchRequest(GROUP, [("t", 0)]))
        return response.partitions[0].committed_offset

    store.fail_next = True
    failed = await coordinator.commit_offsets(commit(5))
    assert failed.error_code is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert await fetched() == -1
    done = await coordinator.commit_offsets(commit(7))
    assert done.error_code is ErrorCode.NONE
    assert [p.error_code for p in done.partitions] == [ErrorCode.NONE]
    assert await fetched() == 7
    await coordinator.close()


async def test_then_runs_after_the_write_and_failed_answers_instead() -> None:
    """Kafka's appendFuture: `then` runs under the lock once the records are written (its own
    records are written next); `failed` undoes and answers when the write failed."""
    store = CountingStore()
    await store.open()
    context = CoordinatorContext(CoordinatorConfig(), ManualClock(), store)
    group = ClassicGroup(GROUP)
    context.groups[GROUP] = group

    def decide() -> CoordinatorResult[str]:
        context.journal(group, JournalKind.GROUP_EMPTY, None)

        def then() -> CoordinatorResult[str]:
            assert group.lock.locked() and store.writes == 1
            context.journal(group, JournalKind.STABLE, None)
            return context.result(group, "written")

        return context.result(group, "decided", then=then)

    assert await context.write(group, decide) == "written"
    assert store.writes == 2
    rows = await store.journal_rows(GROUP, 0, None)
    assert [(row.seq, row.kind) for row in rows] == [(1, "group_empty"), (2, "stable")]

    def decide_and_fail() -> CoordinatorResult[str]:
        context.journal(group, JournalKind.GROUP_EMPTY, None)

        def failed(error: StoreError) -> CoordinatorResult[str]:
            assert group.lock.locked()
            return CoordinatorResult(f"not written: {error}")

        return context.result(group, "decided", then=lambda: CoordinatorResult("no"), failed=failed)

    store.fail_next = True
    assert await context.write(group, decide_and_fail) == "not written: disk full"
    assert len(await store.journal_rows(GROUP, 0, None)) == 2
    await store.close()
