"""A member's time is its injected clock: heartbeats, backoffs and the session check."""

from __future__ import annotations

import asyncio

from coordinator import GroupCoordinator, ManualClock
from coordinator.client import GroupMember
from coordinator.client.timing import MonotonicClock, sleep
from coordinator.clock import settle

from .helpers import FaultyTransport, Ledger, advance_until, in_process, member_config


async def test_heartbeats_wait_for_the_clock_not_the_wall(
    manual_coordinator: GroupCoordinator, clock: ManualClock, members: list[GroupMember]
) -> None:
    transport = FaultyTransport(in_process(manual_coordinator))
    member = GroupMember(transport, member_config("m-0"), Ledger().listener("m-0"), clock=clock)
    members.append(member)
    await member.start()
    await advance_until(clock, lambda: member.state == "stable")

    beats = transport.calls.count("heartbeat")
    await asyncio.sleep(0.1)  # three real intervals pass; the member's clock does not move
    assert transport.calls.count("heartbeat") == beats
    await clock.advance(member.config.heartbeat_interval_ms)
    assert transport.calls.count("heartbeat") == beats + 1


async def test_a_member_unheard_for_a_session_on_its_clock_loses_its_partitions(
    manual_coordinator: GroupCoordinator, clock: ManualClock, members: list[GroupMember]
) -> None:
    transport = FaultyTransport(in_process(manual_coordinator))
    ledger = Ledger()
    member = GroupMember(transport, member_config("m-0"), ledger.listener("m-0"), clock=clock)
    members.append(member)
    await member.start()
    await advance_until(clock, lambda: member.state == "stable")
    owned = member.assignment

    transport.unreachable = True
    await clock.advance(member.config.session_timeout_ms - 100)
    assert member.assignment == owned  # within the session nothing changes
    await clock.advance(200)
    await advance_until(clock, lambda: not member.assignment, within_ms=1_000)
    assert ledger.log[-1] == ("m-0", "lost", owned)


async def test_sleep_wakes_on_advance_and_a_cancelled_sleep_leaves_no_timer() -> None:
    clock = ManualClock()
    sleeper = asyncio.ensure_future(sleep(clock, 50))
    await settle()
    await clock.advance(49)
    assert not sleeper.done()
    await clock.advance(1)
    assert sleeper.done()

    abandoned = asyncio.ensure_future(sleep(clock, 50))
    await settle()
    assert clock.pending_timers() == 1
    abandoned.cancel()
    await settle()
    assert clock.pending_timers() == 0


async def test_the_default_clock_is_monotonic_and_really_sleeps() -> None:
    clock = MonotonicClock()
    before = clock.now_ms()
    await sleep(clock, 20)
    assert clock.now_ms() - before >= 19  # timer granularity
