"""A group member on Kafka's consumer group protocol (KIP-848): ConsumerGroupHeartbeat.

The decisions are consumer_protocol_state.py's; this module sends the heartbeats, runs the
listener's callbacks in the order `reconcile` gives, and commits with the member epoch
(OffsetCommit v9 with member id and epoch, as Kafka's AsyncKafkaConsumer does). It offers
what staticfleet's member process uses of `GroupMember` (start, run, commit,
fetch_committed, close), so the same listener and event log serve both protocols.

One task does everything in order: a heartbeat, then the reconciliation its answer asks
for, then the acknowledging heartbeat at once; so an acknowledgement is never sent before
the callbacks it acknowledges have returned. A callback longer than the broker's session
timeout would expire the session meanwhile: ours commit and return.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from coordinator.client.access import AccessError
from coordinator.client.config import MemberConfig
from coordinator.client.consumer_protocol_state import (
    JOIN_EPOCH,
    UNRELEASED_INSTANCE_ID,
    HeartbeatAnswer,
    InstanceIdWait,
    Outcome,
    Partitions,
    StepKind,
    assigned_partitions,
    close_epoch,
    decide,
    leave_fields,
    new_member_id,
    owned_by_id,
    reconcile,
)
from coordinator.client.listener import RebalanceListener, invoke
from coordinator.client.member import MemberAccessDenied, MemberFailure
from coordinator.client.timing import MonotonicClock, sleep
from coordinator.client.transport import TransportError
from coordinator.clock import Clock
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from coordinator.protocol import TopicPartition
from coordinator.standby import Promoted

logger = logging.getLogger(__name__)


class ConsumerProtocolTransport(Protocol):
    """What this member needs of a transport (KafkaTransport has it)."""

    async def consumer_group_heartbeat(
        self, group_id: str, fields: dict[str, Any]
    ) -> HeartbeatAnswer: ...

    async def topic_ids(self, topics: list[str]) -> dict[str, uuid.UUID]: ...

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse: ...

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse: ...


class ConsumerProtocolError(CoordinatorError):
    """The broker refused the member for good; `kafka_code` is Kafka's error code (the
    KIP-848 codes have no `ErrorCode`)."""

    def __init__(self, kafka_code: int, detail: str) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, detail)
        self.kafka_code = kafka_code

    def __str__(self) -> str:
        return self.detail

    @property
    def unreleased_instance_id(self) -> bool:
        return self.kafka_code == UNRELEASED_INSTANCE_ID


class ConsumerProtocolMember:
    def __init__(
        self,
        transport: ConsumerProtocolTransport,
        config: MemberConfig,
        listener: RebalanceListener,
        *,
        remote_assignor: str | None = None,
        clock: Clock | None = None,
        standby: InstanceIdWait | None = None,
    ) -> None:
        self._transport = transport
        self._config = config
        self._listener = listener
        self._remote_assignor = remote_assignor
        # Heartbeat intervals, backoffs and the session check read it (tests: ManualClock).
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._member_id = new_member_id()
        self._epoch = JOIN_EPOCH
        self._owned: Partitions = frozenset()
        self._interval_ms = config.heartbeat_interval_ms
        self._ids: dict[str, uuid.UUID] = {}
        self._names: dict[uuid.UUID, str] = {}
        self._error: CoordinatorError | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._assigned = asyncio.Event()
        self._reconciling = False
        self._closing = False
        self._last_contact_ms: int | None = None
        self._standby = standby
        # When a standby's join was first refused for its held instance id (its wait's start).
        self._waiting_since_ms: int | None = None
        self.reconciliations = 0

    # ------------------------------------------------------------------ what callers read

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def group_instance_id(self) -> str | None:
        return self._config.group_instance_id

    @property
    def generation_id(self) -> int:
        """The member epoch (the event log's generation on this protocol)."""
        return self._epoch

    @property
    def assignment(self) -> Partitions:
        return self._owned

    @property
    def error(self) -> CoordinatorError | None:
        return self._error

    @property
    def last_contact_ms(self) -> int | None:
        """When (this member's clock) the broker last answered a heartbeat; None: never."""
        return self._last_contact_ms

    @property
    def reconciling(self) -> bool:
        """Moving towards a new assignment (revoking, assigning, acknowledging)."""
        return self._reconciling

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def waiting_for_instance_id(self) -> bool:
        """A standby (InstanceIdWait) whose join the broker refuses while the id is held."""
        return self._waiting_since_ms is not None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, promoted: Promoted | None = None) -> None:
        if promoted is not None:
            raise CoordinatorError(
                ErrorCode.INVALID_REQUEST, "a standby needs our coordinator, not Kafka"
            )
        self._task = asyncio.create_task(self._run(), name=f"consumer-member-{self._label()}")

    async def run(self) -> None:
        """Until closed (returns) or failed (raises the fatal error)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)
        if self._error is not None:
            raise self._error

    async def wait_for_assignment(self, timeout: float | None = None) -> Partitions:  # noqa: ASYNC109
        """The owned partitions once the member has acknowledged a non-empty assignment."""
        await asyncio.wait_for(self._assigned.wait(), timeout)
        return self._owned

    async def close(self, leave: bool | None = None) -> None:
        """Revoke what is owned (the listener commits), then the closing heartbeat: epoch
        -2 for a static member (its restart within the session keeps its partitions), -1
        for a leave. `leave=None` follows the config, as `GroupMember.close`."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        if self._task is not None:
            if not self._reconciling:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._error is None and self._owned:
            owned, self._owned = self._owned, frozenset()
            await invoke(self._listener.on_partitions_revoked, owned)
        should_leave = self._config.leave_on_close if leave is None else leave
        epoch = close_epoch(self._config.group_instance_id is not None, should_leave)
        if epoch is None or self._epoch <= JOIN_EPOCH or self._error is not None:
            return
        fields = leave_fields(self._member_id, self._config.group_instance_id, epoch)
        try:
            answer = await self._transport.consumer_group_heartbeat(self._config.group_id, fields)
            if answer.error_code:
                logger.warning("%s: leave (epoch %d) answered %s", self._label(), epoch, answer)
        except (TransportError, CoordinatorError, AccessError) as error:
            logger.warning("%s: leave (epoch %d) not sent: %s", self._label(), epoch, error)

    # ------------------------------------------------------------------ offsets

    async def commit(
        self, offsets: Mapping[TopicPartition, int], metadata: str | None = None
    ) -> None:
        if self._error is not None:
            raise self._error
        if not offsets:
            return
        request = OffsetCommitRequest(
            group_id=self._config.group_id,
            generation_id=self._epoch,
            member_id=self._member_id,
            group_instance_id=self._config.group_instance_id,
            partitions=[
                OffsetCommitPartition(tp.topic, tp.partition, offset, metadata)
                for tp, offset in sorted(offsets.items())
            ],
        )
        response = await self._transport.commit_offsets(request)
        code = response.error_code
        if code is ErrorCode.NONE:
            code = next(
                (p.error_code for p in response.partitions if p.error_code is not ErrorCode.NONE),
                ErrorCode.NONE,
            )
        if code is not ErrorCode.NONE:
            raise CoordinatorError(code, f"offset commit by {self._label()} failed")

    async def fetch_committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        response = await self._transport.fetch_offsets(
            OffsetFetchRequest(
                group_id=self._config.group_id,
                partitions=[(tp.topic, tp.partition) for tp in wanted],
                member_id=self._member_id,
                generation_id=self._epoch,
                group_instance_id=self._config.group_instance_id,
            )
        )
        if response.error_code is not ErrorCode.NONE:
            raise CoordinatorError(response.error_code, f"offset fetch by {self._label()} failed")
        return {
            TopicPartition(p.topic, p.partition): p.committed_offset
            for p in response.partitions
            if p.error_code is ErrorCode.NONE and p.committed_offset >= 0
        }

    async def lose_partitions_if_session_expired(self) -> None:
        """Unheard by the broker for a session timeout (a stop, a stall): the partitions may
        be another member's now; lose them before another record is processed, and rejoin.
        The member's `session_timeout_ms` stands in for the broker's group-level session
        (never longer by default: 10 s against 45 s), so it errs on the safe side."""
        if not self._owned or self._last_contact_ms is None or self._reconciling:
            return
        if self._clock.now_ms() - self._last_contact_ms <= self._config.session_timeout_ms:
            return
        logger.warning("%s: no contact with the broker for a session timeout", self._label())
        await self._lose("no contact for a session timeout")
        self._wake.set()

    # ------------------------------------------------------------------ the heartbeat task

    async def _run(self) -> None:
        try:
            while not self._closing:
                # A wake set from now on (a lost session, close) cuts the next sleep short.
                self._wake.clear()
                answer = await self._heartbeat()
                if answer is None:  # not sent (transport): back off, then again
                    await self._sleep(self._config.retry_backoff_ms)
                    continue
                decision = decide(answer, self._wait_left_ms())
                if decision.outcome is Outcome.WAIT:
                    await self._wait_for_instance_id(decision.detail)
                    continue
                if decision.outcome is Outcome.FATAL:
                    self._error = ConsumerProtocolError(
                        answer.error_code, f"{self._label()}: {decision.detail}"
                    )
                    return
                if decision.outcome is Outcome.REJOIN:
                    logger.info("%s: rejoining: %s", self._label(), decision.detail)
                    await self._lose(decision.detail)
                    continue
                if decision.outcome is Outcome.RETRY:
                    logger.info("%s: heartbeat: %s", self._label(), decision.detail)
                    await self._sleep(self._config.retry_backoff_ms)
                    continue
                if self._waiting_since_ms is not None:
                    logger.warning(
                        "%s: joined after waiting %d ms for the instance id",
                        self._label(),
                        self._clock.now_ms() - self._waiting_since_ms,
                    )
                    self._waiting_since_ms = None
                    self._standby = None  # a member now: a later refusal is fatal again
                self._epoch = answer.member_epoch
                self._interval_ms = answer.heartbeat_interval_ms
                if answer.assignment is not None and await self._reconcile(answer.assignment):
                    continue  # acknowledge at once
                await self._sleep(self._interval_ms)
        except AccessError as error:
            self._error = MemberAccessDenied(error)
        except Exception as error:  # a bug here: fatal, with its cause, not a silent end
            logger.exception("%s: the heartbeat task failed", self._label())
            self._error = MemberFailure(f"the consumer-protocol heartbeat task failed: {error!r}")

    def _wait_left_ms(self) -> int | None:
        """A standby's time left to wait for its instance id (None: not a standby)."""
        if self._standby is None:
            return None
        if self._waiting_since_ms is None:
            return self._standby.limit_ms
        return self._standby.limit_ms - (self._clock.now_ms() - self._waiting_since_ms)

    async def _wait_for_instance_id(self, reason: str) -> None:
        """A standby's join refused (UNRELEASED_INSTANCE_ID): join again after `retry_ms`.
        Logged once: the retries are the standby's normal state until its member leaves."""
        assert self._standby is not None
        # The refusal is the broker's answer: a standby hearing it is in contact (readiness).
        self._last_contact_ms = self._clock.now_ms()
        if self._waiting_since_ms is None:
            self._waiting_since_ms = self._clock.now_ms()
            logger.warning(
                "%s: standby: the instance id is held (%s); joining again every %d ms for up "
                "to %d ms",
                self._label(),
                reason,
                self._standby.retry_ms,
                self._standby.limit_ms,
            )
        await self._sleep(self._standby.retry_ms)

    async def _heartbeat(self) -> HeartbeatAnswer | None:
        topics = list(self._config.topics)
        if self._epoch == JOIN_EPOCH and any(t not in self._ids for t in topics):
            await self._learn_topic_ids()
        fields = {
            "member_id": self._member_id,
            "member_epoch": self._epoch,
            "instance_id": self._config.group_instance_id,
            "rack_id": None,
            "rebalance_timeout_ms": self._config.rebalance_timeout_ms,
            "subscribed_topic_names": topics,
            "subscribed_topic_regex": None,
            "server_assignor": self._remote_assignor,
            "topic_partitions": owned_by_id(self._owned, self._ids),
        }
        try:
            answer = await self._transport.consumer_group_heartbeat(self._config.group_id, fields)
        except TransportError as error:
            logger.info("%s: heartbeat not sent: %s", self._label(), error)
            return None
        if answer.error_code == 0:
            self._last_contact_ms = self._clock.now_ms()
        return answer

    async def _reconcile(self, assignment: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]) -> bool:
        """Run the steps towards `assignment`; True when an acknowledgement is due."""
        target = assigned_partitions(assignment, self._names)
        if target is None:
            await self._learn_topic_ids(force=True)
            target = assigned_partitions(assignment, self._names)
            if target is None:  # a topic deleted meanwhile: the next answer says more
                return False
        steps = reconcile(self._owned, target)
        self._reconciling = True
        try:
            for step in steps:
                if step.kind is StepKind.REVOKE:
                    await invoke(self._listener.on_partitions_revoked, step.partitions)
                    self._owned = self._owned - step.partitions
                elif step.kind is StepKind.ASSIGN:
                    self._owned = self._owned | step.partitions
                    await invoke(self._listener.on_partitions_assigned, step.partitions)
        finally:
            self._reconciling = False
        if steps:
            self.reconciliations += 1
        if self._owned:
            self._assigned.set()
        return bool(steps)

    async def _lose(self, reason: str) -> None:
        """Drop the partitions uncommitted and join again with epoch 0 (same member id)."""
        owned, self._owned = self._owned, frozenset()
        self._epoch = JOIN_EPOCH
        self._assigned.clear()
        if owned:
            logger.warning("%s: lost %d partition(s): %s", self._label(), len(owned), reason)
            await invoke(self._listener.on_partitions_lost, owned)

    async def _learn_topic_ids(self, force: bool = False) -> None:
        wanted = [t for t in self._config.topics if force or t not in self._ids]
        try:
            self._ids.update(await self._transport.topic_ids(wanted))
        except TransportError as error:
            logger.info("%s: topic ids not read: %s", self._label(), error)
        self._names = {v: k for k, v in self._ids.items()}

    async def _sleep(self, delay_ms: int) -> None:
        """`delay_ms` on the member's clock, or less when woken."""
        woken = asyncio.ensure_future(self._wake.wait())
        timer = asyncio.ensure_future(sleep(self._clock, delay_ms))
        try:
            await asyncio.wait({woken, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            timer.cancel()

    def _label(self) -> str:
        who = self._config.group_instance_id or self._member_id
        return f"{who} (group {self._config.group_id!r}, epoch {self._epoch})"
