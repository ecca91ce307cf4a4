"""Which replica is the active one, by the rule Kopf's peering applies, and the handover
of the embedded coordinator's store between replicas.

Kopf pauses every replica but the one with the highest priority among the live peers in
the peering object (equal priorities pause each other). Only the active replica holds the
authoritative coordinator state, so only it may report ready: then the coordinator and
webhook Services route to it alone. `is_active` is that rule as a pure function over the
peering object's `status`; `watch_peering` polls the object and, by `handover_step`, has
this replica take the store (load it, then open its `PeeringGate`) or give it up (close
the gate, then suspend the coordinator).

Every replica mounts the same store, so a paused replica must not hold it: state loaded at
its own start would be stale when it becomes active, and its session timers, fed by no
heartbeat, would expire members into the store behind the active replica's back
(docs/operator.md, "Replicas and the store").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Protocol

import aiohttp

from staticfleet_operator.kube import KubeApi, KubeError

log = logging.getLogger("staticfleet.operator.peering")

PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"


# How often a replica that does not hold the store reads the peering object.
STANDBY_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Peer:
    identity: str
    priority: int
    deadline: datetime


def peers_of(status: Mapping[str, Any]) -> list[Peer]:
    """The peers a peering object's status lists (`{identity: {priority, lastseen,
    lifetime}}`); entries that cannot be read are left out."""
    peers = []
    for identity, info in status.items():
        if not isinstance(info, Mapping):
            continue
        try:
            lastseen = datetime.fromisoformat(str(info["lastseen"]))
            if lastseen.tzinfo is None:
                lastseen = lastseen.replace(tzinfo=UTC)
            deadline = lastseen + timedelta(seconds=int(info.get("lifetime", 60)))
            peers.append(Peer(identity, int(info.get("priority", 0)), deadline))
        except (KeyError, TypeError, ValueError):
            continue
    return peers


def is_active(status: Mapping[str, Any], identity: str, priority: int, now: datetime) -> bool:
    """True when this replica is registered and alive, and no other live peer has a priority
    equal to or above its own."""
    live = [peer for peer in peers_of(status) if peer.deadline > now]
    if all(peer.identity != identity for peer in live):
        return False  # not registered yet (or expired): Kopf does not consider us either
    return not any(peer.priority >= priority for peer in live if peer.identity != identity)


def registration(identity: str, priority: int, lifetime_s: int, now: datetime) -> dict[str, Any]:
    """The merge patch that lists this replica in a peering object, as Kopf's keep-alive
    writes it (`kopf._core.engines.peering.touch`: priority, lifetime, lastseen)."""
    entry = {"priority": priority, "lifetime": lifetime_s, "lastseen": now.isoformat()}
    return {"status": {identity: entry}}


def others_alive(status: Mapping[str, Any], identity: str, now: datetime) -> bool:
    """Whether a live peer other than this replica is listed (a replica that may still
    hold the store, or the ghost of one that died: the two look alike)."""
    return any(peer.identity != identity and peer.deadline > now for peer in peers_of(status))


class HandoverStep(Enum):
    TAKE = "take"
    GIVE_UP = "give up"


def handover_step(
    holding: bool, active_since: datetime | None, others: bool, now: datetime, wait: timedelta
) -> HandoverStep | None:
    """What this replica does about the store after a poll. `active_since`: when the polls
    began to find it active, without a break (None: the last one did not). `others`:
    another live peer is listed and the store is marked held by another replica.

    Paused, it gives the store up at once. Active, it takes the store at once when nobody
    else may hold it, else only after `wait` (two poll intervals): the replica it outranks
    gives the store up (and clears its mark) at its own next poll, and must have done so
    before this one loads what that one wrote last; a holder that died keeps its mark, so
    after the wait the mark is taken as stale."""
    if active_since is None:
        return HandoverStep.GIVE_UP if holding else None
    if holding:
        return None
    if not others or now - active_since >= wait:
        return HandoverStep.TAKE
    return None


def next_poll_s(
    holding: bool, active_since: datetime | None, now: datetime, interval: float, wait: timedelta
) -> float:
    """How long until this replica looks at the peering object again. Holding the store:
    `interval`, but only once it has been active for `wait` (`handover_step`'s, two
    intervals); until then, and while it does not hold the store, `STANDBY_INTERVAL_S` (or
    `interval`, if shorter). Replicas started together (a Recreate rollout) may each find
    itself alone at its first look; the outranked one took the store, and learns it is
    paused at its next look: within a second, not a whole interval later."""
    settled = active_since is not None and now - active_since >= wait
    return interval if holding and settled else min(interval, STANDBY_INTERVAL_S)


class StoreHolder(Protocol):
    """What `watch_peering` hands the store to: the operator's `GroupCoordinator`."""

    async def start(self, holder: str | None = None) -> None: ...

    async def suspend(self) -> None: ...

    async def store_holder(self) -> str | None: ...


def marked_by_another(marked: str | None, identity: str, pod: str | None) -> bool:
    """Whether a store mark names a replica other than this one. With `pod` (this replica's
    pod name; identities are `<pod name>-<random>`, app.py), a mark of the same pod is this
    container's previous process, which the kubelet restarted this one in place of: a pod
    runs one operator container, so that process is dead, whatever its mark says."""
    if marked is None or marked == identity:
        return False
    return pod is None or not marked.startswith(f"{pod}-")


async def held_by_another(holder: StoreHolder, identity: str, pod: str | None) -> bool:
    """Whether the store is marked held by another replica (unreadable: assume so, and
    wait)."""
    try:
        marked = await holder.store_holder()
    except Exception as error:  # the store's own error, or a closed store
        log.warning("cannot read who holds the coordinator's store: %s", error)
        return True
    return marked_by_another(marked, identity, pod)


@dataclass(frozen=True, slots=True)
class PeeringObject:
    plural: str
    name: str
    namespace: str | None = None  # None: cluster-wide

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.plural}.{PEERING_GROUP} {where}{self.name}"


def peering_objects(name: str, namespaces: Sequence[str]) -> list[PeeringObject]:
    """The peering objects Kopf uses: one cluster-wide, or one per watched namespace."""
    if not namespaces:
        return [PeeringObject("clusterkopfpeerings", name)]
    return [PeeringObject("kopfpeerings", name, ns) for ns in namespaces]


async def peering_status(
    kube: KubeApi,
    peering: PeeringObject,
    identity: str,
    listing: Mapping[str, Any] | None,
    *,
    timeout_s: float,
) -> Mapping[str, Any]:
    """The peering object's `status` (empty when the object is absent). With `listing`
    (this replica's `registration`), an object that exists but does not list `identity` is
    patched with it first, and the status is the patched object's. Each request is bounded
    by `timeout_s` (`TimeoutError`)."""
    async with asyncio.timeout(timeout_s):
        body = await kube.get_custom_object(
            PEERING_GROUP, PEERING_VERSION, peering.plural, peering.name, peering.namespace
        )
    status: Mapping[str, Any] = (body or {}).get("status") or {}
    if body is None or identity in status or listing is None:
        return status
    async with asyncio.timeout(timeout_s):
        body = await kube.patch_custom_object(
            PEERING_GROUP, PEERING_VERSION, peering.plural, peering.name, listing, peering.namespace
        )
    status = (body or {}).get("status") or {}
    if identity in status:
        log.info("listed this replica in the peering object %s", peering)
    return status


@dataclass(slots=True)
class PeeringGate:
    """A readiness gate: open while this replica is the active one and holds the store."""

    active: bool = False

    def __call__(self) -> bool:
        return self.active


async def watch_peering(
    kube: Callable[[], KubeApi],
    gate: PeeringGate,
    holder: StoreHolder,
    *,
    name: str,
    namespaces: Sequence[str],
    identity: str,
    priority: int,
    interval: float = 5.0,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    on_active: Callable[[], None] = lambda: None,
    pod: str | None = None,
    lifetime_s: int = 60,
) -> None:
    """Poll the peering object(s) until cancelled. This replica takes the store when it is
    active in every one of them (`handover_step`), then calls `on_active`; it gives the
    store up when it is not. `pod`: this replica's pod name, when it runs in one. An
    unreadable object counts as paused (fail safe: a replica that cannot tell stops taking
    members and stops writing).

    Until this replica is first seen listed in an object, the poller lists it there itself
    (`registration`, with Kopf's `lifetime_s`). Kopf's keep-alive writes the entry at start
    and then every lifetime less 5-10 s, and a write that finds no object is dropped: an
    operator that starts before `helm install` has made the peering object (Helm creates
    custom resources after the Deployment) stayed unlisted, so paused by `is_active` and
    unready, for 50-55 s. Once listed, the entry is Kopf's alone to keep or remove."""
    objects = peering_objects(name, namespaces)
    wait = timedelta(seconds=2 * interval)
    active_since: datetime | None = None
    listed_in: set[PeeringObject] = set()
    while True:
        now = clock()
        others = False
        try:
            active = True
            for peering in objects:
                listing = (
                    None
                    if peering in listed_in
                    else registration(identity, priority, lifetime_s, now)
                )
                # Bounded: a request that hangs must close the gate, not freeze it open.
                status = await peering_status(
                    kube(), peering, identity, listing, timeout_s=max(interval, 5.0)
                )
                if identity in status:
                    listed_in.add(peering)
                active = active and is_active(status, identity, priority, now)
                others = others or others_alive(status, identity, now)
        except (TimeoutError, KubeError, aiohttp.ClientError) as error:
            log.warning(
                "cannot read the peering object(s) %s: %s", ", ".join(map(str, objects)), error
            )
            active = False
        active_since = (active_since or now) if active else None
        if active and others and not gate.active:
            others = await held_by_another(holder, identity, pod)
        step = handover_step(gate.active, active_since, others, now, wait)
        if step is HandoverStep.GIVE_UP:
            gate.active = False  # unready first: the Services stop routing members here
            log.info("this replica is now paused; giving the coordinator's store up")
            try:
                await holder.suspend()
            except Exception:
                log.exception("giving the coordinator's store up failed")
        elif step is HandoverStep.TAKE:
            try:
                await holder.start(identity)
            except Exception:
                # Tried again at the next poll; unready meanwhile.
                log.exception("this replica is active but cannot load the coordinator's store")
            else:
                gate.active = True
                log.info("this replica is now active; the coordinator's store is loaded")
                on_active()
        elif active and not gate.active and active_since == now:
            log.info(
                "this replica is active; another replica holds the store, so this one "
                "loads it once that one releases it, or in %s",
                wait,
            )
        # A replica that does not hold the store, or has just taken it, looks more often:
        # the one that just started misses its own peering entry at its first look (Kopf
        # writes it a moment later), a restart's readiness waited a whole interval for the
        # second, and a peer started at the same moment may outrank it (`next_poll_s`).
        await asyncio.sleep(next_poll_s(gate.active, active_since, now, interval, wait))
