"""Scenario 12: docs/getting-started.md, run as written on the real node (issue 27).

The guide's steps 3 to 7 (e2e/getting_started.py reads them from the file): `helm install` of
the chart, the example fleet of six (`examples/managed-group.yaml`) Ready, the two-bounce to
cooperative, `kubectl scale` to four with one batch LeaveGroup, and the clean-up, each step's
commands in bash with the node's kubectl and helm, failing where a user would stop. Steps 1
and 2 (a kind cluster, the image loaded into it) are what the node of e2e/node/conftest.py
already is. It runs last on that node: the release the other scenarios share is uninstalled
first, and a fresh PersistentVolume stands in for the provisioner kind and minikube have.

    .venv/bin/pytest -o testpaths=e2e e2e/node/test_12_getting_started.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from e2e.cluster import OPERATOR_NAMESPACE, RELEASE
from e2e.getting_started import GUIDE, run_step, steps
from e2e.node.cluster import IMAGE_UID, node_volume
from e2e.node.conftest import FleetNode

NAMESPACE = "orders"
GROUP = "orders"


def test_the_getting_started_guide_runs_as_written(
    fleet_node: FleetNode, record: Callable[[str, Any], None]
) -> None:
    cluster = fleet_node.cluster
    # A new install on an empty node, as the guide's reader has: the shared release goes,
    # and its claim's volume (Retain) with it; a fresh one waits for the guide's claim.
    cluster.helm("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait", "--timeout", "120s")
    cluster.kubectl("delete", "pvc", "--all", "-n", OPERATOR_NAMESPACE, "--timeout=60s")
    cluster.kubectl("delete", "pv", "node-data", "--timeout=60s")
    data = fleet_node.workdir / "persistent-volumes" / "guide-data"
    data.mkdir(parents=True, exist_ok=True)
    os.chown(data, IMAGE_UID, IMAGE_UID)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(node_volume(data)))

    guide = steps(GUIDE.read_text())
    assert [step.number for step in guide] == [3, 4, 5, 6, 7]
    bin_dir = fleet_node.workdir / "guide-bin"
    durations: dict[str, float] = {}
    for step in guide[:-1]:  # the clean-up after the checks below
        durations[f"{step.number}. {step.title}"] = round(run_step(cluster, step, bin_dir), 1)

    # What the guide says the reader sees.
    group = cluster.get_json("-n", NAMESPACE, "get", "consumergroup", GROUP)
    status = group["status"]
    assert status["effectiveRebalanceProtocol"] == "cooperative"
    assert status["rollout"]["phase"] == "Completed"
    assert status["replicas"] == 4 and status["members"] == 4
    pods = [
        p
        for p in cluster.member_pods(NAMESPACE, GROUP)
        if not p["metadata"].get("deletionTimestamp")
    ]
    assert sorted(p["metadata"]["name"] for p in pods) == [f"{GROUP}-{i}" for i in range(4)]
    events = cluster.get_json(
        "-n", NAMESPACE, "get", "events", "--field-selector", "reason=MembersLeft"
    )["items"]
    assert [e["message"] for e in events] == [
        f"batch LeaveGroup for {GROUP}-4, {GROUP}-5 (scale-down)"
    ]

    durations[f"{guide[-1].number}. {guide[-1].title}"] = round(
        run_step(cluster, guide[-1], bin_dir), 1
    )
    assert cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0
    record("step_seconds", durations)
    record("generation_after", status.get("generation"))
