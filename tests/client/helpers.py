"""Shared pieces for member tests: a coordinator, an ownership ledger, fault injection."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

from coordinator.client import (
    GroupMember,
    InProcessTransport,
    MemberConfig,
    Partitions,
    Transport,
    TransportError,
)
from coordinator.clock import ManualClock
from coordinator.errors import ErrorCode
from coordinator.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator.protocol import TopicPartition
from coordinator.standby import StandbyHeartbeatRequest, StandbyHeartbeatResponse

GROUP = "fleet"
TOPIC = "events"

# Small timings: heartbeats every 30 ms make rebalances propagate in few steps (a few
# `advance_until` steps on a ManualClock, or little real time over HTTP and in processes);
# the session timeout is the coordinator's minimum so nothing expires by accident.
FAST = {
    "session_timeout_ms": 6_000,
    "rebalance_timeout_ms": 5_000,
    "heartbeat_interval_ms": 30,
    "retry_backoff_ms": 20,
    "retry_backoff_max_ms": 200,
}


def member_config(instance_id: str | None = None, **overrides: object) -> MemberConfig:
    settings: dict[str, object] = {
        "group_id": GROUP,
        "topics": (TOPIC,),
        "group_instance_id": instance_id,
        **FAST,
    }
    settings.update(overrides)
    return MemberConfig(**settings)  # type: ignore[arg-type]


def all_partitions(count: int, topic: str = TOPIC) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in range(count))


async def wait_until(
    predicate: Callable[[], object], within: float = 10.0, interval: float = 0.01
) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


async def advance_until(
    clock: ManualClock, predicate: Callable[[], object], within_ms: int = 60_000, step_ms: int = 10
) -> int:
    """Move a manual clock in `step_ms` steps until `predicate` holds; the clock time it took.

    Each step fires the timers that fall due (heartbeats, backoffs, the coordinator's) and
    lets the tasks they wake run, so a rebalance takes as many steps as its timers need, not
    wall-clock time."""
    waited = 0
    while not predicate():
        if waited >= within_ms:
            raise AssertionError(f"condition not reached within {within_ms} ms of clock time")
        await clock.advance(step_ms)
        waited += step_ms
    return waited


async def assignment_of(clock: ManualClock, member: GroupMember) -> Partitions:
    """`wait_for_assignment` on manual time: advance until the member is stable (or failed)."""
    await advance_until(clock, lambda: member.state == "stable" or member.error is not None)
    return member.poll()


def settled(members: Iterable[GroupMember], partitions: frozenset[TopicPartition]) -> bool:
    """Every member stable in one generation, together owning every partition once."""
    members = list(members)
    if not members or any(m.state != "stable" for m in members):
        return False
    if len({m.generation_id for m in members}) != 1:
        return False
    owned = [tp for m in members for tp in m.assignment]
    return len(owned) == len(set(owned)) and set(owned) == set(partitions)


@dataclass
class Ledger:
    """Who owns what, as the listeners report it; flags any double ownership at once."""

    owner: dict[TopicPartition, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    log: list[tuple[str, str, frozenset[TopicPartition]]] = field(default_factory=list)

    def listener(self, name: str) -> LedgerListener:
        return LedgerListener(self, name)


class LedgerListener:
    def __init__(self, ledger: Ledger, name: str) -> None:
        self.ledger = ledger
        self.name = name
        self.revoked: list[Partitions] = []
        self.assigned: list[Partitions] = []
        self.lost: list[Partitions] = []

    def on_partitions_assigned(self, partitions: Partitions) -> None:
        self.assigned.append(partitions)
        self.ledger.log.append((self.name, "assigned", partitions))
        for tp in partitions:
            current = self.ledger.owner.get(tp)
            if current is not None and current != self.name:
                self.ledger.violations.append(f"{tp} given to {self.name} while {current} owns it")
            self.ledger.owner[tp] = self.name

    async def on_partitions_revoked(self, partitions: Partitions) -> None:
        # Async on purpose: both listener kinds must work, and a yield here lets other
        # members run while this one is "committing".
        await asyncio.sleep(0)
        self.revoked.append(partitions)
        self.ledger.log.append((self.name, "revoked", partitions))
        self._release(partitions)

    def on_partitions_lost(self, partitions: Partitions) -> None:
        self.lost.append(partitions)
        self.ledger.log.append((self.name, "lost", partitions))
        self._release(partitions)

    def _release(self, partitions: Partitions) -> None:
        for tp in partitions:
            if self.ledger.owner.get(tp) == self.name:
                del self.ledger.owner[tp]


class FaultyTransport:
    """Wraps a transport; tests make chosen calls fail or answer with chosen errors."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.unreachable = False
        self.heartbeat_errors: list[ErrorCode] = []
        self.sync_errors: list[ErrorCode] = []
        self.calls: list[str] = []

    def _reach(self, name: str) -> None:
        self.calls.append(name)
        if self.unreachable:
            raise TransportError(f"{name}: connection refused (test)")

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        self._reach("join")
        return await self.inner.join_group(request)

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        self._reach("sync")
        if self.sync_errors:
            return SyncGroupResponse(self.sync_errors.pop(0))
        return await self.inner.sync_group(request)

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        self._reach("heartbeat")
        if self.heartbeat_errors:
            return HeartbeatResponse(self.heartbeat_errors.pop(0))
        return await self.inner.heartbeat(request)

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        self._reach("leave")
        return await self.inner.leave_group(request)

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        self._reach("commit")
        return await self.inner.commit_offsets(request)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        self._reach("fetch")
        return await self.inner.fetch_offsets(request)

    async def standby_heartbeat(self, request: StandbyHeartbeatRequest) -> StandbyHeartbeatResponse:
        self._reach("standby")
        return await self.inner.standby_heartbeat(request)

    async def topic_metadata(self) -> dict[str, int]:
        self._reach("metadata")
        return await self.inner.topic_metadata()

    async def close(self) -> None:
        await self.inner.close()


def listener_of(member: GroupMember) -> LedgerListener:
    """The ledger listener a test member was built with."""
    return cast(LedgerListener, member._listener)


def in_process(coordinator: object) -> InProcessTransport:
    return InProcessTransport(coordinator)  # type: ignore[arg-type]
