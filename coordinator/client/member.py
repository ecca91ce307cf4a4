"""`GroupMember`: the consumer side of the group protocol (Kafka's ConsumerCoordinator).

One member, two tasks:

* the *main task* owns the member's state and runs every rebalance: prepare (eager
  revoke), JoinGroup, the leader's assignment, SyncGroup, and the listener callbacks. All
  listener callbacks run here, one at a time, so ownership changes are never concurrent;
* the *heartbeat task* keeps the session alive while the member is completing a rebalance
  or stable. It changes nothing itself: it records what the coordinator said (rebalance,
  stale generation, unknown member, session lost) and wakes the main task, or declares a
  fatal error.

The member holds one `MemberState` and changes it only through the transition table of
`member_state.py` (unjoined -> preparing_rebalance -> completing_rebalance -> stable, back to
preparing_rebalance on any rejoin; leaving -> closed on close; fatal on an error retrying
cannot fix). Time comes from an injected `Clock` (`timing.py`). See docs/client.md for the
state and error tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Coroutine, Iterable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from coordinator.assignors import PartitionAssignor, get_assignor
from coordinator.client.access import AccessError
from coordinator.client.backoff import Backoff
from coordinator.client.config import MemberConfig
from coordinator.client.leader import assign, assignments_by_instance
from coordinator.client.listener import NoopRebalanceListener, Partitions, RebalanceListener, invoke
from coordinator.client.member_state import (
    Identity,
    MemberState,
    Reset,
    is_active,
    is_stale,
    transition,
)
from coordinator.client.probing import rejoin_reason
from coordinator.client.strategy import PROTOCOL_TYPE, AssignorFactory, build_strategy
from coordinator.client.timing import MonotonicClock, sleep
from coordinator.client.transport import RequestTooLargeError, Transport, TransportError
from coordinator.client.validation import assignment_problem
from coordinator.clock import Clock
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.messages import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from coordinator.protocol import Assignment, ProtocolError, TopicPartition, decode_assignment
from coordinator.standby import Promoted

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Errors after which retrying cannot help: the member stops and says why.
FATAL_ERRORS = frozenset(
    {
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode.INVALID_SESSION_TIMEOUT,
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)


class MemberFailure(CoordinatorError):
    """The member itself failed (a bug, e.g. in an assignor on the leader), not the
    coordinator; `code` is UNKNOWN_SERVER_ERROR so callers need only one except clause."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, detail)

    def __str__(self) -> str:
        return f"the member failed: {self.detail} (see its log)"


class MemberAccessDenied(CoordinatorError):
    """A Kafka cluster refused the member's access (`access`: bad credentials, an untrusted
    certificate, a missing ACL ...), or the member refused our coordinator's certificate.
    Fatal: a retry cannot fix it, and a member that retried would hide it (docs/kafka.md,
    "Secured clusters"; docs/server.md, "TLS")."""

    def __init__(self, access: AccessError) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, str(access))
        self.access = access
        self.__cause__ = access

    def __str__(self) -> str:
        return f"{self.access.reason}: {self.access}"


class MemberClosedError(RuntimeError):
    """The member was closed; it will not be assigned anything again."""


class _Aborted(Exception):
    """The main task must stop now (fatal error or close)."""


class _Step(StrEnum):
    """What one join+sync round ended with."""

    STABLE = "stable"
    RETRY_NOW = "retry_now"
    RETRY_LATER = "retry_later"


class GroupMember:
    def __init__(
        self,
        transport: Transport,
        config: MemberConfig,
        listener: RebalanceListener | None = None,
        *,
        assignor_factory: AssignorFactory = get_assignor,
        clock: Clock | None = None,
    ) -> None:
        self._transport = transport
        # Heartbeats, backoffs and the session check all read this clock (tests: ManualClock).
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._config = config
        self._listener: RebalanceListener = listener or NoopRebalanceListener()
        self._strategy = build_strategy(config, assignor_factory)

        self._member_id = UNKNOWN_MEMBER_ID
        self._generation_id = NO_GENERATION
        self._protocol_name: str | None = None
        self._leader_id = ""
        self._owned: Partitions = frozenset()
        # KIP-792: the generation in which the owned partitions were assigned, sent with
        # them so the leader can tell a stale claim from a current one.
        self._owned_generation = NO_GENERATION
        # What this member assigned, by instance id, the last time it led (see leader.assign).
        self._leader_memory: dict[str, bytes] = {}
        self._state = MemberState.UNJOINED
        self._error: CoordinatorError | None = None

        # Requests from the heartbeat task (or elsewhere) to the main task.
        self._rejoin_reason: str | None = None
        self._reset = Reset.NONE

        self._rejoin_event = asyncio.Event()
        self._stable_event = asyncio.Event()
        self._abort_event = asyncio.Event()
        self._done_event = asyncio.Event()
        self._main_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._last_contact_ms = 0
        # Since when the coordinator refuses our credentials (None: it accepts them).
        self._unauthorized_since_ms: int | None = None
        self._rebalances = 0
        # Rejoins begun (a part of `Identity`): an answer sent before one began is stale.
        self._rejoins = 0
        # Set by start() for a promoted hot standby: its first step is a sync, not a join.
        self._promoted: Promoted | None = None

    # ------------------------------------------------------------------ public API

    @property
    def config(self) -> MemberConfig:
        return self._config

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def group_instance_id(self) -> str | None:
        return self._config.group_instance_id

    @property
    def generation_id(self) -> int:
        return self._generation_id

    @property
    def assignment(self) -> Partitions:
        """The partitions this member owns right now."""
        return self._owned

    @property
    def state(self) -> MemberState:
        return self._state

    @property
    def protocol_name(self) -> str | None:
        """The assignor (protocol) the group selected in the last join."""
        return self._protocol_name

    @property
    def is_leader(self) -> bool:
        return bool(self._member_id) and self._leader_id == self._member_id

    @property
    def cooperative(self) -> bool:
        """True when this member follows the cooperative protocol (KIP-429)."""
        return self._strategy.cooperative

    @property
    def error(self) -> CoordinatorError | None:
        """The fatal error that stopped this member, if any."""
        return self._error

    @property
    def last_contact_ms(self) -> int:
        """When (this member's clock) the coordinator last answered: a session counts from it."""
        return self._last_contact_ms

    @property
    def rebalances(self) -> int:
        """Completed join+sync rounds (for tests and metrics)."""
        return self._rebalances

    def assignor(self, name: str) -> PartitionAssignor:
        """The assignor instance this member uses for a protocol name (tests, diagnostics)."""
        return self._strategy.assignors[name]

    async def start(self, promoted: Promoted | None = None) -> None:
        """Start joining in the background; returns at once (see `wait_for_assignment`).

        Joining is a long-poll that can last the coordinator's initial rebalance delay or
        a whole rebalance timeout, so it never blocks the caller here.

        `promoted`: this process was a hot standby and the coordinator made it this member
        (`coordinator.client.standby`): it syncs at once in the current generation with the
        member id it was given and takes the member's assignment, with no JoinGroup and no
        rebalance; should the sync fail, it rejoins as any member would.
        """
        if self._main_task is not None:
            raise RuntimeError("this member was already started; create a new one to restart")
        self._note_contact()
        if promoted is None:
            self._request_rejoin("the member is starting")
        else:
            if promoted.instance_id != self._config.group_instance_id:
                raise ValueError(
                    f"promoted to {promoted.instance_id!r} but configured as "
                    f"{self._config.group_instance_id!r}"
                )
            self._promoted = promoted
        self._main_task = asyncio.create_task(self._run(), name=f"member-{self._label()}")
        self._heartbeat_task = asyncio.create_task(
            self._heartbeat_loop(), name=f"member-heartbeat-{self._label()}"
        )

    async def wait_for_assignment(self, timeout: float | None = None) -> Partitions:  # noqa: ASYNC109
        """Wait (up to `timeout` seconds) until the member is stable; its assignment.

        Raises the fatal error if the member failed, `MemberClosedError` if it was closed,
        `TimeoutError` on timeout.
        """
        stable = asyncio.ensure_future(self._stable_event.wait())
        done = asyncio.ensure_future(self._done_event.wait())
        try:
            await asyncio.wait({stable, done}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stable.cancel()
            done.cancel()
        self.poll()
        if self._state is not MemberState.STABLE:
            raise TimeoutError(f"member {self._label()} not stable after {timeout}s")
        return self._owned

    def poll(self) -> Partitions:
        """The current assignment; raises the fatal error once the member has one."""
        if self._error is not None:
            raise self._error
        if self._state is MemberState.CLOSED:
            raise MemberClosedError(f"member {self._label()} is closed")
        return self._owned

    async def run(self) -> None:
        """Wait until the member is closed (returns) or fails (raises its fatal error)."""
        await self._done_event.wait()
        if self._error is not None:
            raise self._error

    async def commit(
        self, offsets: Mapping[TopicPartition, int], metadata: str | None = None
    ) -> None:
        """Commit offsets (the next record to read, as Kafka) with this member's identity.

        Raises `CoordinatorError` when the coordinator refuses (a fenced instance also
        makes the member fatal) and `TransportError` when it cannot be reached.
        """
        if self._error is not None:
            raise self._error
        if not offsets:
            return
        if not self._may_commit():
            # Kafka's client refuses too (RebalanceInProgressException): a commit sent now
            # carries an identity the rejoin is about to replace.
            raise CoordinatorError(
                ErrorCode.REBALANCE_IN_PROGRESS,
                f"offset commit by {self._label()} not sent: the member is rebalancing "
                f"({self._state}); commit again once it is stable",
            )
        sent = self._identity()
        request = OffsetCommitRequest(
            group_id=self._config.group_id,
            generation_id=sent.generation_id,
            member_id=sent.member_id,
            group_instance_id=self._config.group_instance_id,
            partitions=[
                OffsetCommitPartition(tp.topic, tp.partition, offset, metadata)
                for tp, offset in sorted(offsets.items())
            ],
        )
        try:
            response = await self._within_session(self._transport.commit_offsets(request))
        except CoordinatorError as error:
            raise self._on_request_error(error.code, "offset commit", sent) or error from None
        except TransportError:
            # Unanswered past the session: the partitions go first, before the caller hears
            # of the failure and logs it (a woken zombie's first act is to give them up).
            await self.lose_partitions_if_session_expired()
            raise
        code = response.error_code
        if code is ErrorCode.NONE:
            code = next(
                (p.error_code for p in response.partitions if p.error_code is not ErrorCode.NONE),
                ErrorCode.NONE,
            )
        if code is not ErrorCode.NONE:
            raise self._on_request_error(code, "offset commit", sent) or CoordinatorError(
                code, f"offset commit by {self._label()} failed"
            )

    async def lose_partitions_if_session_expired(self) -> None:
        """Call before processing records. A member unheard by the coordinator for a session
        timeout (its process stopped, starved, or cut off) may have had its partitions given
        to another member: it loses them now, before it processes another record, rather than
        when its heartbeat task runs. A process woken from SIGSTOP runs its poll loop first,
        and a heartbeat to a stalled coordinator hangs for the request timeout: until then
        this member and the partitions' new owner would both process them (found by the
        fault soak, docs/soak.md)."""
        if not self._owned:
            return
        if self._reset >= Reset.PARTITIONS:
            # An answer (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION) already said the partitions
            # are gone; the main task may not have run its rejoin yet (Kafka's poll rejoins,
            # and so loses them, before it returns another record).
            reason = "the coordinator no longer knows this member's generation"
        elif self._state is MemberState.STABLE and self._session_expired():
            logger.warning("member %s: no contact for a session timeout", self._label())
            self._reset_to(Reset.GENERATION)
            reason = "no contact with the coordinator for a session timeout"
        else:
            return
        owned, self._owned = self._owned, frozenset()
        self._request_rejoin(reason)
        await invoke(self._listener.on_partitions_lost, owned)

    async def fetch_committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Committed offsets of `partitions`; partitions with none are absent."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        sent = self._identity()
        request = OffsetFetchRequest(
            group_id=self._config.group_id,
            partitions=[(tp.topic, tp.partition) for tp in wanted],
            member_id=sent.member_id or None,
            generation_id=sent.generation_id,
            group_instance_id=self._config.group_instance_id,
        )
        response = await self._transport.fetch_offsets(request)
        if response.error_code is not ErrorCode.NONE:
            code = response.error_code
            raise self._on_request_error(code, "offset fetch", sent) or CoordinatorError(
                code, f"offset fetch by {self._label()} failed"
            )
        return {
            TopicPartition(p.topic, p.partition): p.committed_offset
            for p in response.partitions
            if p.error_code is ErrorCode.NONE and p.committed_offset >= 0
        }

    async def close(self, leave: bool | None = None) -> None:
        """Stop: revoke owned partitions (the listener commits), then LeaveGroup if asked.

        `leave=None` follows the config (KIP-345: static members do not leave, so their
        restart within the session timeout causes no rebalance).
        """
        if self._main_task is not None and asyncio.current_task() is self._main_task:
            raise RuntimeError(
                "close() called from a rebalance listener would wait for itself; close the "
                "member from the application's own task"
            )
        if self._state in (MemberState.LEAVING, MemberState.CLOSED):
            await self._done_event.wait()
            return
        self._state = transition(self._state, MemberState.LEAVING)
        self._abort_event.set()
        await self._stop_tasks()
        if self._error is None and self._owned:
            owned = self._owned
            if self._reset >= Reset.PARTITIONS or self._session_expired():
                await invoke(self._listener.on_partitions_lost, owned)
            else:
                await invoke(self._listener.on_partitions_revoked, owned)
            self._owned = frozenset()
        should_leave = self._config.leave_on_close if leave is None else leave
        # After a fatal error the member still leaves (so a dynamic member's partitions move
        # at once), except when fenced: the instance id belongs to another process now.
        fenced = self._error is not None and self._error.code is ErrorCode.FENCED_INSTANCE_ID
        if should_leave and not fenced and self._member_id:
            await self._leave_group()
        # Closed even after a fatal error (`error` still says why): a closed member is done.
        self._state = transition(self._state, MemberState.CLOSED)
        self._stable_event.clear()
        self._done_event.set()

    # ------------------------------------------------------------------ main task

    async def _run(self) -> None:
        try:
            if self._promoted is not None:
                await self._take_over(self._promoted)
            while True:
                await self._interruptible(self._rejoin_event.wait())
                await self._join_until_stable()
        except _Aborted:
            pass
        except AccessError as error:
            self._fail(MemberAccessDenied(error))
        except Exception as error:  # a bug must stop the member loudly, not hang it
            logger.exception("member %s loop crashed", self._label())
            self._fail(MemberFailure(f"{type(error).__name__}: {error}"))
        finally:
            if self._error is not None:
                await self._after_fatal()

    async def _take_over(self, promoted: Promoted) -> None:
        """A promoted standby's first step: SyncGroup in the current generation (the
        coordinator answers a Stable group's sync with the member's stored assignment)."""
        self._promoted = None
        joined = JoinGroupResponse(
            ErrorCode.NONE,
            generation_id=promoted.generation_id,
            protocol_type=promoted.protocol_type,
            protocol_name=promoted.protocol_name,
            leader=promoted.leader,
            # The group's assignment stands; even as its leader, there is nothing to assign.
            skip_assignment=True,
            member_id=promoted.member_id,
        )
        step = await self._sync(joined)
        if step is not _Step.STABLE:
            self._request_rejoin("the takeover sync did not complete; rejoining")

    async def _after_fatal(self) -> None:
        if self._heartbeat_task is not None and self._heartbeat_task is not asyncio.current_task():
            self._heartbeat_task.cancel()
        self._enter_fatal()
        self._stable_event.clear()
        if self._owned:
            # The partitions may already belong to another process (fencing): lost, not
            # revoked, so the application does not commit them.
            owned, self._owned = self._owned, frozenset()
            await invoke(self._listener.on_partitions_lost, owned)
        self._done_event.set()

    async def _join_until_stable(self) -> None:
        backoff = Backoff(self._config.retry_backoff_ms, self._config.retry_backoff_max_ms)
        while True:
            await self._prepare_join()
            step = await self._join_and_sync()
            if step is _Step.STABLE:
                return
            if step is _Step.RETRY_LATER:
                await self._interruptible(sleep(self._clock, backoff.next_delay_ms()))

    async def _prepare_join(self) -> None:
        """Kafka's onJoinPrepare: settle what happens to owned partitions before joining."""
        self._rejoin_event.clear()
        self._enter(MemberState.PREPARING_REBALANCE)
        self._rejoins += 1
        self._stable_event.clear()
        if self._owned and self._session_expired():
            logger.warning("member %s: no contact for a session timeout", self._label())
            self._reset_to(Reset.GENERATION)
        reset, self._reset = self._reset, Reset.NONE
        if reset >= Reset.MEMBER_ID:
            self._member_id = UNKNOWN_MEMBER_ID
        if reset >= Reset.GENERATION:
            self._generation_id = NO_GENERATION
            self._owned_generation = NO_GENERATION
        if reset >= Reset.PARTITIONS and self._owned:
            owned, self._owned = self._owned, frozenset()
            await invoke(self._listener.on_partitions_lost, owned)
        if not self._strategy.cooperative and self._owned:
            # Eager: give up everything before joining; the listener commits now, while
            # this member's generation is still the current one.
            await invoke(self._listener.on_partitions_revoked, self._owned)
            self._owned = frozenset()

    async def _join_and_sync(self) -> _Step:
        reason = self._rejoin_reason or "rejoining"
        self._rejoin_reason = None
        request = JoinGroupRequest(
            group_id=self._config.group_id,
            session_timeout_ms=self._config.session_timeout_ms,
            rebalance_timeout_ms=self._config.rebalance_timeout_ms,
            member_id=self._member_id,
            group_instance_id=self._config.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=self._strategy.join_protocols(
                self._config.topics,
                self._owned,
                self._owned_generation if self._owned else self._generation_id,
            ),
            reason=reason,
            client_id=self._config.client_id,
            client_host=self._config.client_host,
        )
        try:
            response = await self._interruptible(self._transport.join_group(request))
        except TransportError as error:
            logger.warning("member %s: join failed, will retry: %s", self._label(), error)
            return _Step.RETRY_LATER
        except RequestTooLargeError as error:
            return self._too_large(error, "join")
        except CoordinatorError as error:
            return self._on_join_error(error.code, None, error.detail)
        self._note_contact()
        if response.error_code is not ErrorCode.NONE:
            return self._on_join_error(response.error_code, response, "")
        return await self._sync(response)

    def _on_join_error(
        self, code: ErrorCode, response: JoinGroupResponse | None, detail: str
    ) -> _Step:
        if code is ErrorCode.MEMBER_ID_REQUIRED and response is not None:
            # KIP-394: the coordinator handed us an id; join again with it at once.
            self._member_id = response.member_id
            self._rejoin_reason = "rejoining with the member id the coordinator gave (KIP-394)"
            return _Step.RETRY_NOW
        if code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL:
            self._fail(
                CoordinatorError(
                    code,
                    f"member {self._label()} offered {list(self._strategy.assignors)} "
                    f"(rebalance_protocol {self._config.rebalance_protocol.value!r}), which "
                    "shares no protocol with the group's members. A cooperative member cannot "
                    "join a group whose members are eager: bounce the group to 'compatible' "
                    "first (KIP-429 two-bounce upgrade)",
                )
            )
            raise _Aborted
        return self._on_group_error(code, "join", detail)

    async def _sync(self, joined: JoinGroupResponse) -> _Step:
        self._member_id = joined.member_id
        self._generation_id = joined.generation_id
        self._protocol_name = joined.protocol_name
        self._leader_id = joined.leader
        self._enter(MemberState.COMPLETING_REBALANCE)
        name = joined.protocol_name or ""
        assignor = self._strategy.assignors.get(name)
        if assignor is None:
            self._fail(
                CoordinatorError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"the coordinator selected protocol {name!r}, which this member did not offer",
                )
            )
            raise _Aborted
        assignments: list[SyncGroupRequestAssignment] = []
        # Every member reads the topic metadata: the leader to assign, and each member to
        # check what it is given (validation.py).
        try:
            metadata = await self._interruptible(self._transport.topic_metadata())
        except TransportError as error:
            logger.warning("member %s: no topic metadata, will rejoin: %s", self._label(), error)
            return _Step.RETRY_LATER
        except CoordinatorError as error:
            step = self._on_group_error(error.code, "topic metadata", error.detail)
            return _Step.RETRY_LATER if step is _Step.RETRY_NOW else step
        if self.is_leader and not joined.skip_assignment:
            assignments = assign(assignor, joined.members, metadata, self._leader_memory)
            self._leader_memory = assignments_by_instance(joined.members, assignments)
        # KIP-814: a static leader that rejoined without a rebalance syncs with nothing and
        # takes its cached assignment, like any follower.
        request = SyncGroupRequest(
            group_id=self._config.group_id,
            generation_id=self._generation_id,
            member_id=self._member_id,
            group_instance_id=self._config.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=joined.protocol_name,
            assignments=assignments,
        )
        try:
            response = await self._interruptible(self._transport.sync_group(request))
        except TransportError as error:
            logger.warning("member %s: sync failed, will rejoin: %s", self._label(), error)
            return _Step.RETRY_LATER
        except RequestTooLargeError as error:
            return self._too_large(error, "sync")
        except CoordinatorError as error:
            return self._on_group_error(error.code, "sync", error.detail)
        self._note_contact()
        if response.error_code is not ErrorCode.NONE:
            return self._on_group_error(response.error_code, "sync", "")
        try:
            assignment = (
                decode_assignment(response.assignment)
                if response.assignment
                else Assignment(partitions=())
            )
        except ProtocolError as error:
            logger.error("member %s: unreadable assignment, rejoining: %s", self._label(), error)
            return _Step.RETRY_LATER
        problem = assignment_problem(assignment, self._config.topics, metadata)
        if problem is not None:
            logger.error(
                "member %s: the leader's assignment for generation %d is invalid (%s); "
                "ignoring it and rejoining",
                self._label(),
                self._generation_id,
                problem,
            )
            self._rejoin_reason = f"invalid assignment from the leader: {problem}"
            return _Step.RETRY_LATER
        await self._on_join_complete(
            assignor, assignment, skipped_assignment=self.is_leader and joined.skip_assignment
        )
        return _Step.STABLE

    async def _on_join_complete(
        self, assignor: PartitionAssignor, assignment: Assignment, *, skipped_assignment: bool
    ) -> None:
        """Kafka's onJoinComplete: apply the new assignment and tell the listener."""
        assignor.on_assignment(assignment, self._generation_id)
        # Checked by assignment_problem before we get here: only subscribed topics.
        new = frozenset(assignment.partitions)
        revoked: Partitions = frozenset()
        if self._strategy.cooperative:
            revoked = self._owned - new
            added = new - self._owned
            if revoked:
                await invoke(self._listener.on_partitions_revoked, revoked)
        else:
            added = new
        self._owned = new
        self._owned_generation = self._generation_id
        self._rebalances += 1
        await invoke(self._listener.on_partitions_assigned, added)
        if revoked:
            # KIP-429: what we gave up can only be handed over in a follow-up rebalance.
            self._request_rejoin(
                f"cooperative follow-up after revoking {len(revoked)} partition(s)"
            )
        probing = rejoin_reason(assignor, skipped_assignment_as_leader=skipped_assignment)
        if probing is not None:
            self._request_rejoin(probing)
        self._enter(MemberState.STABLE)
        self._stable_event.set()
        logger.info(
            "member %s stable in generation %d with %d partition(s)",
            self._label(),
            self._generation_id,
            len(self._owned),
        )

    def _too_large(self, error: RequestTooLargeError, what: str) -> _Step:
        # Exiting would only restart the process into the same refusal (a crash loop);
        # staying up keeps the member's identity and says what to change.
        logger.error("member %s: %s refused, will retry: %s", self._label(), what, error)
        return _Step.RETRY_LATER

    def _on_group_error(self, code: ErrorCode, what: str, detail: str) -> _Step:
        """Errors JoinGroup and SyncGroup share with the heartbeat."""
        logger.info("member %s: %s returned %s %s", self._label(), what, code.name, detail)
        if self._retry_authorization(code, what):
            return _Step.RETRY_LATER
        if code in FATAL_ERRORS:
            self._fail(CoordinatorError(code, detail or f"{what} by {self._label()}"))
            raise _Aborted
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset_to(Reset.MEMBER_ID)
            self._rejoin_reason = f"{what} returned UNKNOWN_MEMBER_ID"
            return _Step.RETRY_NOW
        if code is ErrorCode.ILLEGAL_GENERATION:
            self._reset_to(Reset.GENERATION)
            self._rejoin_reason = f"{what} returned ILLEGAL_GENERATION"
            return _Step.RETRY_NOW
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            self._rejoin_reason = f"{what} returned REBALANCE_IN_PROGRESS"
            return _Step.RETRY_NOW
        return _Step.RETRY_LATER

    # ------------------------------------------------------------------ heartbeat task

    async def _heartbeat_loop(self) -> None:
        interval_ms = self._config.heartbeat_interval_ms
        backoff = Backoff(self._config.retry_backoff_ms, self._config.retry_backoff_max_ms)
        delay_ms = interval_ms
        while not self._abort_event.is_set():
            await sleep(self._clock, delay_ms)
            delay_ms = interval_ms
            if self._state not in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE):
                continue
            sent = self._identity()
            sent_ms = self._clock.now_ms()
            request = HeartbeatRequest(
                group_id=self._config.group_id,
                generation_id=sent.generation_id,
                member_id=sent.member_id,
                group_instance_id=self._config.group_instance_id,
            )
            try:
                code = (await self._transport.heartbeat(request)).error_code
            except TransportError as error:
                logger.debug("member %s: heartbeat failed: %s", self._label(), error)
                if self._state is MemberState.STABLE and self._session_expired():
                    self._request_rejoin("no contact with the coordinator for a session timeout")
                delay_ms = min(interval_ms, backoff.next_delay_ms())
                continue
            except CoordinatorError as error:
                code = error.code
            except AccessError as error:
                self._fail(MemberAccessDenied(error))
                return
            except Exception:  # a transport bug must not silently end the heartbeats
                logger.exception("member %s: heartbeat crashed; retrying", self._label())
                delay_ms = max(interval_ms, backoff.next_delay_ms())
                continue
            backoff.reset()
            if is_stale(sent, self._identity()):
                continue
            self._on_heartbeat_result(code, sent_ms)

    def _on_heartbeat_result(self, code: ErrorCode, sent_ms: int) -> None:
        if code is ErrorCode.NONE:
            self._note_contact(sent_ms)
            return
        if self._retry_authorization(code, "heartbeat"):
            if self._state is MemberState.STABLE and self._session_expired():
                # The coordinator has not heard from us for a session: as when unreachable.
                self._request_rejoin("no accepted heartbeat for a session timeout")
            return
        if code in FATAL_ERRORS:
            self._fail(CoordinatorError(code, f"heartbeat by {self._label()}"))
            return
        if self._state is not MemberState.STABLE:
            # Mid-rebalance the SyncGroup answer decides; Kafka ignores these too.
            return
        self._note_contact(sent_ms)
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            self._request_rejoin("heartbeat returned REBALANCE_IN_PROGRESS")
        elif code is ErrorCode.ILLEGAL_GENERATION:
            self._reset_to(Reset.GENERATION)
            self._request_rejoin("heartbeat returned ILLEGAL_GENERATION")
        elif code is ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset_to(Reset.MEMBER_ID)
            self._request_rejoin("heartbeat returned UNKNOWN_MEMBER_ID")
        else:
            logger.info("member %s: heartbeat returned %s; retrying", self._label(), code.name)

    # ------------------------------------------------------------------ helpers

    def _note_contact(self, sent_ms: int | None = None) -> None:
        """The coordinator answered (so it also accepted our credentials). A heartbeat's
        answer counts from when it was sent: the coordinator heard it no earlier, and counts
        the session from then; counting from the answer's arrival would let a member behind
        a slow network keep partitions the coordinator has already given away (the soak's
        network delay, docs/soak.md)."""
        at = self._clock.now_ms() if sent_ms is None else sent_ms
        self._last_contact_ms = max(self._last_contact_ms, at)
        self._unauthorized_since_ms = None

    async def _within_session(self, request: Awaitable[T]) -> T:
        """Await `request` no longer than the member's session lasts (TransportError after):
        past it the partitions may be another member's, and a caller blocked on the answer
        (the poll loop in a commit) could not lose them. A request cut off by a dropped link
        otherwise waits for TCP's retransmissions, seconds after the link is back."""
        answer = asyncio.ensure_future(request)
        # Heartbeats answered meanwhile extend the session: wait again until it lapses.
        while not answer.done() and not self._session_expired():
            left_ms = self._last_contact_ms + self._config.session_timeout_ms - self._clock.now_ms()
            lapse = asyncio.ensure_future(sleep(self._clock, left_ms + 1))
            try:
                await asyncio.wait({answer, lapse}, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                answer.cancel()  # the caller was cancelled: so is its request
                raise
            finally:
                lapse.cancel()
        if not answer.done():
            answer.cancel()
            raise TransportError(
                f"no answer within {self._label()}'s session timeout "
                f"({self._config.session_timeout_ms} ms since its last contact)"
            )
        return answer.result()

    def _retry_authorization(self, code: ErrorCode, what: str) -> bool:
        """True while a refused token should be retried: a restarting operator refuses it
        until it registers the group's tokens again. Fatal once it lasts longer than
        `authorization_retry_ms`."""
        if code is not ErrorCode.GROUP_AUTHORIZATION_FAILED:
            return False
        now = self._clock.now_ms()
        if self._unauthorized_since_ms is None:
            self._unauthorized_since_ms = now
        refused_for_ms = now - self._unauthorized_since_ms
        if refused_for_ms >= self._config.authorization_retry_ms:
            return False
        logger.warning(
            "member %s: %s refused our token (GROUP_AUTHORIZATION_FAILED) for %.0f ms; "
            "retrying for up to %d ms (a restarting coordinator may not know it yet)",
            self._label(),
            what,
            refused_for_ms,
            self._config.authorization_retry_ms,
        )
        return True

    def _reset_to(self, level: Reset) -> None:
        """Make the next rejoin drop at least `level` (the highest request wins)."""
        self._reset = max(self._reset, level)

    def _enter(self, target: MemberState) -> None:
        """The main task's moves; once the member is stopping it moves no further."""
        if self._abort_event.is_set():
            raise _Aborted
        self._state = transition(self._state, target)

    def _enter_fatal(self) -> None:
        # A failure while closing leaves the member LEAVING: close() finishes it as CLOSED.
        if is_active(self._state):
            self._state = transition(self._state, MemberState.FATAL)

    def _request_rejoin(self, reason: str) -> None:
        if self._rejoin_reason is None:
            self._rejoin_reason = reason
        self._rejoin_event.set()

    def _identity(self) -> Identity:
        return Identity(self._member_id, self._generation_id, self._rejoins)

    def _may_commit(self) -> bool:
        """Stable or closing, or a rebalance listener (it runs in the main task, e.g. the
        revoke before a join, while this member's generation is still current)."""
        if self._state in (MemberState.STABLE, MemberState.LEAVING):
            return True
        return self._main_task is not None and asyncio.current_task() is self._main_task

    def _on_request_error(
        self, code: ErrorCode, what: str, sent: Identity
    ) -> CoordinatorError | None:
        """Errors of commit/fetch that change the member, not just the call. An answer about
        an identity the member no longer holds changes nothing: it is returned as the
        error to raise instead (fencing of an old member id is not fencing of this one)."""
        if is_stale(sent, self._identity()):
            logger.info(
                "member %s: %s sent as member id %s generation %d returned %s after the "
                "member rejoined; stale, ignored",
                self._label(),
                what,
                sent.member_id,
                sent.generation_id,
                code.name,
            )
            rebalancing = self._state not in (MemberState.STABLE, MemberState.LEAVING)
            return CoordinatorError(
                ErrorCode.REBALANCE_IN_PROGRESS if rebalancing else ErrorCode.ILLEGAL_GENERATION,
                f"{what} by {self._label()} was sent as member id {sent.member_id!r} "
                f"generation {sent.generation_id}, which it no longer holds (it rejoined); "
                f"the coordinator's {code.name} is stale: not applied, not fatal",
            )
        if code is ErrorCode.FENCED_INSTANCE_ID:
            self._fail(CoordinatorError(code, f"{what} by {self._label()}"))
        elif code is ErrorCode.REBALANCE_IN_PROGRESS and self._state is MemberState.STABLE:
            self._request_rejoin(f"{what} returned REBALANCE_IN_PROGRESS")
        return None

    def _fail(self, error: CoordinatorError) -> None:
        """Declare a fatal error: the member never sends again. The main task then drops
        the partitions as lost and finishes."""
        if self._error is None:
            self._error = error
            logger.error("member %s is stopping: %s", self._label(), error)
        self._abort_event.set()
        if self._main_task is None or self._main_task.done():
            # Nobody left to run the fatal epilogue (not started, or already finished).
            self._enter_fatal()
            self._done_event.set()

    async def _interruptible(self, awaitable: Coroutine[Any, Any, T] | Awaitable[T]) -> T:
        """Await a transport call or a wait, abandoning it when the member must stop."""
        if self._abort_event.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise _Aborted
        work = asyncio.ensure_future(awaitable)
        abort = asyncio.ensure_future(self._abort_event.wait())
        try:
            await asyncio.wait({work, abort}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            abort.cancel()
            if not work.done():
                work.cancel()
        if work.cancelled() or not work.done():
            raise _Aborted
        return work.result()

    async def _stop_tasks(self) -> None:
        tasks = [task for task in (self._heartbeat_task, self._main_task) if task is not None]
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _leave_group(self) -> None:
        request = LeaveGroupRequest(
            group_id=self._config.group_id,
            members=[
                MemberIdentity(
                    member_id=self._member_id,
                    group_instance_id=self._config.group_instance_id,
                    reason="the member is closing",
                )
            ],
        )
        try:
            response = await self._transport.leave_group(request)
        except (TransportError, CoordinatorError, AccessError) as error:
            logger.warning("member %s: LeaveGroup failed: %s", self._label(), error)
            return
        if response.error_code is not ErrorCode.NONE:
            logger.warning(
                "member %s: LeaveGroup returned %s", self._label(), response.error_code.name
            )

    def _session_expired(self) -> bool:
        return self._clock.now_ms() - self._last_contact_ms > self._config.session_timeout_ms

    def _label(self) -> str:
        return self._config.group_instance_id or self._member_id or "new-member"
