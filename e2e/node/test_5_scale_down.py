"""Scenario 5: scale 6 → 4. The two highest slots' pods go, then one batch LeaveGroup names
exactly their instance ids, and their partitions are reassigned at once — long before the
session timeout that would otherwise be the wait."""

from __future__ import annotations

import time

from coordinator.journal_metrics import generation_assignments, partition_moves
from e2e.cluster import Cluster
from e2e.fleet import Record, rows_of, wait_for
from e2e.groups import (
    SESSION_TIMEOUT_MS,
    apply,
    managed_group,
    namespace,
    patch_spec,
    wait_stable,
)

GROUP = "shrink"


def test_scale_down_sends_one_batch_leave(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    with namespace(cluster, "e2e-scale") as ns:
        apply(cluster, ns, managed_group(GROUP, replicas=6, protocol="cooperative"))
        before = wait_stable(cluster, ns, GROUP, 6)
        admin = cluster.admin()
        since_ms = int(time.time() * 1000)
        patch_spec(cluster, ns, GROUP, {"replicas": 4})
        after = wait_stable(cluster, ns, GROUP, 4, timeout_s=120)
        pods_gone_ms = int(time.time() * 1000)

        journal = admin.journal(GROUP)
        left = rows_of(journal, "member_left", since_ms)
        removed = {f"{GROUP}-4", f"{GROUP}-5"}
        assert {row["group_instance_id"] for row in left} == removed, left
        # One request: both leaves carry the timestamp of its one write and start one
        # rebalance, whose reason counts them together.
        assert len({row["ts_ms"] for row in left}) == 1, left
        left_ms = left[0]["ts_ms"]
        rebalances = rows_of(journal, "rebalance_started", since_ms)
        assert len(rebalances) == 1 and "2 member(s) left" in rebalances[0]["detail"]["reason"]
        # Nobody was dropped by the session timeout: they left.
        assert rows_of(journal, "member_removed", since_ms) == []

        # The removed members' partitions went to the survivors in the next stable generation.
        stable = rows_of(journal, "stable", left_ms)
        assert stable, "the group never became Stable after the batch leave"
        final = generation_assignments(journal, {})[-1]
        assert set(final.owners.values()) == {f"{GROUP}-{slot}" for slot in range(4)}
        assert len(final.owners) == 24
        reassigned_after_ms = stable[-1]["ts_ms"] - left_ms
        record("leave_to_stable_ms", reassigned_after_ms)
        record("session_timeout_ms", SESSION_TIMEOUT_MS)
        record("rebalances", len(rebalances))
        record("generation_before", before["generation_id"])
        record("generation_after", after["generation_id"])
        moves = partition_moves(journal, {}, since_ms, int(time.time() * 1000))
        record("partition_moves", len(moves))
        # What moved is what the removed members held (sticky: the survivors keep theirs).
        assert {m.from_owner for m in moves} <= removed
        assert reassigned_after_ms < SESSION_TIMEOUT_MS
        assert pods_gone_ms - since_ms < SESSION_TIMEOUT_MS * 4
        # The CR reports the smaller fleet.
        wait_for(
            "status.members == 4",
            lambda: (
                cluster.get_json("-n", ns, "get", "consumergroup", GROUP)["status"].get("members")
                == 4
            ),
            timeout_s=30,
        )
