"""Hypothesis stateful test: the coordinator plus members following the cooperative protocol.

Random static members start, restart (a new process with the same instance id, possibly
subscribing to one more topic), leave, stop heartbeating, the clock jumps, the topic's
partition count is raised and the coordinator itself restarts on its store. After every
step:
- no partition is owned by two members that have synced the group's current generation;
- a replaced member id (fenced) never gets a request through;
- the generation never goes down.
At the end, once traffic stops, every partition of every subscribed topic, at its current
count, is owned by exactly one member.

Members are a small deterministic model of the consumer side (KIP-429): they keep owned
partitions across a rebalance, revoke only what they lost and rejoin at once when they
revoked anything; the leader runs the real cooperative-sticky assignor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from coordinator import (
    CoordinatorConfig,
    ErrorCode,
    GroupCoordinator,
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    ManualClock,
    MemberIdentity,
    MemoryStore,
    OffsetCommitPartition,
    OffsetCommitRequest,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from coordinator.assignors import get_assignor
from coordinator.clock import settle
from coordinator.protocol import (
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

GROUP = "stateful"
TOPIC = "events"
EXTRA = "clicks"  # the topic a restarted member may subscribe to as well
PARTITIONS = 12
MAX_PARTITIONS = 30
INSTANCES = [f"i-{n}" for n in range(5)]
SESSION_MS = 10_000
REBALANCE_MS = 20_000
ASSIGNOR = "cooperative-sticky"
T = TypeVar("T")


@dataclass(eq=False)
class ModelMember:
    instance_id: str
    topics: tuple[str, ...] = (TOPIC,)
    member_id: str = ""
    generation: int = -1
    synced_generation: int = -1
    owned: set[TopicPartition] = field(default_factory=set)
    task: asyncio.Task[JoinGroupResponse] | asyncio.Task[SyncGroupResponse] | None = None
    task_kind: str = ""
    paused: bool = False


class CooperativeFleet(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = MemoryStore()
        self.clock = ManualClock()
        self.coordinator = self._new_coordinator()
        self.loop.run_until_complete(self.coordinator.start())
        self.partitions = PARTITIONS
        self.run(self.coordinator.set_topic_metadata({TOPIC: PARTITIONS, EXTRA: 4}))
        self.members: dict[str, ModelMember] = {}
        self.zombies: list[tuple[str, str]] = []  # (instance id, replaced member id)
        self.max_generation = -1  # no group yet
        self.max_synced_generation = -1

    def _new_coordinator(self) -> GroupCoordinator:
        config = CoordinatorConfig(group_initial_rebalance_delay_ms=0)
        return GroupCoordinator(config, self.clock, self.store)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    # --- the member model ---------------------------------------------------------------

    def _join(self, member: ModelMember) -> None:
        assignor = get_assignor(ASSIGNOR)
        subscription = Subscription(
            member.topics,
            assignor.subscription_user_data(member.topics),
            tuple(sorted(member.owned)),
            member.generation,
        )
        request = JoinGroupRequest(
            GROUP,
            SESSION_MS,
            REBALANCE_MS,
            member.member_id,
            member.instance_id,
            "consumer",
            [JoinGroupProtocol(ASSIGNOR, encode_subscription(subscription))],
        )
        member.task = self.loop.create_task(self.coordinator.join_group(request))
        member.task_kind = "join"

    def _lose_everything(self, member: ModelMember, reset_member_id: bool) -> None:
        member.owned.clear()
        member.generation = -1
        member.synced_generation = -1
        if reset_member_id:
            member.member_id = ""

    def _on_join(self, member: ModelMember, response: JoinGroupResponse) -> None:
        code = response.error_code
        assert code != ErrorCode.FENCED_INSTANCE_ID, f"live member {member.instance_id} fenced"
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._lose_everything(member, reset_member_id=True)
            self._join(member)
            return
        if code == ErrorCode.ILLEGAL_GENERATION:
            self._lose_everything(member, reset_member_id=False)
            self._join(member)
            return
        if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self._join(member)
            return
        assert code == ErrorCode.NONE, response
        member.member_id = response.member_id
        member.generation = response.generation_id
        assignments: list[SyncGroupRequestAssignment] = []
        if response.leader == response.member_id and not response.skip_assignment:
            subscriptions = {}
            for entry in response.members:
                decoded = decode_subscription(entry.metadata)
                subscriptions[entry.member_id] = Subscription(
                    decoded.topics,
                    decoded.user_data,
                    decoded.owned_partitions,
                    decoded.generation_id,
                    group_instance_id=entry.group_instance_id,
                )
            # As a real leader: the coordinator's metadata as it is now.
            metadata = self.run(self.coordinator.topic_metadata())
            result = get_assignor(ASSIGNOR).assign(metadata, subscriptions)
            assignments = [
                SyncGroupRequestAssignment(member_id, encode_assignment(assignment))
                for member_id, assignment in result.items()
            ]
        request = SyncGroupRequest(
            GROUP,
            member.generation,
            member.member_id,
            member.instance_id,
            "consumer",
            ASSIGNOR,
            assignments,
        )
        member.task = self.loop.create_task(self.coordinator.sync_group(request))
        member.task_kind = "sync"

    def _on_sync(self, member: ModelMember, response: SyncGroupResponse) -> None:
        code = response.error_code
        assert code != ErrorCode.FENCED_INSTANCE_ID, f"live member {member.instance_id} fenced"
        if code == ErrorCode.NONE:
            assigned = set(decode_assignment(response.assignment).partitions)
            revoked = member.owned - assigned
            member.owned = assigned
            member.synced_generation = member.generation
            if revoked:
                self._join(member)  # KIP-429: the follow-up rebalance
            return
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._lose_everything(member, reset_member_id=True)
        elif code == ErrorCode.ILLEGAL_GENERATION:
            self._lose_everything(member, reset_member_id=False)
        self._join(member)

    def _pump(self) -> None:
        """Let the loop run and react to every answered request until nothing changes."""
        for _ in range(200):
            self.run(self.clock.advance(0))
            progressed = False
            for member in list(self.members.values()):
                task = member.task
                if task is None or not task.done():
                    continue
                member.task = None
                progressed = True
                result = task.result()
                if isinstance(result, JoinGroupResponse):
                    self._on_join(member, result)
                else:
                    self._on_sync(member, result)
            if not progressed:
                return
        raise AssertionError("members kept reacting for 200 rounds")

    def _heartbeats(self) -> None:
        for member in list(self.members.values()):
            if member.paused or member.task is not None or not member.member_id:
                continue
            response = self.run(
                self.coordinator.heartbeat(
                    HeartbeatRequest(GROUP, member.generation, member.member_id, member.instance_id)
                )
            )
            code = response.error_code
            assert code != ErrorCode.FENCED_INSTANCE_ID, f"live member {member.instance_id} fenced"
            if code == ErrorCode.NONE:
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self._lose_everything(member, reset_member_id=True)
            elif code == ErrorCode.ILLEGAL_GENERATION:
                self._lose_everything(member, reset_member_id=False)
            self._join(member)
        self._pump()

    # --- rules --------------------------------------------------------------------------

    @rule(instance=st.sampled_from(INSTANCES))
    def start_member(self, instance: str, topics: tuple[str, ...] = (TOPIC,)) -> None:
        if instance in self.members:
            return
        member = ModelMember(instance, topics)
        self.members[instance] = member
        self._join(member)
        self._pump()

    @rule(
        instance=st.sampled_from(INSTANCES),
        topics=st.sampled_from([(TOPIC,), (TOPIC, EXTRA)]),
    )
    def restart_member(self, instance: str, topics: tuple[str, ...]) -> None:
        """The process dies without LeaveGroup; a new one with the same instance id starts,
        subscribing to `topics` (another topic set must rebalance: docs/coordinator.md)."""
        old = self.members.get(instance)
        if old is None:
            return
        if old.task is not None:
            old.task.cancel()
        if old.member_id:
            self.zombies.append((instance, old.member_id))
        del self.members[instance]
        self.start_member(instance, topics)

    @rule(instance=st.sampled_from(INSTANCES))
    def leave_member(self, instance: str) -> None:
        member = self.members.get(instance)
        if member is None:
            return
        if member.task is not None:
            member.task.cancel()
        del self.members[instance]
        # A static member that has no member id yet still leaves by its instance id.
        self.run(
            self.coordinator.leave_group(
                LeaveGroupRequest(GROUP, [MemberIdentity(member.member_id, instance)])
            )
        )
        self._pump()

    @rule(instance=st.sampled_from(INSTANCES), paused=st.booleans())
    def pause_heartbeats(self, instance: str, paused: bool) -> None:
        if instance in self.members:
            self.members[instance].paused = paused

    @rule(ms=st.integers(min_value=100, max_value=3_000))
    def tick(self, ms: int) -> None:
        self._heartbeats()
        self.run(self.clock.advance(ms))
        self._pump()

    @rule(ms=st.integers(min_value=5_000, max_value=25_000))
    def clock_jump(self, ms: int) -> None:
        self._heartbeats()
        self.run(self.clock.advance(ms))
        self._pump()

    @precondition(lambda self: self.partitions < MAX_PARTITIONS)
    @rule(extra=st.integers(min_value=1, max_value=6))
    def raise_partitions(self, extra: int) -> None:
        """An admin raises the topic's partition count (the operator does, from the spec)."""
        self.partitions += extra
        self.run(self.coordinator.set_topic_metadata({TOPIC: self.partitions}))
        self._pump()

    @rule()
    def restart_coordinator(self) -> None:
        """The coordinator process dies; a new one loads the same store.

        The old one's timers are on the old clock, which never moves again: a dead process
        does nothing. Requests it had parked are lost, so members resend them.
        """
        now = self.clock.now_ms()
        self.clock = ManualClock(now)
        self.coordinator = self._new_coordinator()
        self.run(self.coordinator.start())
        self.max_generation = self.coordinator.generation_of(GROUP)
        for member in self.members.values():
            if member.task is not None:
                member.task.cancel()
                member.task = None
                self._join(member)
        self._pump()

    @precondition(lambda self: bool(self.zombies))
    @rule()
    def zombie_requests_fail(self) -> None:
        for instance, member_id in self.zombies:
            heartbeat = self.run(
                self.coordinator.heartbeat(HeartbeatRequest(GROUP, 0, member_id, instance))
            )
            assert heartbeat.error_code != ErrorCode.NONE
            commit = self.run(
                self.coordinator.commit_offsets(
                    OffsetCommitRequest(
                        GROUP,
                        self.coordinator.generation_of(GROUP),
                        member_id,
                        instance,
                        [OffsetCommitPartition(TOPIC, 0, 1)],
                    )
                )
            )
            # FENCED while the instance maps to its successor, UNKNOWN once that one is gone too.
            assert commit.partitions[0].error_code != ErrorCode.NONE
            sync = self.run(
                self.coordinator.sync_group(
                    SyncGroupRequest(
                        GROUP,
                        self.coordinator.generation_of(GROUP),
                        member_id,
                        instance,
                        None,
                        None,
                    )
                )
            )
            assert sync.error_code != ErrorCode.NONE

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def no_partition_has_two_owners_in_current_generation(self) -> None:
        current = self.coordinator.generation_of(GROUP)
        seen: dict[TopicPartition, str] = {}
        for member in self.members.values():
            if member.synced_generation != current:
                continue
            for partition in member.owned:
                assert partition not in seen, (
                    f"{partition} owned by {seen[partition]} and {member.instance_id} "
                    f"in generation {current}"
                )
                seen[partition] = member.instance_id

    @invariant()
    def generation_only_grows(self) -> None:
        """Within one coordinator process the generation never goes down; across a crash it
        may fall back to the last generation whose assignment was stored, never below a
        generation any member has synced (Kafka persists the group only at sync)."""
        generation = self.coordinator.generation_of(GROUP)
        assert generation >= self.max_generation
        self.max_generation = generation
        synced = max((m.synced_generation for m in self.members.values()), default=-1)
        self.max_synced_generation = max(self.max_synced_generation, synced)
        assert generation >= self.max_synced_generation

    def teardown(self) -> None:
        try:
            if self.members:
                self._settle_until_stable()
        finally:
            self.run(self.coordinator.close())
            self.loop.run_until_complete(settle())
            self.loop.close()

    def _settle_until_stable(self) -> None:
        """Traffic stops: everyone heartbeats normally until the group converges."""
        for member in self.members.values():
            member.paused = False
        for _ in range(100):
            self._heartbeats()
            self.run(self.clock.advance(1_000))
            self._pump()
            current = self.coordinator.generation_of(GROUP)
            (described,) = self.run(self.coordinator.describe_groups([GROUP]))
            in_group = {m.group_instance_id for m in described.members}
            if (
                described.group_state == "Stable"
                and in_group == set(self.members)
                and all(
                    m.task is None and m.synced_generation == current for m in self.members.values()
                )
            ):
                break
        else:
            raise AssertionError("the group did not converge once traffic stopped")
        owned = [p for m in self.members.values() for p in m.owned]
        assert len(owned) == len(set(owned)), "a partition has two owners at the end"
        metadata = self.run(self.coordinator.topic_metadata())
        assert metadata[TOPIC] == self.partitions
        subscribed = {topic for m in self.members.values() for topic in m.topics}
        expected = {TopicPartition(t, p) for t in subscribed for p in range(metadata[t])}
        assert set(owned) == expected, "every partition is owned once traffic stops"


CooperativeFleet.TestCase.settings = settings(
    max_examples=400,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCooperativeFleet = CooperativeFleet.TestCase
