"""Answers about an identity the member no longer holds are stale, never fatal.

A real coordinator (HTTP on loopback, SQLite store) and a `GroupMember` over HTTP. The
member's view of the coordinator stalls (its heartbeats and a commit are held in flight)
past its session: the coordinator expires it, the member rejoins under a new member id,
and only then does the coordinator read the commit sent with the old id and answer
FENCED_INSTANCE_ID. Kafka's client raises that as fatal only when the generation it was
sent with is still current (ConsumerCoordinator's OffsetCommitResponseHandler); ours
did not look, and a static member exited as if another process used its instance id.
A commit in flight now ends when the member's session lapses (the soak's partitions), so
the late answer reaches no one; an answer within the session is judged by the same rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, SqliteStore
from coordinator.client import GroupMember, HttpTransport, MemberState, TransportError
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from coordinator.protocol import TopicPartition
from coordinator.server import AuthConfig, RunningServer, create_app, start_server

from .helpers import GROUP, TOPIC, member_config

# Long enough that a loaded machine does not expire the member by accident.
SESSION_MS = 2_000


class StallingTransport(HttpTransport):
    """HTTP to the real server, with heartbeats and commits held while `stalled` is clear
    (as a member sees a coordinator that SIGSTOP froze: requests sent, no answer)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.heartbeats_flow = asyncio.Event()
        self.heartbeats_flow.set()
        self.commits_flow = asyncio.Event()
        self.commits_flow.set()
        self.commits_sent: list[OffsetCommitRequest] = []
        self.joins_flow = asyncio.Event()
        self.joins_flow.set()

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        await self.joins_flow.wait()
        return await super().join_group(request)

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        await self.heartbeats_flow.wait()
        return await super().heartbeat(request)

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        await self.commits_flow.wait()
        self.commits_sent.append(request)
        return await super().commit_offsets(request)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, GroupCoordinator]]:
    config = CoordinatorConfig(
        group_min_session_timeout_ms=SESSION_MS, group_initial_rebalance_delay_ms=0
    )
    coordinator = GroupCoordinator(config=config, store=SqliteStore(tmp_path / "c.db"))
    running = await start_server(create_app(coordinator, AuthConfig(insecure=True)), "127.0.0.1", 0)
    await coordinator.set_topic_metadata({TOPIC: 4})
    yield running, coordinator
    await running.stop()


async def kinds(coordinator: GroupCoordinator) -> list[tuple[str, str | None]]:
    rows = await coordinator.journal_rows(group_id=GROUP, since_seq=0, limit=1000)
    return [(row.kind, row.member_id) for row in rows]


async def until(predicate: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    """`helpers.wait_until` for a predicate that must await (the journal is read async)."""
    deadline = asyncio.get_running_loop().time() + within
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def test_a_commit_in_flight_past_the_session_ends_retriably_and_is_never_fenced(served):
    running, coordinator = served
    transport = StallingTransport(running.url)
    config = member_config("s-0", session_timeout_ms=SESSION_MS, heartbeat_interval_ms=50)
    member = GroupMember(transport, config)
    await member.start()
    try:
        await member.wait_for_assignment(timeout=10)
        old_id = member.member_id
        tp = TopicPartition(TOPIC, 0)
        await member.commit({tp: 1})

        # The stall: nothing the member sends is answered; a commit is in flight.
        transport.heartbeats_flow.clear()
        transport.commits_flow.clear()
        commit = asyncio.create_task(member.commit({tp: 2}))

        async def expired() -> bool:
            return ("member_removed", old_id) in await kinds(coordinator)

        await until(expired)
        transport.heartbeats_flow.set()  # heartbeat: UNKNOWN_MEMBER_ID, so the member rejoins

        async def rejoined() -> bool:
            return member.state is MemberState.STABLE and member.member_id != old_id

        await until(rejoined)
        new_id = member.member_id
        # The member stopped waiting for the old commit's answer when its session lapsed
        # (a retriable error, docs/soak.md): whatever the coordinator answers the old id
        # later (FENCED_INSTANCE_ID) reaches no one.
        assert commit.done()
        with pytest.raises(TransportError, match="session timeout"):
            await commit
        transport.commits_flow.set()

        # Not fatal: same instance id, still stable, and its next commit lands.
        assert member.error is None
        assert member.state is MemberState.STABLE
        assert member.group_instance_id == "s-0" and member.member_id == new_id
        await member.commit({tp: 3})
        assert await member.fetch_committed([tp]) == {tp: 3}
        assert [c.member_id for c in transport.commits_sent] == [old_id, new_id]
    finally:
        await member.close()
        await transport.close()


async def test_no_commit_is_sent_while_the_member_rebalances(served):
    """Kafka's client refuses a commit outside a rebalance listener while rebalancing."""
    running, coordinator = served
    transport = StallingTransport(running.url)
    config = member_config("s-0", session_timeout_ms=SESSION_MS, heartbeat_interval_ms=50)
    member = GroupMember(transport, config)
    await member.start()
    try:
        await member.wait_for_assignment(timeout=10)
        old_id = member.member_id
        transport.heartbeats_flow.clear()
        transport.joins_flow.clear()

        async def expired() -> bool:
            return ("member_removed", old_id) in await kinds(coordinator)

        await until(expired)
        transport.heartbeats_flow.set()  # UNKNOWN_MEMBER_ID: the member rejoins; join held

        async def rebalancing() -> bool:
            return member.state is MemberState.PREPARING_REBALANCE

        await until(rebalancing)
        sent_before = len(transport.commits_sent)
        with pytest.raises(CoordinatorError) as refused:
            await member.commit({TopicPartition(TOPIC, 0): 5})
        assert refused.value.code is ErrorCode.REBALANCE_IN_PROGRESS
        assert "not sent" in str(refused.value)
        assert len(transport.commits_sent) == sent_before
        assert member.error is None

        transport.joins_flow.set()
        await member.wait_for_assignment(timeout=10)
        await member.commit({TopicPartition(TOPIC, 0): 5})
        assert len(transport.commits_sent) == sent_before + 1
    finally:
        await member.close()
        await transport.close()


def test_a_commit_loop_that_fell_behind_commits_once_not_once_per_missed_tick():
    from staticfleet.member.runtime import next_commit_deadline

    assert next_commit_deadline(10.0, 10.01, 0.3) == pytest.approx(10.3)  # on time: cadence kept
    # Stalled 5 s past the deadline: the next is an interval from now, not 10.3, 10.6, ...
    assert next_commit_deadline(10.0, 15.0, 0.3) == pytest.approx(15.3)
    assert next_commit_deadline(10.0, 10.3, 0.3) == pytest.approx(10.6)
