"""The cluster a scenario runs against: the tools a user has (`kubectl`, `helm`), the
coordinator over HTTP, the member containers' logs, and a way to crash the operator.

One bootstrap implements it, the real node's (e2e/node/cluster.py: `NodeCluster`); the
scenarios are written against this interface, so they read as a user's steps and not as the
node's plumbing (docs/node.md).
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from e2e.fleet import GROUP_LABEL, CoordinatorAdmin, wait_for

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
E2E_BIN = BUILD / "e2e" / "bin"
HELM = BUILD / "bin" / "helm"
CHART = ROOT / "charts" / "staticfleet"

RELEASE = "sf"
OPERATOR_NAMESPACE = "staticfleet-system"
FULLNAME = f"{RELEASE}-staticfleet"
# The chart's default coordinator port (the test reaches it through the Service).
COORDINATOR_PORT = 9092
# A scenario's own pods (not a ConsumerGroup's) whose every incarnation's log it reads, e.g. a
# StatefulSet of consumers rolled by hand (scenario 8d): followed as members' are (PodLogs).
FOLLOW_LOGS_LABEL = "e2e.staticfleet.dev/follow-logs"
# The name the scenarios' member templates give the image (e2e/groups.py): never pulled,
# e2e/node/conftest.py tags the chart's image so in the node's containerd.
IMAGE_REPOSITORY = "staticfleet"
IMAGE_TAG = "e2e"


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

    def close(self) -> None:  # noqa: B027 (a bootstrap that starts nothing stops nothing)
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


def instance_ids_from_env(pods: Sequence[dict[str, Any]]) -> dict[str, str]:
    """pod name -> the group.instance.id the member in it runs as (from its env)."""
    found: dict[str, str] = {}
    for pod in pods:
        for container in pod["spec"]["containers"]:
            for variable in container.get("env") or []:
                if variable["name"] == "STATICFLEET_INSTANCE_ID" and "value" in variable:
                    found[pod["metadata"]["name"]] = variable["value"]
    return found
