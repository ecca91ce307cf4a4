"""Scenario 9b: scale-up 6 → 12 on the real API server. With expected members (the default)
the operator tells the coordinator to expect the 12 instance ids before it creates the pods
and the group rebalances exactly once; without them (`scaleUp.expectMembers: false`) the
same scale-up is measured as the baseline."""

from __future__ import annotations

import time

from coordinator.journal_metrics import partition_moves
from e2e.cluster import Cluster
from e2e.fleet import Record, rows_of
from e2e.groups import apply, managed_group, namespace, patch_spec, wait_stable


def _scale_up(cluster: Cluster, ns: str, group: str, expect_members: bool) -> dict[str, int]:
    manifest = managed_group(group, replicas=6)
    manifest["spec"]["scaleUp"] = {"expectMembers": expect_members}
    apply(cluster, ns, manifest)
    wait_stable(cluster, ns, group, 6)
    admin = cluster.admin()
    since_ms = int(time.time() * 1000)
    started = time.monotonic()
    patch_spec(cluster, ns, group, {"replicas": 12})
    after = wait_stable(cluster, ns, group, 12, timeout_s=300)
    seconds = time.monotonic() - started
    journal = admin.journal(group)
    assert {m["group_instance_id"] for m in after["members"]} == {
        f"{group}-{slot}" for slot in range(12)
    }
    return {
        "rebalances": len(rows_of(journal, "generation_started", since_ms)),
        "partition_moves": len(partition_moves(journal, {}, since_ms, int(time.time() * 1000))),
        "members_joined": len(rows_of(journal, "member_joined", since_ms)),
        "scale_up_to_stable_ms": int(seconds * 1000),
    }


def test_a_scale_up_with_expected_members_is_one_rebalance(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    with namespace(cluster, "e2e-scale-up") as ns:
        expected = _scale_up(cluster, ns, "grow", expect_members=True)
        for key, value in expected.items():
            record(f"expected_members_{key}", value)
        assert expected["members_joined"] == 6
        assert expected["rebalances"] == 1, expected
    with namespace(cluster, "e2e-scale-up-plain") as ns:
        plain = _scale_up(cluster, ns, "grow-plain", expect_members=False)
        for key, value in plain.items():
            record(f"plain_{key}", value)
        # Measured, not assumed: the members join as their pods start.
        assert plain["rebalances"] >= 1
