"""Scenario 6: pods labelled like Spark executors, created by the test as a Spark driver
would (no operator-made template): the admission webhook, called by the API server through
the chart's Service, stamps each with a slot and group.instance.id; a replacement executor
for a lost one takes the freed id and rejoins as the same static member."""

from __future__ import annotations

import json
import time
from typing import Any

from e2e.cluster import Cluster, instance_ids_from_env
from e2e.fleet import INSTANCE_ANNOTATION, Record, rows_of, static_rejoins, wait_for
from e2e.groups import adopted_group, apply, member_container, namespace, wait_stable

GROUP = "clicks"
APP = "clickstream"


def executor_pod(number: int) -> dict[str, Any]:
    """What Spark's Kubernetes scheduler backend creates for executor `number` (trimmed to
    what matters here): the executor labels, and the member task's process."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{APP}-exec-{number}",
            "labels": {
                "spark-role": "executor",
                "spark-app-name": APP,
                "spark-exec-id": str(number),
                "staticfleet.dev/group": GROUP,
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "containers": [member_container()],
        },
    }


def test_adopted_executors_get_ids_and_a_replacement_takes_the_freed_one(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    with namespace(cluster, "e2e-spark") as ns:
        apply(cluster, ns, adopted_group(GROUP, APP))
        for number in range(1, 5):
            cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(executor_pod(number)))
        described = wait_stable(cluster, ns, GROUP, 4)
        pods = {pod["metadata"]["name"]: pod for pod in cluster.member_pods(ns, GROUP)}
        ids = {
            name: pod["metadata"]["annotations"][INSTANCE_ANNOTATION] for name, pod in pods.items()
        }
        # Stamped at admission: distinct ids, the lowest slots, in the annotation and the env.
        assert sorted(ids.values()) == [f"{GROUP}-{slot}" for slot in range(4)]
        assert instance_ids_from_env(list(pods.values())) == ids
        generation = described["generation_id"]

        lost = f"{APP}-exec-2"
        freed = ids[lost]
        since_ms = int(time.time() * 1000)
        cluster.kubectl("-n", ns, "delete", "pod", lost, "--wait=true", "--timeout=60s")
        # The driver asks for a new executor; it gets the next executor number.
        cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(executor_pod(5)))
        replacement = wait_for(
            "the replacement executor to be stamped",
            lambda: (
                cluster.get_json("-n", ns, "get", "pod", f"{APP}-exec-5")["metadata"]
                .get("annotations", {})
                .get(INSTANCE_ANNOTATION)
            ),
            timeout_s=30,
        )
        assert replacement == freed
        after = wait_stable(cluster, ns, GROUP, 4)
        admin = cluster.admin()
        wait_for(
            "the replacement's static rejoin",
            lambda: static_rejoins(admin.journal(GROUP), freed, since_ms),
            timeout_s=60,
        )
        journal = admin.journal(GROUP)
        record("replacement_instance_id", replacement)
        record("rebalances_after_replacement", len(rows_of(journal, "rebalance_started", since_ms)))
        assert after["generation_id"] == generation
        assert rows_of(journal, "rebalance_started", since_ms) == []
        assert rows_of(journal, "member_left", since_ms) == []
