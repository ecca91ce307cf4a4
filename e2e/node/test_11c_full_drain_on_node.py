"""Scenario 11c: a full `kubectl drain` of the only node, the operator's own pod included
(issue 28: "kubectl drain of the node: what happens to a fleet, measured").

On scenario 10's node and chart release (e2e/node/conftest.py), a managed ConsumerGroup of 3
static members with the budget the operator makes (`<group>-members`, maxUnavailable 1), and
the chart's defaults: one operator replica, no operator budget. Then `kubectl drain <node>
--ignore-daemonsets --delete-emptydir-data --timeout=...`, no pod selector:

- the operator's pod is evicted (no budget holds it) and its replacement is Pending on the
  cordoned node: the embedded coordinator is gone until uncordon, and nobody recreates an
  evicted member's pod (the operator makes them);
- one member is evicted (the budget allows one); the drain is refused for the others and gives
  up at its timeout;
- the two members left keep their assignment while their session lasts (their commits fail:
  `commit_failed` naming their partitions), then give the partitions up (`lost`: the
  coordinator could have handed them on) and turn NotReady; they do not exit (liveness
  holds: restarting would not bring the coordinator back) and keep trying to rejoin;
- `kubectl uncordon`: the operator's replacement starts, its coordinator loads the group from
  SQLite and starts every member's session from then (Kafka's coordinator does the same on
  failover), so the downtime expires nobody; the operator recreates the evicted slot; every
  member comes back under its own instance id; never two owners of a partition. A member
  that lost its session rejoins (JoinGroup): when that member is the group's leader the
  coordinator rebalances once (Kafka's classic rule for a leader's join in Stable), else no
  new generation.

Its first run found the restarted operator never Ready: its pass had to create the evicted
member's pod, a create goes through the pod webhook the operator serves behind a Service
that routes only to a Ready pod, and readiness waited for that pass (readiness.py now counts
a group once its token step is done; tests/operator/test_readiness.py).

With the chart's operator budget on (one replica), the same drain never evicts the operator.

    .venv/bin/pytest -o testpaths=e2e e2e/node/test_10_fleet_on_node.py \
        e2e/node/test_11c_full_drain_on_node.py
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from e2e.cluster import CHART, FULLNAME, OPERATOR_NAMESPACE, RELEASE, pod_ready
from e2e.fleet import INSTANCE_ANNOTATION, Record, answers_ready, rows_of, wait_for
from e2e.groups import apply, managed_group, namespace, wait_stable
from e2e.node import probe
from e2e.node.cluster import BUDGET_REFUSAL, NodeCluster, evicted_pods
from e2e.node.conftest import CALL_FAILED, FleetNode, print_diagnostics
from e2e.rollouts import doubly_assigned, member_logs, ownership

GROUP = "node-drain"
NAMESPACE = "e2e-node-drain"
MEMBERS = 3
# Kafka's default; shorter than the node stays cordoned, so the members' side of a long
# outage is seen.
SESSION_TIMEOUT_MS = 45_000
DRAIN_TIMEOUT_S = 20
OPERATOR_BUDGET_DRAIN_TIMEOUT_S = 10

pytestmark = pytest.mark.timeout(900)


@dataclass
class Sample:
    at: float  # time.monotonic()
    coordinator: bool  # /readyz through the Service answered 200
    operator_ready: bool
    members_ready: int


@dataclass
class Timeline:
    """What the cluster looked like every ~0.5 s while the drain and its recovery ran."""

    cluster: NodeCluster
    ns: str
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._base_url = self.cluster.coordinator_base_url()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.monotonic()
            coordinator = answers_ready(self._base_url, timeout_s=1)
            operators = self.cluster.operator_pods()
            members = [
                p
                for p in self.cluster.member_pods(self.ns, GROUP)
                if pod_ready(p) and not p["metadata"].get("deletionTimestamp")
            ]
            self.samples.append(
                Sample(at, coordinator, any(pod_ready(p) for p in operators), len(members))
            )
            self._stop.wait(0.5)

    def first(self, after: float, predicate: Callable[[Sample], bool]) -> float | None:
        """When (monotonic) the first sample at or after `after` met `predicate`."""
        return next((s.at for s in self.samples if s.at >= after and predicate(s)), None)


@pytest.fixture
def drained_fleet(fleet_node: FleetNode, request: pytest.FixtureRequest) -> Iterator[str]:
    """The group's namespace; afterwards the node uncordoned and the operator Ready and routed
    again, whatever the test did: the scenarios after this one use the release."""
    cluster = fleet_node.cluster
    with namespace(cluster, NAMESPACE) as ns:
        apply(
            cluster,
            ns,
            managed_group(GROUP, replicas=MEMBERS, session_timeout_ms=SESSION_TIMEOUT_MS),
        )
        wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=240)
        try:
            yield ns
        finally:
            if request.node.stash.get(CALL_FAILED, False):
                print_diagnostics(cluster)
            # Before the namespace goes: its group's finalizer needs the operator running.
            cluster.kubectl("uncordon", probe.NODE_NAME, check=False)
            coordinator = cluster.coordinator_base_url()
            wait_for(
                "the operator Ready and routed again",
                lambda: answers_ready(coordinator),
                timeout_s=180,
            )


def test_full_drain_evicts_the_operator_and_the_group_recovers(
    drained_fleet: str, fleet_node: FleetNode, record: Record
) -> None:
    cluster, ns = fleet_node.cluster, drained_fleet
    before = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=120)
    wait_for(
        "the group's budget to allow one disruption",
        lambda: cluster.disruptions_allowed(ns, f"{GROUP}-members") == 1,
        timeout_s=60,
    )
    leader = next(m for m in before["members"] if m["member_id"] == before["leader"])
    leader_instance = leader["group_instance_id"]
    operator = cluster.operator_pod()
    assert operator is not None
    members = {p["metadata"]["name"]: p for p in cluster.member_pods(ns, GROUP)}
    since_ms = int(time.time() * 1000)

    with Timeline(cluster, ns) as timeline:
        started = time.monotonic()
        drain = cluster.drain(DRAIN_TIMEOUT_S)
        drain_s = time.monotonic() - started
        output = drain.stdout + drain.stderr
        evicted = evicted_pods(output)
        record("drain_exit_code", drain.returncode)
        record("drain_blocked_s", round(drain_s, 1))
        record("drain_evicted", evicted)
        record("drain_budget_refusals", output.count(BUDGET_REFUSAL))
        assert drain.returncode != 0, output  # the budget holds the rest: no progress
        assert operator["metadata"]["name"] in evicted, output
        evicted_members = sorted(set(evicted) & set(members))
        assert len(evicted_members) == 1, (evicted, output)
        assert BUDGET_REFUSAL in output, output
        (evicted_member,) = evicted_members
        evicted_instance = members[evicted_member]["metadata"]["annotations"][INSTANCE_ANNOTATION]
        survivors = sorted(set(members) - {evicted_member})

        # The Deployment's replacement cannot be scheduled; with no operator, no member pod
        # replaces the evicted one.
        replacement = wait_for(
            "the operator's replacement pod",
            lambda: next(
                (
                    p
                    for p in cluster.operator_pods()
                    if p["metadata"]["uid"] != operator["metadata"]["uid"]
                ),
                None,
            ),
            timeout_s=30,
        )
        scheduled = next(
            c for c in replacement["status"].get("conditions", []) if c["type"] == "PodScheduled"
        )
        record("operator_replacement_scheduled", scheduled.get("reason"))
        assert replacement["status"].get("phase") == "Pending", replacement["status"]
        assert scheduled["status"] == "False" and scheduled.get("reason") == "Unschedulable"
        live = [
            p for p in cluster.member_pods(ns, GROUP) if not p["metadata"].get("deletionTimestamp")
        ]
        assert sorted(p["metadata"]["name"] for p in live) == survivors

        # Cordoned past the members' session: they give the partitions up and turn NotReady,
        # but keep running.
        lost = wait_for(
            "the members left to turn NotReady without their coordinator",
            lambda: timeline.first(started, lambda s: s.members_ready == 0),
            timeout_s=SESSION_TIMEOUT_MS / 1000 + 60,
        )
        record("drain_to_members_not_ready_s", round(lost - started, 1))
        for pod in cluster.member_pods(ns, GROUP):
            if pod["metadata"]["name"] in survivors:
                status = next(
                    c for c in pod["status"]["containerStatuses"] if c["name"] == "member"
                )
                assert status["restartCount"] == 0 and "running" in status["state"], status
        cluster.kubectl("uncordon", probe.NODE_NAME)
        uncordoned = time.monotonic()
        record("drain_to_uncordon_s", round(uncordoned - started, 1))

        back = wait_for(
            "the coordinator to answer again",
            lambda: timeline.first(uncordoned, lambda s: s.coordinator),
            timeout_s=180,
        )
        admin = cluster.admin()
        # The evicted slot's new process takes its instance id over: a static rejoin when the
        # group is Stable, a replacement inside the rebalance when one is under way.
        wait_for(
            f"{evicted_instance} back under its instance id",
            lambda: _came_back(admin.journal(GROUP), evicted_instance, since_ms),
            timeout_s=120,
        )
        rejoined = time.monotonic()
        after = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=180)
        stable = time.monotonic()
        time.sleep(1)  # one more sample

    gone = timeline.first(started, lambda s: not s.coordinator)
    assert gone is not None
    operator_ready = timeline.first(uncordoned, lambda s: s.operator_ready)
    record("drain_to_coordinator_gone_s", round(gone - started, 1))
    record("coordinator_down_s", round(back - gone, 1))
    if operator_ready is not None:
        record("uncordon_to_operator_ready_s", round(operator_ready - uncordoned, 1))
    record("uncordon_to_coordinator_answers_s", round(back - uncordoned, 1))
    record("uncordon_to_evicted_back_s", round(rejoined - uncordoned, 1))
    record("uncordon_to_stable_s", round(stable - uncordoned, 1))
    record("members_ready_min", min(s.members_ready for s in timeline.samples))
    record("timeline_samples", len(timeline.samples))

    # What the members did meanwhile, from their own event logs.
    behaviour: dict[str, Any] = {}
    for name in survivors:
        processes = member_logs(cluster, ns, [name])
        assert len(processes) == 1, [p.process for p in processes]  # never exited
        rows = [r for r in processes[0].rows if int(r["ts_ms"]) >= since_ms]
        kinds = [r["event"] for r in rows]
        assert "stopped" not in kinds and "fatal" not in kinds, kinds
        failed = [r for r in rows if r["event"] == "commit_failed"]
        lost_rows = [r for r in rows if r["event"] == "lost"]
        assert failed and lost_rows, kinds
        # Before the session ended it kept its partitions and kept committing them.
        assert int(failed[0]["ts_ms"]) < int(lost_rows[0]["ts_ms"]), rows[:5]
        assert failed[0]["partitions"], failed[0]
        assert kinds.index("lost") < len(kinds) - 1 and "assigned" in kinds[kinds.index("lost") :]
        behaviour[name] = {
            "commit_failed": len(failed),
            "drain_to_lost_s": round((int(lost_rows[0]["ts_ms"]) - since_ms) / 1000, 1),
            "lost_partitions": len(lost_rows[0]["partitions"]),
        }
    record("survivors", behaviour)

    # The coordinator's side: nobody expired for the coordinator's own downtime.
    journal = admin.journal(GROUP)
    removed = rows_of(journal, "member_removed", since_ms)
    rebalances = [
        (r.get("detail") or {}).get("reason")
        for r in rows_of(journal, "rebalance_started", since_ms)
    ]
    record("journal_removed", removed)
    record(
        "journal_kinds", dict(Counter(r["kind"] for r in journal if int(r["ts_ms"]) >= since_ms))
    )
    record("journal_rebalances", rebalances)
    assert removed == [], removed
    record("generation", [before["generation_id"], after["generation_id"]])
    record("leader_evicted", leader_instance == evicted_instance)
    # A leader that rejoins in Stable rebalances the group once (Kafka's classic rule);
    # followers and a static replacement do not.
    expected = before["generation_id"] + (0 if leader_instance == evicted_instance else 1)
    assert after["generation_id"] == expected, (leader_instance, evicted_instance, rebalances)
    assert {m["group_instance_id"] for m in after["members"]} == {
        m["group_instance_id"] for m in before["members"]
    }
    assert doubly_assigned(journal) == []
    owners = ownership(member_logs(cluster, ns, members))
    record("ownership", {"processes": owners.processes, "max_owners": owners.max_owners})
    assert owners.overlaps == 0 and owners.max_owners <= 1, owners


def _came_back(journal: list[dict[str, Any]], instance_id: str, since_ms: int) -> bool:
    return any(
        r.get("group_instance_id") == instance_id
        for kind in ("static_rejoin", "member_replaced")
        for r in rows_of(journal, kind, since_ms)
    )


def test_the_chart_operator_budget_blocks_a_full_drain(
    fleet_node: FleetNode, record: Record
) -> None:
    """With the chart's operator budget on (`podDisruptionBudget.enabled`, minAvailable 1) and
    one replica, a full drain can never evict the operator: it is refused until its timeout,
    the operator keeps serving. Why the chart leaves the budget off by default."""
    cluster = fleet_node.cluster
    operator = cluster.operator_pod()
    assert operator is not None
    budget = FULLNAME
    try:
        _operator_budget(cluster, enabled=True)
        wait_for(
            "the operator's budget to count its one pod",
            lambda: (
                (
                    cluster.get_json("-n", OPERATOR_NAMESPACE, "get", "pdb", budget).get("status")
                    or {}
                ).get("currentHealthy")
                == 1
            ),
            timeout_s=60,
        )
        allowed = cluster.get_json("-n", OPERATOR_NAMESPACE, "get", "pdb", budget)["status"]
        record("operator_budget_disruptions_allowed", allowed.get("disruptionsAllowed"))
        assert allowed.get("disruptionsAllowed") == 0, allowed
        started = time.monotonic()
        drain = cluster.drain(OPERATOR_BUDGET_DRAIN_TIMEOUT_S)
        output = drain.stdout + drain.stderr
        record("operator_budget_drain_exit_code", drain.returncode)
        record("operator_budget_drain_s", round(time.monotonic() - started, 1))
        record("operator_budget_refusals", output.count(BUDGET_REFUSAL))
        assert drain.returncode != 0, output
        assert BUDGET_REFUSAL in output, output
        assert operator["metadata"]["name"] not in evicted_pods(output), output
        still = cluster.operator_pod()
        assert still is not None and still["metadata"]["uid"] == operator["metadata"]["uid"]
        assert pod_ready(still)
        assert answers_ready(cluster.coordinator_base_url())
    finally:
        cluster.kubectl("uncordon", probe.NODE_NAME, check=False)
        _operator_budget(cluster, enabled=False)
    gone = cluster.kubectl("-n", OPERATOR_NAMESPACE, "get", "pdb", budget, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stderr


def _operator_budget(cluster: NodeCluster, *, enabled: bool) -> None:
    cluster.helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        OPERATOR_NAMESPACE,
        "--reuse-values",
        "--set",
        f"podDisruptionBudget.enabled={str(enabled).lower()}",
    )
