"""Scenario 3: a managed group of 6. Every pod gets a distinct group.instance.id; a deleted
pod is replaced by one with the same id, which rejoins as the same static member: the
coordinator starts no new generation."""

from __future__ import annotations

import json
import time
from typing import Any

from coordinator.journal_metrics import partition_moves
from e2e.cluster import Cluster, instance_ids_from_env
from e2e.fleet import INSTANCE_ANNOTATION, Record, rows_of, static_rejoins, wait_for
from e2e.groups import adopted_group, apply, managed_group, namespace, wait_stable

GROUP = "orders"


def test_managed_group_keeps_instance_ids_across_pod_replacement(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    with namespace(cluster, "e2e-managed") as ns:
        started = time.monotonic()
        apply(cluster, ns, managed_group(GROUP, replicas=6))
        described = wait_stable(cluster, ns, GROUP, 6)
        record("create_to_stable_s", round(time.monotonic() - started, 1))

        pods = cluster.member_pods(ns, GROUP)
        ids = {pod["metadata"]["annotations"][INSTANCE_ANNOTATION] for pod in pods}
        assert ids == {f"{GROUP}-{slot}" for slot in range(6)}
        # The id the pod carries is the one its member runs with and the coordinator knows.
        env_ids = instance_ids_from_env(pods)
        assert sorted(env_ids.values()) == sorted(ids)
        assert {m["group_instance_id"] for m in described["members"]} == ids
        generation = described["generation_id"]

        victim = next(pod for pod in pods if pod["metadata"]["name"].endswith("-2"))
        victim_id = victim["metadata"]["annotations"][INSTANCE_ANNOTATION]
        victim_uid = victim["metadata"]["uid"]
        admin = cluster.admin()
        deleted_at_ms = int(time.time() * 1000)
        started = time.monotonic()
        cluster.kubectl("-n", ns, "delete", "pod", victim["metadata"]["name"], "--wait=false")

        def replaced() -> dict[str, Any] | None:
            for pod in cluster.member_pods(ns, GROUP):
                meta = pod["metadata"]
                if (
                    meta["uid"] != victim_uid
                    and meta["annotations"].get(INSTANCE_ANNOTATION) == victim_id
                ):
                    return pod
            return None

        replacement = wait_for(
            "a replacement pod with the same instance id", replaced, timeout_s=120
        )
        after = wait_stable(cluster, ns, GROUP, 6)
        # The member rejoined: the coordinator saw the static rejoin.
        rejoins = wait_for(
            "the replacement's static rejoin in the journal",
            lambda: static_rejoins(admin.journal(GROUP), victim_id, deleted_at_ms),
            timeout_s=60,
        )
        journal = admin.journal(GROUP)
        record("replacement_rejoined_s", round(time.monotonic() - started, 1))

        assert replacement["metadata"]["name"] == victim["metadata"]["name"]
        assert after["generation_id"] == generation, "a new generation after a static restart"
        rebalances = rows_of(journal, "rebalance_started", deleted_at_ms)
        record("rebalances_after_pod_delete", len(rebalances))
        assert rebalances == []
        assert rejoins, "the replacement never rejoined as the static member"
        assert {m["group_instance_id"] for m in after["members"]} == ids
        record(
            "partition_moves",
            len(partition_moves(journal, {}, deleted_at_ms, int(time.time() * 1000))),
        )
        record("generation_before", generation)
        record("generation_after", after["generation_id"])


def test_kubectl_scale_resizes_a_managed_group_and_is_refused_for_an_adopted_one(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    with namespace(cluster, "e2e-scale") as ns:
        apply(cluster, ns, managed_group("scaled", replicas=2))
        wait_stable(cluster, ns, "scaled", 2)

        # `kubectl scale` goes through the /scale subresource (spec.replicas in).
        started = time.monotonic()
        cluster.kubectl("-n", ns, "scale", "consumergroup/scaled", "--replicas=3")
        wait_stable(cluster, ns, "scaled", 3)
        record("kubectl_scale_2_to_3_s", round(time.monotonic() - started, 1))
        path = f"/apis/staticfleet.dev/v1alpha1/namespaces/{ns}/consumergroups/scaled/scale"

        def scale_reports_three() -> dict[str, Any] | None:
            scale: dict[str, Any] = json.loads(cluster.kubectl("get", "--raw", path).stdout)
            return scale if scale.get("status", {}).get("replicas") == 3 else None

        scale = wait_for("the scale subresource reports 3", scale_reports_three, timeout_s=60)
        assert scale["spec"]["replicas"] == 3
        selector = scale["status"]["selector"]
        assert selector == (
            "app.kubernetes.io/managed-by=staticfleet,staticfleet.dev/group=scaled,"
            "staticfleet.dev/slot"
        )
        # The selector, as an HPA uses it, finds exactly the member pods.
        selected = cluster.get_json("-n", ns, "get", "pods", "-l", selector)["items"]
        live = [p for p in selected if not p["metadata"].get("deletionTimestamp")]
        assert len(live) == 3

        # The members' PodDisruptionBudget, owned by the group.
        budget = cluster.get_json("-n", ns, "get", "poddisruptionbudget", "scaled-members")
        [owner] = budget["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("ConsumerGroup", "scaled")
        assert budget["spec"]["maxUnavailable"] == 1

        # An adopted group has no replicas to scale: the API server refuses, and says why.
        apply(cluster, ns, adopted_group("spark-scaled", app="scaled-app"))
        refused = cluster.kubectl(
            "-n", ns, "scale", "consumergroup/spark-scaled", "--replicas=2", check=False
        )
        assert refused.returncode != 0
        assert "an adopted group (selector) cannot be scaled" in refused.stderr, refused.stderr
