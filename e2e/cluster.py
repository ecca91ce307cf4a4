"""The cluster a scenario runs against, and the only part that differs between bootstraps.

`LocalCluster` (make e2e): etcd, kube-apiserver and kube-controller-manager built from their
Go modules and started on loopback, plus e2e/node_agent/ standing in for the kubelet.
`KindCluster` (make e2e-kind): an existing kind cluster with the image built from the
Dockerfile. The scenarios use only what both offer: `kubectl`, `helm`, the coordinator over
HTTP, the member containers' logs and a way to crash a container.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from e2e.controlplane import free_ports
from e2e.fleet import GROUP_LABEL, CoordinatorAdmin, wait_for

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
E2E_BIN = BUILD / "e2e" / "bin"
HELM = BUILD / "bin" / "helm"
CHART = ROOT / "charts" / "staticfleet"

RELEASE = "sf"
OPERATOR_NAMESPACE = "staticfleet-system"
FULLNAME = f"{RELEASE}-staticfleet"
# The chart's default coordinator port (kind reaches it through the Service).
COORDINATOR_PORT = 9092
# The image every pod runs: the node agent runs it as local processes, kind loads it.
# A scenario's own pods (not a ConsumerGroup's) whose every incarnation's log it reads, e.g. a
# StatefulSet of consumers rolled by hand (scenario 8d): followed as members' are (PodLogs).
FOLLOW_LOGS_LABEL = "e2e.staticfleet.dev/follow-logs"
IMAGE_REPOSITORY = "staticfleet"
IMAGE_TAG = "e2e"
IMAGE_VALUES = ["--set", f"image.repository={IMAGE_REPOSITORY}", "--set", f"image.tag={IMAGE_TAG}"]


def crd_established(crd: Mapping[str, Any]) -> bool:
    """A CRD the API server serves (its Established condition True; a CRD read before the
    API server has written any condition has none: not yet)."""
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


class Cluster(ABC):
    name: str

    def __init__(self, kubeconfig: Path, kubectl_bin: Path, helm_bin: Path) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl_bin = kubectl_bin
        self.helm_bin = helm_bin

    # --- the tools a user has -------------------------------------------------------------

    @property
    def kubectl_command(self) -> list[str]:
        return [str(self.kubectl_bin), "--kubeconfig", str(self.kubeconfig)]

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*self.kubectl_command, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
            )
        return result

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def wait_crd_established(self, name: str, timeout_s: float = 60) -> None:
        """Polled, not `kubectl wait --for=condition=Established`: that fails at once
        ("accessor error: <nil>") when it reads the CRD before the API server has written
        any condition, as it did under load."""
        wait_for(
            f"the CRD {name} to be Established",
            lambda: crd_established(self.get_json("get", "crd", name)),
            timeout_s=timeout_s,
        )

    def helm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.helm_bin), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    # --- what differs per bootstrap ---------------------------------------------------------

    @abstractmethod
    def chart_values(self) -> list[str]:
        """`helm install` flags this cluster needs (image, how members reach the coordinator)."""

    @abstractmethod
    def coordinator_base_url(self) -> str:
        """Where the test process reaches the operator's embedded coordinator."""

    @abstractmethod
    def container_log(self, namespace: str, pod: str, container: str) -> str:
        """Everything every incarnation of this pod name's container wrote, in order."""

    @abstractmethod
    def crash_operator(self) -> None:
        """Kill the operator process without warning (SIGKILL), as a crash would."""

    def close(self) -> None:  # noqa: B027 (most bootstraps start nothing to stop)
        """Stop what the bootstrap started for the tests (not the cluster itself)."""

    # --- conveniences shared by the scenarios -------------------------------------------------

    def admin(self) -> CoordinatorAdmin:
        secret = self.get_json("-n", OPERATOR_NAMESPACE, "get", "secret", f"{FULLNAME}-admin-token")
        token = base64.b64decode(secret["data"]["token"]).decode()
        return CoordinatorAdmin(self.coordinator_base_url(), token)

    def operator_pods(self) -> list[dict[str, Any]]:
        """The release's operator pods that are not being deleted."""
        pods: list[dict[str, Any]] = self.get_json(
            "-n",
            OPERATOR_NAMESPACE,
            "get",
            "pods",
            "-l",
            f"app.kubernetes.io/instance={RELEASE}",
        )["items"]
        return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]

    def operator_pod(self) -> dict[str, Any] | None:
        live = self.operator_pods()
        return live[0] if live else None

    def member_pods(self, namespace: str, group: str) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = self.get_json(
            "-n", namespace, "get", "pods", "-l", f"{GROUP_LABEL}={group}"
        )["items"]
        return pods


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


# --- the local control plane (make e2e) ------------------------------------------------------


class LocalCluster(Cluster):
    """Our own control plane on loopback, and the node agent running pods as processes.

    Every pod shares the node's network (there is no container runtime), so the chart is
    installed with the coordinator URL members are told set to loopback; there is no
    cluster DNS to resolve the Service name. The operator's ports are free ports picked for
    this session, so a coordinator a user runs by hand on 9092 (or anything on 8080, 9443)
    does not clash with it.
    """

    name = "local"

    def __init__(self, kubeconfig: Path, node_workdir: Path) -> None:
        super().__init__(kubeconfig, E2E_BIN / "kubectl", HELM)
        self.node_workdir = node_workdir
        self.coordinator_port, self.webhook_port, self.health_port = free_ports(3)

    def chart_values(self) -> list[str]:
        return [
            *IMAGE_VALUES,
            "--set",
            f"coordinator.port={self.coordinator_port}",
            "--set",
            f"coordinator.advertisedUrl=http://127.0.0.1:{self.coordinator_port}",
            "--set",
            f"webhook.port={self.webhook_port}",
            "--set",
            f"health.port={self.health_port}",
            # Every pod shares the host's ports here: one default health port would refuse
            # every member after the first (templates that want probes set their own).
            "--set",
            "members.healthPort=0",
        ]

    def coordinator_base_url(self) -> str:
        return f"http://127.0.0.1:{self.coordinator_port}"

    def _container_dir(self, namespace: str, pod: str) -> Path:
        return self.node_workdir / "pods" / namespace / pod

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        path = self._container_dir(namespace, pod) / f"{container}.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def pods_run(self, namespace: str) -> list[str]:
        """Every pod name the node ran in `namespace`, gone ones too: its directory, with its
        logs, stays (a Deployment's pods have names nobody can list once they are deleted)."""
        directory = self.node_workdir / "pods" / namespace
        return (
            sorted(p.name for p in directory.iterdir() if p.is_dir()) if directory.is_dir() else []
        )

    def crash_operator(self) -> None:
        pod = self.operator_pod()
        assert pod is not None, "no operator pod"
        pid_file = self._container_dir(OPERATOR_NAMESPACE, pod["metadata"]["name"]) / "operator.pid"
        pid = int(pid_file.read_text().strip())
        os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def local_cluster(workdir: Path) -> Iterator[LocalCluster]:
    """Build (cached) and start the control plane and the node agent; stop both after."""
    from e2e.controlplane import running_control_plane

    subprocess.run([str(ROOT / "e2e" / "build.sh")], check=True)
    with running_control_plane(workdir / "control-plane", E2E_BIN) as plane:
        node_dir = workdir / "node"
        node_dir.mkdir(parents=True, exist_ok=True)
        log = (workdir / "node-agent.log").open("ab")
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "e2e.node_agent",
                "--kubeconfig",
                str(plane.kubeconfig),
                "--workdir",
                str(node_dir),
                "--node-ip",
                plane.node_ip,
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        cluster = LocalCluster(plane.kubeconfig, node_dir)
        try:
            wait_for(
                "the node agent's Node to be Ready",
                lambda: _node_ready(cluster),
                timeout_s=60,
                describe=lambda: _tail(workdir / "node-agent.log"),
            )
            cluster.kubectl("apply", "-f", "-", input=json.dumps(node_volume(node_dir)))
            yield cluster
        finally:
            cluster.close()
            # The agent stops its pods' processes on SIGTERM, as a drained kubelet would.
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait(timeout=10)
            log.close()


def node_volume(node_dir: Path) -> dict[str, Any]:
    """A PersistentVolume of the node, made before the chart is installed, as a cluster
    without a provisioner offers one (static provisioning): the chart's claim (no
    storageClassName) binds to it, and `helm install --wait` waits for that. The node agent
    keeps a claim's files in its own directory per claim (e2e/README.md)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "e2e-node-data"},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(node_dir / "persistent-volumes" / "e2e-node-data")},
        },
    }


def _node_ready(cluster: Cluster) -> bool:
    nodes = cluster.get_json("get", "nodes")["items"]
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for node in nodes
        for c in node["status"].get("conditions") or []
    )


def _tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"({path} does not exist)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- kind (make e2e-kind) -------------------------------------------------------------------------


class KindCluster(Cluster):
    """A kind cluster made by e2e/kind.sh, with the image loaded as staticfleet:e2e.

    Pods are real containers here, so their logs come from the API (followed from the
    moment each pod appears, because a bounced pod's logs go with it), the coordinator is
    reached through `kubectl port-forward`, and a crash is a forced pod deletion (the
    chart's default PersistentVolumeClaim keeps the coordinator's SQLite file across it).
    """

    name = "kind"

    def __init__(self, kubeconfig: Path, log_dir: Path) -> None:
        kubectl = Path(os.environ.get("KUBECTL", "kubectl"))
        super().__init__(kubeconfig, kubectl, HELM)
        self.logs = PodLogs(self, log_dir)
        self._forward: subprocess.Popen[bytes] | None = None
        (self._forward_port,) = free_ports(1)

    def chart_values(self) -> list[str]:
        return [
            *IMAGE_VALUES,
            "--set",
            "image.pullPolicy=Never",
        ]

    def coordinator_base_url(self) -> str:
        if self._forward is None or self._forward.poll() is not None:
            self._forward = subprocess.Popen(
                [
                    *self.kubectl_command,
                    "-n",
                    OPERATOR_NAMESPACE,
                    "port-forward",
                    f"svc/{FULLNAME}-coordinator",
                    f"{self._forward_port}:{COORDINATOR_PORT}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_for("kubectl port-forward", lambda: _port_open(self._forward_port), timeout_s=30)
        return f"http://127.0.0.1:{self._forward_port}"

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        return self.logs.read(namespace, pod, container)

    def crash_operator(self) -> None:
        pod = self.operator_pod()
        assert pod is not None, "no operator pod"
        self.kubectl(
            "-n",
            OPERATOR_NAMESPACE,
            "delete",
            "pod",
            pod["metadata"]["name"],
            "--grace-period=0",
            "--force",
        )

    def close(self) -> None:
        self.logs.stop()
        if self._forward is not None and self._forward.poll() is None:
            self._forward.terminate()


class PodLogs:
    """Every incarnation's log of the member pods' containers (a ConsumerGroup's pods, and a
    scenario's own pods labelled `FOLLOW_LOGS_LABEL`), where pods are real containers: a
    bounced pod's logs go with it, so each is followed (`kubectl logs -f`, through the API
    server and the kubelet) from the moment it runs, into a file of its own under `log_dir`."""

    def __init__(self, cluster: Cluster, log_dir: Path) -> None:
        self._cluster = cluster
        self.log_dir = log_dir
        self._followers: dict[str, subprocess.Popen[bytes]] = {}
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._follow, daemon=True)
        self._watcher.start()

    def read(self, namespace: str, pod: str, container: str) -> str:
        """Everything every incarnation of this pod name's container wrote, in order."""
        paths = sorted(self.log_dir.glob(f"{namespace}__{pod}__*__{container}.log"))
        return "".join(path.read_text(errors="replace") for path in paths)

    def pods(self, namespace: str) -> list[str]:
        """Every pod name in `namespace` whose containers were followed, gone ones too (a
        Deployment's pods have names nobody can list once they are deleted)."""
        paths = self.log_dir.glob(f"{namespace}__*.log")
        return sorted({path.name.split("__")[1] for path in paths})

    def stop(self) -> None:
        self._stop.set()
        self._watcher.join(timeout=5)
        for process in self._followers.values():
            if process.poll() is None:
                process.terminate()

    def _follow(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                pods = [
                    pod
                    for selector in (GROUP_LABEL, FOLLOW_LOGS_LABEL)
                    for pod in self._cluster.get_json("get", "pods", "-A", "-l", selector)["items"]
                ]
                for pod in pods:
                    # By container id: a container the kubelet restarts in place is a new
                    # incarnation with a log of its own.
                    for status in (pod.get("status") or {}).get("containerStatuses") or []:
                        container_id = status.get("containerID")
                        running = "running" in (status.get("state") or {})
                        if container_id and running and container_id not in self._followers:
                            self._followers[container_id] = self._start(pod, status["name"])
            self._stop.wait(0.5)

    def _start(self, pod: dict[str, Any], container: str) -> subprocess.Popen[bytes]:
        meta = pod["metadata"]
        name = f"{meta['namespace']}__{meta['name']}__{time.time_ns()}__{container}.log"
        with (self.log_dir / name).open("wb") as out:
            return subprocess.Popen(
                [
                    *self._cluster.kubectl_command,
                    "-n",
                    meta["namespace"],
                    "logs",
                    "-f",
                    meta["name"],
                    "-c",
                    container,
                ],
                stdout=out,
                stderr=subprocess.DEVNULL,
            )


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def kind_cluster(workdir: Path) -> Iterator[KindCluster]:
    kubeconfig = Path(os.environ.get("KUBECONFIG", Path.home() / ".kube" / "config"))
    cluster = KindCluster(kubeconfig, workdir / "logs")
    try:
        yield cluster
    finally:
        cluster.close()


def cluster_for(kind: str, workdir: Path) -> contextlib.AbstractContextManager[Cluster]:
    if kind == "local":
        return local_cluster(workdir)
    if kind == "kind":
        return kind_cluster(workdir)
    raise ValueError(f"unknown STATICFLEET_E2E_CLUSTER {kind!r}: local or kind")


def instance_ids_from_env(pods: Sequence[dict[str, Any]]) -> dict[str, str]:
    """pod name -> the group.instance.id the member in it runs as (from its env)."""
    found: dict[str, str] = {}
    for pod in pods:
        for container in pod["spec"]["containers"]:
            for variable in container.get("env") or []:
                if variable["name"] == "STATICFLEET_INSTANCE_ID" and "value" in variable:
                    found[pod["metadata"]["name"]] = variable["value"]
    return found
