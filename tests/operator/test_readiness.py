"""Readiness after an operator restart waits for the groups' member tokens (readiness.py).

The unit tests drive `TokensGate` with a fake clock; the kmock test runs the real operator
process (`run_operator`) against kmock with groups that exist before it starts, as after a
restart, and checks that the first 200 on /readyz comes only once a member's token works.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib

import aiohttp
import kmock
import kopf

from coordinator.server import AuthConfig
from staticfleet.kafka.broker import free_port
from staticfleet_operator.app import OperatorOptions, run_operator
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.readiness import TokensGate
from tests.operator.kube_harness import (
    NAMESPACE,
    consumer_group,
    declare_resources,
    managed_spec,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_gate_is_closed_until_the_groups_are_listed() -> None:
    gate = TokensGate()
    assert not gate()
    gate.expect([])
    assert gate()


def test_gate_opens_once_every_listed_group_was_reconciled() -> None:
    gate = TokensGate()
    gate.reconciled(GroupRef("ns", "early"))  # a pass may run before the listing answers
    gate.expect([GroupRef("ns", "early"), GroupRef("ns", "a"), GroupRef("ns", "b")])
    assert not gate()
    gate.reconciled(GroupRef("ns", "a"))
    assert not gate()
    gate.reconciled(GroupRef("ns", "b"))
    assert gate()
    gate.reconciled(GroupRef("ns", "created-later"))
    assert gate()


def test_gate_gives_up_on_a_group_never_reconciled_after_the_bound() -> None:
    clock = FakeClock()
    gate = TokensGate(max_wait_s=60, clock=clock)
    gate.expect([GroupRef("ns", "a"), GroupRef("ns", "deleted-in-between")])
    clock.now += 3600  # no pass yet (a standby replica): the bound has not started
    assert not gate()
    gate.reconciled(GroupRef("ns", "a"))
    clock.now += 59
    assert not gate()
    clock.now += 1
    assert gate() and gate.gave_up


def test_the_bound_starts_with_the_first_pass_even_one_that_fails() -> None:
    """A restarted operator whose every pass failed (a pod create refused by its own pod
    webhook, unreachable until the operator is Ready: docs/node.md, scenario 11c) was never
    ready: the bound ran from the first pass that succeeded."""
    clock = FakeClock()
    gate = TokensGate(max_wait_s=60, clock=clock)
    gate.expect([GroupRef("ns", "a")])
    gate.pass_started()  # and failed before its token step, every time
    clock.now += 59
    assert not gate()
    clock.now += 1
    assert gate() and gate.gave_up


TOKEN = "members-token-of-orders-0123456789"


async def test_after_a_restart_ready_only_once_member_tokens_are_registered() -> None:
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        answers = await _restart_until_ready(emulator, server, broken=True)
        assert 503 in answers  # it was unready before (the gate was really consulted)


def lists_pods(request: kmock.Request) -> bool:
    plural = request.resource.plural if request.resource is not None else None
    method = str(request.method.value).upper() if request.method is not None else ""
    return plural == "pods" and method == "GET"


async def test_ready_from_the_listed_tokens_without_waiting_for_the_passes() -> None:
    """The pods' informer never lists (every GET of pods answers 500), so no pass of the
    managed group can finish: readiness comes from the tokens registered off the listing.
    (A group whose Secret is missing waits for its pass: it is not in this test.)"""
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        emulator[lists_pods] << 500
        await _restart_until_ready(emulator, server, broken=False)
        assert list(emulator[lists_pods])  # the informer did try, and was refused


async def _restart_until_ready(
    emulator: kmock.KubernetesEmulator, server: kmock.Server, *, broken: bool
) -> list[int]:
    """Groups and their Secrets as a restarted operator finds them (`broken`: and a group
    whose Secret is missing); the operator started; /readyz polled until 200, when a member
    with the group's token must be let in at once. Returns every /readyz answer."""
    declare_resources(emulator)
    url = str(server.url).rstrip("/")
    groups = f"/apis/staticfleet.dev/v1alpha1/namespaces/{NAMESPACE}/consumergroups"
    secrets = f"/api/v1/namespaces/{NAMESPACE}/secrets"
    async with aiohttp.ClientSession() as session:
        created = [consumer_group("orders", managed_spec("orders", replicas=0))]
        if broken:
            # A group whose user Secret is missing must not hold readiness back.
            spec = managed_spec("broken", replicas=0, tokenSecretRef={"name": "nope", "key": "t"})
            created.append(consumer_group("broken", spec))
        for group in created:
            async with session.post(url + groups, json=group) as r:
                assert r.status < 300
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "orders-member-token", "namespace": NAMESPACE},
            "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
        }
        async with session.post(url + secrets, json=secret) as r:
            assert r.status < 300

    port = free_port()
    options = OperatorOptions(
        namespaces=(NAMESPACE,),
        store="memory://",
        coordinator_host="127.0.0.1",
        coordinator_port=port,
        interval=0.2,
        gc_freeze_interval=0,  # a test process: its collector stays as it is
    )
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = True
    settings.posting.enabled = False
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_operator(
            options,
            AuthConfig(admin_tokens=frozenset({"admin-token-123456"})),
            stop_flag=stop,
            credentials=kopf.ConnectionInfo(server=url, default_namespace=NAMESPACE),
            settings=settings,
        )
    )
    base = f"http://127.0.0.1:{port}"
    beat = {"group_id": "orders", "generation_id": 1, "member_id": "nobody"}
    answers: list[int] = []
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(2000):
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with session.get(f"{base}/readyz") as r:
                        answers.append(r.status)
                        if r.status == 200:
                            break
                await asyncio.sleep(0.005)
            assert answers and answers[-1] == 200, answers[-5:]
            # The moment it is ready, a member with the group's token is let in.
            async with session.post(
                f"{base}/v1/groups/orders/heartbeat",
                json=beat,
                headers={"Authorization": f"Bearer {TOKEN}"},
            ) as r:
                assert r.status == 200, await r.text()
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    return answers
