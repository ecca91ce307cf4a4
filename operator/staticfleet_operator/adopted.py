"""Adopted mode: pods someone else creates (a Spark driver, a Deployment) get a slot, and a
slot whose pod is gone waits `replacementGracePeriodSeconds` for a replacement before its
member leaves the group. The one module both the webhook (a pod's admission: `admit`) and
the reconcile pass (`settle_slots`) go through, so they agree on every slot.

The slot table itself is `identity.SlotTable`; this module keeps it true to the pods: read
back from their annotations after a restart (`ensure_table`), a vanished pod's slot made
vacant before any admission or pass reads it (`release_vanished`), and the protocol an
admitted pod is stamped with chosen by the same rule as a managed pod's
(`rollout.fleet.new_pod_protocol`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import ConsumerGroupSpec, RolloutStatus
from staticfleet_operator.group_memory import GroupMemory
from staticfleet_operator.identity import SlotClaim, SlotTable
from staticfleet_operator.members import member_pod, members_of
from staticfleet_operator.rollout import CoordinatorView
from staticfleet_operator.rollout.fleet import new_pod_protocol
from staticfleet_operator.rollout.migration import adopted_refusal
from staticfleet_operator.rollout.plan import uniform_protocol

log = logging.getLogger("staticfleet.operator.adopted")

# Vacant slots expiring within this many seconds of each other leave in one batch.
LEAVE_BATCH_WINDOW_SECONDS: Final = 6.0
# How long an admitted pod may take to appear in a listing (the API server's admission
# timeout is at most 30 s).
ADMISSION_GRACE_SECONDS: Final = 30.0


@dataclass(frozen=True, slots=True)
class Admission:
    """What an admitted pod is stamped with."""

    slot: int
    protocol: RebalanceProtocolSetting


async def admit(
    memory: GroupMemory,
    spec: ConsumerGroupSpec,
    siblings: Sequence[Mapping[str, Any]],
    view: CoordinatorView,
    pod_key: str,
    rollout: RolloutStatus,
    now: datetime,
) -> tuple[Admission, bool]:
    """A slot for the pod `pod_key` (the one it holds, else the lowest free one) and its
    protocol; and whether the slot was handed out now. `siblings`: the group's pods as the
    indices show them."""
    await ensure_table(memory, spec, siblings, view, now)
    # Free the slots of pods gone (or finished) since the last reconcile pass first: a
    # replacement created right after its predecessor was deleted must get the freed slot
    # (and with it the instance id, so it rejoins without a rebalance), not a new one.
    live = [m for m in members_of(siblings) if m.live]
    key = str(memory.ref)
    async with memory.slots.locked(key, spec.instance_id_prefix) as table:
        release_vanished(memory, table, {member.pod_uid for member in live}, now)
    grant = await memory.slots.admit(key, spec.instance_id_prefix, pod_key)
    memory.admitted[pod_key] = now
    protocol = new_pod_protocol(spec, rollout, live)
    protocols = [m.protocol for m in live if not m.deleting]
    if adopted_refusal(spec, protocols) is not None:
        # A refused migration (the pass says why) leaves the fleet as it is: the new pod
        # joins on the protocol its peers run, not on the one the spec asks for.
        protocol = uniform_protocol(protocols) or protocol
    return Admission(grant.slot, protocol), grant.fresh


async def settle_slots(
    memory: GroupMemory,
    spec: ConsumerGroupSpec,
    pods: Sequence[Mapping[str, Any]],
    view: CoordinatorView,
    now: datetime,
    leave: Callable[[list[str]], Awaitable[None]],
) -> tuple[list[str], int]:
    """One pass over the slot table: a vanished pod's slot becomes vacant (its replacement
    takes it), one vacant past the grace period retires with a batch LeaveGroup (`leave`,
    called only for instance ids the coordinator lists). Returns the instance ids that left
    and the slots in use (held, vacant and retiring)."""
    await ensure_table(memory, spec, pods, view, now)
    live_keys = {m.pod_uid for m in members_of(pods) if m.live}
    async with memory.slots.locked(str(memory.ref), spec.instance_id_prefix) as table:
        release_vanished(memory, table, live_keys, now)
        grace = spec.effective_replacement_grace_period_seconds
        table.expire_vacant(now, grace, batch_window_seconds=leave_batch_window(grace))
        listed = {m.instance_id for m in view.members}
        pending = [instance_id for instance_id in table.pending_leave() if instance_id in listed]
        if pending:
            await leave(pending)
        table.leave_sent(table.pending_leave())
        slots_in_use = len(table.held) + len(table.vacant) + len(table.retiring)
        # A vacant slot retires when its grace period ends, an admitted pod's slot is kept
        # for ADMISSION_GRACE_SECONDS: both are clocks, not events.
        memory.timed = bool(table.vacant or table.retiring or memory.admitted)
    return pending, slots_in_use


def leave_batch_window(grace_seconds: float) -> float:
    """How early a vacant slot may retire to join another's batch LeaveGroup: a few passes
    of the operator (pods released together are seen gone a pass or two apart), never more
    than a tenth of the grace period a replacement is owed."""
    return min(LEAVE_BATCH_WINDOW_SECONDS, grace_seconds / 10)


def release_vanished(
    memory: GroupMemory, table: SlotTable, live_keys: set[str], now: datetime
) -> None:
    """Mark the slots of pods no longer listed vacant, so a replacement takes its
    predecessor's slot. A pod admitted moments ago may not be listed yet: it keeps its slot
    for ADMISSION_GRACE_SECONDS. Caller holds the table's lock."""
    for pod_key in live_keys:
        memory.admitted.pop(pod_key, None)  # seen: from now on, its absence means it is gone
    for pod_key in list(table.held.values()):
        since = memory.admitted.get(pod_key)
        if pod_key not in live_keys and not (
            since is not None and (now - since).total_seconds() < ADMISSION_GRACE_SECONDS
        ):
            table.pod_gone(pod_key, now)
            memory.admitted.pop(pod_key, None)


async def ensure_table(
    memory: GroupMemory,
    spec: ConsumerGroupSpec,
    pods: Sequence[Mapping[str, Any]],
    view: CoordinatorView,
    now: datetime,
) -> None:
    """After a (re)start, read the group's slot table back from the pods' annotations before
    handing out any slot: a restarted operator must not give a live pod's slot away."""
    if memory.slots_rebuilt:
        return
    claims = []
    for pod in pods:
        member = member_pod(pod)
        if member is None or not member.live:
            continue
        created = _timestamp((pod.get("metadata") or {}).get("creationTimestamp")) or now
        claims.append(SlotClaim(member.pod_uid, member.pod_name, member.slot, created))
    prefix = spec.instance_id_prefix + "-"
    listed_slots = [
        int(m.instance_id[len(prefix) :])
        for m in view.members
        if m.instance_id
        and m.instance_id.startswith(prefix)
        and m.instance_id[len(prefix) :].isdigit()
    ]
    key = str(memory.ref)
    rebuilt = await memory.slots.rebuild(key, spec.instance_id_prefix, claims, listed_slots, now)
    if rebuilt.conflicts:
        log.warning("%s: pods share a slot: %s", key, rebuilt.conflicts)
    memory.slots_rebuilt = True


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
