"""Scenario 9d: the Spark driver of scenario 9 killed with SIGKILL, so no shutdown hook runs:
it neither asks its executors to stop nor deletes their pods. Client mode, as in scenario 9
(`spark-submit --master k8s://…`, the driver on the host; the examples/spark group with its
replacement grace period cut to 20 s, its session timeout the example's 120 s).

What a user sees, and what is asserted:
- each executor loses its driver (the RPC connection closes: "Driver … disassociated!
  Shutting down." in its log) and exits, 0 with Spark 4 (1 with Spark 3); the kubelet
  reports its pod Succeeded (Failed) - Spark makes executor pods `restartPolicy: Never`.
  In client mode the executor pods have no ownerReference (there is no driver pod), so
  nothing deletes them: they stay until a user does;
- a finished pod never runs again, so the operator treats its slot as vacant, as a deleted
  pod's: after `replacementGracePeriodSeconds` the four members leave with one batch
  LeaveGroup naming exactly their ids, long before their session timeout (no
  `member_removed`); the group is then Empty and nobody rejoins;
- the member processes are gone, and no partition was owned by two of them (their logs)
  nor given to two members in one generation (the journal).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from e2e.cluster import Cluster
from e2e.fleet import INSTANCE_ANNOTATION, Record, rows_of, wait_for
from e2e.groups import apply, group_status, namespace, wait_stable
from e2e.node.cluster import pod_processes
from e2e.node.test_9_spark_on_k8s import (
    EXECUTORS,
    GRACE_S,
    GROUP,
    START_TIMEOUT_S,
    consumer_group,
    member_logs,
    overlaps,
    submitted_driver,
)
from e2e.rollouts import doubly_assigned


def all_executor_pods(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    pods = cluster.get_json("-n", ns, "get", "pods", "-l", "spark-role=executor")["items"]
    return {pod["metadata"]["name"]: pod for pod in pods}


def exit_code(pod: dict[str, Any]) -> int | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return int(terminated["exitCode"])
    return None


def test_a_killed_driver_s_executors_exit_and_their_members_leave_in_one_batch(
    cluster: Cluster, operator_release: None, record: Record, tmp_path: Path
) -> None:
    # The coordinator's journal outlives a deleted group: scenarios 6 and 9 had a "clicks".
    begin_ms = int(time.time() * 1000)
    with namespace(cluster, "e2e-spark-killed") as ns:
        apply(cluster, ns, consumer_group())
        with submitted_driver(cluster, ns, tmp_path) as (driver, control):
            _scenario(cluster, ns, control, driver.pid, record, begin_ms)
            assert driver.wait(timeout=30) == -signal.SIGKILL


def _scenario(
    cluster: Cluster, ns: str, control: Path, driver_pid: int, record: Record, begin_ms: int
) -> None:
    admin = cluster.admin()
    started = time.monotonic()
    wait_stable(cluster, ns, GROUP, EXECUTORS, timeout_s=START_TIMEOUT_S)
    record("submit_to_stable_s", round(time.monotonic() - started, 1))
    pods = all_executor_pods(cluster, ns)
    ids = {name: pod["metadata"]["annotations"][INSTANCE_ANNOTATION] for name, pod in pods.items()}
    assert sorted(ids.values()) == [f"{GROUP}-{slot}" for slot in range(EXECUTORS)]
    # Client mode: no driver pod, so no owner for the garbage collector to follow.
    assert [pod["metadata"].get("ownerReferences") for pod in pods.values()] == [None] * EXECUTORS

    since_ms = int(time.time() * 1000)
    killed = time.monotonic()
    os.killpg(driver_pid, signal.SIGKILL)  # the driver's JVM and its Python, no hook runs

    def finished() -> dict[str, dict[str, Any]] | None:
        now = all_executor_pods(cluster, ns)
        done = all(
            (p.get("status") or {}).get("phase") in ("Succeeded", "Failed") for p in now.values()
        )
        return now if set(now) == set(ids) and done else None

    exited = wait_for("the executors to exit", finished, timeout_s=60)
    record("executors_exited_after_kill_s", round(time.monotonic() - killed, 1))
    codes = sorted({exit_code(pod) for pod in exited.values()}, key=str)
    record("executor_exit_codes", codes)
    # Each says why in its log. Spark 4 exits 0 even so (its backend shuts down in order and
    # its main exits 0; Spark 3 called System.exit(1)): the pods end Succeeded, not Failed.
    for name, pod in exited.items():
        container = pod["spec"]["containers"][0]["name"]
        assert "disassociated! Shutting down" in cluster.container_log(ns, name, container)
    phases = {pod["status"]["phase"] for pod in exited.values()}
    assert phases == ({"Succeeded"} if codes == [0] else {"Failed"}), codes

    def left() -> list[dict[str, Any]] | None:
        rows = rows_of(admin.journal(GROUP), "member_left", since_ms)
        return rows if {row["group_instance_id"] for row in rows} >= set(ids.values()) else None

    rows = wait_for("the members' batch LeaveGroup", left, timeout_s=GRACE_S + 60)
    assert {row["group_instance_id"] for row in rows} == set(ids.values()), rows
    assert len({row["ts_ms"] for row in rows}) == 1, rows  # one request
    record("leave_after_kill_ms", rows[0]["ts_ms"] - since_ms)

    # Nobody comes back, and the coordinator removed no one on its own (session timeout).
    time.sleep(3)
    journal = admin.journal(GROUP)
    assert rows_of(journal, "member_removed", since_ms) == []
    assert rows_of(journal, "static_rejoin", since_ms) == []
    assert rows_of(journal, "member_joined", since_ms) == []
    described = admin.describe(GROUP)
    assert (described["group_state"], described.get("members") or []) == ("Empty", [])
    assert not group_status(cluster, ns, GROUP).get("memberInstances")

    # The pods' fate: still there, finished; nothing deletes them in client mode.
    after = all_executor_pods(cluster, ns)
    assert set(after) == set(ids)
    assert {pod["status"]["phase"] for pod in after.values()} == phases
    assert not any(pod["metadata"].get("deletionTimestamp") for pod in after.values())

    # The member processes died with their executors; never two owners. A log names its
    # process by its pid in the executor's container (its pid namespace).
    logs = member_logs(control / "members")
    assert len(logs) == EXECUTORS
    pids = {int(log.process.rsplit(".", 1)[1]) for log in logs}
    assert [p for p in pod_processes(after.values()) if p.nspid in pids] == []
    assert overlaps(logs) == []
    assert doubly_assigned(row for row in journal if row["ts_ms"] >= begin_ms) == []
