"""What the operator remembers of each ConsumerGroup between passes, in one place.

A pass decides from what it observes (`group_observation.py`) and from this memory: which
problems it has already reported (an Event once per problem, not once per pass), which group
id the member token is registered for, which Secrets the group reads (their change wakes it),
and, in adopted mode, the slot table the admission webhook shares. `plan_pass` never changes
memory; it returns a `MemoryUpdate`, and the actuator applies it.

One `GroupMemory` per group, kept in `Memories`; the finalizer drops it as a whole, so a
deleted group leaves nothing behind (before, its entries were spread over nine collections
and three of them outlived it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.identity import SlotAllocator
from staticfleet_operator.scaling import Recommendation, ScaleTarget


@dataclass
class GroupMemory:
    ref: GroupRef
    # One pass at a time per group (event, timer, finalizer and webhook may overlap).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    group_id: str | None = None
    # The group id the member token is registered for with the embedded server.
    token_group_id: str | None = None
    # reason -> the message last reported by a Warning Event.
    reported: dict[str, str] = field(default_factory=dict)
    # Secrets the group reads (member token, Kafka credentials): a change wakes it.
    secrets: frozenset[str] = frozenset()
    # Adopted mode: the slot table, shared with the admission webhook (adopted.py).
    slots: SlotAllocator = field(default_factory=SlotAllocator)
    # The slot table was read back from the pods' annotations since this process started.
    slots_rebuilt: bool = False
    # Pod key -> when the webhook granted it a slot: until the API server has created the
    # pod, a pass that does not see it yet must not take its slot back.
    admitted: dict[str, datetime] = field(default_factory=dict)
    # Managed mode: the members' PodDisruptionBudget spec (members.budget_key) written or
    # found as wanted; while the spec wants the same, a pass does not read the budget.
    disruption_budget: str | None = None
    # The last pass waits on a clock (an adopted slot's grace period, an admission's).
    timed: bool = False
    # When this process last read (or tried to read) the group's lag (status.lagTime moves
    # only when the figure does, so it cannot say when the next read is due).
    lag_read: datetime | None = None
    # Managed mode (scaling.py): the count the last pass scaled to, and the counts asked for
    # within the scale-down stabilization window (None: no pass of this process yet).
    scale_target: int | None = None
    recommendations: tuple[Recommendation, ...] | None = None
    # Since when a scale-down waits for a rebalance in flight (None: it does not).
    held_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class MemoryUpdate:
    """What one pass asks to be remembered (the output of `plan_pass`)."""

    group_id: str | None = None
    token_group_id: str | None = None
    # reason -> message to remember as reported; reason -> None: forget (reported again).
    reported: Mapping[str, str | None] = field(default_factory=dict)
    secrets: frozenset[str] = frozenset()
    # The members' PodDisruptionBudget was found as wanted (members.budget_key).
    disruption_budget: str | None = None
    # The pass read, or tried to read, the group's lag (at this time).
    lag_read: datetime | None = None
    # Managed mode: this pass's scale target (remembered as a whole).
    scale: ScaleTarget | None = None


class Memories:
    """Every group's memory, by `GroupRef`; and which group a group id or Secret belongs to."""

    def __init__(self) -> None:
        self._groups: dict[GroupRef, GroupMemory] = {}
        self._by_group_id: dict[str, GroupRef] = {}
        # (namespace, Secret name) -> the groups that read it.
        self._by_secret: dict[tuple[str, str], set[GroupRef]] = {}

    def of(self, ref: GroupRef) -> GroupMemory:
        memory = self._groups.get(ref)
        if memory is None:
            memory = self._groups[ref] = GroupMemory(ref)
        return memory

    def get(self, ref: GroupRef) -> GroupMemory | None:
        return self._groups.get(ref)

    def drop(self, ref: GroupRef) -> GroupMemory | None:
        memory = self._groups.pop(ref, None)
        if memory is not None and memory.group_id is not None:
            self._forget_group_id(memory.group_id, ref)
        if memory is not None:
            self._index_secrets(memory, frozenset())
        return memory

    def remember(self, memory: GroupMemory, update: MemoryUpdate) -> None:
        if update.group_id is not None and update.group_id != memory.group_id:
            if memory.group_id is not None:
                self._forget_group_id(memory.group_id, memory.ref)
            memory.group_id = update.group_id
        if memory.group_id is not None:
            self._by_group_id[memory.group_id] = memory.ref
        memory.token_group_id = update.token_group_id
        for reason, message in update.reported.items():
            if message is None:
                memory.reported.pop(reason, None)
            else:
                memory.reported[reason] = message
        self._index_secrets(memory, update.secrets)
        if update.disruption_budget is not None:
            memory.disruption_budget = update.disruption_budget
        if update.lag_read is not None:
            memory.lag_read = update.lag_read
        if update.scale is not None:
            memory.scale_target = update.scale.replicas
            memory.recommendations = update.scale.recommendations
            memory.held_since = update.scale.held_since

    def _index_secrets(self, memory: GroupMemory, secrets: frozenset[str]) -> None:
        namespace = memory.ref.namespace
        for name in memory.secrets - secrets:
            users = self._by_secret.get((namespace, name), set())
            users.discard(memory.ref)
            if not users:
                self._by_secret.pop((namespace, name), None)
        for name in secrets - memory.secrets:
            self._by_secret.setdefault((namespace, name), set()).add(memory.ref)
        memory.secrets = secrets

    def _forget_group_id(self, group_id: str, ref: GroupRef) -> None:
        if self._by_group_id.get(group_id) == ref:
            del self._by_group_id[group_id]

    def ref_of(self, group_id: str) -> GroupRef | None:
        """The ConsumerGroup whose spec names `group_id` (a journal entry wakes it)."""
        return self._by_group_id.get(group_id)

    def users_of_secret(self, namespace: str, name: str) -> frozenset[GroupRef]:
        """The groups that read the Secret `namespace/name` (its change wakes them)."""
        return frozenset(self._by_secret.get((namespace, name), ()))

    def __iter__(self) -> Iterator[GroupRef]:
        return iter(list(self._groups))

    def __len__(self) -> int:
        return len(self._groups)
