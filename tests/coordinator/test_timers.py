"""Keyed timers (`coordinator.timers`) and ClassicGroup's invariants.

The service on its own (replace on reschedule, cancel, the one write path), then which
timers a coordinator has armed, and when, after join, sync, heartbeat and leave.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator, Callable

import pytest

from coordinator import ErrorCode, LeaveGroupRequest, ManualClock, MemberIdentity
from coordinator.clock import SystemClock, settle
from coordinator.group import ClassicGroup, ClassicMember, GroupInvariantError
from coordinator.records import StoreBatch
from coordinator.store import MemoryStore
from coordinator.timers import Timers, heartbeat_key, join_key, sync_key
from tests.coordinator.harness import (
    GROUP,
    INITIAL_DELAY_MS,
    REBALANCE_MS,
    SESSION_MS,
    Harness,
    join_request,
)

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # CoordinatorConfig's default, as Kafka's


class WritePath:
    """A fake runtime: a lock per scope and a count of persists (one per expiry that ran)."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.flushes: list[str] = []

    async def __call__(self, scope: str, operation: Callable[[], bool]) -> None:
        async with self.lock:
            if operation():
                self.flushes.append(scope)


def service() -> tuple[ManualClock, WritePath, Timers[str]]:
    clock = ManualClock()
    write_path = WritePath()
    return clock, write_path, Timers(clock, write_path)


# --- the service ------------------------------------------------------------------------


async def test_scheduling_a_key_replaces_its_timer() -> None:
    clock, write_path, timers = service()
    fired: list[str] = []
    timers.schedule("join-g", "g", 100, lambda: fired.append("first"))
    timers.schedule("join-g", "g", 50, lambda: fired.append("second"))
    timers.assert_timer("join-g", 50)
    assert timers.keys() == ["join-g"]
    await clock.advance(200)
    assert fired == ["second"], "the replaced timer never fires"
    assert write_path.flushes == ["g"], "one expiry, one persist"
    assert not timers.is_scheduled("join-g")


async def test_cancel_and_due_time() -> None:
    clock, write_path, timers = service()
    fired: list[str] = []
    timers.schedule_at("sync-g", "g", 70, lambda: fired.append("sync"))
    timers.schedule("heartbeat-g-m", "g", 30, lambda: fired.append("heartbeat"))
    assert timers.due_ms("sync-g") == 70
    timers.cancel("sync-g")
    timers.cancel("no-such-key")  # cancelling nothing is fine
    assert timers.due_ms("sync-g") is None
    timers.assert_no_timer("sync-g")
    await clock.advance(100)
    assert fired == ["heartbeat"]
    assert write_path.flushes == ["g"]


async def test_assert_timer_reports_a_wrong_or_missing_timer() -> None:
    _, _, timers = service()
    timers.schedule("join-g", "g", 10, lambda: None)
    with pytest.raises(AssertionError, match="due at 10"):
        timers.assert_timer("join-g", 11)
    with pytest.raises(AssertionError, match="no timer"):
        timers.assert_timer("sync-g", 10)
    with pytest.raises(AssertionError, match="is armed"):
        timers.assert_no_timer("join-g")


async def test_an_operation_may_reschedule_its_own_key() -> None:
    clock, write_path, timers = service()
    fired: list[int] = []

    def tick() -> None:
        fired.append(clock.now_ms())
        if len(fired) < 3:
            timers.schedule("heartbeat-g-m", "g", 10, tick)

    timers.schedule("heartbeat-g-m", "g", 10, tick)
    await clock.advance(100)
    assert fired == [10, 20, 30]
    assert write_path.flushes == ["g"] * 3


async def test_a_timer_replaced_while_waiting_for_the_lock_does_not_run() -> None:
    clock, write_path, timers = service()
    fired: list[str] = []
    timers.schedule("join-g", "g", 10, lambda: fired.append("stale"))
    await write_path.lock.acquire()  # a request holds the group lock
    advancing = asyncio.ensure_future(clock.advance(10))
    await settle()
    assert not advancing.done(), "the expiry waits for the lock"
    timers.schedule("join-g", "g", 50, lambda: fired.append("fresh"))  # the request re-arms
    write_path.lock.release()
    await advancing
    assert fired == [] and write_path.flushes == [], "nothing ran, nothing was persisted"
    timers.assert_timer("join-g", 60)
    await clock.advance(100)
    assert fired == ["fresh"]


async def test_cancel_all() -> None:
    clock, _, timers = service()
    fired: list[str] = []
    timers.schedule("join-g", "g", 10, lambda: fired.append("join"))
    timers.schedule("sync-h", "h", 10, lambda: fired.append("sync"))
    timers.cancel_all()
    assert timers.keys() == []
    await clock.advance(100)
    assert fired == []


async def test_a_fired_timer_is_freed_without_the_collector() -> None:
    # The server freezes the collector (server.gc_policy): a cycle left by a fired timer
    # would never be reclaimed.
    write_path = WritePath()
    timers: Timers[str] = Timers(SystemClock(), write_path)
    fired: list[str] = []
    gc.disable()
    try:
        timers.schedule("join-g", "g", 0, lambda: fired.append("join"))
        timer = weakref.ref(timers._timers["join-g"])
        for _ in range(100):
            await asyncio.sleep(0.001)
            if fired:
                break
        await settle()
        assert fired == ["join"]
        assert timer() is None, "freed by reference counting alone"
    finally:
        gc.enable()


def test_keys_are_kafkas() -> None:
    assert heartbeat_key("g", "m-1") == "heartbeat-g-m-1"
    assert join_key("g") == "join-g"
    assert sync_key("g") == "sync-g"


# --- the coordinator's timers -------------------------------------------------------------


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = await Harness().start()
    yield h
    await h.coordinator.close()


def group_timers(harness: Harness) -> Timers[ClassicGroup]:
    return harness.coordinator.timers


async def test_timers_after_join_sync_heartbeat_and_leave(harness: Harness) -> None:
    timers = group_timers(harness)
    first = harness.join(join_request(instance_id="i-0"))
    second = harness.join(join_request(instance_id="i-1"))
    await settle()
    # The initial delay (Kafka's InitialDelayedJoin) and each new member's join timeout.
    timers.assert_timer(join_key(GROUP), INITIAL_DELAY_MS)
    group = harness.coordinator._groups[GROUP]
    member_ids = list(group.members)
    for member_id in member_ids:
        timers.assert_timer(heartbeat_key(GROUP, member_id), NEW_MEMBER_JOIN_TIMEOUT_MS)

    # The second member arrived during the delay: the delay runs once more (same key).
    await harness.clock.advance(INITIAL_DELAY_MS)
    timers.assert_timer(join_key(GROUP), 2 * INITIAL_DELAY_MS)
    responses = await harness.finish_join([first, second])
    now = harness.clock.now_ms()
    assert now == 2 * INITIAL_DELAY_MS
    # Join phase over: the sync deadline is armed, every session starts again.
    timers.assert_no_timer(join_key(GROUP))
    timers.assert_timer(sync_key(GROUP), now + REBALANCE_MS)
    for response in responses:
        timers.assert_timer(heartbeat_key(GROUP, response.member_id), now + SESSION_MS)

    await harness.complete_sync(responses)
    timers.assert_no_timer(sync_key(GROUP))  # everyone synced: as Kafka, it is cancelled
    leader, follower = sorted(responses, key=lambda r: r.leader != r.member_id)
    assert leader.leader == leader.member_id

    # A heartbeat only records the time: the armed timer stays where it was (lazy re-arm).
    await harness.clock.advance(4_000)
    assert await harness.heartbeat(leader.member_id, 1, "i-0") == ErrorCode.NONE
    assert await harness.heartbeat(follower.member_id, 1, "i-1") == ErrorCode.NONE
    heartbeat_at = harness.clock.now_ms()
    timers.assert_timer(heartbeat_key(GROUP, leader.member_id), now + SESSION_MS)
    # When it falls due it re-arms for the rest of the session, measured from the heartbeat.
    await harness.clock.advance(now + SESSION_MS - heartbeat_at)
    timers.assert_timer(heartbeat_key(GROUP, leader.member_id), heartbeat_at + SESSION_MS)
    assert await harness.state() == "Stable"

    # A member leaves: its session timer goes, the rebalance arms the join deadline.
    left_at = harness.clock.now_ms()
    result = await harness.coordinator.leave_group(
        LeaveGroupRequest(GROUP, [MemberIdentity(follower.member_id, "i-1")])
    )
    assert result.members[0].error_code == ErrorCode.NONE
    timers.assert_no_timer(heartbeat_key(GROUP, follower.member_id))
    timers.assert_timer(join_key(GROUP), left_at + REBALANCE_MS)
    timers.assert_no_timer(sync_key(GROUP))
    assert sorted(timers.keys()) == sorted(
        [join_key(GROUP), heartbeat_key(GROUP, leader.member_id)]
    )


async def test_pending_member_id_is_timed_by_its_heartbeat_key(harness: Harness) -> None:
    timers = group_timers(harness)
    first = await harness.coordinator.join_group(join_request())
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    key = heartbeat_key(GROUP, first.member_id)
    timers.assert_timer(key, SESSION_MS)
    # Rejoining with the id replaces the pending timer under the same key.
    await harness.clock.advance(1_000)
    harness.join(join_request(first.member_id))
    await settle()
    timers.assert_timer(key, 1_000 + NEW_MEMBER_JOIN_TIMEOUT_MS)
    assert harness.coordinator.group_size(GROUP) == 1


async def test_pending_member_id_expires(harness: Harness) -> None:
    first = await harness.coordinator.join_group(join_request())
    assert harness.coordinator.group_size(GROUP) == 1
    await harness.clock.advance(SESSION_MS)
    assert harness.coordinator.group_size(GROUP) == 0
    assert harness.coordinator.timers.keys() == []
    late = await harness.coordinator.join_group(join_request(first.member_id))
    assert late.error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_static_replacement_moves_the_session_timer(harness: Harness) -> None:
    timers = group_timers(harness)
    (old,) = await harness.form_group(["i-0"])
    due = INITIAL_DELAY_MS + SESSION_MS
    timers.assert_timer(heartbeat_key(GROUP, old.member_id), due)
    await harness.clock.advance(1_000)
    new = await harness.coordinator.join_group(join_request(instance_id="i-0"))
    assert new.error_code == ErrorCode.NONE and new.member_id != old.member_id
    timers.assert_no_timer(heartbeat_key(GROUP, old.member_id))
    timers.assert_timer(heartbeat_key(GROUP, new.member_id), due)
    # The moved timer ends the new member's session, not a stale one.
    await harness.clock.advance(due + SESSION_MS)
    assert await harness.state() == "Empty"


async def test_close_cancels_every_timer() -> None:
    harness = await Harness().start()
    await harness.form_group(["i-0", None])
    assert harness.coordinator.timers.keys()
    await harness.coordinator.close()
    assert harness.coordinator.timers.keys() == []
    assert harness.clock.pending_timers() == 0


# --- ClassicGroup's invariants (where Kafka's ClassicGroup checks them) -----------------------


def member(
    member_id: str,
    instance_id: str | None = None,
    protocol_type: str = "consumer",
    names: tuple[str, ...] = ("range",),
) -> ClassicMember:
    return ClassicMember(
        member_id=member_id,
        group_instance_id=instance_id,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        protocol_type=protocol_type,
        protocols=tuple((name, b"") for name in names),
    )


def test_adding_a_static_member_that_is_already_mapped_is_an_error() -> None:
    group = ClassicGroup("g")
    group.add(member("a", "i-0"))
    with pytest.raises(GroupInvariantError, match="already a member"):
        group.add(member("b", "i-0"))
    assert list(group.members) == ["a"] and group.static_members == {"i-0": "a"}


def test_adding_a_member_of_another_protocol_type_or_protocols_is_an_error() -> None:
    group = ClassicGroup("g")
    group.add(member("a"))
    with pytest.raises(GroupInvariantError, match="protocol type"):
        group.add(member("b", protocol_type="connect"))
    with pytest.raises(GroupInvariantError, match="supports none"):
        group.add(member("c", names=("roundrobin",)))
    assert list(group.members) == ["a"]
    assert group.protocol_counts == {"range": 1}


def test_pending_member_invariants() -> None:
    group = ClassicGroup("g")
    group.add(member("a"))
    with pytest.raises(GroupInvariantError, match="already a member"):
        group.add_pending_member("a")
    assert group.add_pending_member("b") is True
    assert group.add_pending_member("b") is False
    group.add(member("b"))
    assert group.pending_members == set(), "as Kafka's add: no longer pending"


def test_pending_sync_member_must_be_a_member() -> None:
    group = ClassicGroup("g")
    group.add(member("a"))
    group.add_pending_sync_member("a")
    with pytest.raises(GroupInvariantError):
        group.add_pending_sync_member("x")
    with pytest.raises(GroupInvariantError):
        group.remove_pending_sync_member("x")
    assert group.remove_pending_sync_member("a") is True
    assert group.remove_pending_sync_member("a") is False


def test_replacing_an_unknown_static_member_is_an_error() -> None:
    group = ClassicGroup("g")
    group.add(member("a", "i-0"))
    with pytest.raises(GroupInvariantError, match="non-existing"):
        group.replace_static_member("i-0", "nobody", "b")
    assert group.static_members == {"i-0": "a"}


def test_removing_an_unknown_member_is_lenient_as_in_kafka() -> None:
    group = ClassicGroup("g")
    group.add(member("a"))
    assert group.remove("nobody") is None
    assert list(group.members) == ["a"] and group.leader_id == "a"


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[StoreBatch] = []

    async def write(self, batch: StoreBatch) -> None:
        self.batches.append(batch)
        await super().write(batch)


async def test_a_session_expiry_is_written_once_through_the_write_path() -> None:
    store = CountingStore()
    harness = await Harness(store=store).start()
    try:
        responses = await harness.form_group(["i-0", "i-1"])
        stays = next(r for r in responses if r.member_id.startswith("i-0"))
        store.batches.clear()
        # i-0 keeps heartbeating, i-1 goes silent; nothing else happens meanwhile.
        for _ in range(SESSION_MS // 3_000 + 1):
            await harness.clock.advance(3_000)
            assert await harness.heartbeat(stays.member_id, 1, "i-0") in (
                ErrorCode.NONE,
                ErrorCode.REBALANCE_IN_PROGRESS,
            )
        expiry = [b for b in store.batches if any(e.kind == "member_removed" for e in b.journal)]
        assert len(expiry) == 1, "one write for the expiry and what it started"
        kinds = [event.kind for event in expiry[0].journal]
        assert kinds == ["member_removed", "rebalance_started"]
        assert await harness.state() == "PreparingRebalance"
    finally:
        await harness.coordinator.close()
