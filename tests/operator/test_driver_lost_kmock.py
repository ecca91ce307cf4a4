"""The real Kopf operator against kmock: adopted executors whose Spark driver is gone (killed
with SIGKILL, in client mode). Each executor exits ("Driver … disassociated!": 0 with Spark 4,
1 with Spark 3) and, as Spark makes its executor pods `restartPolicy: Never` with no owner in
client mode, its pod stays Succeeded or Failed until someone deletes it (e2e scenario 9d). A
finished pod never runs again, so its slot goes vacant as a deleted pod's does: the members
leave in one batch after the grace period (not at the session timeout), and a resubmitted
job's executors take the same instance ids."""

from __future__ import annotations

import time
from typing import Any

from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.members import INSTANCE_ID_ANNOTATION, member_pod
from tests.operator.kube_harness import NAMESPACE, Cluster, running_cluster
from tests.operator.test_grace_and_pause_kmock import SPARK, _last_seq, _slots, _start_executors
from tests.operator.test_handlers_kmock import executor

IDS = ["spark-job-0", "spark-job-1", "spark-job-2"]


async def _phases(cluster: Cluster) -> dict[str, str]:
    return {
        pod["metadata"]["name"]: (pod.get("status") or {}).get("phase", "")
        for pod in await cluster.pods("spark")
    }


async def test_failed_executor_pods_leave_in_one_batch_and_their_ids_are_reused() -> None:
    async with running_cluster(webhook=True) as cluster:
        # Grace (1 s) well under the session timeout (6 s): only the operator's LeaveGroup
        # can remove the members that soon.
        await _start_executors(cluster, 3, grace_seconds=1)
        since = await _last_seq(cluster, "spark-job")

        # The driver dies: every executor exits at about the same time. (Holding the
        # group's lock keeps one pass from seeing only some of them finished.)
        async with cluster.operator.memories.of(GroupRef(NAMESPACE, "spark")).lock:
            for index in range(3):
                await cluster.kubelet.exit(f"exec-{index}", code=0)  # as Spark 4 exits
            exited_at = time.monotonic()

        async def all_left() -> list[Any] | None:
            left = [e for e in await cluster.journal("spark-job", since) if e.kind == "member_left"]
            return left if len(left) >= len(IDS) else None

        left = await cluster.eventually(all_left, what="member_left x3")
        assert time.monotonic() - exited_at > 1.0  # not before the grace period ran out
        assert sorted(e.group_instance_id or "" for e in left) == IDS
        events = await cluster.journal("spark-job", since)
        first = events.index(left[0])
        # One request: adjacent rows, then one rebalance; no session-timeout removal.
        assert events[first : first + 3] == left
        assert "member_removed" not in [e.kind for e in events]
        assert cluster.metric("staticfleet_operator_batch_leaves_total", **SPARK) == 1
        assert cluster.metric("staticfleet_operator_batch_leave_members_total", **SPARK) == 3

        # The pods are still there, Succeeded: nothing deletes them, and none holds a slot
        # (once the pass that sent the LeaveGroup has recorded it).
        await cluster.passes(2)
        assert await _phases(cluster) == {f"exec-{i}": "Succeeded" for i in range(3)}
        held, vacant, retiring = _slots(cluster)
        assert not held and not vacant and not retiring
        status = (await cluster.get_group("spark")).get("status") or {}
        assert not status.get("memberInstances")

        # The job is submitted again: its executors get the lowest free slots, the same
        # instance ids as before (not spark-job-3 and up past the finished pods).
        for index, instance_id in enumerate(IDS[:2]):
            created = await cluster.admit_and_create(executor(f"exec-{3 + index}"))
            assert created["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] == instance_id
        await cluster.eventually(lambda: cluster.group_settled("spark", 2), what="2 executors")


async def test_a_restarted_operator_gives_a_finished_pods_slot_to_a_new_executor() -> None:
    async with running_cluster(webhook=True) as cluster:
        await _start_executors(cluster, 2, grace_seconds=1)
        await cluster.kubelet.exit("exec-0", code=1)  # as Spark 3 exits: Failed

        async def seen_finished() -> bool:  # the operator's pod index shows it Failed
            held, _, _ = _slots(cluster)
            return 0 not in held

        await cluster.eventually(seen_finished, what="slot 0 released")
        # The slot table is rebuilt from the pods after a restart: the Failed pod's
        # annotation must not claim its slot back.
        cluster.forget_operator_memory()
        created = await cluster.admit_and_create(executor("exec-2"))
        assert created["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] == "spark-job-0"
        await cluster.eventually(lambda: cluster.group_settled("spark", 2), what="2 executors")


def test_a_pod_in_a_terminal_phase_is_finished_and_no_longer_live() -> None:
    pod = executor("exec-0")
    pod["metadata"]["annotations"] = {
        "staticfleet.dev/slot": "0",
        INSTANCE_ID_ANNOTATION: "spark-job-0",
        "staticfleet.dev/protocol": "eager",
    }
    for phase, finished in (("Running", False), ("Failed", True), ("Succeeded", True)):
        member = member_pod({**pod, "status": {"phase": phase}})
        assert member is not None
        assert (member.finished, member.live) == (finished, not finished), phase
