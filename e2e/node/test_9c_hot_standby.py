"""Scenario 9c: hot standby on the real API server. A group of 6 with `standbys: 1`; an
active member's pod is deleted; the operator promotes the Ready standby into its instance
id: the standby consumes the member's partitions again with no rebalance (same generation,
no `rebalance_started` in the journal), its pod is relabeled into the slot, the slot's pod
is not recreated, and a new standby pod replaces it."""

from __future__ import annotations

import time
from typing import Any

from e2e.cluster import Cluster, pod_ready
from e2e.fleet import INSTANCE_ANNOTATION, Record, member_logs_from_text, rows_of, wait_for
from e2e.groups import SESSION_TIMEOUT_MS, apply, group_status, managed_group, namespace

GROUP = "spare"
ROLE_LABEL = "staticfleet.dev/role"


def _live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _standbys(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return [
        p
        for p in _live(cluster.member_pods(ns, GROUP))
        if p["metadata"]["labels"].get(ROLE_LABEL) == "standby"
    ]


def _ready(cluster: Cluster, ns: str, members: int, standbys: int) -> dict[str, Any] | None:
    described = cluster.admin().describe(GROUP)
    pods = _live(cluster.member_pods(ns, GROUP))
    slotted = [p for p in pods if p["metadata"]["labels"].get(ROLE_LABEL) != "standby"]
    if (
        described.get("group_state") == "Stable"
        and len(described.get("members") or []) == members
        and len(slotted) == members
        and all(pod_ready(p) for p in pods)
        and group_status(cluster, ns, GROUP).get("standbysReady") == standbys
    ):
        return described
    return None


def _events(cluster: Cluster, ns: str, pod: str) -> list[dict[str, Any]]:
    logs = member_logs_from_text(pod, cluster.container_log(ns, pod, "member"))
    return [dict(row) for log in logs for row in log.rows]


def test_a_standby_takes_over_a_deleted_member_without_a_rebalance(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    with namespace(cluster, "e2e-standby") as ns:
        manifest = managed_group(GROUP, replicas=6, protocol="cooperative")
        manifest["spec"]["standbys"] = 1
        apply(cluster, ns, manifest)
        before = wait_for(
            "6 members Stable and 1 standby ready",
            lambda: _ready(cluster, ns, 6, 1),
            timeout_s=240,
            interval_s=1.0,
        )
        [standby] = _standbys(cluster, ns)
        standby_name = standby["metadata"]["name"]
        victim_id = f"{GROUP}-2"
        victim = next(m for m in before["members"] if m["group_instance_id"] == victim_id)
        admin = cluster.admin()
        deleted_at_ms = int(time.time() * 1000)
        cluster.kubectl("-n", ns, "delete", "pod", f"{GROUP}-2", "--wait=false")

        def promoted() -> dict[str, Any] | None:
            member = next(
                (
                    m
                    for m in admin.describe(GROUP).get("members") or []
                    if m["group_instance_id"] == victim_id
                ),
                None,
            )
            return member if member and member["member_id"] != victim["member_id"] else None

        taken = wait_for("the standby promoted", promoted, timeout_s=60, interval_s=0.2)
        promoted_seen_ms = int(time.time() * 1000)
        assert taken["member_assignment"] == victim["member_assignment"]

        def consuming() -> dict[str, Any] | None:
            rows = _events(cluster, ns, standby_name)
            return next(
                (r for r in rows if r["event"] == "commit" and r.get("instance_id") == victim_id),
                None,
            )

        first_commit = wait_for("the standby committing", consuming, timeout_s=60)
        rows = _events(cluster, ns, standby_name)
        assigned = next(r for r in rows if r["event"] == "assigned" and r["partitions"])
        promoted_row = next(r for r in rows if r["event"] == "promoted")
        victim_rows = _events(cluster, ns, f"{GROUP}-2")
        stopped = [r for r in victim_rows if r["event"] == "stopped"]
        gone_ms = int(stopped[-1]["ts_ms"]) if stopped else deleted_at_ms

        after = wait_for(
            "6 members Stable and a new standby ready",
            lambda: _ready(cluster, ns, 6, 1),
            timeout_s=180,
            interval_s=1.0,
        )
        journal = admin.journal(GROUP)
        assert after["generation_id"] == before["generation_id"]
        assert rows_of(journal, "rebalance_started", deleted_at_ms) == []
        assert rows_of(journal, "generation_started", deleted_at_ms) == []
        pods = {p["metadata"]["name"]: p for p in _live(cluster.member_pods(ns, GROUP))}
        assert f"{GROUP}-2" not in pods, "the slot's pod was recreated beside the standby"
        assert pods[standby_name]["metadata"]["annotations"][INSTANCE_ANNOTATION] == victim_id
        [new_standby] = _standbys(cluster, ns)
        assert new_standby["metadata"]["name"] != standby_name
        status = group_status(cluster, ns, GROUP)
        assert status["lastPromotion"]["instanceId"] == victim_id
        assert status["lastPromotion"]["standby"] == standby_name

        record("rebalances", 0)
        record("generation", after["generation_id"])
        record("member_stopped_to_promoted_ms", int(promoted_row["ts_ms"]) - gone_ms)
        record("member_stopped_to_assigned_ms", int(assigned["ts_ms"]) - gone_ms)
        record("member_stopped_to_first_commit_ms", int(first_commit["ts_ms"]) - gone_ms)
        record("delete_to_assigned_ms", int(assigned["ts_ms"]) - deleted_at_ms)
        record("promoted_to_assigned_ms", int(assigned["ts_ms"]) - int(promoted_row["ts_ms"]))
        record("promotion_seen_by_describe_ms", promoted_seen_ms - deleted_at_ms)
        record("session_timeout_ms", SESSION_TIMEOUT_MS)
        assert int(assigned["ts_ms"]) - gone_ms < SESSION_TIMEOUT_MS
