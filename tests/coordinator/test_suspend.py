"""`suspend()`: an operator replica that is no longer the active one gives the shared store
up (peering.py), and `start()` loads it again as another replica left it. Real SQLite file,
two coordinators on it as two replicas, ManualClock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator import ErrorCode, LeaveGroupRequest, MemberIdentity, SqliteStore, StoreError
from coordinator.clock import settle
from tests.coordinator.harness import GROUP, SESSION_MS, Harness, join_request


async def _store_holds(path: Path) -> tuple[set[str], set[str]]:
    """What a third replica starting now would load: the members, and the journal's kinds."""
    reader = await Harness(store=SqliteStore(path)).start()
    try:
        (described,) = await reader.coordinator.describe_groups([GROUP])
        journal = await reader.coordinator.journal_rows(GROUP)
        return {m.group_instance_id or "" for m in described.members}, {r.kind for r in journal}
    finally:
        await reader.coordinator.close()


async def test_a_suspended_coordinator_expires_no_session_into_the_store(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    paused = await Harness(store=SqliteStore(path)).start()
    await paused.form_group(["i-0", "i-1"])
    await paused.coordinator.suspend()
    assert not paused.coordinator.is_ready
    # Long past every session: the members heartbeat to the active replica, not here.
    await paused.clock.advance(10 * SESSION_MS)
    await settle()
    members, kinds = await _store_holds(path)
    assert members == {"i-0", "i-1"}
    assert "member_removed" not in kinds and "rebalance_started" in kinds
    await paused.coordinator.close()


async def test_start_after_suspend_loads_what_the_other_replica_wrote(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    first = await Harness(store=SqliteStore(path)).start()
    await first.form_group(["i-0"])
    await first.coordinator.suspend()
    # The other replica takes over, and the group changes there.
    second = await Harness(store=SqliteStore(path)).start()
    left = await second.coordinator.leave_group(
        LeaveGroupRequest(GROUP, [MemberIdentity("", "i-0", "test")])
    )
    assert left.error_code == ErrorCode.NONE
    await second.form_group(["i-7"])
    generation = second.coordinator.generation_of(GROUP)
    await second.coordinator.suspend()
    # Back on the first: it serves the store as the second left it, not its own old state.
    await first.coordinator.start()
    assert first.coordinator.is_ready
    assert first.coordinator.generation_of(GROUP) == generation
    (described,) = await first.coordinator.describe_groups([GROUP])
    assert {m.group_instance_id for m in described.members} == {"i-7"}
    await first.coordinator.close()
    await second.coordinator.close()


async def test_requests_are_refused_while_suspended_and_parked_ones_answered(
    tmp_path: Path,
) -> None:
    harness = await Harness(store=SqliteStore(tmp_path / "coordinator.db")).start()
    # A member parked in the first generation's delay is answered when the store is given up.
    parked = harness.join(join_request(instance_id="i-0"))
    await settle()
    assert not parked.done()
    await harness.coordinator.suspend()
    assert (await parked).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    refused = await harness.coordinator.join_group(join_request(instance_id="i-1"))
    assert refused.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert await harness.heartbeat("m", 1, "i-0") == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # Its listeners survive the handover: the embedder registered them once.
    seen: list[str] = []
    harness.coordinator.add_journal_listener(lambda event: seen.append(event.kind))
    await harness.coordinator.start()
    await harness.form_group(["i-2"])
    assert "member_joined" in seen
    await harness.coordinator.close()


async def test_the_holder_mark_is_put_on_start_and_cleared_only_by_its_owner(
    tmp_path: Path,
) -> None:
    path = tmp_path / "coordinator.db"
    first = Harness(store=SqliteStore(path))
    await first.coordinator.start(holder="a")
    assert await first.coordinator.store_holder() == "a"
    await first.coordinator.suspend()
    assert await first.coordinator.store_holder() is None  # released, the store still open
    await first.coordinator.start(holder="a")
    # Another replica took the store over (a's mark was stale to it): a must not clear b's.
    second = Harness(store=SqliteStore(path))
    await second.coordinator.start(holder="b")
    await first.coordinator.close()
    assert await second.coordinator.store_holder() == "b"
    await second.coordinator.close()
    reader = SqliteStore(path)
    await reader.open()
    assert await reader.holder() is None  # b released it when it closed
    await reader.close()


async def test_a_start_that_failed_to_load_leaves_no_mark_once_suspended(
    tmp_path: Path,
) -> None:
    class Unloadable(SqliteStore):
        async def load(self) -> Any:
            raise StoreError("the volume went away")

    path = tmp_path / "coordinator.db"
    harness = Harness(store=Unloadable(path))
    with pytest.raises(StoreError):
        await harness.coordinator.start(holder="a")
    assert not harness.coordinator.is_ready
    assert await harness.coordinator.store_holder() == "a"
    await harness.coordinator.suspend()  # paused before it could load: the mark goes too
    assert await harness.coordinator.store_holder() is None
    await harness.coordinator.close()
