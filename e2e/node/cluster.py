"""The e2e scenarios' view of a real node (e2e/node/probe.py's running_node): the Cluster of
e2e/cluster.py with the chart's image as containerd holds it, the coordinator reached at its
Service's ClusterIP through kube-proxy's rules on this host, and logs through the API server
(`kubectl logs`, which the API server fetches from the kubelet). docs/node.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.cluster import COORDINATOR_PORT, E2E_BIN, FULLNAME, HELM, OPERATOR_NAMESPACE, Cluster

# The PersistentVolume the chart's claim binds to: a hostPath the kubelet mounts as it is
# (no fsGroup change for hostPath), so it is made owned by the image's uid.
IMAGE_UID = 10001


class NodeCluster(Cluster):
    name = "node"

    def __init__(self, kubeconfig: Path, image: str) -> None:
        super().__init__(kubeconfig, E2E_BIN / "kubectl", HELM)
        self.image = image  # docker.io/library/staticfleet:<version>

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
        result = self.kubectl("-n", namespace, "logs", pod, "-c", container, check=False)
        return result.stdout

    def crash_operator(self) -> None:
        raise NotImplementedError("not a scenario on the real node yet (docs/node.md)")


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
