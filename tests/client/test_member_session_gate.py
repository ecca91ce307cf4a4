"""A member whose session lapsed while it could not run loses its partitions before it
processes another record (found by the fault soak: a member woken from SIGSTOP, or one whose
heartbeat hangs on a stalled coordinator, processed partitions already given to another
member until its heartbeat task ran; docs/soak.md)."""

from __future__ import annotations

import asyncio

import pytest

from coordinator import GroupCoordinator, ManualClock
from coordinator.client import GroupMember, TransportError
from coordinator.client.member_state import Reset
from coordinator.client.timing import sleep
from coordinator.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)

from .helpers import FaultyTransport, Ledger, advance_until, in_process, member_config


class HangingHeartbeats(FaultyTransport):
    """Heartbeats get no answer while `hang` is set: a coordinator stopped by SIGSTOP."""

    def __init__(self, inner: object) -> None:
        super().__init__(in_process(inner))
        self.released = asyncio.Event()
        self.hang = False

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        if self.hang:
            await self.released.wait()
        return await super().heartbeat(request)


async def test_a_member_unheard_for_a_session_loses_its_partitions_before_processing(
    manual_coordinator: GroupCoordinator, clock: ManualClock, members: list[GroupMember]
) -> None:
    transport = HangingHeartbeats(manual_coordinator)
    ledger = Ledger()
    member = GroupMember(transport, member_config("m-0"), ledger.listener("m-0"), clock=clock)
    members.append(member)
    try:
        await member.start()
        await advance_until(clock, lambda: member.state == "stable")
        owned = member.assignment
        assert owned

        transport.hang = True
        await clock.advance(member.config.session_timeout_ms - 100)
        await member.lose_partitions_if_session_expired()
        assert member.assignment == owned  # within the session: nothing changes

        await clock.advance(200)
        # The heartbeat task waits on its unanswered request, so nothing else notices; a
        # poll loop running now would process partitions the coordinator may have moved.
        assert member.assignment == owned
        await member.lose_partitions_if_session_expired()
        assert member.assignment == frozenset()
        assert ledger.log[-1] == ("m-0", "lost", owned)
    finally:
        transport.released.set()
    transport.hang = False
    # The member rejoins once the coordinator answers again.
    await advance_until(clock, lambda: member.assignment == owned, within_ms=10_000)


async def test_a_member_told_its_generation_is_gone_loses_its_partitions_before_processing(
    manual_coordinator: GroupCoordinator, clock: ManualClock, members: list[GroupMember]
) -> None:
    # Found by the 30-minute soak (seed 25): a woken zombie's heartbeat was answered
    # UNKNOWN_MEMBER_ID, which counts as contact, so the session check passed, and the member
    # processed and committed for 0.5 s before its main task rejoined and lost them.
    transport = FaultyTransport(in_process(manual_coordinator))
    ledger = Ledger()
    member = GroupMember(transport, member_config("m-0"), ledger.listener("m-0"), clock=clock)
    members.append(member)
    await member.start()
    await advance_until(clock, lambda: member.state == "stable")
    owned = member.assignment
    # The answer as the heartbeat task records it, before the main task has run.
    member._reset_to(Reset.MEMBER_ID)
    await member.lose_partitions_if_session_expired()
    assert member.assignment == frozenset()
    assert ledger.log[-1] == ("m-0", "lost", owned)
    await advance_until(clock, lambda: member.assignment == owned, within_ms=10_000)


class PartitionedTransport(FaultyTransport):
    """A network between the member and the coordinator that can delay one heartbeat's
    answer (the request reaches the coordinator at once, the answer comes `delay_ms` later),
    then cut every request off: no answer at all, as behind a dropped link."""

    def __init__(self, inner: object, clock: ManualClock) -> None:
        super().__init__(in_process(inner))
        self.clock = clock
        self.healed = asyncio.Event()
        self.delay_ms = 0
        self.cut = False

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        if self.cut:
            await self.healed.wait()
        response = await super().heartbeat(request)
        if self.delay_ms:
            await sleep(self.clock, self.delay_ms)
            self.cut = True
        return response

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        if self.cut:
            await self.healed.wait()
        return await super().commit_offsets(request)


async def _stable_member(
    transport: PartitionedTransport, clock: ManualClock, members: list[GroupMember]
) -> tuple[GroupMember, Ledger]:
    """m-0, alone in its group over `transport`, once Stable; and its callbacks' ledger."""
    ledger = Ledger()
    member = GroupMember(transport, member_config("m-0"), ledger.listener("m-0"), clock=clock)
    members.append(member)
    await member.start()
    await advance_until(clock, lambda: member.state == "stable")
    return member, ledger


async def test_the_session_counts_from_the_heartbeat_sent_not_from_its_late_answer(
    manual_coordinator: GroupCoordinator, clock: ManualClock, members: list[GroupMember]
) -> None:
    # Found by the soak's network delay: with each way delayed past the session, the
    # coordinator last heard the member when its heartbeat arrived, the member counted from
    # when the answer came back (a delay later), and both processed the partitions meanwhile.
    transport = PartitionedTransport(manual_coordinator, clock)
    member, ledger = await _stable_member(transport, clock, members)
    try:
        owned = member.assignment
        delay_ms = member.config.session_timeout_ms // 2
        transport.delay_ms = delay_ms
        sent = clock.now_ms()
        # The next heartbeat reaches the coordinator at once and is answered a delay later;
        # after it, nothing gets through.
        await advance_until(clock, lambda: transport.cut)
        assert clock.now_ms() - sent <= member.config.heartbeat_interval_ms + delay_ms
        heard = clock.now_ms() - delay_ms  # when the coordinator last heard the member
        await clock.advance(heard + member.config.session_timeout_ms + 50 - clock.now_ms())
        # The coordinator's session has lapsed: the partitions may be another's now.
        await member.lose_partitions_if_session_expired()
        assert member.assignment == frozenset()
        assert ledger.log[-1] == ("m-0", "lost", owned)
    finally:
        transport.healed.set()


async def test_a_commit_does_not_wait_for_an_answer_past_the_session(
    manual_coordinator: GroupCoordinator, clock: ManualClock, members: list[GroupMember]
) -> None:
    # Found by the soak's partitions: a commit sent just before the link dropped waited for
    # TCP's retransmissions until after the link came back; the member's poll loop, blocked
    # in it, could not lose the partitions when its session lapsed, so they had two owners.
    transport = PartitionedTransport(manual_coordinator, clock)
    member, _ = await _stable_member(transport, clock, members)
    try:
        owned = member.assignment
        transport.cut = True
        commit = asyncio.ensure_future(member.commit({tp: 1 for tp in owned}))
        await advance_until(clock, commit.done, within_ms=member.config.session_timeout_ms + 100)
        with pytest.raises(TransportError):
            commit.result()
        # Lost before the failure reached the caller: a zombie woken past its session must
        # give its partitions up before it does anything else, a failed commit's log line
        # included (the soak's Kafka variant saw the commit's failure first, and counted
        # the woken member as a running owner for that millisecond).
        assert member.assignment == frozenset()
    finally:
        transport.healed.set()
