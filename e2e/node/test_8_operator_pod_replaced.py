"""Scenario 8: the operator pod is deleted, as a node drain, an eviction or an upgrade that
changes the pod would; the Deployment makes a new pod, whose coordinator opens the same
SQLite file on the chart's default PersistentVolumeClaim. The group keeps its generation (no
rebalance), its static members and every committed offset (none goes back)."""

from __future__ import annotations

import time

from e2e.cluster import OPERATOR_NAMESPACE, Cluster, pod_ready
from e2e.fleet import Record, wait_for
from e2e.groups import PARTITIONS, apply, managed_group, namespace, wait_stable

GROUP = "durable"
REPLICAS = 3


def test_operator_pod_replaced_keeps_the_group_and_its_offsets(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    with namespace(cluster, "e2e-durable") as ns:
        apply(cluster, ns, managed_group(GROUP, replicas=REPLICAS))
        wait_stable(cluster, ns, GROUP, REPLICAS)
        admin = cluster.admin()
        before = wait_for(
            f"a committed offset for each of the {PARTITIONS} partitions",
            lambda: found if len(found := admin.committed_offsets(GROUP)) == PARTITIONS else None,
            timeout_s=60,
            describe=lambda: str(admin.committed_offsets(GROUP)),
        )
        described = admin.describe(GROUP)
        generation = described["generation_id"]
        members = {m["group_instance_id"] for m in described["members"]}

        old = cluster.operator_pod()
        assert old is not None
        deleted_at = time.time()
        cluster.kubectl(
            "-n", OPERATOR_NAMESPACE, "delete", "pod", old["metadata"]["name"], "--wait=true"
        )
        new = wait_for(
            "a new operator pod, Ready",
            lambda: (
                pod
                if (pod := cluster.operator_pod()) is not None
                and pod["metadata"]["uid"] != old["metadata"]["uid"]
                and pod_ready(pod)
                else None
            ),
            timeout_s=180,
        )
        record("operator_pod_back_s", round(time.time() - deleted_at, 1))
        assert new["metadata"]["name"] != old["metadata"]["name"]

        after_described = wait_stable(cluster, ns, GROUP, REPLICAS)
        record("group_stable_again_s", round(time.time() - deleted_at, 1))
        after = admin.committed_offsets(GROUP)
        went_back = {
            f"{topic}-{partition}": (offset, after.get((topic, partition)))
            for (topic, partition), offset in before.items()
            if after.get((topic, partition), -1) < offset
        }
        record("generation_before_after", [generation, after_described["generation_id"]])
        record("partitions_committed_before_after", [len(before), len(after)])
        record("offsets_went_back", len(went_back))
        assert went_back == {}
        assert after_described["generation_id"] == generation
        assert {m["group_instance_id"] for m in after_described["members"]} == members
