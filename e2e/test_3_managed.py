"""Scenario 3: a managed group of 6. Every pod gets a distinct group.instance.id; a deleted
pod is replaced by one with the same id, which rejoins as the same static member: the
coordinator starts no new generation."""

from __future__ import annotations

import time
from typing import Any

from coordinator.journal_metrics import partition_moves
from e2e.cluster import Cluster, instance_ids_from_env
from e2e.fleet import INSTANCE_ANNOTATION, Record, rows_of, static_rejoins, wait_for
from e2e.groups import apply, managed_group, namespace, wait_stable

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
