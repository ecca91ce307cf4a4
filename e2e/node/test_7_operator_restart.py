"""Scenario 7: the operator is killed (SIGKILL) in the middle of a rollout and comes back
(the container restarts, as the kubelet would restart it). The rollout resumes from
`status.rollout` and completes with every member bounced exactly once per phase."""

from __future__ import annotations

import time

from e2e.cluster import Cluster
from e2e.fleet import PodRecorder, Record, wait_for
from e2e.groups import (
    apply,
    group_status,
    managed_group,
    namespace,
    patch_spec,
    wait_rollout_completed,
    wait_stable,
)
from e2e.rollouts import bounces_per_slot, doubly_assigned, member_logs, ownership

GROUP = "resume"
REPLICAS = 4


def test_operator_killed_mid_rollout_resumes_without_repeating_a_member(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    with namespace(cluster, "e2e-resume") as ns:
        apply(cluster, ns, managed_group(GROUP, replicas=REPLICAS, protocol="cooperative"))
        wait_stable(cluster, ns, GROUP, REPLICAS)
        recorder = PodRecorder(cluster.kubectl_command, ns).start()
        try:
            time.sleep(1)
            since = time.time()
            # A downgrade walks back the same way: compatible, then eager.
            patch_spec(cluster, ns, GROUP, {"rebalance": {"protocol": "eager"}})
            wait_for(
                "two members bounced in the first phase",
                lambda: len(bounces_per_slot(recorder.sightings(), since)) >= 2,
                timeout_s=180,
                interval_s=0.3,
            )
            before_crash = group_status(cluster, ns, GROUP).get("rollout") or {}
            operator = cluster.operator_pod()
            assert operator is not None
            restarts = operator["status"]["containerStatuses"][0].get("restartCount", 0)
            cluster.crash_operator()
            crashed_at = time.time()
            wait_for(
                "the operator to come back",
                lambda: (
                    (pod := cluster.operator_pod()) is not None
                    and any(
                        s.get("restartCount", 0) > restarts
                        or pod["metadata"]["uid"] != operator["metadata"]["uid"]
                        for s in pod["status"].get("containerStatuses") or []
                    )
                    and all(s.get("ready") for s in pod["status"].get("containerStatuses") or [])
                ),
                timeout_s=120,
            )
            record("operator_back_s", round(time.time() - crashed_at, 1))
            wait_rollout_completed(cluster, ns, GROUP, "eager")
            wait_stable(cluster, ns, GROUP, REPLICAS)
            record("rollout_s", round(time.time() - since, 1))
        finally:
            recorder.stop()

        record("phase_at_crash", before_crash.get("phase"))
        per_slot = bounces_per_slot(recorder.sightings(), since)
        record("bounces_per_slot", per_slot)
        assert sorted(per_slot) == [str(slot) for slot in range(REPLICAS)], per_slot
        for slot, protocols in per_slot.items():
            assert protocols == ["compatible", "eager"], (slot, protocols)
        logs = member_logs(
            cluster, ns, (pod["metadata"]["name"] for pod in cluster.member_pods(ns, GROUP))
        )
        owners = ownership(logs)
        assert owners.overlaps == 0 and owners.max_owners == 1
        assert doubly_assigned(cluster.admin().journal(GROUP)) == []
