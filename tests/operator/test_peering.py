"""Only the active replica is ready and holds the store: Kopf's peering rule and the
handover rule as pure functions, the poller that takes and gives up the store and feeds the
readiness gate, and the gate on the coordinator server's /readyz."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from aiohttp.test_utils import TestClient, TestServer
from kopf._cogs.structs.credentials import Vault

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore, SqliteStore, SystemClock
from coordinator.server import AuthConfig, add_readiness_gate, create_app
from staticfleet_operator.app import default_priority
from staticfleet_operator.kube import Forbidden, KubeApi
from staticfleet_operator.peering import (
    STANDBY_INTERVAL_S,
    HandoverStep,
    PeeringGate,
    PeeringObject,
    handover_step,
    is_active,
    marked_by_another,
    next_poll_s,
    others_alive,
    peering_objects,
    peers_of,
    watch_peering,
)
from tests.coordinator.harness import Harness

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
    refuses would; one kept as None is absent (404: the API answers None)."""

    def __init__(self, objects: dict[str, Any]) -> None:
        super().__init__(Vault({"unused": kopf.ConnectionInfo(server="http://unused")}))
        self.objects = objects
        self.patches: list[dict[str, Any]] = []

    async def get_custom_object(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        path = f"{plural}/{namespace or ''}/{name}"
        if path not in self.objects:
            raise Forbidden(403, "Forbidden", "forbidden")
        body: dict[str, Any] | None = self.objects[path]
        return body

    async def patch_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
    ) -> dict[str, Any] | None:
        # A merge patch of the status, as the API server applies Kopf's.
        body = await self.get_custom_object(group, version, plural, name, namespace)
        self.patches.append(dict(patch))
        if body is None:
            return None
        status = body.setdefault("status", {})
        for key, value in patch["status"].items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        return body


def _watching(
    api: KubeApi,
    gate: PeeringGate,
    holder: Any,
    identity: str,
    priority: int,
    interval: float,
    clock: Any,
    pod: str | None = None,
) -> asyncio.Task[None]:
    """A replica's poller on the peering object "p" (cluster-wide)."""
    return asyncio.create_task(
        watch_peering(
            lambda: api,
            gate,
            holder,
            name="p",
            namespaces=[],
            identity=identity,
            priority=priority,
            interval=interval,
            clock=clock,
            pod=pod,
        )
    )


async def _until(predicate: Any, limit_s: float = 2.0) -> None:
    for _ in range(int(limit_s / 0.005)):  # polls the poller's effect
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never held")


class RecordingHolder:
    """Records what the poller does with the store, and whether the gate was open then."""

    def __init__(self, gate: PeeringGate, mark: str | None = None) -> None:
        self.gate = gate
        self.calls: list[tuple[str, bool]] = []
        self.mark = mark  # who the store says holds it

    async def start(self, holder: str | None = None) -> None:
        self.calls.append(("start", self.gate.active))
        self.mark = holder

    async def suspend(self) -> None:
        self.calls.append(("suspend", self.gate.active))
        self.mark = None

    async def store_holder(self) -> str | None:
        return self.mark


async def test_the_poller_opens_and_closes_the_gate() -> None:
    path = "clusterkopfpeerings//p"
    api = FakePeeringApi({path: {"status": {"me": entry(10)}}})
    gate = PeeringGate()
    holder = RecordingHolder(gate)
    task = _watching(api, gate, holder, "me", 10, 0.01, lambda: NOW)
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
    # The store is loaded before the gate opens, and the gate closed before it is given up.
    assert holder.calls[:4] == [
        ("start", False),
        ("suspend", False),
        ("start", False),
        ("suspend", False),
    ]


def test_others_alive_counts_live_peers_but_this_replica() -> None:
    assert not others_alive({"me": entry(10)}, "me", NOW)
    assert others_alive({"me": entry(10), "ghost": entry(5)}, "me", NOW)
    assert not others_alive({"me": entry(10), "gone": entry(5, seen_ago_s=120)}, "me", NOW)


def test_the_store_is_taken_at_once_alone_and_after_the_wait_beside_another_peer() -> None:
    wait = timedelta(seconds=10)
    later = NOW + timedelta(seconds=4)
    take, give_up = HandoverStep.TAKE, HandoverStep.GIVE_UP
    assert handover_step(False, NOW, False, NOW, wait) is take
    # Beside another live peer (a replica it outranks, or a ghost): not before the wait.
    assert handover_step(False, NOW, True, later, wait) is None
    assert handover_step(False, NOW, True, NOW + wait, wait) is take
    # Paused (or the object unreadable): given up at once; nothing to do when not held.
    assert handover_step(True, None, True, later, wait) is give_up
    assert handover_step(False, None, False, later, wait) is None
    assert handover_step(True, NOW, True, later, wait) is None


def test_a_replica_that_just_took_the_store_looks_again_within_the_standby_interval() -> None:
    second = timedelta(seconds=1)
    wait = 10 * second  # two intervals of 5 s
    assert next_poll_s(False, None, NOW, 5.0, wait) == STANDBY_INTERVAL_S
    assert next_poll_s(False, NOW, NOW, 5.0, wait) == STANDBY_INTERVAL_S  # waiting to take it
    assert next_poll_s(True, NOW, NOW + 9 * second, 5.0, wait) == STANDBY_INTERVAL_S
    assert next_poll_s(True, NOW, NOW + wait, 5.0, wait) == 5.0  # held two intervals
    assert next_poll_s(True, NOW, NOW + wait, 0.01, wait) == 0.01  # never above `interval`


async def test_of_two_replicas_started_together_the_outranked_gives_the_store_up_soon() -> None:
    """Each found itself alone at its first look: the outranked one took the store, and
    gives it up at its next look, a standby interval later, not a whole interval."""
    path = "clusterkopfpeerings//p"
    api = FakePeeringApi({path: {"status": {"me": entry(10)}}})
    gate = PeeringGate()
    holder = RecordingHolder(gate)
    task = _watching(api, gate, holder, "me", 10, 30.0, lambda: NOW)
    try:
        await _until(lambda: gate.active)
        api.objects[path] = {"status": {"me": entry(10), "other": entry(11)}}
        await _until(lambda: not gate.active, limit_s=10 * STANDBY_INTERVAL_S)  # not 30 s
        assert holder.calls == [("start", False), ("suspend", False)]
    finally:
        task.cancel()


async def test_a_replica_waits_two_intervals_while_the_store_is_marked_held_by_a_peer() -> None:
    path = "clusterkopfpeerings//p"
    api = FakePeeringApi({path: {"status": {"me": entry(11), "old": entry(10)}}})
    gate = PeeringGate()
    holder = RecordingHolder(gate, mark="old")  # "old" has not released it (or died)
    now = [NOW]
    task = _watching(api, gate, holder, "me", 11, 0.01, lambda: now[0])
    try:
        await asyncio.sleep(0.1)  # ten polls at the same instant: the wait has not passed
        assert holder.calls == [] and not gate.active
        now[0] = NOW + timedelta(seconds=0.02)
        await _until(lambda: gate.active)
        assert holder.calls == [("start", False)] and holder.mark == "me"
    finally:
        task.cancel()


async def test_a_replica_takes_a_released_store_at_once_beside_a_live_peer() -> None:
    path = "clusterkopfpeerings//p"
    api = FakePeeringApi({path: {"status": {"me": entry(11), "old": entry(10)}}})
    gate = PeeringGate()
    holder = RecordingHolder(gate, mark="old")
    # The clock is frozen: the two intervals never pass.
    task = _watching(api, gate, holder, "me", 11, 0.01, lambda: NOW)
    try:
        await asyncio.sleep(0.1)
        assert not gate.active
        holder.mark = None  # "old" gave the store up at its own poll
        await _until(lambda: gate.active)
        assert holder.mark == "me"
    finally:
        task.cancel()


async def test_a_replica_that_is_paused_gives_the_store_up_and_loads_it_anew(
    tmp_path: Any,
) -> None:
    """Two replicas on one SQLite file: what the active one wrote is what the next loads."""
    db = tmp_path / "coordinator.db"
    path = "clusterkopfpeerings//p"
    api = FakePeeringApi({path: {"status": {"a": entry(10)}}})
    first, second = Harness(store=SqliteStore(db)), Harness(store=SqliteStore(db))
    gates = PeeringGate(), PeeringGate()
    for harness in (first, second):
        await harness.store.open()  # as run_operator opens it at the replica's start
    tasks = [_watching(api, gates[0], first.coordinator, "a", 10, 0.01, lambda: NOW)]
    try:
        await _until(lambda: gates[0].active)
        assert not second.coordinator.is_ready  # not started: not even loaded
        await first.form_group(["i-0", "i-1"])
        generation = first.coordinator.generation_of("g")
        # "b" starts (a rolling update), lists itself and outranks "a".
        tasks.append(_watching(api, gates[1], second.coordinator, "b", 11, 0.01, lambda: NOW))
        await _until(lambda: not gates[0].active)
        assert not first.coordinator.is_ready
        # "a" is still listed alive, and the clock does not move: "b" takes the store at
        # once because "a" marked it released.
        await _until(lambda: gates[1].active)
        assert await second.coordinator.store_holder() == "b"
        assert second.coordinator.generation_of("g") == generation
        (described,) = await second.coordinator.describe_groups(["g"])
        assert {m.group_instance_id for m in described.members} == {"i-0", "i-1"}
    finally:
        for task in tasks:
            task.cancel()
        await first.coordinator.close()
        await second.coordinator.close()


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


async def test_a_replica_that_does_not_hold_the_store_looks_every_second() -> None:
    """`helm install` makes the peering object after the operator's Deployment: a starting
    replica's first look may find none. The second look comes a second later, not a whole
    interval (5 s) later."""
    path = "clusterkopfpeerings//p"
    api = FakePeeringApi({path: None})  # not made yet
    gate = PeeringGate()
    holder = RecordingHolder(gate)
    task = _watching(api, gate, holder, "me", 10, 5.0, lambda: NOW)
    try:
        await asyncio.sleep(0.1)
        assert not gate.active  # the first look found no object
        api.objects[path] = {"status": {"me": entry(10)}}
        await _until(lambda: gate.active)  # within 2 s, not 5
    finally:
        task.cancel()


async def test_a_replica_lists_itself_where_kopfs_first_keepalive_found_no_object() -> None:
    """Kopf's keep-alive wrote to a peering object that did not exist yet (dropped: "not
    found") and writes again only a lifetime less 5-10 s later. The poller lists the replica
    in the object once it exists, as Kopf's keep-alive would, and the replica is active at
    once instead of unready for 50-55 s (e2e scenario 2 measured 58-61 s)."""
    path = "clusterkopfpeerings//p"
    api = FakePeeringApi({path: None})
    gate = PeeringGate()
    holder = RecordingHolder(gate)
    task = _watching(api, gate, holder, "me", 10, 5.0, lambda: NOW)
    try:
        await asyncio.sleep(0.1)
        api.objects[path] = {}  # Helm made it; Kopf's next write is 50-55 s away
        await _until(lambda: gate.active)
    finally:
        task.cancel()
    lastseen = NOW.isoformat()
    assert api.patches == [
        {"status": {"me": {"priority": 10, "lifetime": 60, "lastseen": lastseen}}}
    ]
    assert holder.calls == [("start", False)]


async def test_an_entry_once_listed_is_kopfs_to_keep_or_remove() -> None:
    """Once the replica was seen listed, the poller never writes its entry again: Kopf's
    keep-alive removes it when the operator stops, and a poller still running then must
    not list a replica that is going away."""
    path = "clusterkopfpeerings//p"
    api = FakePeeringApi({path: {"status": {"me": entry(10)}}})
    gate = PeeringGate()
    holder = RecordingHolder(gate)
    task = _watching(api, gate, holder, "me", 10, 0.01, lambda: NOW)
    try:
        await _until(lambda: gate.active)
        api.objects[path] = {"status": {}}  # Kopf's last keep-alive removed the entry
        await _until(lambda: not gate.active)
        await asyncio.sleep(0.1)  # ten more polls
    finally:
        task.cancel()
    assert api.patches == []
    assert not gate.active


def test_a_mark_of_this_pods_previous_process_does_not_count() -> None:
    me = "sf-staticfleet-7d9-abcde-1234abcd"
    # The kubelet restarted the container: the mark names the same pod, another process.
    assert not marked_by_another(
        "sf-staticfleet-7d9-abcde-9f9f9f9f", me, "sf-staticfleet-7d9-abcde"
    )
    # Another pod of the Deployment (a prefix of a name is not the name).
    assert marked_by_another("sf-staticfleet-7d9-abcdf-9f9f9f9f", me, "sf-staticfleet-7d9-abcde")
    assert marked_by_another("sf-staticfleet-7d9-abcde-x-9f9f9f9f", me, "sf-staticfleet-7d9-abcd")
    # Outside a pod (no POD_NAME) only this very process's own mark is its own.
    assert marked_by_another("host-9f9f9f9f", "host-1234abcd", None)
    assert not marked_by_another("host-1234abcd", "host-1234abcd", None)
    assert not marked_by_another(None, me, None)


async def test_a_restarted_container_takes_its_dead_predecessors_store_at_once() -> None:
    """A crash: the peering object still lists the dead process alive (its lifetime has not
    run out) and the store still carries its mark; the restarted container in the same pod
    loads at once instead of waiting two intervals."""
    path = "clusterkopfpeerings//p"
    ghost = "pod-a-0000dead"
    api = FakePeeringApi({path: {"status": {"pod-a-1234abcd": entry(11), ghost: entry(10)}}})
    gate = PeeringGate()
    holder = RecordingHolder(gate, mark=ghost)
    # The clock is frozen: the two intervals never pass.
    task = _watching(api, gate, holder, "pod-a-1234abcd", 11, 0.01, lambda: NOW, pod="pod-a")
    try:
        await _until(lambda: gate.active)
        assert holder.mark == "pod-a-1234abcd"
    finally:
        task.cancel()
