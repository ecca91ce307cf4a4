"""A member whose session lapsed while it could not run loses its partitions before it
processes another record (found by the fault soak: a member woken from SIGSTOP, or one whose
heartbeat hangs on a stalled coordinator, processed partitions already given to another
member until its heartbeat task ran; docs/soak.md)."""

from __future__ import annotations

import asyncio

from coordinator import GroupCoordinator, ManualClock
from coordinator.client import GroupMember
from coordinator.client.member_state import Reset
from coordinator.messages import HeartbeatRequest, HeartbeatResponse

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
