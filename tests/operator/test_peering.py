"""Only the active replica is ready: Kopf's peering rule as a pure function, the poller
that feeds the readiness gate, and the gate on the coordinator server's /readyz."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from aiohttp.test_utils import TestClient, TestServer
from kopf._cogs.structs.credentials import Vault

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore, SystemClock
from coordinator.server import AuthConfig, add_readiness_gate, create_app
from staticfleet_operator.app import default_priority
from staticfleet_operator.kube import Forbidden, KubeApi
from staticfleet_operator.peering import (
    PeeringGate,
    PeeringObject,
    is_active,
    peering_objects,
    peers_of,
    watch_peering,
)

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def entry(priority: int, seen_ago_s: float = 5, lifetime: int = 60) -> dict[str, Any]:
    # Kopf writes lastseen as an ISO timestamp; older versions without a zone (UTC).
    lastseen = (NOW - timedelta(seconds=seen_ago_s)).replace(tzinfo=None).isoformat()
    return {"priority": priority, "lastseen": lastseen, "lifetime": lifetime}


def test_the_highest_live_priority_is_active_and_the_others_stand_by() -> None:
    status = {"a": entry(10), "b": entry(20)}
    assert is_active(status, "b", 20, NOW)
    assert not is_active(status, "a", 10, NOW)


def test_equal_priorities_pause_each_other_as_in_kopf() -> None:
    status = {"a": entry(10), "b": entry(10)}
    assert not is_active(status, "a", 10, NOW)
    assert not is_active(status, "b", 10, NOW)


def test_dead_peers_do_not_count_and_an_unregistered_replica_is_not_active() -> None:
    status = {"a": entry(10), "b": entry(99, seen_ago_s=61)}  # b's lifetime ran out
    assert is_active(status, "a", 10, NOW)
    assert not is_active(status, "c", 50, NOW)  # not in the object yet
    assert not is_active({"a": entry(10, seen_ago_s=70)}, "a", 10, NOW)  # ourselves expired


def test_unreadable_entries_are_skipped() -> None:
    status: dict[str, Any] = {"a": entry(10), "junk": "x", "bad": {"priority": 1}}
    assert [peer.identity for peer in peers_of(status)] == ["a"]


def test_peering_objects_cluster_wide_or_per_namespace() -> None:
    assert peering_objects("p", []) == [PeeringObject("clusterkopfpeerings", "p")]
    assert peering_objects("p", ["a", "b"]) == [
        PeeringObject("kopfpeerings", "p", "a"),
        PeeringObject("kopfpeerings", "p", "b"),
    ]


class FakePeeringApi(KubeApi):
    """Answers from a dict by plural/namespace/name; a missing one raises as a server that
    refuses would."""

    def __init__(self, objects: dict[str, Any]) -> None:
        super().__init__(Vault({"unused": kopf.ConnectionInfo(server="http://unused")}))
        self.objects = objects

    async def get_custom_object(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        path = f"{plural}/{namespace or ''}/{name}"
        if path not in self.objects:
            raise Forbidden(403, "Forbidden", "forbidden")
        body: dict[str, Any] = self.objects[path]
        return body


async def _until(predicate: Any) -> None:
    for _ in range(400):  # polls the poller's effect: 2 s at most
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never held")


async def test_the_poller_opens_and_closes_the_gate() -> None:
    path = "clusterkopfpeerings//p"
    api = FakePeeringApi({path: {"status": {"me": entry(10)}}})
    gate = PeeringGate()
    task = asyncio.create_task(
        watch_peering(
            lambda: api,
            gate,
            name="p",
            namespaces=[],
            identity="me",
            priority=10,
            interval=0.01,
            clock=lambda: NOW,
        )
    )
    try:
        await _until(lambda: gate.active)
        api.objects[path] = {"status": {"me": entry(10), "other": entry(11)}}
        await _until(lambda: not gate.active)
        api.objects[path] = {"status": {"me": entry(10)}}
        await _until(lambda: gate.active)
        del api.objects[path]  # cannot read it: fail safe, stand by
        await _until(lambda: not gate.active)
    finally:
        task.cancel()


async def test_a_closed_gate_makes_the_server_unready_and_refuse_members() -> None:
    coordinator = GroupCoordinator(CoordinatorConfig(), SystemClock(), MemoryStore())
    app = create_app(coordinator, AuthConfig(admin_tokens=frozenset({"t"})))
    gate = PeeringGate()
    add_readiness_gate(app, gate)
    async with TestClient(TestServer(app)) as client:
        headers = {"Authorization": "Bearer t"}
        assert (await client.get("/readyz")).status == 503
        assert (await client.get("/v1/groups", headers=headers)).status == 503
        gate.active = True
        assert (await client.get("/readyz")).status == 200
        assert (await client.get("/v1/groups", headers=headers)).status == 200
        assert (await client.get("/healthz")).status == 200


def test_a_restarted_operator_outranks_its_own_ghost() -> None:
    """The default priority grows with the start time, so a container restarted after a
    crash is active at once, while its dead predecessor's entry has not expired yet."""
    ghost = default_priority(now=1_000.0)
    restarted = default_priority(now=1_000.5)
    assert restarted > ghost
    status = {"ghost": entry(ghost, seen_ago_s=10), "new": entry(restarted, seen_ago_s=1)}
    assert is_active(status, "new", restarted, NOW)
    assert not is_active(status, "ghost", ghost, NOW)
