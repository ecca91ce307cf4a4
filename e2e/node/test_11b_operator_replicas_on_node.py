"""Scenario 11b: two operator replicas on a real node (issue 28).

On scenario 10's node and chart release (e2e/node/conftest.py), `helm upgrade` to
`replicaCount: 2` on a ReadWriteMany volume (a hostPath PersistentVolume both pods mount):

- **readiness keeps members off the standby**: exactly one operator pod is Ready; the
  coordinator Service's EndpointSlice lists only that pod as ready, so kube-proxy routes
  members there; the standby, asked directly at its pod IP, answers 503 on /readyz and on a
  member's request;
- **the standby takes the store over**: a managed group of 2 goes Stable; the active pod is
  deleted; the Deployment's replacement and the standby hand the store over between them
  (peering.py: the newest live replica is active; a replica loads the store only once it is
  the active one, and releases it when it is paused); afterwards one pod is Ready, the
  Service routes to it, and the group is Stable **in the same generation** with the same
  members, its journal showing no member removed and no rebalance: the replica that took
  over served the store as the active one had left it. (Before this was fixed, every
  replica loaded the store at its own start: the standby here started before the group
  existed, so it took over with no group at all and the members had to join again.)

The scenario leaves the release at two replicas on the shared volume: it runs after the
other scenarios that share the release and before 12, which uninstalls it for a fresh
install (the order e2e/node/conftest.py sets). In the first CI run it was named 13 and ran
after 12: its `helm upgrade` found no release.

    .venv/bin/pytest -o testpaths=e2e e2e/node/test_11b_operator_replicas_on_node.py
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from e2e.cluster import CHART, COORDINATOR_PORT, FULLNAME, OPERATOR_NAMESPACE, RELEASE, pod_ready
from e2e.fleet import answers_ready, wait_for
from e2e.groups import apply, managed_group, namespace, wait_stable
from e2e.node.cluster import IMAGE_UID, NodeCluster, node_volume
from e2e.node.conftest import FleetNode, print_diagnostics

GROUP = "node-replicas"
NAMESPACE = "e2e-node-replicas"
MEMBERS = 2
# Kafka's default. A member that hears nothing for its whole session rejoins: with 20 s,
# a handover that waited two peering polls (before the store's holder mark) once cost a
# rebalance (docs/node.md, scenario 11b).
SESSION_TIMEOUT_MS = 45_000
# After the handover: long enough for a member the new active replica did not know to have
# been told so at its next heartbeat (3 s) and to have rejoined.
SETTLE_S = 10
SHARED_CLAIM = "staticfleet-shared-data"
SHARED_VOLUME = "node-shared-data"

pytestmark = pytest.mark.timeout(1200)


def test_two_operator_replicas_readiness_and_the_store_handover(
    fleet_node: FleetNode, record: Callable[[str, Any], None]
) -> None:
    try:
        _run_scenario(fleet_node, record)
    except BaseException:
        print_diagnostics(fleet_node.cluster)
        for pod in fleet_node.cluster.operator_pods():
            name = pod["metadata"]["name"]
            print(f"--- {name}")
            print(fleet_node.cluster.container_log(OPERATOR_NAMESPACE, name, "operator")[-6000:])
        raise


def _run_scenario(fleet_node: FleetNode, record: Callable[[str, Any], None]) -> None:
    cluster = fleet_node.cluster
    _shared_volume(cluster, fleet_node)
    started = time.monotonic()
    cluster.helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        OPERATOR_NAMESPACE,
        "--reuse-values",
        "--set",
        "replicaCount=2",
        "--set",
        f"store.persistence.existingClaim={SHARED_CLAIM}",
        "--set",
        "store.persistence.accessModes={ReadWriteMany}",
        # No --wait: helm waits for every replica of a Recreate Deployment to be Ready, and
        # a standby never is.
    )
    active, standby = wait_for(
        "two operator pods running, exactly one of them Ready",
        lambda: _one_ready_of_two(cluster),
        timeout_s=240,
    )
    record("upgrade_to_one_ready_of_two_s", round(time.monotonic() - started, 1))
    _readiness_keeps_members_off(cluster, active, standby, record)

    with namespace(cluster, NAMESPACE) as ns:
        group = managed_group(GROUP, replicas=MEMBERS, session_timeout_ms=SESSION_TIMEOUT_MS)
        container = group["spec"]["template"]["spec"]["containers"][0]
        container["image"] = fleet_node.node.image
        container["imagePullPolicy"] = "Never"
        apply(cluster, ns, group)
        described = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=240)
        generation = described["generation_id"]
        members = {m["group_instance_id"] for m in described["members"]}
        formed_at_ms = int(time.time() * 1000)

        # The active replica goes (a node drain, a rescheduled pod): the standby and the
        # Deployment's replacement hand the store over between them.
        started = time.monotonic()
        cluster.kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", active, "--wait=false")
        new_active, _ = wait_for(
            "one Ready operator pod again, not the deleted one",
            lambda: _one_ready_of_two(cluster, not_named=active),
            timeout_s=180,
        )
        record("active_deleted_to_another_ready_s", round(time.monotonic() - started, 1))
        record("took_over", "the standby" if new_active == standby else "the replacement")
        wait_for(
            "the coordinator Service to route to the new active replica",
            lambda: answers_ready(cluster.coordinator_base_url()),
            timeout_s=60,
        )
        record("active_deleted_to_service_routed_s", round(time.monotonic() - started, 1))
        # A member the replica that took over did not know would have rejoined by now.
        time.sleep(SETTLE_S)
        after = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=120)
        record("handover_to_stable_s", round(time.monotonic() - started, 1))
        assert after["generation_id"] == generation, (generation, after["generation_id"])
        assert {m["group_instance_id"] for m in after["members"]} == members
        kinds = [
            row["kind"]
            for row in cluster.admin().journal(GROUP)
            if int(row["ts_ms"]) >= formed_at_ms
        ]
        assert "member_removed" not in kinds and "rebalance_started" not in kinds, kinds
        record("generation_unchanged", generation)
        record("journal_kinds_after_forming", sorted(set(kinds)))


def _shared_volume(cluster: NodeCluster, fleet_node: FleetNode) -> None:
    """A ReadWriteMany hostPath PersistentVolume and a claim bound to it: both replicas'
    pods run on this one node, so both mount the same directory (SQLite's locks hold)."""
    data = fleet_node.workdir / "persistent-volumes" / "shared-data"
    data.mkdir(parents=True)
    os.chown(data, IMAGE_UID, IMAGE_UID)
    volume = node_volume(data, SHARED_VOLUME, "ReadWriteMany")
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": SHARED_CLAIM, "namespace": OPERATOR_NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": SHARED_VOLUME,
            "resources": {"requests": {"storage": "10Gi"}},
        },
    }
    for item in (volume, claim):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(item))


def _one_ready_of_two(cluster: NodeCluster, not_named: str = "") -> tuple[str, str] | None:
    """(the Ready pod, the running one that is not) once there are exactly two, both with
    their container running, only one Ready, and each one's own /readyz agreeing (200 from
    the Ready one, 503 from the other); the same answer twice in a row, a probe period
    apart, so that a handover in flight is not taken for its end. The pods' readiness lags
    their /readyz by up to the probe's failure threshold: two replicas started together
    (the chart's Deployment is Recreate) may both find themselves alone in the peering
    object at first, and the outranked one then holds the store until its next poll (5 s),
    Ready while it already answers 503."""

    def look() -> tuple[str, str] | None:
        pods = [p for p in cluster.operator_pods() if p["metadata"]["name"] != not_named]
        running = [
            p
            for p in pods
            if any(
                "running" in (s.get("state") or {})
                for s in p["status"].get("containerStatuses") or []
            )
        ]
        if len(running) != 2:
            return None
        ready = [p for p in running if pod_ready(p)]
        others = [p for p in running if not pod_ready(p)]
        if len(ready) != 1 or not _answers(ready[0], 200) or not _answers(others[0], 503):
            return None
        return ready[0]["metadata"]["name"], others[0]["metadata"]["name"]

    first = look()
    if first is None:
        return None
    time.sleep(6)  # the chart's readiness probe period is 5 s
    return first if look() == first else None


def _answers(pod: dict[str, Any], status: int) -> bool:
    """Whether the operator in `pod` answers `status` on its own /readyz (not yet
    listening: no)."""
    ip = pod["status"].get("podIP")
    try:
        return bool(ip) and _status(f"http://{ip}:{COORDINATOR_PORT}/readyz") == status
    except OSError:
        return False


def _readiness_keeps_members_off(
    cluster: NodeCluster, active: str, standby: str, record: Callable[[str, Any], None]
) -> None:
    ips = {pod["metadata"]["name"]: pod["status"]["podIP"] for pod in cluster.operator_pods()}
    slices = cluster.get_json(
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "endpointslices",
        "-l",
        f"kubernetes.io/service-name={FULLNAME}-coordinator",
    )["items"]
    ready = {
        address
        for item in slices
        for endpoint in item.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint["addresses"]
    }
    assert ready == {ips[active]}, (ready, ips)
    token = cluster.admin().token
    for name, wanted in ((active, 200), (standby, 503)):
        url = f"http://{ips[name]}:{COORDINATOR_PORT}"
        assert _status(f"{url}/readyz") == wanted, name
        # A request at the standby is refused, not served from a state that is not the
        # fleet's (a member's client would retry through the Service, at the active one).
        assert _status(f"{url}/v1/groups", token) == wanted, name
    record("standby_answers", 503)


def _status(url: str, token: str = "") -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
