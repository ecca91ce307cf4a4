"""Expected members: a scale-up joins every new member in one rebalance."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator import ErrorCode, JoinGroupResponse, SqliteStore
from coordinator.clock import ManualClock, settle
from coordinator.expected_members import ExpectedMembers
from tests.coordinator.harness import GROUP, REBALANCE_MS, Harness, join_request

EXPECTED_TIMEOUT_MS = 120_000
OLD = ["i-0", "i-1", "i-2"]
NEW = ["i-3", "i-4", "i-5"]


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = await Harness().start()
    yield h
    await h.coordinator.close()


async def _rejoin_old_members(
    harness: Harness, formed: list[JoinGroupResponse]
) -> list[asyncio.Task[JoinGroupResponse]]:
    """The existing members learn of the rebalance from a heartbeat and rejoin."""
    tasks = []
    for response, instance_id in zip(formed, OLD, strict=True):
        code = await harness.heartbeat(response.member_id, response.generation_id, instance_id)
        assert code == ErrorCode.REBALANCE_IN_PROGRESS
        tasks.append(harness.join(join_request(response.member_id, instance_id)))
    await settle()
    return tasks


def _instances(response: JoinGroupResponse) -> set[str]:
    return {m.group_instance_id or "" for m in response.members}


async def test_all_expected_members_join_in_exactly_one_rebalance(harness: Harness) -> None:
    formed = await harness.form_group(OLD)
    assert harness.coordinator.generation_of(GROUP) == 1
    await harness.coordinator.set_expected_members(GROUP, OLD + NEW, EXPECTED_TIMEOUT_MS)
    first_new = harness.join(join_request(instance_id=NEW[0]))
    await settle()
    rejoined = await _rejoin_old_members(harness, formed)
    # Everyone present has joined and the rebalance timeout has passed: still held.
    await harness.clock.advance(REBALANCE_MS + 1)
    assert not any(task.done() for task in [first_new, *rejoined])
    assert await harness.state() == "PreparingRebalance"
    late = [harness.join(join_request(instance_id=i)) for i in NEW[1:]]
    await settle()
    responses = [task.result() for task in [first_new, *rejoined, *late]]
    assert {r.generation_id for r in responses} == {2}
    leader = next(r for r in responses if r.leader == r.member_id)
    assert _instances(leader) == set(OLD + NEW)
    assert harness.coordinator.generation_of(GROUP) == 2


async def test_without_expected_members_the_same_scale_up_rebalances_more_than_once(
    harness: Harness,
) -> None:
    """Today's (and Kafka's) behaviour, the baseline expected members improve on."""
    formed = await harness.form_group(OLD)
    first_new = harness.join(join_request(instance_id=NEW[0]))
    await settle()
    await _rejoin_old_members(harness, formed)
    assert first_new.done() and first_new.result().generation_id == 2
    second_new = harness.join(join_request(instance_id=NEW[1]))
    await settle()
    assert await harness.state() == "PreparingRebalance"
    second_new.cancel()
    assert harness.coordinator.generation_of(GROUP) == 2  # and a third generation to come


async def test_expected_members_timeout_ends_the_hold_with_the_members_present(
    harness: Harness,
) -> None:
    formed = await harness.form_group(OLD)
    await harness.coordinator.set_expected_members(GROUP, OLD + NEW, EXPECTED_TIMEOUT_MS)
    first_new = harness.join(join_request(instance_id=NEW[0]))
    await settle()
    await _rejoin_old_members(harness, formed)
    await harness.clock.advance(EXPECTED_TIMEOUT_MS - 1)
    assert not first_new.done()
    await harness.clock.advance(1)
    response = first_new.result()
    assert response.generation_id == 2 and response.error_code == ErrorCode.NONE
    assert harness.coordinator.generation_of(GROUP) == 2


async def test_member_after_the_timeout_joins_as_usual(harness: Harness) -> None:
    formed = await harness.form_group(OLD)
    await harness.coordinator.set_expected_members(GROUP, OLD + NEW[:2], EXPECTED_TIMEOUT_MS)
    first_new = harness.join(join_request(instance_id=NEW[0]))
    await settle()
    rejoined = await _rejoin_old_members(harness, formed)
    await harness.clock.advance(EXPECTED_TIMEOUT_MS)
    assert first_new.result().generation_id == 2
    responses = [first_new.result(), *(t.result() for t in rejoined)]
    await harness.complete_sync(responses)
    assert await harness.state() == "Stable"
    # The deadline has passed: the late member starts one ordinary rebalance.
    late = harness.join(join_request(instance_id=NEW[1]))
    await settle()
    assert await harness.state() == "PreparingRebalance"
    for response in responses:
        harness.join(join_request(response.member_id, response_instance(response)))
    await settle()
    assert late.result().generation_id == 3


def response_instance(response: JoinGroupResponse) -> str:
    # Static member ids are "<instance id>-<uuid>" (uuid: 36 characters).
    return response.member_id[: -(36 + 1)]


async def test_an_unexpected_member_neither_ends_nor_escapes_the_hold(harness: Harness) -> None:
    formed = await harness.form_group(OLD)
    await harness.coordinator.set_expected_members(GROUP, [NEW[0]], EXPECTED_TIMEOUT_MS)
    stranger = harness.join(join_request(instance_id="stranger"))
    await settle()
    rejoined = await _rejoin_old_members(harness, formed)
    await harness.clock.advance(REBALANCE_MS + 1)
    assert not stranger.done(), "an unexpected member must not end the hold"
    expected = harness.join(join_request(instance_id=NEW[0]))
    await settle()
    responses = [task.result() for task in [stranger, expected, *rejoined]]
    assert {r.generation_id for r in responses} == {2}
    leader = next(r for r in responses if r.leader == r.member_id)
    assert _instances(leader) == {*OLD, NEW[0], "stranger"}


async def test_clearing_the_expected_members_releases_a_held_join_phase(harness: Harness) -> None:
    formed = await harness.form_group(OLD)
    await harness.coordinator.set_expected_members(GROUP, OLD + NEW, EXPECTED_TIMEOUT_MS)
    first_new = harness.join(join_request(instance_id=NEW[0]))
    await settle()
    await _rejoin_old_members(harness, formed)
    assert not first_new.done()
    await harness.coordinator.clear_expected_members(GROUP)
    await settle()
    assert first_new.result().generation_id == 2
    assert harness.coordinator.expected_members(GROUP) is None


async def test_invalid_expected_members_are_refused_and_long_timeouts_capped(
    harness: Harness,
) -> None:
    with pytest.raises(ValueError):
        await harness.coordinator.set_expected_members(GROUP, [], EXPECTED_TIMEOUT_MS)
    with pytest.raises(ValueError):
        await harness.coordinator.set_expected_members(GROUP, ["i-0"], 0)
    with pytest.raises(ValueError):
        await harness.coordinator.set_expected_members(GROUP, ["i-\x00"], EXPECTED_TIMEOUT_MS)
    # Longer than the new-member join timeout: cut to it (the first ones would expire).
    limit = harness.coordinator.config.group_new_member_join_timeout_ms
    capped = await harness.coordinator.set_expected_members(GROUP, ["i-0"], limit + 1)
    assert capped.timeout_ms == limit


async def test_a_restart_mid_scale_up_keeps_waiting_for_the_same_set(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    clock = ManualClock()
    first = await Harness(store=SqliteStore(path), clock=clock).start()
    formed = await first.form_group(OLD)
    expected = await first.coordinator.set_expected_members(GROUP, OLD + NEW, EXPECTED_TIMEOUT_MS)
    await first.coordinator.close()
    await clock.advance(1_000)
    second = await Harness(store=SqliteStore(path), clock=clock).start()
    assert second.coordinator.expected_members(GROUP) == expected
    # The first new member arrives; the old ones (same member ids) learn of it and rejoin.
    first_new = second.join(join_request(instance_id=NEW[0]))
    await settle()
    old = await _rejoin_old_members(second, formed)
    await clock.advance(REBALANCE_MS + 1)
    await asyncio.wait([first_new], timeout=0.5)
    assert not first_new.done(), "the restarted coordinator must still hold for i-4, i-5"
    rest = [second.join(join_request(instance_id=i)) for i in NEW[1:]]
    await settle()
    # SQLite writes run on the store's thread: wait for them in real time, not clock time.
    await asyncio.wait([*old, first_new, *rest], timeout=10)
    responses = [t.result() for t in [*old, first_new, *rest]]
    new_generation = {r.generation_id for r in responses if r.error_code == ErrorCode.NONE}
    assert new_generation == {2}, responses
    assert second.coordinator.generation_of(GROUP) == 2
    await second.coordinator.close()


async def test_the_deadline_is_absolute_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    clock = ManualClock()
    first = await Harness(store=SqliteStore(path), clock=clock).start()
    await first.coordinator.set_expected_members(GROUP, ["i-9"], EXPECTED_TIMEOUT_MS)
    await first.coordinator.close()
    second = await Harness(store=SqliteStore(path), clock=clock).start()
    loaded = second.coordinator.expected_members(GROUP)
    assert loaded == ExpectedMembers(frozenset({"i-9"}), EXPECTED_TIMEOUT_MS, EXPECTED_TIMEOUT_MS)
    await second.coordinator.clear_expected_members(GROUP)
    await second.coordinator.close()
    third = await Harness(store=SqliteStore(path), clock=clock).start()
    assert third.coordinator.expected_members(GROUP) is None
    await third.coordinator.close()
