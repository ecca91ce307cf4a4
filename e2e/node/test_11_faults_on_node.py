"""Scenario 11: what only a real node does to a member (issues 28 and 24).

On scenario 10's node and chart release (e2e/node/conftest.py), a managed ConsumerGroup of 3
whose members serve their health endpoints (`STATICFLEET_HEALTH_PORT`: the operator gives
them httpGet liveness and readiness probes on /livez and /readyz), with a memory limit, and
whose event log goes through a FIFO to a sidecar that prints it (`cat`):

- **liveness**: the test stops one pod's sidecar (SIGSTOP of its `cat`, from the host) and
  fills the FIFO, so that member's run loop blocks writing its next event line, for real.
  Its health thread still answers: /livez turns 503 "stuck" once the stall limit (session +
  poll + 5 s) is past, the kubelet kills the container for the failed liveness probe and
  restarts it in the same pod, and the member rejoins under the same instance id. A stuck
  loop sends no heartbeats either, so the coordinator expired the member first (its session
  is shorter than the stall limit): one rebalance out and one back in, not a static rejoin.
  Readiness: the pod goes NotReady ("lost") within the session plus the probe's period;
- **OOM**: inside one member's container a process allocates past the limit; the kernel's
  memory-cgroup OOM killer kills the member (the allocator shields itself, see
  `test_oom_kill_restarts_in_place`), the pod status says `OOMKilled`, the container
  restarts in place, the same static member, no new generation;
- **drain**: `kubectl drain` of the only node with the group's PodDisruptionBudget
  (maxUnavailable 1): one member evicted, its replacement Pending on the cordoned node, the
  drain blocked by the budget until its `--timeout`; never more than one member down; after
  `kubectl uncordon` the replacement starts and rejoins as the same static member within the
  session timeout: no rebalance;
- **drain during a rollout**: a template change starts a static rolling bounce (the
  operator's DELETE, which no budget holds); with a bounce in flight the budget is at 0 and
  `kubectl drain` is refused; after uncordon the rollout completes: neither waits for the
  other forever.

    .venv/bin/pytest -o testpaths=e2e e2e/node/test_10_fleet_on_node.py \
        e2e/node/test_11_faults_on_node.py
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.cluster import pod_ready
from e2e.fleet import INSTANCE_ANNOTATION, rows_of, static_rejoins, wait_for
from e2e.groups import (
    apply,
    managed_group,
    namespace,
    patch_spec,
    wait_rollout_completed,
    wait_stable,
)
from e2e.node import probe
from e2e.node.cluster import BUDGET_REFUSAL, NodeCluster, evicted_pods, pod_processes
from e2e.node.conftest import CALL_FAILED, FleetNode, print_diagnostics

GROUP = "node-faults"
NAMESPACE = "e2e-node-faults"
MEMBERS = 3
# Longer than the drain's blocked wait plus a start on uncordon, so the evicted member's
# replacement is back before its session ends (what "a static restart" needs).
SESSION_TIMEOUT_MS = 45_000
DRAIN_TIMEOUT_S = 15
ROLLOUT_DRAIN_TIMEOUT_S = 8
HEALTH_PORT = 8081
EVENTS_DIR = "/events"
EVENTS_FIFO = f"{EVENTS_DIR}/log"
EVENTS_CONTAINER = "events"
# Fill a FIFO without blocking: the writer stops when the pipe's buffer is full.
FILL_FIFO = (
    "import os\n"
    f"fd = os.open({EVENTS_FIFO!r}, os.O_WRONLY | os.O_NONBLOCK)\n"
    "n = 0\n"
    "try:\n"
    "    while True:\n"
    "        n += os.write(fd, b'#' * 4096)\n"
    "except BlockingIOError:\n"
    "    print(n)\n"
)
GET_LIVEZ = (
    "import urllib.request, urllib.error\n"
    "try:\n"
    f"    r = urllib.request.urlopen('http://127.0.0.1:{HEALTH_PORT}/livez', timeout=3)\n"
    "    print(r.status, r.read().decode())\n"
    "except urllib.error.HTTPError as e:\n"
    "    print(e.code, e.read().decode())\n"
)
MEMORY_LIMIT = "256Mi"
ALLOCATE_MIB = 512

pytestmark = pytest.mark.timeout(900)


@dataclass
class Fleet:
    cluster: NodeCluster
    node: probe.Node
    ns: str


def faulty_group(image: str) -> dict[str, Any]:
    group = managed_group(GROUP, replicas=MEMBERS, session_timeout_ms=SESSION_TIMEOUT_MS)
    pod_spec = group["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    container["image"] = image
    container["imagePullPolicy"] = "Never"
    # No probes written here: the operator adds httpGet ones on the member's health port.
    container["env"] = [{"name": "STATICFLEET_HEALTH_PORT", "value": str(HEALTH_PORT)}]
    # The flag: the operator owns STATICFLEET_EVENT_LOG.
    container["args"] = [*container["args"], "--event-log", EVENTS_FIFO]
    container["resources"] = {"limits": {"memory": MEMORY_LIMIT}}
    mount = {"name": "events", "mountPath": EVENTS_DIR}
    container["volumeMounts"] = [mount]
    pod_spec["volumes"] = [{"name": "events", "emptyDir": {}}]
    pod_spec["initContainers"] = [
        {
            "name": "fifo",
            "image": image,
            "imagePullPolicy": "Never",
            "command": ["mkfifo", EVENTS_FIFO],
            "volumeMounts": [mount],
        }
    ]
    # `cat` holds the FIFO open read-write too, so a member's restart (its write end closed)
    # is no end of file for it: one reader for every incarnation.
    pod_spec["containers"].append(
        {
            "name": EVENTS_CONTAINER,
            "image": image,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", f"exec cat <>{EVENTS_FIFO}"],
            "volumeMounts": [mount],
        }
    )
    return group


@pytest.fixture(scope="module")
def fleet(fleet_node: FleetNode) -> Iterator[Fleet]:
    cluster = fleet_node.cluster
    with namespace(cluster, NAMESPACE) as ns:
        apply(cluster, ns, faulty_group(fleet_node.node.image))
        wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=240)
        yield Fleet(cluster, fleet_node.node, ns)


@pytest.fixture
def diagnosed(fleet: Fleet, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    """The fleet; the cluster's state printed after a failed test (its captured output)."""
    yield fleet
    if request.node.stash.get(CALL_FAILED, False):
        print_diagnostics(fleet.cluster)


def _pod(fleet: Fleet, slot: int) -> dict[str, Any]:
    for pod in fleet.cluster.member_pods(fleet.ns, GROUP):
        meta = pod["metadata"]
        if meta["annotations"].get(INSTANCE_ANNOTATION) == f"{GROUP}-{slot}" and not meta.get(
            "deletionTimestamp"
        ):
            return pod
    raise AssertionError(f"no pod for slot {slot}")


def _member_status(pod: dict[str, Any]) -> dict[str, Any]:
    """The member container's status (the kubelet lists them by name: the sidecar first)."""
    return next(c for c in pod["status"]["containerStatuses"] if c["name"] == "member")


def _restarted_in_place(
    fleet: Fleet,
    victim: dict[str, Any],
    fault: Callable[[], None],
    record: Callable[[str, Any], None],
    prefix: str,
    *,
    static: bool = True,
    on_restart: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run `fault` on `victim`'s member; it restarts in the same pod, rejoins under the same
    instance id, and the group is Stable again: with no new generation when `static` (a
    restart within the session), else after the coordinator expired it and it joined again.
    `on_restart` runs once the restart is seen (before the member is Ready). Returns the pod."""
    cluster, ns = fleet.cluster, fleet.ns
    before = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=120)
    name = victim["metadata"]["name"]
    restarts = _member_status(victim)["restartCount"]
    instance_id = victim["metadata"]["annotations"][INSTANCE_ANNOTATION]
    admin = cluster.admin()
    since_ms = int(time.time() * 1000)
    started = time.monotonic()
    fault()
    seen_restart: list[float] = []

    def restarted() -> dict[str, Any] | None:
        pod: dict[str, Any] = cluster.get_json("-n", ns, "get", "pod", name)
        if _member_status(pod)["restartCount"] > restarts and not seen_restart:
            seen_restart.append(time.monotonic() - started)
            if on_restart is not None:
                on_restart()
        return pod if seen_restart and pod_ready(pod) else None

    pod = wait_for(f"{name}'s container restarted and Ready", restarted, timeout_s=180)
    record(f"{prefix}_to_restart_s", round(seen_restart[0], 1))
    record(f"{prefix}_to_ready_s", round(time.monotonic() - started, 1))
    if static:
        wait_for(
            f"{instance_id}'s static rejoin in the journal",
            lambda: static_rejoins(admin.journal(GROUP), instance_id, since_ms),
            timeout_s=60,
        )
        record(f"{prefix}_to_static_rejoin_s", round(time.monotonic() - started, 1))
    else:
        journal = admin.journal(GROUP)
        removed = [
            r
            for r in rows_of(journal, "member_removed", since_ms)
            if r.get("group_instance_id") == instance_id
        ]
        joined = [
            r
            for r in rows_of(journal, "member_joined", since_ms)
            if r.get("group_instance_id") == instance_id
        ]
        record(f"{prefix}_journal", {"removed": removed, "joined": len(joined)})
        assert removed and joined, journal[-20:]
    after = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=120)
    record(f"{prefix}_to_stable_s", round(time.monotonic() - started, 1))
    assert pod["metadata"]["uid"] == victim["metadata"]["uid"]  # the same pod, in place
    assert _member_status(pod)["restartCount"] == restarts + 1
    record(f"{prefix}_restart_count", [restarts, restarts + 1])
    record(f"{prefix}_generation", [before["generation_id"], after["generation_id"]])
    if static:
        assert after["generation_id"] == before["generation_id"]
    else:
        assert after["generation_id"] > before["generation_id"]
    assert {m["group_instance_id"] for m in after["members"]} == {
        m["group_instance_id"] for m in before["members"]
    }
    return pod


def _sidecar_reader_pid(pod: dict[str, Any]) -> int:
    """The host pid of `pod`'s event reader (`cat`)."""
    found = [process.pid for process in pod_processes([pod]) if process.command == b"cat"]
    assert len(found) == 1, found
    return found[0]


def _last_terminated(fleet: Fleet, name: str) -> dict[str, Any]:
    """The member container's lastState.terminated, read until the kubelet reports it: one CI
    run's pod, Ready after the restart, still had an empty lastState for the member."""
    terminated: dict[str, Any] = wait_for(
        f"{name}'s member lastState.terminated",
        lambda: _member_status(fleet.cluster.get_json("-n", fleet.ns, "get", "pod", name))[
            "lastState"
        ].get("terminated"),
        timeout_s=60,
    )
    return terminated


def _exec_python(fleet: Fleet, name: str, script: str) -> str:
    result = fleet.cluster.kubectl(
        "-n", fleet.ns, "exec", name, "-c", "member", "--", "python3", "-c", script, timeout=30
    )
    return result.stdout.strip()


def test_liveness_probe_failure_restarts_in_place(
    diagnosed: Fleet, record: Callable[[str, Any], None]
) -> None:
    fleet = diagnosed
    victim = _pod(fleet, 0)
    name = victim["metadata"]["name"]
    probes = victim["spec"]["containers"][0]
    # The operator's probes, from the port the template set.
    for key, path in (
        ("startupProbe", "/livez"),
        ("livenessProbe", "/livez"),
        ("readinessProbe", "/readyz"),
    ):
        get = probes[key]["httpGet"]  # the API server adds scheme: HTTP
        assert (get["path"], get["port"]) == (path, HEALTH_PORT), probes
    reader = _sidecar_reader_pid(victim)
    stuck: dict[str, Any] = {}
    started: list[float] = []

    def stall_the_loop() -> None:
        os.kill(reader, signal.SIGSTOP)
        stuck["filled_bytes"] = int(_exec_python(fleet, name, FILL_FIFO))
        started.append(time.monotonic())
        # Until the kubelet acts: when the pod goes NotReady, and /livez from inside.
        while time.monotonic() - started[0] < 150:
            pod = fleet.cluster.get_json("-n", fleet.ns, "get", "pod", name)
            if _member_status(pod)["restartCount"] > _member_status(victim)["restartCount"]:
                return
            elapsed = round(time.monotonic() - started[0], 1)
            if not pod_ready(pod):
                stuck.setdefault("not_ready_after_s", elapsed)
            if "livez" not in stuck:
                answer = _exec_python(fleet, name, GET_LIVEZ)
                status, _, body = answer.partition(" ")
                if status == "503":
                    stuck["livez_503_after_s"] = elapsed
                    stuck["livez"] = json.loads(body)
            time.sleep(1)

    try:
        _restarted_in_place(
            fleet,
            victim,
            stall_the_loop,
            record,
            "liveness",
            static=False,
            on_restart=lambda: os.kill(reader, signal.SIGCONT),
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(reader, signal.SIGCONT)
    record("liveness_stuck", stuck)
    assert stuck["filled_bytes"] >= 4096, stuck
    assert stuck["livez"]["reason"] == "stuck", stuck
    assert "has not ticked" in stuck["livez"]["detail"], stuck
    assert "not_ready_after_s" in stuck, stuck  # readiness: "lost" once the session is past
    # The kubelet's own account: the httpGet probe got 503 and it killed the container.
    events = fleet.cluster.get_json(
        "-n", fleet.ns, "get", "events", "--field-selector", f"involvedObject.name={name}"
    )["items"]
    messages = [f"{e['reason']}: {e['message']}" for e in events]
    assert any(
        e["reason"] == "Killing" and "failed liveness probe" in e["message"] for e in events
    ), messages
    assert any(
        "Liveness probe failed: HTTP probe failed with statuscode: 503" in m for m in messages
    ), messages
    record(
        "liveness_kubelet_events",
        sorted({m for m in messages if "iveness" in m or "eadiness" in m}),
    )
    last = _last_terminated(fleet, name)
    # Blocked in write(2), the member cannot run its SIGTERM handler: SIGKILL after the grace.
    record("liveness_last_state", {"reason": last["reason"], "exitCode": last["exitCode"]})


def test_oom_kill_restarts_in_place(diagnosed: Fleet, record: Callable[[str, Any], None]) -> None:
    fleet = diagnosed
    victim = _pod(fleet, 1)
    name = victim["metadata"]["name"]
    exec_result: dict[str, Any] = {}

    def allocate() -> None:
        # Within the container's memory cgroup (kubectl exec joins it) a process touches
        # ALLOCATE_MIB, past the limit. The memcg OOM killer kills the task with the highest
        # badness (resident pages + oom_score_adj x the limit's pages / 1000); the kubelet
        # gives every process of the container the same adj (990 for this Burstable pod), so
        # it would kill the allocator, the larger, and leave the member running (seen:
        # docs/node.md). The allocator lowers its own adj to 0 (allowed without privilege down
        # to the minimum it inherited), so the kernel kills the member, as when the member
        # itself outgrows its limit.
        script = (
            "cat /proc/1/oom_score_adj && echo 0 > /proc/self/oom_score_adj && "
            f"exec python3 -c 'x = bytes([1]) * ({ALLOCATE_MIB} << 20)'"
        )
        result = fleet.cluster.kubectl(
            "-n", fleet.ns, "exec", name, "-c", "member", "--", "sh", "-c", script, check=False
        )
        exec_result.update(
            code=result.returncode,
            member_oom_score_adj=result.stdout.strip(),
            stderr=result.stderr.strip()[-300:],
        )

    pod = _restarted_in_place(fleet, victim, allocate, record, "oom")
    last = _last_terminated(fleet, name)
    record("oom_last_state", {"reason": last["reason"], "exitCode": last["exitCode"]})
    record("oom_exec", exec_result)
    assert last["reason"] == "OOMKilled", last
    assert last["exitCode"] == 137, last
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["memory"] == MEMORY_LIMIT


class _DownSampler:
    """Samples how many members are down (absent, terminating or not Ready) while a drain
    runs: the budget must keep it at one."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _DownSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self.fleet.cluster.member_pods(self.fleet.ns, GROUP)
            up = [p for p in pods if pod_ready(p) and not p["metadata"].get("deletionTimestamp")]
            self.samples.append(MEMBERS - len(up))
            self._stop.wait(0.3)


def test_drain_with_the_disruption_budget(
    diagnosed: Fleet, record: Callable[[str, Any], None]
) -> None:
    fleet = diagnosed
    cluster, ns = fleet.cluster, fleet.ns
    before = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=120)
    budget_name = f"{GROUP}-members"
    wait_for(
        "the budget to allow one disruption",
        lambda: (
            (cluster.get_json("-n", ns, "get", "pdb", budget_name).get("status") or {}).get(
                "disruptionsAllowed"
            )
            == 1
        ),
        timeout_s=60,
    )
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.member_pods(ns, GROUP)}
    since_ms = int(time.time() * 1000)
    started = time.monotonic()
    with _DownSampler(fleet) as sampler:
        drain = _drain(fleet, timeout_s=DRAIN_TIMEOUT_S)
        drain_s = round(time.monotonic() - started, 1)
        pods = cluster.member_pods(ns, GROUP)
        evicted = sorted(n for n, uid in uids.items() if not _same(pods, n, uid))
        pending = [p for p in pods if p["status"].get("phase") == "Pending"]
        node = cluster.get_json("get", "node", probe.NODE_NAME)
        output = drain.stdout + drain.stderr
        record("drain_exit_code", drain.returncode)
        record("drain_blocked_s", drain_s)
        record("drain_evicted", evicted)
        assert evicted_pods(output) == evicted, output
        record(
            "drain_budget_refusals",
            output.count(BUDGET_REFUSAL),
        )
        assert drain.returncode != 0, output  # blocked: one node cannot make progress
        assert "disruption budget" in output, output
        assert node["spec"].get("unschedulable") is True
        assert len(evicted) == 1, (evicted, output)
        # The operator recreated the evicted slot; the cordoned node cannot take it.
        assert len(pending) == 1, [p["status"] for p in pods]
        scheduled = next(
            c for c in pending[0]["status"].get("conditions", []) if c["type"] == "PodScheduled"
        )
        record("drain_replacement_scheduled", scheduled.get("reason"))
        assert scheduled["status"] == "False" and scheduled.get("reason") == "Unschedulable"
        instance_id = pending[0]["metadata"]["annotations"][INSTANCE_ANNOTATION]

        cluster.kubectl("uncordon", probe.NODE_NAME)
        uncordoned = time.monotonic()
        admin = cluster.admin()
        wait_for(
            f"{instance_id}'s static rejoin after uncordon",
            lambda: static_rejoins(admin.journal(GROUP), instance_id, since_ms),
            timeout_s=120,
        )
        record("uncordon_to_static_rejoin_s", round(time.monotonic() - uncordoned, 1))
        record("eviction_to_static_rejoin_s", round(time.monotonic() - started, 1))
        after = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=120)
        record("uncordon_to_stable_s", round(time.monotonic() - uncordoned, 1))
    record("drain_max_members_down", max(sampler.samples))
    record("drain_down_samples", len(sampler.samples))
    assert max(sampler.samples) == 1, sampler.samples
    record("drain_generation", [before["generation_id"], after["generation_id"]])
    assert after["generation_id"] == before["generation_id"]
    assert {m["group_instance_id"] for m in after["members"]} == {
        m["group_instance_id"] for m in before["members"]
    }


def test_drain_while_a_rollout_bounces(
    diagnosed: Fleet, record: Callable[[str, Any], None]
) -> None:
    """A rollout's bounce (the operator's DELETE, which no budget holds) in flight, then a
    drain: the budget counts the bounced member as down, so the eviction is refused; the
    rollout waits for nothing the drain holds; after uncordon both are done, no deadlock."""
    fleet = diagnosed
    cluster, ns = fleet.cluster, fleet.ns
    before = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=120)
    wait_for("the budget to allow one disruption", lambda: _allowed(fleet) == 1, timeout_s=60)
    spec = cluster.get_json("-n", ns, "get", "consumergroup", GROUP)["spec"]
    template = spec["template"]
    template["spec"]["containers"][0].setdefault("env", []).append(
        {"name": "E2E_ROLLOUT_MARK", "value": "1"}
    )
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.member_pods(ns, GROUP)}
    started = time.monotonic()
    with _DownSampler(fleet) as sampler:
        patch_spec(cluster, ns, GROUP, {"template": template})
        # The first bounce in flight: the budget allows nothing until its replacement is Ready.
        wait_for(
            "a bounce in flight (the budget at 0)",
            lambda: _allowed(fleet) == 0,
            timeout_s=60,
            interval_s=0.2,
        )
        record("rollout_patch_to_budget_zero_s", round(time.monotonic() - started, 1))
        drain = _drain(fleet, timeout_s=ROLLOUT_DRAIN_TIMEOUT_S)
        output = drain.stdout + drain.stderr
        record("rollout_drain_exit_code", drain.returncode)
        record("rollout_drain_budget_refusals", output.count(BUDGET_REFUSAL))
        # Evicted after the bounce's replacement turned Ready (the drain retries every 5 s).
        record("rollout_drain_evicted", evicted_pods(output))
        assert BUDGET_REFUSAL in output, output
        cluster.kubectl("uncordon", probe.NODE_NAME)
        uncordoned = time.monotonic()
        wait_rollout_completed(cluster, ns, GROUP, "eager", timeout_s=300)
        record("rollout_uncordon_to_completed_s", round(time.monotonic() - uncordoned, 1))
        after = wait_stable(cluster, ns, GROUP, MEMBERS, timeout_s=120)
    record("rollout_total_s", round(time.monotonic() - started, 1))
    pods = cluster.member_pods(ns, GROUP)
    # Every member recreated once by the rollout (the one evicted, if any, recreated too).
    assert not any(_same(pods, name, uid) for name, uid in uids.items())
    record("rollout_max_members_down", max(sampler.samples))
    # One at a time but for the race docs/operator.md names (an eviction and a bounce decided
    # at the same instant): two for a moment, never more.
    assert max(sampler.samples) <= 2, sampler.samples
    record("rollout_generation", [before["generation_id"], after["generation_id"]])
    assert {m["group_instance_id"] for m in after["members"]} == {
        m["group_instance_id"] for m in before["members"]
    }


def _allowed(fleet: Fleet) -> int | None:
    return fleet.cluster.disruptions_allowed(fleet.ns, f"{GROUP}-members")


def _drain(fleet: Fleet, timeout_s: int) -> subprocess.CompletedProcess[str]:
    # Only the group's pods: the operator's own pod (one replica, no budget by default)
    # serves the embedded coordinator; scenario 11c drains it too.
    return fleet.cluster.drain(timeout_s, pod_selector=f"staticfleet.dev/group={GROUP}")


def _same(pods: list[dict[str, Any]], name: str, uid: str) -> bool:
    return any(
        p["metadata"]["name"] == name
        and p["metadata"]["uid"] == uid
        and not p["metadata"].get("deletionTimestamp")
        for p in pods
    )
