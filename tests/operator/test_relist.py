"""A pod or Secret deleted while the watch was down: the informer lists again and drops it.

When the API server no longer holds the resourceVersion a watch would resume from (410
Gone), the operator's informer LISTs again and compares the listing with its store: what
the listing lacks went meanwhile, is dropped and told as DELETED, and its group gets a pass
(Kopf's indices keep such entries for ever: docs/operator.md, "Kopf: what the operator
relies on").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import kmock

from staticfleet_operator.informer import MEMBER_PODS, OPAQUE_SECRETS, Informer
from staticfleet_operator.kube import CORE, USER_AGENT, KubeApi, KubeError, path
from staticfleet_operator.owned import GROUP_LABEL
from tests.operator.kube_harness import (
    GONE,
    NAMESPACE,
    Cluster,
    made_by,
    managed_spec,
    running_cluster,
)


def pod(name: str, uid: str, group: str = "orders", namespace: str = "ns", rv: str = "1") -> Any:
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "namespace": namespace,
            "resourceVersion": rv,
            "labels": {GROUP_LABEL: group},
            "managedFields": [{"manager": "kubectl"}],
        }
    }


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


Told = list[tuple[str, str]]


def recorder(told: Told) -> Callable[[str, dict[str, Any]], None]:
    return lambda kind, body: told.append((kind, body["metadata"]["name"]))


def test_a_listing_drops_what_it_lacks_in_its_own_scope_only() -> None:
    told: Told = []
    pods = Informer(lambda: cast(KubeApi, None), MEMBER_PODS, ("ns", "other"), recorder(told))
    a, b, c = pod("orders-0", "u0"), pod("orders-1", "u1"), pod("logs-0", "l0", "logs", "other")
    pods.replace("ns", [a, b])
    pods.replace("other", [c])
    assert names(pods.group(("ns", "orders"))) == ["orders-0", "orders-1"]
    assert "managedFields" not in pods.group(("ns", "orders"))[0]["metadata"]
    told.clear()

    assert pods.replace("ns", [a, pod("orders-2", "u2")]) == 1
    assert told == [("ADDED", "orders-2"), ("DELETED", "orders-1")]
    assert names(pods.group(("ns", "orders"))) == ["orders-0", "orders-2"]
    assert names(pods.group(("other", "logs"))) == ["logs-0"]  # another scope's listing
    # A pod that loses its group label leaves the group as if deleted; an unlabelled one,
    # never kept, is never told.
    unlabelled = {"metadata": {**a["metadata"], "labels": {}, "resourceVersion": "2"}}
    told.clear()
    pods.apply("MODIFIED", unlabelled)
    pods.apply("ADDED", {"metadata": {"name": "web-0", "namespace": "ns", "labels": {}}})
    assert told == [("DELETED", "orders-0")]
    assert names(pods.group(("ns", "orders"))) == ["orders-2"]


def test_only_opaque_secrets_are_kept_and_of_them_their_data() -> None:
    secrets = Informer(lambda: cast(KubeApi, None), OPAQUE_SECRETS)
    token = {
        "metadata": {"name": "orders-member-token", "namespace": "ns"},
        "data": {"token": "YQ=="},
        "stringData": {"ignored": "x"},
    }
    tls = {"metadata": {"name": "tls", "namespace": "ns"}, "type": "kubernetes.io/tls"}
    secrets.replace(None, [token, tls])
    assert secrets.get("ns", "tls") is None
    kept = secrets.get("ns", "orders-member-token")
    assert kept is not None and kept["data"] == {"token": "YQ=="} and "stringData" not in kept


class FakeApi:
    """The two calls an informer makes: each LIST answers the next listing, each WATCH
    plays the next script (events, then an error or the end of the stream); with no
    script left a watch waits for ever."""

    def __init__(self, listings: list[list[Any]], scripts: list[list[Any]]) -> None:
        self.listings, self.scripts = listings, scripts
        self.lists = 0
        self.watched_from: list[str | None] = []

    async def list_objects(self, request: Any, **params: Any) -> dict[str, Any]:
        self.lists += 1
        items = self.listings.pop(0)
        return {"metadata": {"resourceVersion": f"list-{self.lists}"}, "items": items}

    async def watch(
        self, request: Any, *, resource_version: str | None, timeout_seconds: int, **_: Any
    ) -> AsyncIterator[dict[str, Any]]:
        self.watched_from.append(resource_version)
        if not self.scripts:
            await asyncio.Event().wait()
        for step in self.scripts.pop(0):
            if isinstance(step, Exception):
                raise step
            yield step


async def test_a_pod_deleted_while_the_watch_was_down_is_dropped_on_the_relist() -> None:
    a, b = pod("orders-0", "u0"), pod("orders-1", "u1")
    moved = pod("orders-0", "u0", rv="5")
    api = FakeApi(
        listings=[[a, b], [moved]],  # orders-1 went while no watch ran
        scripts=[
            [{"type": "MODIFIED", "object": moved}],  # the server ends the stream
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}],
            [KubeError(410, "Expired", "too old resource version")],
        ],
    )
    told: Told = []
    pods = Informer(lambda: cast(KubeApi, api), MEMBER_PODS, ("ns",), recorder(told))
    pods.start()
    try:
        await asyncio.wait_for(pods.synced.wait(), 5)
        for _ in range(200):
            if api.lists == 2 and len(api.watched_from) == 4:
                break
            await asyncio.sleep(0.01)
    finally:
        await pods.stop()

    # Resumed from the last version seen (a bookmark's too), listed again after the 410.
    assert api.watched_from == ["list-1", "5", "7", "list-2"]
    assert told == [
        ("ADDED", "orders-0"),
        ("ADDED", "orders-1"),
        ("MODIFIED", "orders-0"),
        ("DELETED", "orders-1"),
    ]
    assert names(pods.group(("ns", "orders"))) == ["orders-0"]
    assert pods.get("ns", "orders-1") is None
    assert pods.relists == 1


async def test_a_failed_first_listing_is_retried_and_synced_waits_for_it() -> None:
    class Flaky(FakeApi):
        async def list_objects(self, request: Any, **params: Any) -> dict[str, Any]:
            if self.lists == 0:
                self.lists += 1
                raise ConnectionError("the API server is away")
            return await super().list_objects(request, **params)

    api = Flaky(listings=[[pod("a-0", "a")]], scripts=[])
    pods = Informer(lambda: cast(KubeApi, api), MEMBER_PODS, ("ns",))
    pods.start()
    try:
        await asyncio.sleep(0.1)
        assert not pods.synced.is_set()  # the listing failed: reads keep waiting
        await asyncio.wait_for(pods.synced.wait(), 5)  # listed after the backoff
    finally:
        await pods.stop()
    assert names(pods.group(("ns", "orders"))) == ["a-0"]


def informer_watch(request: kmock.Request) -> bool:
    return request.params.get("watch") == "true" and made_by(request, USER_AGENT)


@contextlib.asynccontextmanager
async def watches_down(cluster: Cluster) -> AsyncIterator[None]:
    """The operator's informers stop watching; on leaving they start again, resume from
    the version they last saw and are answered 410 Gone (the API server no longer holds
    it, as after a long cut), so they list again."""
    informers = [cluster.operator.observed.pods, cluster.operator.observed.secrets]
    relists = 0
    for informer in informers:
        assert informer is not None
        relists += informer.relists
        await informer.stop()
    yield
    down = True

    def gone(request: kmock.Request) -> bool:
        return down and informer_watch(request)

    cluster.emulator[gone] << GONE
    for informer in informers:
        assert informer is not None
        informer.start()
    await cluster.eventually(
        lambda: sum(i.relists for i in informers if i is not None) >= relists + 2,
        what="both informers listed again",
    )
    down = False


async def test_a_member_pod_deleted_while_the_watch_was_down_is_replaced() -> None:
    async with running_cluster(tokens=True) as cluster:
        await cluster.create_group("orders", managed_spec(replicas=2))
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        pods = cluster.operator.observed.pods
        assert pods is not None
        async with watches_down(cluster):
            [victim] = [
                p for p in await cluster.pods("orders") if p["metadata"]["name"] == "orders-1"
            ]
            await cluster.kube.delete_pod(NAMESPACE, "orders-1")

            async def gone() -> bool:
                return "orders-1" not in names(await cluster.pods("orders"))

            await cluster.eventually(gone, what="orders-1 gone")
            assert pods.get(NAMESPACE, "orders-1") is not None  # no watch told the operator
        # The informer's listing after the 410 does.
        await cluster.eventually(
            lambda: cluster.replaced("orders", victim), timeout=20, what="orders-1 recreated"
        )
        assert sorted(names(await cluster.pods("orders"))) == ["orders-0", "orders-1"]
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable again")


async def test_a_token_secret_deleted_while_the_watch_was_down_is_created_again() -> None:
    async with running_cluster(tokens=True) as cluster:
        await cluster.create_group("orders", managed_spec(replicas=2))
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        secret = "orders-member-token"
        before = await cluster.kube.get_secret(NAMESPACE, secret)
        assert before is not None
        async with watches_down(cluster):
            await cluster.kube.call("DELETE", path(CORE, "secrets", NAMESPACE, secret))

        async def created_again() -> bool:
            now = await cluster.kube.get_secret(NAMESPACE, secret)
            return now is not None and now.get("data") != before.get("data")

        await cluster.eventually(created_again, timeout=20, what="the token Secret again")
