"""Hot standby on a ManualClock: a standby holds nothing, and its promotion hands it a
missing member's exact assignment in the same generation, fencing the old holder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator import ErrorCode, SqliteStore
from coordinator.clock import ManualClock, settle
from coordinator.messages import OffsetCommitPartition, OffsetCommitRequest
from coordinator.standby import StandbyHeartbeatRequest, StandbyHeartbeatResponse
from tests.coordinator.harness import GROUP, SESSION_MS, Harness, join_request

MEMBERS = ["i-0", "i-1", "i-2"]


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = await Harness().start()
    yield h
    await h.coordinator.close()


async def standby_beat(harness: Harness, standby_id: str = "s-0") -> StandbyHeartbeatResponse:
    return await harness.coordinator.standby_heartbeat(
        StandbyHeartbeatRequest(GROUP, standby_id, SESSION_MS)
    )


async def test_a_standby_joins_nothing_and_changes_no_generation(harness: Harness) -> None:
    await harness.form_group(MEMBERS)
    answer = await standby_beat(harness)
    assert answer.error_code == ErrorCode.NONE and answer.promoted is None
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert described.group_state == "Stable"
    assert {m.group_instance_id for m in described.members} == set(MEMBERS)
    assert harness.coordinator.generation_of(GROUP) == 1
    assert harness.coordinator.standbys(GROUP).standby_ids == ["s-0"]


async def test_a_silent_standby_stops_being_ready_after_its_session(harness: Harness) -> None:
    await standby_beat(harness)
    await harness.clock.advance(SESSION_MS + 1)
    assert harness.coordinator.standbys(GROUP).standby_ids == []


async def test_promotion_gives_the_exact_assignment_in_the_same_generation(
    harness: Harness,
) -> None:
    formed = await harness.form_group(MEMBERS)
    await standby_beat(harness)
    result = await harness.coordinator.promote(GROUP, "s-0", "i-1")
    assert result.error_code == ErrorCode.NONE and result.promotion is not None
    answer = await standby_beat(harness)
    promoted = answer.promoted
    assert promoted is not None
    assert promoted.member_id == result.promotion.member_id
    assert promoted.instance_id == "i-1" and promoted.generation_id == 1
    synced = await harness.sync(promoted.member_id, promoted.generation_id, instance_id="i-1")
    assert synced.error_code == ErrorCode.NONE and synced.assignment == b"i-1"
    assert await harness.heartbeat(promoted.member_id, 1, "i-1") == ErrorCode.NONE
    # Nobody else noticed: still Stable in generation 1, the others' heartbeats are fine.
    assert await harness.state() == "Stable" and harness.coordinator.generation_of(GROUP) == 1
    for response, instance_id in zip(formed, MEMBERS, strict=True):
        if instance_id != "i-1":
            assert await harness.heartbeat(response.member_id, 1, instance_id) == ErrorCode.NONE
    # A promoted standby is a member now, not a spare.
    assert harness.coordinator.standbys(GROUP).standby_ids == []


async def test_the_old_holder_is_fenced(harness: Harness) -> None:
    formed = await harness.form_group(MEMBERS)
    old = formed[1]
    await standby_beat(harness)
    await harness.coordinator.promote(GROUP, "s-0", "i-1")
    assert await harness.heartbeat(old.member_id, 1, "i-1") == ErrorCode.FENCED_INSTANCE_ID
    commit = await harness.coordinator.commit_offsets(
        OffsetCommitRequest(GROUP, 1, old.member_id, "i-1", [OffsetCommitPartition("t", 0, 5)])
    )
    assert commit.partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    synced = await harness.sync(old.member_id, 1, instance_id="i-1")
    assert synced.error_code == ErrorCode.FENCED_INSTANCE_ID


async def test_promote_is_idempotent_and_one_standby_holds_one_instance(harness: Harness) -> None:
    await harness.form_group(MEMBERS)
    await standby_beat(harness)
    first = await harness.coordinator.promote(GROUP, "s-0", "i-1")
    again = await harness.coordinator.promote(GROUP, "s-0", "i-1")
    assert again.error_code == ErrorCode.NONE and again.promotion == first.promotion
    other = await harness.coordinator.promote(GROUP, "s-0", "i-2")
    assert other.error_code == ErrorCode.INVALID_REQUEST
    assert harness.coordinator.generation_of(GROUP) == 1


async def test_promote_refuses_an_unheard_standby_an_unknown_instance_and_a_rebalance(
    harness: Harness,
) -> None:
    formed = await harness.form_group(MEMBERS)
    unheard = await harness.coordinator.promote(GROUP, "s-0", "i-1")
    assert unheard.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    await standby_beat(harness)
    unknown = await harness.coordinator.promote(GROUP, "s-0", "i-9")
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # A rebalance is going on: a new member joined.
    joining = harness.join(join_request(instance_id="i-3"))
    await settle()
    busy = await harness.coordinator.promote(GROUP, "s-0", "i-1")
    assert busy.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    joining.cancel()
    del formed


async def test_a_stale_promotion_is_dropped_when_the_instance_moved_on(harness: Harness) -> None:
    await harness.form_group(MEMBERS)
    await standby_beat(harness)
    await harness.coordinator.promote(GROUP, "s-0", "i-1")
    # A plain static restart of i-1 replaces the promoted member id (and fences it).
    rejoined = await harness.coordinator.join_group(join_request(instance_id="i-1"))
    assert rejoined.error_code == ErrorCode.NONE and rejoined.generation_id == 1
    answer = await standby_beat(harness)
    assert answer.promoted is None, "a record whose member id no longer holds is stale"
    assert harness.coordinator.standbys(GROUP).promotions == []


async def test_a_coordinator_restart_mid_promotion_keeps_it(tmp_path: Path) -> None:
    """Promoted and persisted, the coordinator restarts before the standby heard of it: the
    restarted one tells the standby, the repeated call is NONE, and the assignment is the
    same in the same generation."""
    path = tmp_path / "store.db"
    clock = ManualClock()
    first = await Harness(store=SqliteStore(path), clock=clock).start()
    formed = await first.form_group(MEMBERS)
    await standby_beat(first)
    promotion = (await first.coordinator.promote(GROUP, "s-0", "i-2")).promotion
    assert promotion is not None
    await first.coordinator.close()

    second = await Harness(store=SqliteStore(path), clock=clock).start()
    try:
        again = await second.coordinator.promote(GROUP, "s-0", "i-2")
        assert again.error_code == ErrorCode.NONE and again.promotion == promotion
        answer = await standby_beat(second)
        assert answer.promoted is not None and answer.promoted.member_id == promotion.member_id
        synced = await second.sync(promotion.member_id, 1, instance_id="i-2")
        assert synced.error_code == ErrorCode.NONE and synced.assignment == b"i-2"
        fenced = await second.heartbeat(formed[2].member_id, 1, "i-2")
        assert fenced == ErrorCode.FENCED_INSTANCE_ID
        assert second.coordinator.generation_of(GROUP) == 1
        assert await second.state() == "Stable"
    finally:
        await second.coordinator.close()


async def test_a_promoted_standby_that_never_shows_up_times_out_like_a_member(
    harness: Harness,
) -> None:
    formed = await harness.form_group(MEMBERS)
    await standby_beat(harness)
    await harness.coordinator.promote(GROUP, "s-0", "i-1")
    # The others keep heartbeating; the promoted member id is never used.
    for _ in range(3):
        await harness.clock.advance(SESSION_MS // 2)
        for response, instance_id in zip(formed, MEMBERS, strict=True):
            if instance_id != "i-1":
                await harness.heartbeat(response.member_id, 1, instance_id)
    assert await harness.state() == "PreparingRebalance"
