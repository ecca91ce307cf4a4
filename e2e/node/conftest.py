"""The real node, and the chart's operator installed on it, shared by the node scenarios.

One node for the node scenarios of a session (the e2e/node package): the control plane,
kube-scheduler, containerd, kubelet, kube-proxy and CoreDNS (e2e/node/probe.py), the images
`make image` builds, and a PersistentVolume for the chart's claim (`bare_node`); then the CRDs
and `helm install` of the chart (`fleet_node`). Bringing the node up takes about 40 s, so every
scenario reuses it: 1 (the CRDs) and 2 (the chart's install and uninstall) run first on the
bare node, then the others share the release `fleet_node` installs. At the end the release and
every namespace a scenario left go through the kubelet (CNI DEL of each sandbox), the node
stops, and the host is checked to be as it was. Builds what is absent first; needs root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import CHART, OPERATOR_NAMESPACE, RELEASE, ROOT, pod_ready
from e2e.fleet import answers_ready, wait_for
from e2e.groups import IMAGE, JAVA_IMAGE, RDKAFKA_IMAGE, SPARK_IMAGE
from e2e.node import probe
from e2e.node.cluster import IMAGE_UID, NodeCluster, node_volume
from e2e.node.test_node import _host_state
from staticfleet.kafka.broker import KafkaBroker, running_broker
from staticfleet.kafka.java_peer import ensure_built

RUNC = Path("/usr/bin/runc")
# e2e/groups.py's member image as containerd names it (a CRI reference is normalized so).
MEMBER_IMAGE = f"docker.io/library/{IMAGE}"
# The client images (image/clients.Dockerfile: the Kafka client families', Spark's executors')
# the node scenarios run, by the name their templates (or spark-submit) give (e2e/groups.py):
# each is imported from its archive under that name.
CLIENT_IMAGES = {
    "rdkafka": f"docker.io/library/{RDKAFKA_IMAGE}",
    "java": f"docker.io/library/{JAVA_IMAGE}",
    "spark": f"docker.io/library/{SPARK_IMAGE}",
}
# Namespaces the node scenarios make; deleted (through the kubelet) before the node stops,
# also when a scenario failed before its own cleanup.
# "orders": docs/getting-started.md's (scenario 12).
# The rest: scenarios 3-9f, written for any Cluster (e2e/cluster.py).
SCENARIO_NAMESPACES = (
    "e2e-node-fleet",
    "e2e-node-faults",
    "e2e-node-drain",
    "orders",
    "e2e-node-replicas",
    "e2e-managed",
    "e2e-scale",
    "e2e-upgrade",
    "e2e-spark",
    "e2e-spark-k8s",
    "e2e-spark-killed",
    "e2e-resume",
    "e2e-durable",
    "e2e-scale-up",
    "e2e-scale-up-plain",
    "e2e-standby",
    "e2e-prometheus",
    "e2e-keda",
    "e2e-keda-embedded",
    "e2e-kafka-members",
    "e2e-kafka-rdk",
    "e2e-kafka-java",
    "e2e-kafka-migration",
)


# Set on a test whose call failed, for fixtures that print diagnostics at their teardown.
CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[CALL_FAILED] = True
    return report


# The node scenarios on the bare node, first: 2 installs and uninstalls the chart itself,
# before fleet_node installs the release the others share.
_FIRST = ("test_1_crds.py", "test_2_chart.py")
# The node scenarios that change the shared release, in this order, after the others: 11c
# evicts the operator's pod (a full drain; it leaves the operator Ready again), 11b leaves
# the release at two operator replicas on a shared volume, 12 uninstalls it.
_LAST = (
    "test_11c_full_drain_on_node.py",
    "test_11b_operator_replicas_on_node.py",
    "test_12_getting_started.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Within e2e/node, the tests on the node last: its package-scoped fixture stops after the
    last test of the package, so a test of the package after the node scenarios (test_image.py
    sorts after them) would run beside a running node (the host checks of test_node.py would
    see it). Of those, the ones on the bare node first (`_FIRST`), and the ones that change
    the shared release last (`_LAST`)."""
    here = Path(__file__).parent

    def key(item: pytest.Item) -> tuple[bool, int]:
        on_node = "bare_node" in getattr(item, "fixturenames", ())
        name = item.path.name
        if name in _FIRST:
            return on_node, _FIRST.index(name) - len(_FIRST)
        return on_node, _LAST.index(name) + 1 if name in _LAST else 0

    slots = [i for i, item in enumerate(items) if item.path.parent == here]
    ours = [items[i] for i in slots]
    ordered = sorted(ours, key=key)
    for i, item in zip(slots, ordered, strict=True):
        items[i] = item


@dataclass
class BareNode:
    """The running node with the images and the chart's PersistentVolume, no release."""

    cluster: NodeCluster
    node: probe.Node
    workdir: Path
    start_s: float  # from the node's start to its PersistentVolume made (images included)


@dataclass
class FleetNode(BareNode):
    """The node with the chart installed, and what installing it measured."""

    figures: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="package")
def node_built() -> None:
    # Debian's containerd, runc, CNI plugins and buildah (for the pause image), if absent.
    subprocess.run([str(ROOT / "scripts" / "node" / "install-packages.sh")], check=True)
    subprocess.run([str(ROOT / "e2e" / "build.sh")], check=True, timeout=3600)
    subprocess.run([str(ROOT / "scripts" / "node" / "build.sh")], check=True, timeout=3600)
    probe.build_image(*CLIENT_IMAGES)


# Package scope: torn down after the last test of e2e/node, not at the end of a `make e2e`
# session whose other scenarios run their own control plane.
@pytest.fixture(scope="package")
def bare_node(node_built: None) -> Iterator[BareNode]:
    before = _host_state()
    workdir = ROOT / "build" / "node" / "run-fleet"
    node_probe = probe.Probe(workdir)
    started = time.monotonic()
    try:
        with probe.running_node(node_probe, 180.0, "debian", RUNC) as node:
            # The scenarios' member template names the image as e2e/groups.py's IMAGE
            # (never pulled: its tag is not latest); here it is the chart's image under
            # that second name.
            node.containerd.ctr("image", "tag", "--force", node.image, MEMBER_IMAGE)
            for client, name in CLIENT_IMAGES.items():
                built = node.containerd.import_image(probe.client_archive(client))
                node.containerd.ctr("image", "tag", "--force", built, name)
            cluster = NodeCluster(node.cp.kubeconfig, node.image, node.containerd, workdir / "logs")
            node.stack.callback(cluster.close)
            # Before the kubelet stops: the release's and the groups' pods go through the
            # kubelet (CNI DEL of each sandbox).
            node.stack.callback(_uninstall, cluster)
            # Static provisioning, as a cluster without a provisioner offers it: the chart's
            # claim (no storageClassName) binds to this volume, owned by the image's uid.
            data = workdir / "persistent-volumes" / "node-data"
            data.mkdir(parents=True)
            os.chown(data, IMAGE_UID, IMAGE_UID)
            cluster.kubectl("apply", "-f", "-", input=json.dumps(node_volume(data)))
            yield BareNode(cluster, node, workdir, round(time.monotonic() - started, 1))
    finally:
        node_probe.write()
    assert _host_state() == before


@pytest.fixture(scope="package")
def fleet_node(bare_node: BareNode) -> FleetNode:
    cluster = bare_node.cluster
    try:
        cluster.kubectl("apply", "-f", str(ROOT / "crds"))
        cluster.wait_crd_established("consumergroups.staticfleet.dev")
        figures: dict[str, Any] = {"node_start_s": bare_node.start_s, **install_chart(cluster)}
        operator = cluster.operator_pod()
        assert operator is not None
        status = operator["status"]["containerStatuses"][0]
        assert status["image"] == bare_node.node.image
    except BaseException:
        print_diagnostics(cluster)
        raise
    figures["versions"] = _versions(cluster)
    figures["image"] = {"name": bare_node.node.image, "image_id": status["imageID"]}
    return FleetNode(cluster, bare_node.node, bare_node.workdir, bare_node.start_s, figures)


@pytest.fixture
def cluster(fleet_node: FleetNode) -> NodeCluster:
    """Scenarios written for any Cluster (e2e/cluster.py) run on the real node's."""
    return fleet_node.cluster


@pytest.fixture(scope="package")
def kafka_broker(fleet_node: FleetNode) -> Iterator[KafkaBroker]:
    """The secured KRaft broker of the Kafka scenarios (e2e/conftest.py's), its SASL_SSL and SSL
    listeners on the node's bridge, where pods reach this host (its certificate names that
    address too); PLAINTEXT, the tests' own view, stays on loopback. Started once the node's
    first pod gave the bridge its address, stopped before the node."""
    ensure_built()
    workdir = ROOT / "build" / "e2e" / "kafka-broker-node"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    with running_broker(
        workdir, timeout=120, secured=True, client_host=probe.bridge_address()
    ) as broker:
        yield broker


@pytest.fixture
def operator_release(fleet_node: FleetNode) -> None:
    """The chart's release: fleet_node installed it."""


def install_chart(cluster: NodeCluster) -> dict[str, float]:
    """`helm install` of the chart, its operator pod Ready and its coordinator Service routed
    to it from this host; how long each took."""
    started = time.monotonic()
    cluster.helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        OPERATOR_NAMESPACE,
        "--create-namespace",
        *cluster.chart_values(),
        "--wait",
        "--timeout",
        "180s",
    )
    wait_for(
        "the operator pod to be Ready",
        lambda: (pod := cluster.operator_pod()) is not None and pod_ready(pod),
        timeout_s=120,
    )
    ready = time.monotonic()
    # Ready is not yet routed: kube-proxy programs the Service's ready endpoint up to its
    # sync period later (a REJECT "has no endpoints" until then), and the scenarios' admin
    # calls go through the Service from this host. Seen once under load: a describe right
    # after the install was refused.
    coordinator = cluster.coordinator_base_url()
    wait_for(
        f"the coordinator's Service ({coordinator}) to route to the ready operator",
        lambda: answers_ready(coordinator),
        timeout_s=60,
    )
    return {
        "chart_install_to_operator_ready_s": round(ready - started, 1),
        "operator_ready_to_service_routed_s": round(time.monotonic() - ready, 1),
    }


def _versions(cluster: NodeCluster) -> dict[str, str]:
    info = cluster.get_json("get", "node", probe.NODE_NAME)["status"]["nodeInfo"]
    runc = subprocess.run([str(RUNC), "--version"], capture_output=True, text=True, check=True)
    return {
        "kubelet": info["kubeletVersion"],
        "container_runtime": info["containerRuntimeVersion"],
        "runc": runc.stdout.splitlines()[0],
        "kernel": info["kernelVersion"],
    }


def print_diagnostics(cluster: NodeCluster) -> None:
    """What the cluster looked like, into the failed test's captured output."""
    for args in (
        ["get", "nodes,pods,pvc,svc,endpointslices,pdb,consumergroups", "-A", "-o", "wide"],
        ["get", "events", "-A", "--sort-by=.lastTimestamp"],
    ):
        print(cluster.kubectl(*args, check=False).stdout[-8000:])
    operator = cluster.operator_pod()
    if operator is not None:
        name = operator["metadata"]["name"]
        print(cluster.container_log(OPERATOR_NAMESPACE, name, "operator")[-8000:])


def _uninstall(cluster: NodeCluster) -> None:
    # A scenario that failed mid-way may have left the node cordoned: pods must run to stop.
    cluster.kubectl("uncordon", probe.NODE_NAME, check=False)
    for name in SCENARIO_NAMESPACES:
        cluster.kubectl("delete", "namespace", name, "--timeout=120s", check=False)
    subprocess.run(
        [
            str(cluster.helm_bin),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "uninstall",
            RELEASE,
            "-n",
            OPERATOR_NAMESPACE,
            "--wait",
            "--timeout",
            "120s",
        ],
        check=False,
        capture_output=True,
    )
