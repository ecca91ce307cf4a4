"""Watch, don't poll: a settled fleet costs the API server nothing beyond the watches, a
deleted pod is replaced on its event, and the webhook answers from the watched stores.

The operator's own API client is counted, from the emulator's record of the requests it
received (Kopf's watches go through Kopf's client, another User-Agent, and are not; the
operator's own informer watches were opened before the counted windows). The
harness's requeue interval is 0.1 s: a polling operator would make dozens of requests in
each quiet window below.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

from staticfleet_operator.kube import USER_AGENT
from staticfleet_operator.members import INSTANCE_ID_ANNOTATION
from tests.operator.kube_harness import NAMESPACE, Cluster, made_by, managed_spec, running_cluster
from tests.operator.test_handlers_kmock import adopted_spec, executor

QUIET_SECONDS = 2.0


@contextmanager
def counted(cluster: Cluster) -> Iterator[list[tuple[str, str]]]:
    """Every request the operator's API client made while inside (filled on leaving)."""
    seen: list[tuple[str, str]] = []
    before = len(list(cluster.emulator))
    try:
        yield seen
    finally:
        seen.extend(
            (str(request.method.value), request.url.path)
            for request in list(cluster.emulator)[before:]
            if made_by(request, USER_AGENT)
        )


async def _quiet(cluster: Cluster) -> None:
    """Until no pass is running or due (what the group's events asked for is done)."""

    def idle() -> bool:
        runner = cluster.operator.passes
        return runner is not None and runner.running == 0 and not runner.due

    await cluster.eventually(idle, timeout=30, what="no pass running or due")


async def test_a_settled_group_makes_no_api_request() -> None:
    async with running_cluster() as cluster:
        await cluster.create_group("orders", managed_spec(replicas=3))
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")
        await _quiet(cluster)
        passes_before = cluster.passes_done()
        with counted(cluster) as requests:
            await asyncio.sleep(QUIET_SECONDS)
        assert requests == []
        # Nor do passes run on a clock: at the harness's 0.1 s interval a poller would run
        # about 20 here. A late event (a member pod's status, a member missing its session
        # on a loaded machine) may still ask for one, and it reads only the indices.
        assert cluster.passes_done() - passes_before <= 3


async def test_a_deleted_pod_is_replaced_on_its_event() -> None:
    async with running_cluster(interval=3600) as cluster:
        await cluster.create_group("orders", managed_spec(replicas=3))
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")
        await _quiet(cluster)
        [victim] = [p for p in await cluster.pods("orders") if p["metadata"]["name"] == "orders-1"]
        deleted = time.monotonic()
        await cluster.kube.delete_pod(NAMESPACE, "orders-1")

        # The requeue interval (an hour here) plays no part: the pod's events drive it.
        await cluster.eventually(
            lambda: cluster.replaced("orders", victim), timeout=20, what="orders-1 recreated"
        )
        assert time.monotonic() - deleted < 20


async def test_the_webhook_answers_from_the_indices() -> None:
    async with running_cluster(webhook=True) as cluster:
        await cluster.create_group("spark", adopted_spec())
        await cluster.eventually(
            lambda: _has_status(cluster, "spark"), what="the group's first pass"
        )
        await cluster.admit_and_create(executor("exec-0"))  # its token Secret exists now
        await _quiet(cluster)
        with counted(cluster) as requests:
            admitted = await cluster.admit_and_create(executor("exec-1"))
        assert admitted["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] == "spark-job-1"
        # The admission itself asked the API server nothing (a pass its pod's event asked
        # for may have written status since: that is not the admission path).
        assert [r for r in requests if r[0] == "GET"] == []


async def _has_status(cluster: Cluster, name: str) -> bool:
    body = await cluster.kube.get_group(NAMESPACE, name)
    return bool((body or {}).get("status"))
