"""Which replica is the active one, by the rule Kopf's peering applies.

Kopf pauses every replica but the one with the highest priority among the live peers in
the peering object (equal priorities pause each other). Only the active replica holds the
authoritative coordinator state, so only it may report ready: then the coordinator and
webhook Services route to it alone. `is_active` is that rule as a pure function over the
peering object's `status`; `watch_peering` polls the object and keeps a `PeeringGate` true
while this replica is the active one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from staticfleet_operator.kube import KubeApi, KubeError

log = logging.getLogger("staticfleet.operator.peering")

PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"


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


@dataclass(slots=True)
class PeeringGate:
    """A readiness gate: open while this replica is the active one."""

    active: bool = False

    def __call__(self) -> bool:
        return self.active


async def watch_peering(
    kube: Callable[[], KubeApi],
    gate: PeeringGate,
    *,
    name: str,
    namespaces: Sequence[str],
    identity: str,
    priority: int,
    interval: float = 5.0,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:
    """Poll the peering object(s) until cancelled; the gate is open while this replica is
    active in every one of them. An unreadable object closes the gate (fail safe: a
    replica that cannot tell stops taking members)."""
    objects = peering_objects(name, namespaces)
    while True:
        try:
            active = True
            for peering in objects:
                # Bounded: a request that hangs must close the gate, not freeze it open.
                async with asyncio.timeout(max(interval, 5.0)):
                    body = await kube().get_custom_object(
                        PEERING_GROUP,
                        PEERING_VERSION,
                        peering.plural,
                        peering.name,
                        peering.namespace,
                    )
                status = (body or {}).get("status") or {}
                active = active and is_active(status, identity, priority, clock())
        except (TimeoutError, KubeError, aiohttp.ClientError) as error:
            log.warning(
                "cannot read the peering object(s) %s: %s", ", ".join(map(str, objects)), error
            )
            active = False
        if active != gate.active:
            log.info("this replica is now %s", "active" if active else "paused")
            gate.active = active
        await asyncio.sleep(interval)
