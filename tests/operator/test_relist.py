"""A pod deleted while Kopf's watch was down: Kopf lists again and keeps the gone pod indexed.

Kopf restarts a watch that cannot resume (410 Gone) with a LIST, indexes what it returns,
and never drops an index entry the LIST no longer shows. The operator checks once after each
relist (observed.stale_pods, passes.relisted) and replaces the member pod that went.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, cast

import kmock
import pytest
from kopf._cogs.clients import watching
from kubernetes_asyncio.client import CoreV1Api

from staticfleet_operator import relists
from staticfleet_operator.kube import KubeApi, Labels, label_selector
from staticfleet_operator.observed import Observed
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.passes import Passes
from tests.operator.kube_harness import (
    GONE,
    NAMESPACE,
    Cluster,
    kopf_watch,
    managed_spec,
    running_cluster,
)


def pod(name: str, uid: str, group: str = "orders", namespace: str = "ns") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "namespace": namespace,
            "labels": {GROUP_LABEL: group},
        }
    }


# Kopf's pod index as the handlers see it: (namespace, group) -> the pods' bodies.
Index = dict[tuple[str, str], list[dict[str, Any]]]


class Lister:
    """The one API call `stale_pods` makes: LIST the member pods of a namespace."""

    def __init__(self, pods: Iterable[dict[str, Any]]) -> None:
        self.pods = list(pods)
        self.calls: list[tuple[str, str]] = []
        self.before_answer: Callable[[], None] | None = None

    async def list_pods(self, namespace: str, labels: Labels) -> list[dict[str, Any]]:
        self.calls.append((namespace, label_selector(labels)))
        if self.before_answer is not None:
            self.before_answer()
        return [p for p in self.pods if p["metadata"].get("namespace", namespace) == namespace]

    @property
    def kube(self) -> KubeApi:
        return cast(KubeApi, self)


def observed(index: Index) -> Observed:
    seen = Observed()
    seen.attach({}, index, {})
    return seen


def names(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


async def test_an_indexed_pod_the_list_does_not_show_is_left_out_until_kopf_drops_it() -> None:
    a, b = pod("orders-0", "u0"), pod("orders-1", "u1")
    logs = pod("logs-0", "l0", "logs", "other")
    index: Index = {("ns", "orders"): [a, b], ("other", "logs"): [logs]}
    seen = observed(index)
    lister = Lister([a, logs])
    kube = lister.kube

    assert await seen.stale_pods(kube) == {("ns", "orders")}
    # One LIST per namespace with indexed pods, of every member pod (the label exists).
    assert lister.calls == [("ns", GROUP_LABEL), ("other", GROUP_LABEL)]
    assert names(await seen.member_pods(kube, "ns", "orders")) == ["orders-0"]
    assert names(await seen.member_pods(kube, "other", "logs")) == ["logs-0"]
    assert len(lister.calls) == 2  # reading the index asked the API nothing

    # A replacement of the same name is another object: shown.
    index[("ns", "orders")] = [a, pod("orders-1", "u2")]
    assert names(await seen.member_pods(kube, "ns", "orders")) == ["orders-0", "orders-1"]
    # And the stale entry went with it: the old body, were Kopf to show it again, is shown.
    index[("ns", "orders")] = [a, b]
    assert names(await seen.member_pods(kube, "ns", "orders")) == ["orders-0", "orders-1"]


async def test_a_pod_indexed_while_the_list_was_on_its_way_is_not_taken_for_gone() -> None:
    a = pod("orders-0", "u0")
    index: Index = {("ns", "orders"): [a]}
    seen = observed(index)
    lister = Lister([a])
    # Created after the API server answered, indexed before the answer is read.
    lister.before_answer = lambda: index[("ns", "orders")].append(pod("orders-1", "u1"))

    assert await seen.stale_pods(lister.kube) == set()
    assert names(await seen.member_pods(lister.kube, "ns", "orders")) == ["orders-0", "orders-1"]


async def test_an_emulator_without_uids_tells_a_replacement_from_the_gone_pod_by_its_body() -> None:
    gone = {"metadata": {"name": "orders-1", "annotations": {"key": "old"}}}
    index: Index = {("ns", "orders"): [gone]}
    seen = observed(index)
    kube = Lister([]).kube
    assert await seen.stale_pods(kube) == {("ns", "orders")}
    assert await seen.member_pods(kube, "ns", "orders") == []
    index[("ns", "orders")] = [{"metadata": {"name": "orders-1", "annotations": {"key": "new"}}}]
    assert names(await seen.member_pods(kube, "ns", "orders")) == ["orders-1"]


async def test_a_secret_the_list_does_not_show_is_left_out_until_it_is_another_object() -> None:
    token = {"metadata": {"name": "orders-member-token", "namespace": "ns"}, "data": {"t": "YQ=="}}
    other = {"metadata": {"name": "other", "namespace": "ns"}, "data": {}}
    secrets = {("ns", "orders-member-token"): [token], ("ns", "other"): [other]}
    seen = Observed()
    seen.attach({}, {}, secrets)

    class Secrets(Lister):
        async def list_opaque_secrets(self, namespace: str) -> list[dict[str, Any]]:
            self.calls.append((namespace, "type=Opaque"))
            return [other]

    lister = Secrets([])
    assert await seen.stale_secrets(lister.kube) == {("ns", "orders-member-token")}
    assert lister.calls == [("ns", "type=Opaque")]
    assert await seen.secret(lister.kube, "ns", "orders-member-token") is None
    assert await seen.secret(lister.kube, "ns", "other") == other
    created = {**token, "data": {"t": "Yg=="}}  # the operator's new Secret, once watched
    secrets[("ns", "orders-member-token")] = [created]
    assert await seen.secret(lister.kube, "ns", "orders-member-token") == created


async def test_listings_coalesce_into_checks_that_request_passes_for_the_stale_groups() -> None:
    ran: list[tuple[str, str]] = []
    passes = Passes(lambda ns, name: _record(ran, ns, name), requeue_seconds=60)
    checks = 0
    answers: list[set[tuple[str, str]]] = [{("ns", "orders")}, set()]

    async def stale() -> set[tuple[str, str]]:
        nonlocal checks
        checks += 1
        if checks == 1:
            passes.relisted("pods", stale, settle_s=0.01)  # another listing while this check runs
        return answers[checks - 1]

    for _ in range(100):  # one event per listed object
        passes.relisted("pods", stale, settle_s=0.01)
    await asyncio.sleep(0.2)
    assert checks == 2  # the burst, then the listing seen during the first check
    assert ran == [("ns", "orders")]
    await passes.close()


async def test_a_failed_check_is_tried_again() -> None:
    passes = Passes(lambda ns, name: _record([], ns, name), requeue_seconds=60)
    attempts = 0

    async def stale() -> set[tuple[str, str]]:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionError("the API server is away")
        return set()

    passes.relisted("pods", stale, settle_s=0.01)
    await asyncio.sleep(1.3)  # RETRY_SECONDS after the failure
    assert attempts == 2
    await passes.close()


async def _record(ran: list[tuple[str, str]], namespace: str, name: str) -> bool:
    ran.append((namespace, name))
    return False


@contextlib.asynccontextmanager
async def watches_down(cluster: Cluster) -> AsyncIterator[None]:
    """Every watch Kopf opens is answered 410 Gone (the API server no longer holds its
    resourceVersion), so Kopf lists again and again and sees no event; the watches open now
    are cut by a new login (it closes the old credentials' sessions)."""
    down = True

    def gone(request: kmock.Request) -> bool:
        return down and kopf_watch(request)

    cluster.emulator[gone] << GONE
    vault = cluster.vault
    assert vault is not None
    logins = len(cluster.tokens)
    async for key, info in vault:
        await vault.invalidate(key, info)
        break
    await cluster.eventually(lambda: len(cluster.tokens) == logins + 1, what="a new login")
    try:
        yield
    finally:
        down = False


async def test_a_member_pod_deleted_while_kopfs_watch_was_down_is_replaced() -> None:
    async with running_cluster(tokens=True) as cluster:
        await cluster.create_group("orders", managed_spec(replicas=2))
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        async with watches_down(cluster):
            [victim] = [
                p for p in await cluster.pods("orders") if p["metadata"]["name"] == "orders-1"
            ]
            await cluster.kube.delete_pod(NAMESPACE, "orders-1")
            # No watch event tells the operator: the check after a relist does.
            await cluster.eventually(
                lambda: cluster.replaced("orders", victim), timeout=20, what="orders-1 recreated"
            )
            assert sorted(names(await cluster.pods("orders"))) == ["orders-0", "orders-1"]
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable again")


async def test_a_token_secret_deleted_while_kopfs_watch_was_down_is_created_again() -> None:
    async with running_cluster(tokens=True) as cluster:
        await cluster.create_group("orders", managed_spec(replicas=2))
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        secret = "orders-member-token"
        before = await cluster.kube.get_secret(NAMESPACE, secret)
        assert before is not None
        async with watches_down(cluster):
            await cluster.kube.call(
                lambda c: CoreV1Api(c).delete_namespaced_secret(secret, NAMESPACE)
            )

            async def created_again() -> bool:
                now = await cluster.kube.get_secret(NAMESPACE, secret)
                return now is not None and now.get("data") != before.get("data")

            await cluster.eventually(created_again, timeout=20, what="the token Secret again")


async def test_each_kind_is_checked_on_its_own() -> None:
    passes = Passes(lambda ns, name: _record([], ns, name), requeue_seconds=60)
    checked: list[str] = []

    def check(kind: str) -> Callable[[], Awaitable[set[tuple[str, str]]]]:
        async def stale() -> set[tuple[str, str]]:
            checked.append(kind)
            return set()

        return stale

    passes.relisted("pods", check("pods"), settle_s=0.01)
    passes.relisted("secrets", check("secrets"), settle_s=0.01)
    await asyncio.sleep(0.1)
    assert sorted(checked) == ["pods", "secrets"]
    await passes.close()


async def test_the_end_of_each_listing_reaches_the_listeners_until_they_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @dataclasses.dataclass
    class Resource:
        plural: str

    async def kopf_stream(**_: Any) -> AsyncIterator[Any]:
        for event in [{"type": None}, watching.Bookmark.LISTED, {"type": "ADDED"}] * 2:
            yield event

    monkeypatch.setattr(relists, "_ORIGINAL", kopf_stream)
    monkeypatch.setattr(relists, "_listeners", [])
    relists.install()
    assert relists.installed()
    heard: list[tuple[str, str | None]] = []

    def stays(plural: str, namespace: str | None) -> bool:
        heard.append((plural, namespace))
        return True

    def leaves(plural: str, namespace: str | None) -> bool:
        heard.append(("once", namespace))
        return False

    def fails(plural: str, namespace: str | None) -> bool:
        raise RuntimeError("a listener's bug")

    relists.add_listener(fails)  # logged; the stream and the other listeners go on
    relists.add_listener(stays)
    relists.add_listener(leaves)
    stream = relists._noticed_watch(resource=Resource("pods"), namespace="ns")
    assert watching.infinite_watch is relists._noticed_watch
    events = [event async for event in stream]

    assert len(events) == 6  # every event passes through, the bookmarks too (Kopf needs them)
    assert heard == [("pods", "ns"), ("once", "ns"), ("pods", "ns")]
