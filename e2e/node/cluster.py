"""The e2e scenarios' view of a real node (e2e/node/probe.py's running_node): the Cluster of
e2e/cluster.py with the chart's image as containerd holds it, the coordinator reached at its
Service's ClusterIP through kube-proxy's rules on this host, and logs through the API server
(`kubectl logs`, which the API server fetches from the kubelet; the members' followed from
the moment each container runs, since a bounced pod's logs go with it). docs/node.md."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.cluster import (
    COORDINATOR_PORT,
    E2E_BIN,
    FULLNAME,
    HELM,
    OPERATOR_NAMESPACE,
    Cluster,
    PodLogs,
)
from e2e.node import probe
from e2e.node.containerd import Containerd

# The PersistentVolume the chart's claim binds to: a hostPath the kubelet mounts as it is
# (no fsGroup change for hostPath), so it is made owned by the image's uid.
IMAGE_UID = 10001
# What `kubectl drain` prints for an eviction a PodDisruptionBudget refused (429).
BUDGET_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget"


class NodeCluster(Cluster):
    name = "node"

    def __init__(self, kubeconfig: Path, image: str, containerd: Containerd, log_dir: Path) -> None:
        super().__init__(kubeconfig, E2E_BIN / "kubectl", HELM)
        self.image = image  # docker.io/library/staticfleet:<version>
        self.containerd = containerd  # the node's (CRI namespace k8s.io)
        self.logs = PodLogs(self, log_dir)

    def close(self) -> None:
        self.logs.stop()

    def chart_values(self) -> list[str]:
        # The chart's default image (`staticfleet`, tag appVersion) names what containerd
        # holds; Never: no registry is reachable, a missing image must fail, not pull.
        # The coordinator URL members get stays the chart's default, the Service's DNS name.
        return ["--set", "image.pullPolicy=Never"]

    def coordinator_base_url(self) -> str:
        service = self.get_json(
            "-n", OPERATOR_NAMESPACE, "get", "service", f"{FULLNAME}-coordinator"
        )
        return f"http://{service['spec']['clusterIP']}:{COORDINATOR_PORT}"

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        # A member's every incarnation; any other pod's (the operator's) current container.
        followed = self.logs.read(namespace, pod, container)
        if followed:
            return followed
        result = self.kubectl("-n", namespace, "logs", pod, "-c", container, check=False)
        return result.stdout

    def pods_run(self, namespace: str) -> list[str]:
        """Every followed pod name in `namespace` (members, pods labelled FOLLOW_LOGS_LABEL),
        gone ones too: their logs stay in `self.logs`."""
        return self.logs.pods(namespace)

    def drain(
        self, timeout_s: int, *, pod_selector: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl drain` of the node (only the pods `pod_selector` picks, if given), given up
        after `timeout_s`; its exit status is the caller's to judge."""
        selector = [f"--pod-selector={pod_selector}"] if pod_selector else []
        return self.kubectl(
            "drain",
            probe.NODE_NAME,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            *selector,
            f"--timeout={timeout_s}s",
            check=False,
            timeout=timeout_s + 60,
        )

    def disruptions_allowed(self, namespace: str, budget: str) -> int | None:
        """The PodDisruptionBudget's `status.disruptionsAllowed` (None before it is computed)."""
        status = self.get_json("-n", namespace, "get", "pdb", budget).get("status") or {}
        allowed = status.get("disruptionsAllowed")
        return int(allowed) if allowed is not None else None

    def crash_operator(self) -> None:
        """SIGKILL of the operator's container, as the OOM killer would: the kubelet
        restarts it in the same pod (restartPolicy Always)."""
        pod = self.operator_pod()
        assert pod is not None, "no operator pod"
        (status,) = pod["status"]["containerStatuses"]
        container_id = status["containerID"].split("://", 1)[1]
        self.containerd.ctr("task", "kill", "--signal", "SIGKILL", container_id)


def node_volume(
    path: Path, name: str = "node-data", access_mode: str = "ReadWriteOnce"
) -> dict[str, Any]:
    """The node's PersistentVolume for the chart's claim (as e2e/cluster.py's node_volume);
    scenario 11b's shared one is ReadWriteMany."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": [access_mode],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "Directory"},
        },
    }


@dataclass(frozen=True)
class PodProcess:
    """A process of a pod on this node."""

    pid: int  # on the host
    nspid: int  # in its container's pid namespace (what the process itself logs)
    command: bytes  # argv[0]


def pod_processes(pods: Iterable[Mapping[str, Any]]) -> list[PodProcess]:
    """Every process on this host that belongs to one of `pods`: the kubelet's cgroups name
    the pod's uid (cgroupfs driver), and the scenarios run as root on the node."""
    marks = [
        mark
        for pod in pods
        for uid in [str(pod["metadata"]["uid"])]
        for mark in (f"pod{uid}", f"pod{uid.replace('-', '_')}")
    ]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroups = (entry / "cgroup").read_text()
            if not any(mark in cgroups for mark in marks):
                continue
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue  # it ended meanwhile
        nspid = next(line for line in status.splitlines() if line.startswith("NSpid:"))
        found.append(PodProcess(int(entry.name), int(nspid.split()[-1]), command))
    return found


def evicted_pods(drain_output: str) -> list[str]:
    """The pods `kubectl drain` reports evicted ("pod/NAME evicted")."""
    return sorted(
        line.split()[0].removeprefix("pod/")
        for line in drain_output.splitlines()
        if line.startswith("pod/") and line.rstrip().endswith(" evicted")
    )
