"""Slot allocation that is safe under concurrent admissions: one asyncio.Lock per group.

The admission webhook serves requests concurrently, and two pods of one group admitted at
the same moment must not both get the lowest free slot. Each group's table is guarded by
its own lock; groups never wait for each other. The lock covers the slot choice *and* the
write that records it (`persist`), so a slot is only handed out once it is written down.

That is enough within one process. Across processes (a second operator replica, a table
rebuilt while an admission was in flight) the Kubernetes adapter writes slot annotations
with resourceVersion-checked updates (or in the admission response that creates the pod),
so a stale writer fails instead of handing a slot out twice; a rebuild then resolves any
conflict deterministically (`slots.rebuild`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

from staticfleet_operator.identity.slots import Rebuilt, SlotClaim, SlotTable, rebuild

# Records a granted slot (annotation write, admission patch); raising undoes the grant.
Persist = Callable[[int, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SlotGrant:
    slot: int
    instance_id: str
    fresh: bool = False  # handed out now (not a slot the pod already held)


class SlotAllocator:
    def __init__(self) -> None:
        self._tables: dict[str, SlotTable] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @asynccontextmanager
    async def locked(self, group: str, instance_id_prefix: str) -> AsyncIterator[SlotTable]:
        """The group's table, held exclusively for the block (create it on first use)."""
        async with self._locks.setdefault(group, asyncio.Lock()):
            yield self._table(group, instance_id_prefix)

    async def admit(
        self,
        group: str,
        instance_id_prefix: str,
        pod_key: str,
        persist: Persist | None = None,
    ) -> SlotGrant:
        """The pod's slot: the lowest allocatable one, or the one it already holds."""
        async with self.locked(group, instance_id_prefix) as table:
            existing = table.slot_of(pod_key)
            if existing is not None:
                return SlotGrant(existing, table.instance_id(existing))
            slot = table.lowest_free()
            vacant_since = table.vacant.get(slot)
            table.assign(pod_key)
            if persist is not None:
                try:
                    await persist(slot, table.instance_id(slot))
                except BaseException:
                    # Not written down, so not handed out: the next admission may take it.
                    table.unassign(pod_key, vacant_since)
                    raise
            return SlotGrant(slot, table.instance_id(slot), fresh=True)

    async def claim(
        self, group: str, instance_id_prefix: str, pod_key: str, slot: int
    ) -> SlotGrant:
        """Managed mode: the operator creates the pod for `slot` (raises SlotTakenError)."""
        async with self.locked(group, instance_id_prefix) as table:
            table.claim(pod_key, slot)
            return SlotGrant(slot, table.instance_id(slot))

    async def pod_gone(
        self, group: str, instance_id_prefix: str, pod_key: str, now: datetime
    ) -> int | None:
        async with self.locked(group, instance_id_prefix) as table:
            return table.pod_gone(pod_key, now)

    async def rebuild(
        self,
        group: str,
        instance_id_prefix: str,
        claims: Iterable[SlotClaim],
        vacant_slots: Iterable[int] = (),
        now: datetime | None = None,
    ) -> Rebuilt:
        """Replace the group's table with one read back from pod annotations."""
        async with self._locks.setdefault(group, asyncio.Lock()):
            rebuilt = rebuild(instance_id_prefix, claims, vacant_slots, now)
            self._tables[group] = rebuilt.table
            return rebuilt

    def forget(self, group: str) -> None:
        """The ConsumerGroup is gone (after its finalizer ran)."""
        self._tables.pop(group, None)
        self._locks.pop(group, None)

    def _table(self, group: str, instance_id_prefix: str) -> SlotTable:
        table = self._tables.get(group)
        if table is None:
            table = self._tables[group] = SlotTable(instance_id_prefix)
        elif table.prefix != instance_id_prefix:
            # Every member's identity would change: that is a re-creation of the group,
            # not something to slip in under running pods.
            raise ValueError(
                f"group {group} uses instance id prefix {table.prefix!r}, not "
                f"{instance_id_prefix!r}; rebuild or forget the table to change it"
            )
        return table
