"""Scenario 10: the chart's operator and a managed fleet on a real node (issue 28).

The node of e2e/node/probe.py (kubelet v1.36.3, Debian's containerd 1.6 and runc, the bridge
CNI plugin, kube-proxy, CoreDNS) runs the chart installed with `helm install` from the image
`make image` builds (imagePullPolicy Never); its operator pod goes Ready through its readiness
probe; a managed ConsumerGroup of 3 goes Stable in the embedded coordinator, its members
reaching it by the coordinator Service's DNS name; `kubectl logs` of a member shows its
assignment; a member container killed with SIGKILL is restarted in place by the kubelet and
rejoins as the same static member, with no new generation. Then the host is as it was. The
node and the chart's release come from e2e/node/conftest.py (every node scenario shares
them). Builds what is absent first; needs root.

    .venv/bin/pytest -o testpaths=e2e e2e/node/test_10_fleet_on_node.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from e2e.cluster import pod_ready
from e2e.fleet import INSTANCE_ANNOTATION, member_logs_from_text, static_rejoins, wait_for
from e2e.groups import apply, managed_group, namespace, wait_stable
from e2e.node import probe
from e2e.node.cluster import NodeCluster
from e2e.node.conftest import FleetNode, print_diagnostics

GROUP = "node-orders"
MEMBERS = 3

pytestmark = pytest.mark.timeout(1800)


def _member_group(image: str) -> dict[str, Any]:
    group = managed_group(GROUP, replicas=MEMBERS)
    container = group["spec"]["template"]["spec"]["containers"][0]
    container["image"] = image
    container["imagePullPolicy"] = "Never"
    return group


def test_chart_operator_and_fleet_on_a_real_node(
    fleet_node: FleetNode, record: Callable[[str, Any], None]
) -> None:
    for key, value in fleet_node.figures.items():
        record(key, value)
    try:
        _run_scenario(fleet_node.cluster, fleet_node.node, record)
    except BaseException:
        print_diagnostics(fleet_node.cluster)
        raise


def _run_scenario(
    cluster: NodeCluster, node: probe.Node, record: Callable[[str, Any], None]
) -> None:
    with namespace(cluster, "e2e-node-fleet") as ns:
        started = time.monotonic()
        apply(cluster, ns, _member_group(node.image))
        described = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=240)
        record("create_to_stable_s", round(time.monotonic() - started, 1))
        pods = cluster.member_pods(ns, GROUP)
        assert len(pods) == MEMBERS
        # Pods on the bridge network, not the host's: each has its own address.
        assert len({pod["status"]["podIP"] for pod in pods}) == MEMBERS
        assert all(pod["status"]["podIP"].startswith("10.244.0.") for pod in pods)
        # The members were told the coordinator's Service name and resolved it (CoreDNS).
        env = {e["name"]: e.get("value", "") for e in pods[0]["spec"]["containers"][0]["env"]}
        urls = [v for v in env.values() if "coordinator" in v and v.startswith("http")]
        record("member_coordinator_url", urls)
        assert any(".svc" in url for url in urls), env
        # The chart's members.healthPort (8081): the template sets no port, so the operator
        # gave each member its health port and httpGet probes; Ready above means /readyz
        # said the member holds its place (docs/operator.md, "Member health probes").
        member = pods[0]["spec"]["containers"][0]
        assert env.get("STATICFLEET_HEALTH_PORT") == "8081", env
        # (The API server adds `scheme: HTTP`, its default.)
        for probe_key, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
            http_get = member[probe_key]["httpGet"]
            assert (http_get["path"], http_get["port"]) == (path, 8081), member
        assert {m["group_instance_id"] for m in described["members"]} == {
            f"{GROUP}-{slot}" for slot in range(MEMBERS)
        }

        # kubectl logs (the API server asks the kubelet): the member's assignment.
        name = pods[0]["metadata"]["name"]

        def assigned() -> list[Any] | None:
            logs = member_logs_from_text(name, cluster.container_log(ns, name, "member"))
            rows = [r for log in logs for r in log.rows if r["event"] == "assigned"]
            return rows[-1]["partitions"] if rows and rows[-1]["partitions"] else None

        partitions = wait_for(f"an assignment in kubectl logs {name}", assigned, timeout_s=60)
        record("member_log_assignment_partitions", len(partitions))

        _member_killed_restarts_in_place(cluster, node, ns, pods[0], described, record)


def _member_killed_restarts_in_place(
    cluster: NodeCluster,
    node: probe.Node,
    ns: str,
    victim: dict[str, Any],
    described: dict[str, Any],
    record: Callable[[str, Any], None],
) -> None:
    """SIGKILL of a member's container (as the OOM killer would): the kubelet restarts it in
    the same pod (restartPolicy Always), under the same instance id, and the coordinator
    starts no new generation (a static member's rejoin)."""
    name = victim["metadata"]["name"]
    status = victim["status"]["containerStatuses"][0]
    container_id = status["containerID"].split("://", 1)[1]
    restarts = status["restartCount"]
    generation = described["generation_id"]
    instance_id = victim["metadata"]["annotations"][INSTANCE_ANNOTATION]
    admin = cluster.admin()
    killed_at_ms = int(time.time() * 1000)
    started = time.monotonic()
    node.containerd.ctr("task", "kill", "--signal", "SIGKILL", container_id)

    def restarted() -> dict[str, Any] | None:
        pod: dict[str, Any] = cluster.get_json("-n", ns, "get", "pod", name)
        current = pod["status"]["containerStatuses"][0]
        return pod if current["restartCount"] > restarts and pod_ready(pod) else None

    pod = wait_for(f"{name}'s container restarted and Ready", restarted, timeout_s=120)
    record("member_kill_to_ready_s", round(time.monotonic() - started, 1))
    # The restarted process came back as the same static member (the coordinator's journal).
    wait_for(
        f"{instance_id}'s static rejoin in the journal",
        lambda: static_rejoins(admin.journal(GROUP), instance_id, killed_at_ms),
        timeout_s=60,
    )
    record("member_kill_to_static_rejoin_s", round(time.monotonic() - started, 1))
    assert pod["metadata"]["uid"] == victim["metadata"]["uid"]  # the same pod, in place
    after = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=120)
    record("member_kill_to_stable_s", round(time.monotonic() - started, 1))
    assert after["generation_id"] == generation, (generation, after["generation_id"])
    assert {m["group_instance_id"] for m in after["members"]} == {
        m["group_instance_id"] for m in described["members"]
    }
    record("member_kill_generation_unchanged", generation)
