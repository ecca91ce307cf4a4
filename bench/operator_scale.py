"""One operator, many ConsumerGroups, on the real API server of the e2e control plane.

The e2e control plane (`e2e/controlplane.py`: etcd, kube-apiserver, kube-controller-manager)
is started fresh, the CRDs applied, and one operator process (`staticfleet operator run`,
logged in with the admin kubeconfig, the mutating webhook on loopback named by URL in a
MutatingWebhookConfiguration) watches one namespace holding N managed ConsumerGroups of 6
replicas. No member process runs: this harness plays the kubelet for the 6 N pods — it binds
each pod to a Node object it registered and sets the pod Running and Ready through the
status subresource — so the figures are the operator's and the API server's alone (the
groups need no live member for any of them: the operator's steady state with pods Ready
and nobody joined is "nothing to do").

Figures:
- idle API requests per minute: `apiserver_request_total` from the API server's /metrics,
  non-WATCH verbs, over an idle window after the fleet settled (nothing changes in it);
- pod deletion -> replacement created: a member pod deleted (grace 0), until the API
  server's watch shows its replacement (p50/p99);
- admission: `apiserver_admission_webhook_admission_duration_seconds` for the operator's
  webhook, and timed creates of pods of an adopted group (stamped by the webhook) against
  timed creates of unlabelled pods (the webhook not called);
- the webhook alone: AdmissionReviews POSTed straight to it, as the API server sends them
  (the API server's histogram has no bucket between 25 and 100 ms);
- the operator's RSS (and its peak, VmHWM, before and after a restart), and the time from its
  restart until /readyz answers 200 (every group's member token registered again: from the
  listed groups' Secrets, or by the group's pass; operator/staticfleet_operator/readiness.py).

The harness holds the 6 N pods too: it freezes its own collector as the operator does
(coordinator/server/gc_policy.py), or its own full collections (0.4-0.6 s) would be timed
as the operator's latency.

    python -m bench.run --only operator_scale            # N = 1,000
    python -m bench.operator_scale --groups 100 --label baseline-main
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import signal
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client import AdmissionregistrationV1Api
from prometheus_client.parser import text_string_to_metric_families

from bench.child import process_cpu_seconds
from coordinator.server.gc_policy import freeze_periodically
from e2e.certs import serving_cert
from e2e.controlplane import ControlPlane, free_ports, running_control_plane
from e2e.kube_api import (
    MERGE_PATCH,
    RAW,
    Kube,
    admission_review,
    answer,
    bind_pod,
    create_namespace,
    items,
    text,
    watch_pods,
)
from staticfleet_operator.kube import NotFound

ROOT = Path(__file__).resolve().parents[1]
WORKDIR = ROOT / "build" / "e2e" / "run-bench"
RESULTS = ROOT / "bench" / "results" / "operator_scale.json"
NAMESPACE = "bench"
NODE = "bench-node"
REPLICAS = 6
GROUP_LABEL = "staticfleet.dev/group"
SLOT_LABEL = "staticfleet.dev/slot"
WEBHOOK_NAME = "pods.mutate.staticfleet.dev"
# Kinds the operator reads or writes (the controller manager's own traffic is reported apart).
# A replacement not seen within this long is counted at this value.
REPLACEMENT_WAIT_S = 60.0
OPERATOR_RESOURCES = frozenset({"consumergroups", "pods", "secrets", "events"})


@dataclass(frozen=True, slots=True)
class Sizes:
    groups: int
    idle_seconds: float
    deletions: int
    admissions: int
    settle_seconds: float
    restart_wait_seconds: float = 900.0
    direct_admissions: int = 500
    # The operator's PYTHONMALLOC ("": Python's default, pymalloc, as the chart runs it):
    # only the operator's process, not this harness's (docs/performance.md, "What the
    # operator's memory held").
    python_malloc: str = ""
    # More `staticfleet operator run` arguments (e.g. its collector policy), as given.
    operator_args: tuple[str, ...] = ()


FULL = Sizes(groups=1000, idle_seconds=60, deletions=50, admissions=50, settle_seconds=20)
QUICK = Sizes(
    groups=5, idle_seconds=10, deletions=5, admissions=5, settle_seconds=5, direct_admissions=20
)


def run(quick: bool) -> dict[str, Any]:
    """`bench.run`'s entry: the current code at FULL (QUICK) size; earlier labelled runs
    (the baseline on the code before the watch) are carried over from the results file."""
    sizes = QUICK if quick else FULL
    current = asyncio.run(measure(sizes))
    previous = _previous_runs()
    previous[f"current@N={sizes.groups}"] = current
    return {"runs": previous}


def _previous_runs() -> dict[str, Any]:
    if not RESULTS.exists():
        return {}
    runs: dict[str, Any] = json.loads(RESULTS.read_text()).get("results", {}).get("runs", {})
    return runs


# --- manifests ----------------------------------------------------------------------------


def managed_group(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "staticfleet.dev/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "groupId": name,
            "topics": [{"name": "orders", "partitions": 12}],
            "replicas": REPLICAS,
            "membership": {"instanceIdPrefix": name},
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "member", "image": "staticfleet:bench"}],
                }
            },
        },
    }


def adopted_group(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "staticfleet.dev/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "groupId": name,
            "topics": [{"name": "orders", "partitions": 12}],
            "selector": {"matchLabels": {GROUP_LABEL: name}},
            "membership": {"instanceIdPrefix": name},
        },
    }


def plain_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "member", "image": "staticfleet:bench"}],
        },
    }


def webhook_configuration(port: int, ca_pem: bytes) -> dict[str, Any]:
    """What the chart installs, with a URL on loopback instead of a Service."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "staticfleet-bench"},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/staticfleet-mutate-pod",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "objectSelector": {
                    "matchExpressions": [{"key": GROUP_LABEL, "operator": "Exists"}]
                },
            }
        ],
    }


def node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


# --- the kubelet's part --------------------------------------------------------------------


@dataclass
class Kubelet:
    """Binds every new pod of the namespace and marks it Running and Ready; records when
    each pod was first seen (for deletion -> replacement)."""

    kube: Kube
    running: set[str] = field(default_factory=set)
    seen: dict[str, float] = field(default_factory=dict)
    waiters: list[tuple[str, str, asyncio.Future[float]]] = field(default_factory=list)
    _limit: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(8))

    async def run(self) -> None:
        tasks: set[asyncio.Task[None]] = set()
        async for kind, pod in watch_pods(self.kube, namespace=NAMESPACE, timeout_seconds=600):
            metadata = pod.get("metadata") or {}
            name = str(metadata.get("name"))
            if kind == "DELETED":
                self.running.discard(name)
                continue
            uid = str(metadata.get("uid"))
            if uid not in self.seen:  # a replacement may reuse its predecessor's name
                self.seen[uid] = time.monotonic()
                self._notify(metadata)
            started = (pod.get("spec") or {}).get("nodeName") and (
                (pod.get("status") or {}).get("phase") == "Running"
            )
            if not started and name not in self.running and not metadata.get("deletionTimestamp"):
                self.running.add(name)
                task = asyncio.create_task(self._start(name, pod))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    def _notify(self, metadata: dict[str, Any]) -> None:
        labels = metadata.get("labels") or {}
        for waiter in list(self.waiters):
            group, old, future = waiter
            if labels.get(GROUP_LABEL) == group and metadata.get("uid") != old:
                if not future.done():
                    future.set_result(time.monotonic())
                self.waiters.remove(waiter)

    async def _start(self, name: str, pod: dict[str, Any]) -> None:
        async with self._limit:
            try:
                if not (pod.get("spec") or {}).get("nodeName"):
                    await bind_pod(self.kube, NAMESPACE, name, NODE, None)
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                ready = {"type": "Ready", "status": "True", "lastTransitionTime": now}
                status = {"phase": "Running", "startTime": now, "conditions": [ready]}
                await answer(
                    self.kube.core.patch_namespaced_pod_status(
                        name, NAMESPACE, {"status": status}, _content_type=MERGE_PATCH, **RAW
                    )
                )
            except Exception:  # a pod deleted in between: nothing to start
                self.running.discard(name)

    def replacement_of(self, group: str, old: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters.append((group, old, future))
        return future


# --- the operator process ---------------------------------------------------------------


@dataclass
class OperatorProcess:
    cp: ControlPlane
    cert: Path
    key: Path
    coordinator_port: int
    webhook_port: int
    log: Path
    python_malloc: str = ""
    operator_args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0

    def start(self) -> None:
        argv = [
            str(Path(sys.executable).parent / "staticfleet"),
            "operator",
            "run",
            "--namespace",
            NAMESPACE,
            "--store",
            "memory://",
            "--insecure",
            "--coordinator-host",
            "127.0.0.1",
            "--coordinator-port",
            str(self.coordinator_port),
            "--webhook-host",
            "127.0.0.1",
            "--webhook-port",
            str(self.webhook_port),
            "--webhook-cert",
            str(self.cert),
            "--webhook-key",
            str(self.key),
            *self.operator_args,
        ]
        env = {**os.environ, "KUBECONFIG": str(self.cp.kubeconfig)}
        env.pop("PYTHONMALLOC", None)
        if self.python_malloc:
            env["PYTHONMALLOC"] = self.python_malloc
        self.started = time.monotonic()
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out, stderr=out)

    def ready(self) -> bool:
        url = f"http://127.0.0.1:{self.coordinator_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    async def wait_ready(self, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while not await asyncio.to_thread(self.ready):
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the operator exited; see {self.log}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the operator was not ready within {timeout_s}s")
            await asyncio.sleep(0.2)
        return time.monotonic() - self.started

    def rss_mib(self, field: str = "VmRSS") -> float:
        """The process's resident memory now (VmHWM: its peak so far)."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
        return 0.0

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- the API server's metrics ---------------------------------------------------------------


async def apiserver_metrics(kube: Kube) -> str:
    return await text(kube, "/metrics")


def request_counts(text: str) -> dict[tuple[str, str], float]:
    """(verb, resource) -> requests so far, WATCH and WATCHLIST left out."""
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            verb = sample.labels.get("verb", "")
            if verb in ("WATCH", "WATCHLIST", "CONNECT"):
                continue
            key = (verb, sample.labels.get("resource", ""))
            counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def webhook_buckets(text: str) -> dict[float, float]:
    """Upper bound -> cumulative count of the operator webhook's admission durations."""
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_admission_webhook_admission_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.labels.get("name") == WEBHOOK_NAME:
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def bucket_quantile(buckets: dict[float, float], q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q` (a histogram gives no more)."""
    if not buckets:
        return None
    total = max(buckets.values())
    for bound in sorted(buckets):
        if buckets[bound] >= q * total:
            return bound
    return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values) * 1000, 1),
        "p99_ms": round(percentile(values, 0.99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


# --- the run ---------------------------------------------------------------------------------


@contextlib.contextmanager
def control_plane() -> Iterator[ControlPlane]:
    with running_control_plane(WORKDIR) as cp:
        kubectl = [str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig)]
        subprocess.run(
            [*kubectl, "apply", "-f", str(ROOT / "crds")], check=True, capture_output=True
        )
        subprocess.run(
            [*kubectl, "wait", "--for=condition=Established", "--timeout=60s",
             "crd/consumergroups.staticfleet.dev"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        yield cp


@contextlib.asynccontextmanager
async def background(coro: Any) -> AsyncIterator[None]:
    task = asyncio.create_task(coro)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def gather_limited(coros: list[Any], limit: int = 16) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(coro: Any) -> None:
        async with semaphore:
            await coro

    await asyncio.gather(*(one(c) for c in coros))


async def wait_until(what: str, predicate: Any, timeout_s: float) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s}s")
        await asyncio.sleep(0.5)
    return time.monotonic() - started


async def measure(sizes: Sizes) -> dict[str, Any]:
    freezer = asyncio.create_task(freeze_periodically())
    try:
        with control_plane() as cp:
            return await _measure(cp, sizes)
    finally:
        freezer.cancel()


async def direct_admissions(url: str, ca: Path, count: int) -> list[float]:
    """`count` AdmissionReviews for pods of the adopted group, one after another, each
    timed from send to the webhook's answer (which must allow and patch)."""
    context = ssl.create_default_context(cafile=str(ca))
    timings: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        for i in range(count):
            pod = plain_pod(f"direct-{i}", {GROUP_LABEL: "adopted"})
            review = admission_review(pod, NAMESPACE, "bench")
            started = time.monotonic()
            async with session.post(url, json=review) as response:
                answer_ = await response.json()
            timings.append(time.monotonic() - started)
            verdict = answer_["response"]
            if not verdict.get("allowed") or not verdict.get("patch"):
                raise AssertionError(f"the webhook did not stamp the pod: {verdict}")
    return timings


async def _measure(cp: ControlPlane, sizes: Sizes) -> dict[str, Any]:
    certs = serving_cert(WORKDIR / "webhook-pki", "127.0.0.1")
    coordinator_port, webhook_port = free_ports(2)
    operator = OperatorProcess(
        cp,
        certs[1].cert,
        certs[1].key,
        coordinator_port,
        webhook_port,
        WORKDIR / "logs" / "operator.log",
        sizes.python_malloc,
        sizes.operator_args,
    )
    async with await Kube.connect(cp.kubeconfig) as kube:
        await create_namespace(kube, NAMESPACE)
        await answer(kube.core.create_node(node(), **RAW))
        await _service_account(kube)
        await answer(
            AdmissionregistrationV1Api(kube.client).create_mutating_webhook_configuration(
                webhook_configuration(webhook_port, certs[0].cert.read_bytes()), **RAW
            )
        )
        kubelet = Kubelet(kube)
        operator.start()
        try:
            async with background(kubelet.run()):
                return await _scenario(kube, kubelet, operator, sizes, certs[0].cert)
        finally:
            operator.stop()


async def _service_account(kube: Kube) -> None:
    """Until the controller manager has made the namespace's default ServiceAccount."""
    while True:
        try:
            await answer(kube.core.read_namespaced_service_account("default", NAMESPACE, **RAW))
            return
        except NotFound:
            await asyncio.sleep(0.5)


# Expected members expire after spec.scaleUp's timeout (120 s by default).
EXPECTED_MEMBERS_WAIT_S = 600.0


async def _no_group_missing_expected(kube: Kube) -> bool:
    groups = await answer(
        kube.custom.list_namespaced_custom_object(
            "staticfleet.dev", "v1alpha1", NAMESPACE, "consumergroups", **RAW
        )
    )
    return not any((g.get("status") or {}).get("missingExpectedMembers") for g in groups["items"])


async def _create_group(kube: Kube, body: dict[str, Any]) -> None:
    await answer(
        kube.custom.create_namespaced_custom_object(
            "staticfleet.dev", "v1alpha1", NAMESPACE, "consumergroups", body, **RAW
        )
    )


async def _scenario(
    kube: Kube, kubelet: Kubelet, operator: OperatorProcess, sizes: Sizes, ca: Path
) -> dict[str, Any]:
    n = sizes.groups
    await operator.wait_ready(120)
    names = [f"g{i:04d}" for i in range(n)]
    started = time.monotonic()
    await gather_limited([_create_group(kube, managed_group(name)) for name in names])
    try:
        await wait_until(
            f"{n * REPLICAS} pods Running", lambda: len(kubelet.running) >= n * REPLICAS, 60 + n * 2
        )
    except TimeoutError:  # the operator cannot bring the fleet up: that is the figure
        return {
            "groups": n,
            "fleet_up_seconds": None,
            "fleet_not_up_within_seconds": 60 + n * 2,
            "pods_running_then": len(kubelet.running),
        }
    fleet_up_s = time.monotonic() - started
    # No member process runs here, so each group's expected members (spec.scaleUp, on by
    # default) can only expire: wait for that one-off write per group
    # (a status PATCH and an Event) before the idle window, as with real members it would
    # have completed instead.
    expected_s = time.monotonic()
    while not await _no_group_missing_expected(kube):
        if time.monotonic() - expected_s > EXPECTED_MEMBERS_WAIT_S:
            raise TimeoutError(
                f"groups still missing expected members after {EXPECTED_MEMBERS_WAIT_S}s"
            )
        await asyncio.sleep(5)
    expected_s = time.monotonic() - expected_s
    await asyncio.sleep(sizes.settle_seconds)

    # Idle: nothing changes; what the API server serves is the operator's polling (if any).
    before = request_counts(await apiserver_metrics(kube))
    rss_before_idle = operator.rss_mib()
    await asyncio.sleep(sizes.idle_seconds)
    after = request_counts(await apiserver_metrics(kube))
    per_minute = 60.0 / sizes.idle_seconds
    by_key = {
        f"{verb} {resource}": round((after[key] - before.get(key, 0.0)) * per_minute, 1)
        for key in after
        if (verb := key[0]) and (resource := key[1]) is not None
        and after[key] - before.get(key, 0.0) > 0
    }  # fmt: skip
    idle_total = sum(by_key.values())
    idle_operator = sum(
        value for key, value in by_key.items() if key.split(" ", 1)[1] in OPERATOR_RESOURCES
    )

    # Deletion -> replacement.
    replacement_s: list[float] = []
    missed = 0
    rng = random.Random(14)
    for _ in range(sizes.deletions):
        group = rng.choice(names)
        pods = await items(
            kube.core.list_namespaced_pod(NAMESPACE, label_selector=f"{GROUP_LABEL}={group}", **RAW)
        )
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if not live:
            continue
        victim = rng.choice(live)["metadata"]
        future = kubelet.replacement_of(group, victim["uid"])
        deleted = time.monotonic()
        await answer(
            kube.core.delete_namespaced_pod(
                victim["name"], NAMESPACE, grace_period_seconds=0, **RAW
            )
        )
        try:
            replacement_s.append(await asyncio.wait_for(future, REPLACEMENT_WAIT_S) - deleted)
        except TimeoutError:  # counted at the cap: the percentiles are then lower bounds
            replacement_s.append(REPLACEMENT_WAIT_S)
            missed += 1
        await asyncio.sleep(0.2)

    # Admission: pods the webhook stamps (an adopted group) against pods it never sees.
    await _create_group(kube, adopted_group("adopted"))
    await asyncio.sleep(3)
    # The histogram's growth over these admissions only (the fleet's own creations came
    # in a burst while the operator was busiest).
    buckets_before = webhook_buckets(await apiserver_metrics(kube))
    stamped_s: list[float] = []
    unlabelled_s: list[float] = []
    for i in range(sizes.admissions):
        t = time.monotonic()
        adopted = plain_pod(f"adopted-{i}", {GROUP_LABEL: "adopted"})
        await answer(kube.core.create_namespaced_pod(NAMESPACE, adopted, **RAW))
        stamped_s.append(time.monotonic() - t)
        t = time.monotonic()
        plain = plain_pod(f"plain-{i}", {"app": "plain"})
        await answer(kube.core.create_namespaced_pod(NAMESPACE, plain, **RAW))
        unlabelled_s.append(time.monotonic() - t)
    buckets_all = webhook_buckets(await apiserver_metrics(kube))
    buckets = {le: n - buckets_before.get(le, 0.0) for le, n in buckets_all.items()}
    # The webhook alone (no API server in between), with the fleet idle.
    direct_s = await direct_admissions(
        f"https://127.0.0.1:{operator.webhook_port}/staticfleet-mutate-pod",
        ca,
        sizes.direct_admissions,
    )

    # Restart: from the new process's start until /readyz (every group's token registered).
    rss = operator.rss_mib()
    peak = operator.rss_mib("VmHWM")
    assert operator.process is not None
    cpu_s = process_cpu_seconds(operator.process.pid)
    print(
        json.dumps({"before_restart": {"idle_per_minute": by_key, "rss_mib": rss}}),
        file=sys.stderr,
        flush=True,
    )
    operator.stop()
    operator.start()
    try:
        restart_ready_s: float | None = await operator.wait_ready(sizes.restart_wait_seconds)
    except TimeoutError:
        restart_ready_s = None
    # The restarted process as it becomes ready: a restart lists and reconciles everything at
    # once, which is what the memory limit must leave room for.
    restart_peak = operator.rss_mib("VmHWM")

    return {
        "groups": n,
        "pods": n * REPLICAS,
        "fleet_up_seconds": round(fleet_up_s, 1),
        "expected_members_expired_after_fleet_up_seconds": round(expected_s, 1),
        "idle_window_seconds": sizes.idle_seconds,
        "idle_requests_per_minute": round(idle_total, 1),
        "idle_operator_requests_per_minute": round(idle_operator, 1),
        "idle_requests_per_minute_by_verb_resource": dict(sorted(by_key.items())),
        "deletion_to_replacement": summary_ms(replacement_s) if replacement_s else None,
        "replacements_not_within_s": {"seconds": REPLACEMENT_WAIT_S, "count": missed},
        "admission_stamped_pod_create": summary_ms(stamped_s),
        "admission_unlabelled_pod_create": summary_ms(unlabelled_s),
        "webhook_admission_seconds_p50_bucket_all": bucket_quantile(buckets_all, 0.5),
        "webhook_admission_seconds_p99_bucket_all": bucket_quantile(buckets_all, 0.99),
        "webhook_admission_seconds_p50_bucket": bucket_quantile(buckets, 0.5),
        "webhook_admission_seconds_p99_bucket": bucket_quantile(buckets, 0.99),
        "webhook_admissions": max(buckets.values()) if buckets else 0,
        "webhook_direct": summary_ms(direct_s),
        "operator_rss_mib_idle": rss_before_idle,
        "operator_rss_mib": rss,
        "operator_peak_rss_mib": peak,
        # From its start to the restart: the fleet's coming up, the idle window, the
        # deletions and admissions (what the allocator's choice costs in CPU).
        "operator_cpu_seconds": round(cpu_s, 1),
        "operator_python_malloc": sizes.python_malloc or "pymalloc",
        "operator_args": list(sizes.operator_args),
        "restarted_operator_peak_rss_mib_at_ready": restart_peak,
        "restart_to_ready_seconds": (
            round(restart_ready_s, 1) if restart_ready_s is not None else None
        ),
        "restart_wait_seconds": sizes.restart_wait_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.operator_scale", description=__doc__)
    parser.add_argument("--groups", type=int, default=FULL.groups)
    parser.add_argument("--idle-seconds", type=float, default=FULL.idle_seconds)
    parser.add_argument("--deletions", type=int, default=FULL.deletions)
    parser.add_argument("--admissions", type=int, default=FULL.admissions)
    parser.add_argument("--settle-seconds", type=float, default=FULL.settle_seconds)
    parser.add_argument("--restart-wait-seconds", type=float, default=FULL.restart_wait_seconds)
    parser.add_argument(
        "--python-malloc",
        choices=["malloc", "pymalloc"],
        default="pymalloc",
        help="the operator's PYTHONMALLOC (default: Python's own, pymalloc, as the chart runs it)",
    )
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for `staticfleet operator run` (repeat it; e.g. "
        "--operator-arg=--gc-full-interval --operator-arg=60)",
    )
    parser.add_argument(
        "--label", required=True, help="the run's name in the results file (e.g. baseline-main)"
    )
    args = parser.parse_args(argv)
    sizes = Sizes(
        args.groups,
        args.idle_seconds,
        args.deletions,
        args.admissions,
        args.settle_seconds,
        args.restart_wait_seconds,
        python_malloc="" if args.python_malloc == "pymalloc" else args.python_malloc,
        operator_args=tuple(args.operator_arg),
    )
    result = asyncio.run(measure(sizes))
    result["commit"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    document: dict[str, Any] = (
        json.loads(RESULTS.read_text()) if RESULTS.exists() else {"benchmark": "operator_scale"}
    )
    document.setdefault("results", {}).setdefault("runs", {})[f"{args.label}@N={args.groups}"] = (
        result
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
