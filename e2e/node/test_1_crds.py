"""Scenario 1: `kubectl apply -f crds/` works, and the API server itself rejects an invalid
ConsumerGroup with a schema error (OpenAPI validation and the CEL rules of the CRD). On the
node's control plane before anything of the project is installed (`bare_node`)."""

from __future__ import annotations

import json

from e2e.cluster import ROOT
from e2e.fleet import Record
from e2e.groups import managed_group
from e2e.node.conftest import BareNode


def test_crds_apply_and_the_api_server_rejects_invalid_groups(
    bare_node: BareNode, record: Record
) -> None:
    cluster = bare_node.cluster
    applied = cluster.kubectl("apply", "-f", str(ROOT / "crds"))
    assert "consumergroups.staticfleet.dev" in applied.stdout
    cluster.wait_crd_established("consumergroups.staticfleet.dev")
    # `kubectl get cg` knows the short name and the printer columns.
    resources = cluster.kubectl("api-resources", "--api-group=staticfleet.dev").stdout
    assert "cg" in resources.split() and "ConsumerGroup" in resources

    cluster.kubectl("create", "namespace", "e2e-crds")
    try:
        # A valid group is accepted by the server (dry run: no operator is installed yet).
        valid = managed_group("valid")
        cluster.kubectl(
            "-n", "e2e-crds", "apply", "--dry-run=server", "-f", "-", input=json.dumps(valid)
        )

        rejections = {}
        # Schema: an enum and a minimum.
        bad_protocol = managed_group("bad-protocol")
        bad_protocol["spec"]["rebalance"]["protocol"] = "sticky"
        bad_replicas = managed_group("bad-replicas")
        bad_replicas["spec"]["replicas"] = -1
        # A rule: managed (replicas + template) and adopted (selector) are exclusive.
        both_modes = managed_group("both-modes")
        both_modes["spec"]["selector"] = {"matchLabels": {"spark-role": "executor"}}
        # Required field.
        no_group_id = managed_group("no-group-id")
        del no_group_id["spec"]["groupId"]
        cases = {
            "bad-protocol": (bad_protocol, "spec.rebalance.protocol"),
            "bad-replicas": (bad_replicas, "spec.replicas"),
            "both-modes": (both_modes, "spec"),
            "no-group-id": (no_group_id, "groupId"),
        }
        for name, (manifest, field) in cases.items():
            result = cluster.kubectl(
                "-n", "e2e-crds", "apply", "-f", "-", input=json.dumps(manifest), check=False
            )
            assert result.returncode != 0, f"{name} was accepted"
            assert "is invalid" in result.stderr and field in result.stderr, result.stderr
            rejections[name] = next(
                line.strip() for line in result.stderr.splitlines() if field in line
            )[:300]
        # Nothing invalid was stored.
        stored = cluster.get_json("-n", "e2e-crds", "get", "consumergroups")["items"]
        assert stored == []
        record("rejections", rejections)
    finally:
        cluster.kubectl("delete", "namespace", "e2e-crds", "--wait=false", check=False)
