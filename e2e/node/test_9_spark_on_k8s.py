"""Scenario 9: Spark on Kubernetes for real. `spark-submit --master k8s://…` in client mode
(the driver on the host, `e2e/spark_driver.py`) with the admin's client certificate: the
Spark driver creates the executor pods through the API server from the pod template of
examples/spark, the chart's webhook stamps each with a slot, and the real node (kubelet,
containerd) runs each from the Spark executor image (image/clients.Dockerfile, target spark):
a `KubernetesExecutorBackend` JVM whose one long-running task is a static member. The driver
listens on this host's address on the pods' bridge, where the executors reach it; the members
reach the coordinator at the chart's Service, as every member pod does.

- a deleted executor pod: the driver asks for a replacement, which gets the freed id and
  rejoins as the same static member (same generation, no rebalance);
- fewer executors (`SparkContext.killExecutors`): one batch LeaveGroup naming exactly them;
- the driver stopped (SIGTERM): its executors exit; their finished pods (left Succeeded)
  hold no slot, and the operator retires the remaining members with one batch LeaveGroup
  after the grace period (a driver killed with SIGKILL: scenario 9d);
- no partition owned by two member processes at once (their own logs), nor given to two
  members in one generation (the journal).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization

from e2e.cluster import ROOT, Cluster, instance_ids_from_env
from e2e.fleet import INSTANCE_ANNOTATION, Record, rows_of, static_rejoins, wait_for
from e2e.groups import SPARK_IMAGE, apply, namespace, wait_stable
from e2e.node import probe
from e2e.rollouts import doubly_assigned
from staticfleet.demo.ownership import MemberLog, all_holdings, ownership_overlaps

GROUP = "clicks"  # the executor pod template's staticfleet.dev/group label
APP = "clickstream"
EXECUTORS = 4
GRACE_S = 20  # replacementGracePeriodSeconds: a replacement comes in seconds here
# spark-submit to a Stable group: the driver's JVM, four executor JVMs in pods, their Python
# workers and members, all on the node's 2 CPUs. 150-250 s at a load average of 8-10 from
# other work on the machine; one run at 9-11 timed out at 420 s with the driver taking 90 s
# between two steps of its own.
START_TIMEOUT_S = 900
EXAMPLES = ROOT / "examples" / "spark"
# The executor container's name in the example's template (Spark's own default too).
EXECUTOR_CONTAINER = "spark-kubernetes-executor"


def consumer_group() -> dict[str, Any]:
    """examples/spark/consumergroup.yaml, with a shorter replacement grace period."""
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLES / "consumergroup.yaml").read_text())
    manifest["spec"]["replacementGracePeriodSeconds"] = GRACE_S
    return manifest


def client_credentials(kubeconfig: Path, into: Path) -> tuple[str, dict[str, Path]]:
    """The API server URL and the admin's CA / client cert / key as files, from the
    kubeconfig (Spark's `spark.kubernetes.authenticate.*` confs take file paths)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    files = {
        "caCertFile": ("ca.crt", cluster["certificate-authority-data"]),
        "clientCertFile": ("admin.crt", user["client-certificate-data"]),
        "clientKeyFile": ("admin.key", user["client-key-data"]),
    }
    paths: dict[str, Path] = {}
    for conf, (name, data) in files.items():
        path = into / name
        raw = base64.b64decode(data)
        path.write_bytes(traditional_pem(raw) if conf == "clientKeyFile" else raw)
        path.chmod(0o600)
        paths[conf] = path
    return str(cluster["server"]), paths


def traditional_pem(pem: bytes) -> bytes:
    """The key as `BEGIN EC/RSA PRIVATE KEY` (SEC1/PKCS#1), whose header names the
    algorithm; the algorithm itself is passed to the driver (KUBERNETES_CERTS_CLIENT_KEY_ALGO)."""
    key = serialization.load_pem_private_key(pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def executor_pod_template(members: Path) -> dict[str, Any]:
    """examples/spark's executor pod template, with the member processes' event logs on this
    host: `members` (a hostPath) mounted at the same path in every executor, so the path the
    driver gives the tasks (`--control-dir`) is the same on both sides and the logs outlive
    the pods (a deleted executor's log is read at the end)."""
    template: dict[str, Any] = yaml.safe_load((EXAMPLES / "executor-pod-template.yaml").read_text())
    spec = template["spec"]
    spec.setdefault("volumes", []).append(
        {"name": "member-logs", "hostPath": {"path": str(members), "type": "Directory"}}
    )
    container = next(c for c in spec["containers"] if c["name"] == EXECUTOR_CONTAINER)
    container.setdefault("volumeMounts", []).append(
        {"name": "member-logs", "mountPath": str(members)}
    )
    return template


def submit_command(
    server: str, auth: dict[str, Path], ns: str, control: Path, template: Path
) -> list[str]:
    driver_host = probe.bridge_address()
    confs = {
        "spark.kubernetes.namespace": ns,
        "spark.kubernetes.container.image": SPARK_IMAGE,
        "spark.kubernetes.executor.podTemplateFile": str(template),
        **{f"spark.kubernetes.authenticate.{k}": str(v) for k, v in auth.items()},
        "spark.executor.instances": str(EXECUTORS),
        "spark.executor.cores": "1",
        # What the scheduler reserves per executor: the node has 2 CPUs, and a member task
        # needs little of one; `spark.executor.cores` (the task slots) stays 1.
        "spark.kubernetes.executor.request.cores": "100m",
        "spark.executor.memory": "512m",
        "spark.driver.memory": "512m",
        # The executors (pods on the node's bridge) reach the driver at this host's address
        # there; it listens on that address only.
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": driver_host,
        "spark.dynamicAllocation.enabled": "false",
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "600s",
        "spark.locality.wait": "0s",
        "spark.speculation": "false",
        "spark.task.maxFailures": "10",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    command = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        f"k8s://{server}",
        "--deploy-mode",
        "client",
        "--name",
        APP,
    ]
    for key, value in confs.items():
        command += ["--conf", f"{key}={value}"]
    return [
        *command,
        str(ROOT / "e2e" / "spark_driver.py"),
        "--executors",
        str(EXECUTORS),
        "--control-dir",
        str(control),
    ]


def executor_pods(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = cluster.get_json(
        "-n", ns, "get", "pods", "-l", "spark-role=executor"
    )["items"]
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]


def member_logs(directory: Path) -> list[MemberLog]:
    """One log per member process (`<instance id>.exec-<n>.<pid>.jsonl`). A process whose
    executor was deleted is killed with it: what it held, it held until its last event."""
    logs = []
    for path in sorted(directory.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if rows:
            owner = path.name.split(".", 1)[0]
            logs.append(MemberLog(owner, path.stem, rows))
    return logs


def overlaps(logs: list[MemberLog]) -> list[Any]:
    holdings = all_holdings(logs)
    last = {log.process: int(log.rows[-1]["ts_ms"]) for log in logs}
    closed = [h if h.end_ms is not None else replace(h, end_ms=last[h.process]) for h in holdings]
    return ownership_overlaps(closed, int(time.time() * 1000))


@contextlib.contextmanager
def submitted_driver(
    cluster: Cluster, ns: str, driver_dir: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """spark-submit of `e2e/spark_driver.py` in its own process group (the driver JVM and
    its Python), logging to `driver_dir/driver.log`; yields it and its control directory.
    Whatever is left of it is SIGKILLed at the end, and the log's tail printed."""
    control = driver_dir / "control"
    members = control / "members"
    members.mkdir(parents=True)
    # The executors run as the image's user (10001), not as this test's.
    members.chmod(0o777)
    template = driver_dir / "executor-pod-template.yaml"
    template.write_text(yaml.safe_dump(executor_pod_template(members)))
    server, auth = client_credentials(cluster.kubeconfig, driver_dir)
    # fabric8 (Spark's Kubernetes client) reads a client key as RSA unless told
    # (kubernetes.certs.client.key.algo); Spark has no conf for it, and e2e/certs.py
    # makes EC keys. The driver's Python is this venv's; the executors' Python workers run
    # the PYSPARK_PYTHON the driver names in each task, the image's `python3`.
    env = {
        **os.environ,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYSPARK_PYTHON": "python3",
        "KUBERNETES_CERTS_CLIENT_KEY_ALGO": "EC",
    }
    env.pop("SPARK_HOME", None)
    log = (driver_dir / "driver.log").open("ab")
    driver = subprocess.Popen(
        submit_command(server, auth, ns, control, template),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield driver, control
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)
        log.close()
        print((driver_dir / "driver.log").read_text()[-6000:])


def test_spark_driver_on_the_api_server_keeps_its_executors_static_members(
    cluster: Cluster, operator_release: None, record: Record, tmp_path: Path
) -> None:
    # The coordinator's journal outlives a deleted group: scenario 6, on the same release,
    # had a "clicks" too, whose generations start at 1 as this one's do.
    begin_ms = int(time.time() * 1000)
    with namespace(cluster, "e2e-spark-k8s") as ns:
        apply(cluster, ns, consumer_group())
        with submitted_driver(cluster, ns, tmp_path) as (driver, control):
            _scenario(cluster, ns, control, driver, record, begin_ms)


def _scenario(
    cluster: Cluster,
    ns: str,
    control: Path,
    driver: subprocess.Popen[bytes],
    record: Record,
    begin_ms: int,
) -> None:
    admin = cluster.admin()
    started = time.monotonic()
    described = wait_stable(cluster, ns, GROUP, EXECUTORS, timeout_s=START_TIMEOUT_S)
    record("submit_to_stable_s", round(time.monotonic() - started, 1))
    pods = {pod["metadata"]["name"]: pod for pod in executor_pods(cluster, ns)}
    ids = {name: pod["metadata"]["annotations"][INSTANCE_ANNOTATION] for name, pod in pods.items()}
    # The driver made them (its labels, its env); the webhook stamped them at admission.
    assert sorted(ids.values()) == [f"{GROUP}-{slot}" for slot in range(EXECUTORS)]
    assert instance_ids_from_env(list(pods.values())) == ids
    assert all(pod["metadata"]["labels"]["spark-role"] == "executor" for pod in pods.values())
    generation = described["generation_id"]

    # 1. A deleted executor pod: the driver's replacement takes the freed id.
    lost = next(name for name, instance in ids.items() if instance == f"{GROUP}-1")
    freed = ids[lost]
    since_ms = int(time.time() * 1000)
    cluster.kubectl("-n", ns, "delete", "pod", lost, "--wait=true", "--timeout=90s")
    replacement = wait_for(
        "the driver's replacement executor, stamped",
        lambda: next(
            (
                pod
                for pod in executor_pods(cluster, ns)
                if pod["metadata"]["name"] not in ids
                and pod["metadata"].get("annotations", {}).get(INSTANCE_ANNOTATION)
            ),
            None,
        ),
        timeout_s=120,
    )
    assert replacement["metadata"]["annotations"][INSTANCE_ANNOTATION] == freed
    wait_for(
        "the replacement's static rejoin",
        lambda: static_rejoins(admin.journal(GROUP), freed, since_ms),
        timeout_s=240,
    )
    after = wait_stable(cluster, ns, GROUP, EXECUTORS, timeout_s=120)
    journal = admin.journal(GROUP)
    record("replacement_rejoin_ms", static_rejoins(journal, freed, since_ms)[0]["ts_ms"] - since_ms)
    assert after["generation_id"] == generation
    assert rows_of(journal, "rebalance_started", since_ms) == []
    assert rows_of(journal, "member_left", since_ms) == []

    # 2. Fewer executors (4 -> 2): the driver kills two; one batch LeaveGroup names them.
    pods = {pod["metadata"]["name"]: pod for pod in executor_pods(cluster, ns)}
    by_id = {pod["metadata"]["annotations"][INSTANCE_ANNOTATION]: pod for pod in pods.values()}
    removed = {f"{GROUP}-2", f"{GROUP}-3"}
    executor_ids = sorted(by_id[i]["metadata"]["labels"]["spark-exec-id"] for i in removed)
    since_ms = int(time.time() * 1000)
    (control / "kill-1.ids").write_text(" ".join(executor_ids) + "\n")
    wait_for("the driver's killExecutors", lambda: (control / "kill-1.done").exists(), timeout_s=60)
    assert (control / "kill-1.done").read_text().strip() == "True"
    wait_stable(cluster, ns, GROUP, EXECUTORS - 2, timeout_s=GRACE_S + 120)
    journal = admin.journal(GROUP)
    left = rows_of(journal, "member_left", since_ms)
    assert {row["group_instance_id"] for row in left} == removed, left
    assert len({row["ts_ms"] for row in left}) == 1, left
    assert rows_of(journal, "member_removed", since_ms) == []
    record("scale_down_leave_after_ms", left[0]["ts_ms"] - since_ms)

    # 3. The driver stops (SIGTERM, as `kill` or a stopped job would): its executors exit;
    # the two members left go in one LeaveGroup after the grace period.
    since_ms = int(time.time() * 1000)
    os.killpg(driver.pid, signal.SIGTERM)
    driver.wait(timeout=120)
    # Seen here: the stopping driver asks each executor to shut down, and they exit 0, but
    # their pods may stay (Succeeded; in client mode nothing else deletes them). A finished
    # pod never runs again, so its slot is vacant as a deleted pod's: nobody deletes them.
    wait_for(
        "the executors to exit",
        lambda: all(
            (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            for p in executor_pods(cluster, ns)
        ),
        timeout_s=120,
    )
    remaining = {f"{GROUP}-0", f"{GROUP}-1"}

    def left_since() -> list[dict[str, Any]]:
        rows = rows_of(admin.journal(GROUP), "member_left", since_ms)
        return rows if {row["group_instance_id"] for row in rows} >= remaining else []

    last = wait_for("the remaining members' LeaveGroup", left_since, timeout_s=GRACE_S + 120)
    assert {row["group_instance_id"] for row in last} == remaining, last
    assert len({row["ts_ms"] for row in last}) == 1, last
    record("driver_stop_leave_after_ms", last[0]["ts_ms"] - since_ms)

    # Never two owners: from the member processes' own logs, and in the journal.
    logs = member_logs(control / "members")
    record("member_processes", len(logs))
    assert len(logs) == EXECUTORS + 1  # the first executors and the one replacement
    assert overlaps(logs) == []
    assert doubly_assigned(row for row in admin.journal(GROUP) if row["ts_ms"] >= begin_ms) == []
