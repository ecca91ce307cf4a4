"""A replacement executor admitted right after its predecessor is deleted, before any
reconcile pass has seen the deletion, still gets the freed slot.

Found by the e2e scenario against a real API server: Spark's driver (here: the test) asks
for a new executor as soon as the old pod is gone, and the webhook used to free slots only
on the operator's periodic pass, so the replacement got a new slot (and a new instance id:
a rebalance static membership exists to avoid). The reconcile interval here is far longer
than the test, so only the admission path can free the slot.
"""

from __future__ import annotations

from coordinator.client import env as member_env
from staticfleet_operator.members import INSTANCE_ID_ANNOTATION
from staticfleet_operator.owned import GROUP_LABEL
from tests.operator.kube_harness import Cluster, env_of, running_cluster
from tests.operator.test_handlers_kmock import adopted_spec, executor


async def _observed(cluster: Cluster) -> bool:
    body = await cluster.kube.get_group("default", "spark")
    return bool(((body or {}).get("status") or {}).get("observedGeneration"))


async def _gone(cluster: Cluster, name: str) -> bool:
    pods = await cluster.kube.list_pods("default", {GROUP_LABEL: "spark"})
    return all(pod["metadata"]["name"] != name for pod in pods)


async def test_replacement_admitted_before_a_reconcile_pass_gets_the_freed_slot() -> None:
    async with running_cluster(interval=3600, webhook=True) as cluster:
        await cluster.create_group("spark", adopted_spec())
        # The operator is up (its one pass wrote status) before the first admission.
        await cluster.eventually(lambda: _observed(cluster), what="the first pass")
        for index in range(3):
            await cluster.admit_and_create(executor(f"exec-{index}"))
        await cluster.kube.delete_pod("default", "exec-1")
        await cluster.eventually(lambda: _gone(cluster, "exec-1"), what="exec-1 deleted")
        replacement = await cluster.admit_and_create(executor("exec-3"))
        assert replacement["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] == "spark-job-1"
        assert env_of(replacement)[member_env.INSTANCE_ID] == "spark-job-1"
        # A pod created while every slot is held still gets a new one.
        newcomer = await cluster.admit_and_create(executor("exec-4"))
        assert newcomer["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] == "spark-job-3"
