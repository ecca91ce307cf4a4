"""A scenario's view of one coordinator: requests by logical member, answers as relations.

Raw member ids and generations differ between two coordinators by design, so every answer
is recorded in relational form: a member id becomes the logical name of the member it was
given to (or `?1`, `?2`... for an id no scenario member holds, in order of appearance), a
generation becomes its distance from the first generation the scenario saw (`g+0`, `g+1`,
or `none` for -1), metadata becomes the marker the member put in it. Two coordinators
conform on a step when these records are equal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.client.transport import TransportError
from coordinator.errors import CoordinatorError
from coordinator.messages import (
    NO_GENERATION,
    HeartbeatRequest,
    JoinGroupProtocol,
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
from coordinator.protocol import ProtocolError, Subscription, decode_subscription
from coordinator.protocol import encode_subscription as _encode
from staticfleet.conformance.targets import Target

Record = dict[str, Any]

# Ids a scenario can pass to mean "this member's current id" or "none/empty".
CURRENT = object()


@dataclass
class Member:
    name: str
    instance_id: str | None
    member_id: str = ""
    generation: int = NO_GENERATION
    protocol: str | None = None


@dataclass(frozen=True, eq=False)
class Matches:
    """An expected value that is a property rather than one value ("2 of these partitions");
    it equals what has the property, so it can sit inside an expected list or tuple."""

    description: str
    test: Callable[[Any], bool]

    def __eq__(self, other: object) -> bool:
        return self.test(other)

    def __hash__(self) -> int:
        return hash(self.description)

    def __repr__(self) -> str:
        return self.description


def _meets(expected: Any, got: Any) -> bool:
    return bool(expected == got)


@dataclass
class Step:
    label: str
    record: Record
    # What the operator relies on in this answer (record keys -> values), checked by the
    # runner's consumer-protocol section, where there is no second coordinator to compare.
    expected: Record = field(default_factory=dict)
    # Figures measured at this step (e.g. a round trip, ms): reported, never compared.
    measured: dict[str, float] = field(default_factory=dict)

    @property
    def mismatches(self) -> list[str]:
        return [
            f"{key}: expected {value!r}, got {self.record.get(key, '<absent>')!r}"
            for key, value in self.expected.items()
            if not _meets(value, self.record.get(key))
        ]


@dataclass
class Session:
    target: Target
    group_id: str
    topic: str
    session_timeout_ms: int = 6_000
    rebalance_timeout_ms: int = 5_000
    steps: list[Step] = field(default_factory=list)
    members: dict[str, Member] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)
    _unknown: int = 0
    _base_generation: int | None = None
    # Requests started in the background, cancelled when the scenario ends.
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    # ------------------------------------------------------------------ requests

    def member(self, name: str, instance_id: str | None = None) -> Member:
        if name not in self.members:
            self.members[name] = Member(name, instance_id)
        return self.members[name]

    def metadata(self, name: str, marker: str) -> bytes:
        return _encode(Subscription(topics=(self.topic,), user_data=marker.encode()))

    def join_request(
        self,
        name: str,
        *,
        instance_id: str | None = None,
        protocols: Sequence[str] = ("range",),
        protocol_type: str = "consumer",
        member_id: object = CURRENT,
        marker: str | None = None,
        session_timeout_ms: int | None = None,
    ) -> JoinGroupRequest:
        member = self.member(name, instance_id)
        if instance_id is not None:
            member.instance_id = instance_id
        return JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=session_timeout_ms or self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            member_id=member.member_id if member_id is CURRENT else str(member_id),
            group_instance_id=member.instance_id,
            protocol_type=protocol_type,
            protocols=[
                JoinGroupProtocol(p, self.metadata(name, f"{name}:{p}:{marker or ''}"))
                for p in protocols
            ],
            reason="conformance",
        )

    async def join(self, label: str, name: str, **kwargs: Any) -> JoinGroupResponse | None:
        """JoinGroup and wait for the answer (records it)."""
        return await self.finish_join(label, name, self.start_join(name, **kwargs))

    def start_join(self, name: str, **kwargs: Any) -> asyncio.Task[Any]:
        """A JoinGroup that may be parked; `finish_join` records its answer later."""
        request = self.join_request(name, **kwargs)
        return self._spawn(self.target.transport(name).join_group(request))

    async def finish_join(
        self, label: str, name: str, task: asyncio.Task[Any]
    ) -> JoinGroupResponse | None:
        response = await task
        if not isinstance(response, JoinGroupResponse):
            self.record(label, {"failed": response})
            return None
        member = self.members[name]
        if response.member_id:
            member.member_id = response.member_id
            if self._names.get(response.member_id, "?").startswith("?"):
                self._names[response.member_id] = name
        if response.generation_id >= 0:
            member.generation = response.generation_id
            member.protocol = response.protocol_name
        self.record(
            label,
            {
                "error": response.error_code.name,
                "generation": self.generation(response.generation_id),
                "protocol_type": response.protocol_type,
                "protocol": response.protocol_name,
                "leader": self.who(response.leader),
                "member": self.who(response.member_id),
                "skip_assignment": response.skip_assignment,
                "members": sorted(
                    (self.who(m.member_id), m.group_instance_id, self.marker(m.metadata))
                    for m in response.members
                ),
            },
        )
        return response

    async def sync(
        self,
        label: str,
        name: str,
        assignments: dict[str, bytes] | None = None,
        *,
        generation: int | None = None,
        protocol_name: object = CURRENT,
        background: bool = False,
    ) -> Any:
        member = self.members[name]
        request = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=member.generation if generation is None else generation,
            member_id=member.member_id,
            group_instance_id=member.instance_id,
            protocol_type="consumer",
            # As Kafka's clients: the protocol the join selected.
            protocol_name=member.protocol if protocol_name is CURRENT else protocol_name,  # type: ignore[arg-type]
            assignments=[
                SyncGroupRequestAssignment(self.members[n].member_id, data)
                for n, data in (assignments or {}).items()
            ],
        )
        task = self._spawn(self.target.transport(name).sync_group(request))
        if background:
            return task
        return await self.finish_sync(label, task)

    async def finish_sync(self, label: str, task: asyncio.Task[Any]) -> None:
        response = await task
        if isinstance(response, str):
            self.record(label, {"failed": response})
            return
        self.record(
            label,
            {
                "error": response.error_code.name,
                "protocol_type": response.protocol_type,
                "protocol": response.protocol_name,
                "assignment": response.assignment.decode(errors="replace"),
            },
        )

    async def heartbeat(
        self,
        label: str,
        name: str,
        *,
        generation: int | None = None,
        member_id: object = CURRENT,
        instance_id: object = CURRENT,
    ) -> str:
        member = self.members[name]
        request = HeartbeatRequest(
            self.group_id,
            member.generation if generation is None else generation,
            member.member_id if member_id is CURRENT else str(member_id),
            member.instance_id if instance_id is CURRENT else instance_id,  # type: ignore[arg-type]
        )
        response = await self._call(self.target.transport(name).heartbeat(request))
        code = response if isinstance(response, str) else response.error_code.name
        self.record(label, {"error": code})
        return code

    async def leave(self, label: str, identities: Iterable[tuple[str, str | None]]) -> None:
        """LeaveGroup of (member id, instance id) pairs, as given (raw)."""
        request = LeaveGroupRequest(
            self.group_id, [MemberIdentity(m, i, "conformance") for m, i in identities]
        )
        response = await self._call(self.target.transport("admin").leave_group(request))
        if isinstance(response, str):
            self.record(label, {"failed": response})
            return
        self.record(
            label,
            {
                "error": response.error_code.name,
                "members": [
                    (self.who(m.member_id), m.group_instance_id, m.error_code.name)
                    for m in response.members
                ],
            },
        )

    async def commit(
        self,
        label: str,
        name: str | None,
        offsets: dict[int, int],
        *,
        generation: int | None = None,
        member_id: object = CURRENT,
        group_id: str | None = None,
    ) -> None:
        member = self.members[name] if name else Member("admin", None)
        request = OffsetCommitRequest(
            group_id=self.group_id if group_id is None else group_id,
            generation_id=member.generation if generation is None else generation,
            member_id=member.member_id if member_id is CURRENT else str(member_id),
            group_instance_id=member.instance_id,
            partitions=[
                OffsetCommitPartition(self.topic, p, o) for p, o in sorted(offsets.items())
            ],
        )
        response = await self._call(self.target.transport(name or "admin").commit_offsets(request))
        if isinstance(response, str):
            self.record(label, {"failed": response})
            return
        self.record(
            label,
            {
                "error": response.error_code.name,
                "partitions": sorted((p.partition, p.error_code.name) for p in response.partitions),
            },
        )

    async def fetch(
        self,
        label: str,
        name: str | None,
        partitions: Sequence[int] | None,
        *,
        generation: int | None = None,
        group_id: str | None = None,
    ) -> None:
        member = self.members[name] if name else None
        request = OffsetFetchRequest(
            group_id=self.group_id if group_id is None else group_id,
            partitions=None if partitions is None else [(self.topic, p) for p in partitions],
            member_id=member.member_id if member else None,
            generation_id=(member.generation if generation is None else generation)
            if member
            else NO_GENERATION,
            group_instance_id=member.instance_id if member else None,
        )
        response = await self._call(self.target.transport(name or "admin").fetch_offsets(request))
        if isinstance(response, str):
            self.record(label, {"failed": response})
            return
        self.record(
            label,
            {
                "error": response.error_code.name,
                "partitions": sorted(
                    (p.partition, p.committed_offset, p.error_code.name)
                    for p in response.partitions
                ),
            },
        )

    async def describe(self, label: str) -> None:
        described = await self.target.describe(self.group_id)
        self.record(
            label,
            {
                "error": described.error_code.name,
                "state": described.group_state,
                "protocol_type": described.protocol_type,
                "protocol": described.protocol_data,
                "members": sorted(
                    (self.who(m.member_id), m.group_instance_id, bool(m.member_assignment))
                    for m in described.members
                ),
            },
        )

    async def keep_alive(self, name: str, seconds: float, interval_s: float = 0.3) -> None:
        """Heartbeat (unrecorded) for a while, e.g. while another member's session expires."""
        deadline = asyncio.get_running_loop().time() + seconds
        member = self.members[name]
        while asyncio.get_running_loop().time() < deadline:
            request = HeartbeatRequest(
                self.group_id, member.generation, member.member_id, member.instance_id
            )
            await self._call(self.target.transport(name).heartbeat(request))
            await asyncio.sleep(interval_s)

    # ------------------------------------------------------------------ relations

    def record(self, label: str, record: Record) -> None:
        self.steps.append(Step(label, record))

    def pin(self, **expected: Any) -> Record:
        """Pin the last step's answer: these record keys must have these values. Returns
        the record, for later steps to pin against what this one answered."""
        step = self.steps[-1]
        step.expected.update(expected)
        return step.record

    def measure(self, **figures: float) -> None:
        self.steps[-1].measured.update(figures)

    def who(self, member_id: str) -> str:
        if not member_id:
            return ""
        name = self._names.get(member_id)
        if name is None:
            self._unknown += 1
            name = self._names[member_id] = f"?{self._unknown}"
        return name

    def generation(self, generation: int) -> str:
        if generation < 0:
            return "none"
        if self._base_generation is None:
            self._base_generation = generation
        return f"g{generation - self._base_generation:+d}"

    @staticmethod
    def marker(metadata: bytes) -> str:
        try:
            return (decode_subscription(metadata).user_data or b"").decode(errors="replace")
        except ProtocolError:
            return f"<{len(metadata)} bytes>"

    def _spawn(self, awaitable: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(self._call(awaitable))
        self.tasks.append(task)
        return task

    @staticmethod
    async def _call(awaitable: Any) -> Any:
        """The answer, or the refusal as a string (a refusal is an answer too)."""
        try:
            return await awaitable
        except CoordinatorError as error:
            return f"refused {error.code.name}"
        except TransportError as error:
            return f"unreachable: {str(error)[:60]}"
