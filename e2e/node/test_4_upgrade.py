"""Scenario 4: the automated two-bounce upgrade eager → cooperative. Bounce 1 recreates every
pod with `compatible`, bounce 2 with `cooperative`, one at a time; at no moment do two
members own one partition (members' logs and the journal); status shows the phases."""

from __future__ import annotations

import time

from coordinator.journal_metrics import partition_moves
from e2e.cluster import Cluster
from e2e.fleet import PodRecorder, Record, rows_of
from e2e.groups import (
    apply,
    managed_group,
    namespace,
    patch_spec,
    wait_rollout_completed,
    wait_stable,
)
from e2e.rollouts import PhaseWatcher, bounces_per_slot, doubly_assigned, member_logs, ownership

GROUP = "upgrade"
REPLICAS = 6


def test_eager_to_cooperative_upgrade_in_two_bounces(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    with namespace(cluster, "e2e-upgrade") as ns:
        apply(cluster, ns, managed_group(GROUP, replicas=REPLICAS, protocol="eager"))
        wait_stable(cluster, ns, GROUP, REPLICAS)
        recorder = PodRecorder(cluster.kubectl_command, ns).start()
        watcher = PhaseWatcher(cluster, ns, GROUP).start()
        admin = cluster.admin()
        try:
            time.sleep(1)  # the recorder's initial listing predates the rollout
            since = time.time()
            since_ms = int(since * 1000)
            patch_spec(cluster, ns, GROUP, {"rebalance": {"protocol": "cooperative"}})
            wait_rollout_completed(cluster, ns, GROUP, "cooperative")
            described = wait_stable(cluster, ns, GROUP, REPLICAS)
            duration = time.time() - since
        finally:
            phases = watcher.stop()
            recorder.stop()

        record("rollout_s", round(duration, 1))
        record("phases_seen", phases)
        # The phases, in order: bounce 1, the check that everyone offers cooperative, bounce 2.
        assert "Bounce1" in phases and "Bounce2" in phases and phases[-1] == "Completed", phases
        assert phases.index("Bounce1") < phases.index("Bounce2")

        # Every slot bounced exactly once per phase: compatible first, then cooperative.
        per_slot = bounces_per_slot(recorder.sightings(), since)
        assert sorted(per_slot) == [str(slot) for slot in range(REPLICAS)], per_slot
        for slot, protocols in per_slot.items():
            assert protocols == ["compatible", "cooperative"], (slot, protocols)
        # ... and bounce 2 started only after bounce 1 was done for every slot.
        creations = sorted(
            (s for s in recorder.sightings() if s.seen_at >= since), key=lambda s: s.seen_at
        )
        first_cooperative = next(i for i, s in enumerate(creations) if s.protocol == "cooperative")
        assert all(s.protocol == "compatible" for s in creations[:first_cooperative])
        assert first_cooperative == REPLICAS

        # Safety: never two owners of one partition, from every member process's own log.
        logs = member_logs(
            cluster, ns, (pod["metadata"]["name"] for pod in cluster.member_pods(ns, GROUP))
        )
        owners = ownership(logs)
        journal = admin.journal(GROUP)
        record("member_processes", owners.processes)
        record("max_simultaneous_owners", owners.max_owners)
        record("rebalances", len(rows_of(journal, "rebalance_started", since_ms)))
        record("generation_after", described["generation_id"])
        record(
            "partition_moves", len(partition_moves(journal, {}, since_ms, int(time.time() * 1000)))
        )
        assert owners.processes >= 3 * REPLICAS  # the first incarnation and two bounces each
        assert owners.overlaps == 0 and owners.max_owners == 1
        assert doubly_assigned(journal) == []
        # The coordinator now runs the group on the cooperative protocol's assignor.
        assert described["protocol_data"] == "cooperative-sticky"
