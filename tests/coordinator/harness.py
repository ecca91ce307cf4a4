"""Helpers for driving a GroupCoordinator on a ManualClock in tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    ManualClock,
    MemoryStore,
    Store,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from coordinator.clock import settle

GROUP = "g"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
INITIAL_DELAY_MS = 3_000


def protocols(*names: str, metadata: bytes = b"") -> list[JoinGroupProtocol]:
    return [JoinGroupProtocol(name, metadata or name.encode()) for name in names]


def join_request(
    member_id: str = "",
    instance_id: str | None = None,
    names: Sequence[str] = ("range",),
    *,
    group_id: str = GROUP,
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    protocol_type: str = "consumer",
    metadata: bytes = b"",
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group_id,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=protocol_type,
        protocols=protocols(*names, metadata=metadata),
        client_id="test-client",
        client_host="/127.0.0.1",
    )


class Harness:
    def __init__(
        self,
        store: Store | None = None,
        config: CoordinatorConfig | None = None,
        clock: ManualClock | None = None,
    ) -> None:
        self.clock = clock or ManualClock()
        self.store = store or MemoryStore()
        self.coordinator = GroupCoordinator(
            config or CoordinatorConfig(group_initial_rebalance_delay_ms=INITIAL_DELAY_MS),
            self.clock,
            self.store,
        )

    async def start(self) -> Harness:
        await self.coordinator.start()
        return self

    def join(self, request: JoinGroupRequest) -> asyncio.Task[JoinGroupResponse]:
        return asyncio.ensure_future(self.coordinator.join_group(request))

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        instance_id: str | None = None,
        group_id: str = GROUP,
    ) -> asyncio.Task[SyncGroupResponse]:
        request = SyncGroupRequest(
            group_id=group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocol_name=None,
            assignments=[
                SyncGroupRequestAssignment(member, data)
                for member, data in (assignments or {}).items()
            ],
        )
        return asyncio.ensure_future(self.coordinator.sync_group(request))

    async def heartbeat(
        self, member_id: str, generation: int, instance_id: str | None = None
    ) -> int:
        response = await self.coordinator.heartbeat(
            HeartbeatRequest(GROUP, generation, member_id, instance_id)
        )
        return response.error_code

    async def join_dynamic(
        self, names: Sequence[str] = ("range",), session_ms: int = SESSION_MS
    ) -> asyncio.Task[JoinGroupResponse]:
        """KIP-394 two-step join; returns the parked second join."""
        first = await self.coordinator.join_group(join_request(names=names, session_ms=session_ms))
        return self.join(join_request(first.member_id, names=names, session_ms=session_ms))

    async def form_group(
        self,
        instance_ids: Sequence[str | None],
        names: Sequence[str] = ("range",),
        session_ms: int = SESSION_MS,
    ) -> list[JoinGroupResponse]:
        """Join every member, pass the initial delay, sync with assignment b'<instance>'."""
        tasks = []
        for instance_id in instance_ids:
            if instance_id is None:
                tasks.append(await self.join_dynamic(names, session_ms))
            else:
                request = join_request(instance_id=instance_id, names=names, session_ms=session_ms)
                tasks.append(self.join(request))
        responses = await self.finish_join(tasks)
        await self.complete_sync(responses)
        return responses

    async def finish_join(
        self, tasks: Sequence[asyncio.Task[JoinGroupResponse]]
    ) -> list[JoinGroupResponse]:
        """Advance through the initial delay (extended while members arrive) until joined."""
        await settle()
        for _ in range(REBALANCE_MS // INITIAL_DELAY_MS + 1):
            if all(task.done() for task in tasks):
                break
            await self.clock.advance(INITIAL_DELAY_MS)
        assert all(task.done() for task in tasks), "join phase did not complete"
        return [task.result() for task in tasks]

    async def complete_sync(self, responses: Sequence[JoinGroupResponse]) -> dict[str, bytes]:
        leader = next(r for r in responses if r.leader == r.member_id)
        assignments = {
            m.member_id: (m.group_instance_id or m.member_id).encode() for m in leader.members
        }
        syncs = [
            self.sync(
                r.member_id,
                r.generation_id,
                assignments if r is leader else None,
            )
            for r in responses
        ]
        results = [await task for task in syncs]
        assert all(result.error_code == 0 for result in results), results
        return {r.member_id: s.assignment for r, s in zip(responses, results, strict=True)}

    async def state(self, group_id: str = GROUP) -> str:
        (described,) = await self.coordinator.describe_groups([group_id])
        return described.group_state
