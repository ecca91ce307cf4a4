"""Identity slots of one group: who holds which `group.instance.id`. Pure, no locking.

A slot is a small int; `group.instance.id = <prefix>-<slot>`. A slot is in one of four
states:

- held: a live pod carries it (annotation + env, stamped at creation);
- vacant: its pod is gone, but the coordinator may still list the static member until its
  session times out. A replacement takes it (the lowest allocatable slot first), and so
  rejoins as the same static member with no rebalance (KIP-345);
- retiring: nobody may take it until the coordinator has been told the member left (batch
  LeaveGroup); otherwise that LeaveGroup would evict the newcomer. Scale-down and vacant
  slots past the adopted-mode grace period end up here;
- free: everything else (never used, or retired and left).

Allocatable = vacant or free. Two live pods never hold one slot: the table maps each slot
to at most one pod key and each pod key to at most one slot.

Pods are named by an opaque `pod_key` the adapter chooses, stable for the pod's whole life
and recorded in its annotations (the webhook cannot use the uid or, with generateName, the
name: neither exists yet at admission).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


class SlotTakenError(ValueError):
    """A specific slot was asked for, but another live pod holds it or it is retiring."""


@dataclass(frozen=True, slots=True)
class SlotClaim:
    """One live pod's identity annotations, as read back after an operator restart."""

    pod_key: str
    pod_name: str
    slot: int | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SlotConflict:
    """Live pods claiming one slot. The oldest keeps it; the others must be deleted (their
    env already carries the instance id, so they cannot be renamed in place)."""

    slot: int
    keeper: str
    evicted: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Rebuilt:
    table: SlotTable
    conflicts: tuple[SlotConflict, ...]
    # Live pods with no slot annotation: admit them again, or delete them.
    unslotted: tuple[str, ...]

    @property
    def pods_to_delete(self) -> tuple[str, ...]:
        return tuple(key for conflict in self.conflicts for key in conflict.evicted)


class SlotTable:
    def __init__(self, instance_id_prefix: str) -> None:
        if not instance_id_prefix:
            raise ValueError("the instance id prefix must not be empty")
        self.prefix = instance_id_prefix
        self._holder_by_slot: dict[int, str] = {}
        self._slot_by_holder: dict[str, int] = {}
        self._vacant_since: dict[int, datetime] = {}
        self._retiring: set[int] = set()

    # --- reading ------------------------------------------------------------------------

    def instance_id(self, slot: int) -> str:
        return f"{self.prefix}-{slot}"

    def slot_of(self, pod_key: str) -> int | None:
        return self._slot_by_holder.get(pod_key)

    def holder(self, slot: int) -> str | None:
        return self._holder_by_slot.get(slot)

    @property
    def held(self) -> dict[int, str]:
        """Slot -> pod key for every held slot (a copy)."""
        return dict(self._holder_by_slot)

    @property
    def vacant(self) -> dict[int, datetime]:
        return dict(self._vacant_since)

    @property
    def retiring(self) -> frozenset[int]:
        return frozenset(self._retiring)

    def lowest_free(self) -> int:
        """The slot the next admission gets: the lowest neither held nor retiring."""
        slot = 0
        while slot in self._holder_by_slot or slot in self._retiring:
            slot += 1
        return slot

    # --- pods arriving and leaving -------------------------------------------------------

    def assign(self, pod_key: str) -> int:
        """The pod's slot, taking the lowest allocatable one if it has none (idempotent, so
        a retried admission gets the same answer)."""
        existing = self._slot_by_holder.get(pod_key)
        if existing is not None:
            return existing
        slot = self.lowest_free()
        self._hold(slot, pod_key)
        return slot

    def claim(self, pod_key: str, slot: int) -> int:
        """Give `slot` to the pod (managed mode: the operator creates the pod for a slot)."""
        if slot < 0:
            raise ValueError(f"slots are non-negative, not {slot}")
        if self._slot_by_holder.get(pod_key) == slot:
            return slot
        holder = self._holder_by_slot.get(slot)
        if holder is not None:
            raise SlotTakenError(f"slot {slot} ({self.instance_id(slot)}) is held by {holder}")
        if slot in self._retiring:
            raise SlotTakenError(
                f"slot {slot} ({self.instance_id(slot)}) waits for its LeaveGroup to be sent"
            )
        if pod_key in self._slot_by_holder:
            raise SlotTakenError(f"{pod_key} already holds slot {self._slot_by_holder[pod_key]}")
        self._hold(slot, pod_key)
        return slot

    def unassign(self, pod_key: str, vacant_since: datetime | None) -> None:
        """Undo an assignment whose pod never came to be (its annotation write failed): the
        slot goes back to what it was, vacant since `vacant_since` or free."""
        slot = self._slot_by_holder.pop(pod_key, None)
        if slot is None:
            return
        del self._holder_by_slot[slot]
        if vacant_since is not None:
            self._vacant_since[slot] = vacant_since

    def pod_gone(self, pod_key: str, now: datetime) -> int | None:
        """The pod is gone: its slot becomes vacant (or, if retiring, ready for the leave)."""
        slot = self._slot_by_holder.pop(pod_key, None)
        if slot is None:
            return None
        del self._holder_by_slot[slot]
        if slot not in self._retiring:
            self._vacant_since[slot] = now
        return slot

    # --- members leaving the group --------------------------------------------------------

    def retire(self, slots: Iterable[int]) -> None:
        """Scale-down: these slots' pods are about to be deleted; nobody may take the slots
        until `leave_sent`."""
        for slot in slots:
            self._retiring.add(slot)
            self._vacant_since.pop(slot, None)

    def expire_vacant(
        self, now: datetime, grace_seconds: float, batch_window_seconds: float = 0.0
    ) -> list[int]:
        """Adopted mode: slots vacant for longer than the grace period start retiring (their
        pods vanished and no replacement came).

        When one expires, slots that would expire within `batch_window_seconds` go with it:
        executors released together are seen gone a pass or two apart, and one batch
        LeaveGroup (one rebalance) is what batch leave is for."""
        waited = {slot: (now - since).total_seconds() for slot, since in self._vacant_since.items()}
        if not any(seconds > grace_seconds for seconds in waited.values()):
            return []
        expired = sorted(
            slot
            for slot, seconds in waited.items()
            if seconds > grace_seconds - batch_window_seconds
        )
        self.retire(expired)
        return expired

    def pending_leave(self) -> list[str]:
        """Instance ids to put in the next batch LeaveGroup: retiring slots whose pods are
        gone (a member whose pod still runs would just rejoin as a new member)."""
        return [
            self.instance_id(slot)
            for slot in sorted(self._retiring)
            if slot not in self._holder_by_slot
        ]

    def leave_sent(self, instance_ids: Iterable[str]) -> list[int]:
        """The coordinator answered the LeaveGroup: those slots are free again."""
        freed = []
        for instance_id in instance_ids:
            slot = self._slot_of_instance(instance_id)
            if slot is not None and slot in self._retiring and slot not in self._holder_by_slot:
                self._retiring.discard(slot)
                freed.append(slot)
        return sorted(freed)

    def mark_vacant(self, slot: int, since: datetime) -> None:
        """A slot with no pod whose member the coordinator may still list (after a rebuild)."""
        if slot in self._holder_by_slot or slot in self._retiring:
            raise SlotTakenError(f"slot {slot} is held or retiring, it cannot be vacant")
        self._vacant_since[slot] = since

    def _hold(self, slot: int, pod_key: str) -> None:
        self._holder_by_slot[slot] = pod_key
        self._slot_by_holder[pod_key] = slot
        self._vacant_since.pop(slot, None)

    def _slot_of_instance(self, instance_id: str) -> int | None:
        head, _, tail = instance_id.rpartition("-")
        if head != self.prefix or not tail.isdigit():
            return None
        return int(tail)


def plan_scale_down(slots_in_use: Iterable[int], replicas: int) -> list[int]:
    """The slots to remove to get down to `replicas`, highest first: the survivors keep the
    low, dense identities, so a later scale-up hands out the same ids again."""
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, not {replicas}")
    in_use = sorted(set(slots_in_use), reverse=True)
    return in_use[: max(0, len(in_use) - replicas)]


def rebuild(
    instance_id_prefix: str,
    claims: Iterable[SlotClaim],
    vacant_slots: Iterable[int] = (),
    now: datetime | None = None,
) -> Rebuilt:
    """A table from the live pods' annotations (after an operator restart).

    Two live pods claiming one slot: the older pod keeps it (it has been that member
    longer; ties by pod name, then key, so every replica of the operator decides alike),
    the others are reported for deletion. `vacant_slots` are slots whose instance ids the
    coordinator still lists with no pod; they restart their grace period at `now`.
    """
    table = SlotTable(instance_id_prefix)
    by_slot: dict[int, list[SlotClaim]] = {}
    unslotted: list[str] = []
    seen: set[str] = set()
    for claim in claims:
        if claim.pod_key in seen:
            continue  # one pod, listed twice: its first reading stands
        seen.add(claim.pod_key)
        if claim.slot is None or claim.slot < 0:
            unslotted.append(claim.pod_key)
        else:
            by_slot.setdefault(claim.slot, []).append(claim)
    conflicts: list[SlotConflict] = []
    for slot in sorted(by_slot):
        contenders = sorted(by_slot[slot], key=lambda c: (c.created_at, c.pod_name, c.pod_key))
        keeper, *others = contenders
        table.claim(keeper.pod_key, slot)
        if others:
            conflicts.append(SlotConflict(slot, keeper.pod_key, tuple(c.pod_key for c in others)))
    vacant = [slot for slot in vacant_slots if table.holder(slot) is None]
    if vacant and now is None:
        raise ValueError("vacant slots need `now`: their grace period restarts then")
    for slot in vacant:
        assert now is not None
        table.mark_vacant(slot, now)
    return Rebuilt(table, tuple(conflicts), tuple(unslotted))
