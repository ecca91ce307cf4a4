"""The node: registration, heartbeats, the node lease, binding, probes and one
`PodWorker` per pod bound to it."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import platform
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import IO, Any

import aiohttp

from e2e.kube_api import (
    MERGE_PATCH,
    RAW,
    STRATEGIC_PATCH,
    JsonObject,
    Kube,
    KubeError,
    answer,
    bind_pod,
    watch_pods,
)
from e2e.node_agent.container import _signal_group
from e2e.node_agent.host import _arch, _read_text, first_ipv4, memory_bytes
from e2e.node_agent.pod import PodWorker
from e2e.node_agent.spec import (
    IMAGE_NAME,
    _phase_done,
    _pod_key,
    now_iso,
    now_micro,
    probe_port,
)
from staticfleet_operator.kube import Conflict, Invalid, NotFound

log = logging.getLogger("e2e.node_agent")

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
NODE_STATUS_S = 20.0


class NodeAgent:
    """The node: registration, heartbeats, binding and one `PodWorker` per pod on it."""

    def __init__(
        self,
        kube: Kube,
        workdir: Path,
        *,
        node_name: str = "e2e-node",
        node_ip: str | None = None,
        executable: Path | None = None,
    ) -> None:
        self.kube = kube
        self.workdir = workdir.resolve()
        self.node_name = node_name
        self.node_ip = node_ip or first_ipv4()
        self.executable = executable or Path(sys.executable).parent / IMAGE_NAME
        cpus = os.cpu_count() or 1
        self.allocatable = {
            "cpu": str(cpus),
            "memory": f"{memory_bytes() // 1024}Ki",
            "pods": "110",
        }
        self.workers: dict[str, PodWorker] = {}
        self._binding: set[str] = set()
        self._node_uid: str | None = None
        self._http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._transitions: dict[str, str] = {}

    @property
    def labels(self) -> dict[str, str]:
        return {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _arch(),
            "staticfleet.dev/e2e-node-agent": "true",
        }

    # ----------------------------------------------------------------- running

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then stop every pod's processes gracefully."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        lock = await self._lock_workdir()
        self.reap_stale_processes()
        await _forever("register the node", self.register_node)
        loops = [
            asyncio.create_task(
                self._every(LEASE_RENEW_S, "renew the node lease", self.renew_lease)
            ),
            asyncio.create_task(
                self._every(NODE_STATUS_S, "update the node status", self.update_node_status)
            ),
            asyncio.create_task(self._watch_pods()),
        ]
        log.info("node %s (%s) is up; workdir %s", self.node_name, self.node_ip, self.workdir)
        try:
            await stop.wait()
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await self.shutdown()
            lock.close()

    async def _lock_workdir(self) -> IO[bytes]:
        """One agent per workdir: a successor waits for a stopping predecessor, whose pods'
        processes it would otherwise reap as leftovers."""
        lock = (self.workdir / "agent.lock").open("wb")
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return lock
            except BlockingIOError:
                log.info("another node agent uses %s; waiting for it to exit", self.workdir)
                await asyncio.sleep(1.0)

    async def shutdown(self) -> None:
        """Stop all pods' processes within their grace periods (the pods stay in the API)."""
        workers = list(self.workers.values())
        for worker in workers:
            worker.request_stop(worker.grace_seconds(), False)
        await asyncio.gather(*(w.task for w in workers), return_exceptions=True)
        if self._http is not None:
            await self._http.close()
        log.info("node agent stopped (%d pods' processes stopped)", len(workers))

    async def _every(self, seconds: float, what: str, call: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await call()
            except (KubeError, aiohttp.ClientError, TimeoutError, OSError) as e:
                log.warning("cannot %s: %s", what, e)

    def reap_stale_processes(self) -> None:
        """Kill processes left by an earlier agent: nothing stale is adopted (the pods that
        still exist get fresh processes)."""
        for pid_file in (self.workdir / "pods").glob("*/*/*.pid"):
            with contextlib.suppress(ValueError, OSError):
                pid = int(pid_file.read_text().strip())
                # Only if it is still that pod's process (pids get reused): same cwd.
                if Path(f"/proc/{pid}/cwd").resolve() == pid_file.parent.resolve():
                    log.info("killing a leftover process %d (%s)", pid, pid_file)
                    _signal_group(pid, signal.SIGKILL)
            pid_file.unlink(missing_ok=True)

    # ----------------------------------------------------------------- node

    async def register_node(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node_name, "labels": self.labels},
            "spec": {},
        }
        try:
            node = await answer(self.kube.core.create_node(body, **RAW))
            log.info("registered node %s", self.node_name)
        except Conflict:
            patch = {"metadata": {"labels": self.labels}}
            node = await answer(
                self.kube.core.patch_node(self.node_name, patch, _content_type=MERGE_PATCH, **RAW)
            )
        self._node_uid = str(node["metadata"]["uid"])
        await self.update_node_status()
        await self.renew_lease()

    async def update_node_status(self) -> None:
        now = now_iso()
        ok = {"status": "True", "reason": "KubeletReady", "message": "e2e node agent is ready"}
        conditions = [
            {"type": "Ready", **ok},
            *(
                {"type": t, "status": "False", "reason": f"KubeletHasSufficient{t[:-8]}"}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
            ),
        ]
        for c in conditions:
            c.update(lastHeartbeatTime=now, lastTransitionTime=self._transition_time(c, now))
        capacity = dict(self.allocatable)
        status = {
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": self.node_ip},
                {"type": "Hostname", "address": self.node_name},
            ],
            "capacity": capacity,
            "allocatable": capacity,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": self._node_info(),
        }
        await answer(
            self.kube.core.patch_node_status(
                self.node_name, {"status": status}, _content_type=STRATEGIC_PATCH, **RAW
            )
        )

    def _transition_time(self, condition: Mapping[str, Any], now: str) -> str:
        # Unchanged conditions keep their first transition time.
        key = f"{condition['type']}={condition['status']}"
        return self._transitions.setdefault(key, now)

    def _node_info(self) -> dict[str, str]:
        uname = platform.uname()
        machine = _read_text("/etc/machine-id") or "e2e"
        return {
            "machineID": machine,
            "systemUUID": machine,
            "bootID": _read_text("/proc/sys/kernel/random/boot_id") or "e2e",
            "kernelVersion": uname.release,
            "osImage": "staticfleet e2e node agent (local processes)",
            "containerRuntimeVersion": "e2e-node-agent://0.1",
            "kubeletVersion": "v1.36.3",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": _arch(),
        }

    async def renew_lease(self) -> None:
        spec = {
            "holderIdentity": self.node_name,
            "leaseDurationSeconds": LEASE_DURATION_S,
            "renewTime": now_micro(),
        }
        try:
            await answer(
                self.kube.coordination.patch_namespaced_lease(
                    self.node_name,
                    LEASE_NAMESPACE,
                    {"spec": spec},
                    _content_type=MERGE_PATCH,
                    **RAW,
                )
            )
        except NotFound:
            meta: JsonObject = {"name": self.node_name, "namespace": LEASE_NAMESPACE}
            if self._node_uid:
                meta["ownerReferences"] = [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": self.node_name,
                        "uid": self._node_uid,
                    }
                ]
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": meta,
                "spec": spec,
            }
            await answer(
                self.kube.coordination.create_namespaced_lease(LEASE_NAMESPACE, lease, **RAW)
            )

    # ----------------------------------------------------------------- pods

    async def _watch_pods(self) -> None:
        while True:
            try:
                async for kind, pod in watch_pods(self.kube):
                    self._on_event(kind, pod)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("pod watch failed (%s); restarting it", e)
                await asyncio.sleep(1.0)

    def _on_event(self, kind: str, pod: JsonObject) -> None:
        try:
            if kind == "DELETED":
                self._on_deleted(pod)
            elif kind in ("ADDED", "MODIFIED"):
                self._on_pod(pod)
        except Exception:
            log.exception("cannot handle %s of pod %s", kind, _pod_key(pod))

    def _on_deleted(self, pod: JsonObject) -> None:
        worker = self.workers.get(_pod_key(pod))
        if worker is not None and worker.uid == pod["metadata"]["uid"]:
            worker.vanished()
            self._forget_when_done(worker)

    def _on_pod(self, pod: JsonObject) -> None:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            if self._should_bind(pod):
                self._spawn(self._bind(pod))
            return
        if node != self.node_name:
            return
        key, uid = _pod_key(pod), str(pod["metadata"]["uid"])
        worker = self.workers.get(key)
        if worker is not None and worker.uid == uid:
            worker.update(pod)
            return
        if worker is not None:
            worker.vanished()  # an older pod of that name, whose DELETED we missed
        if pod["metadata"].get("deletionTimestamp") and worker is None and not _phase_done(pod):
            log.info("pod %s is being deleted before it ran", key)
        new = PodWorker(self, pod, worker)
        self.workers[key] = new
        new.update(pod)
        self._forget_when_done(new)
        log.info("pod %s (uid %s) is on this node", key, uid)

    def _forget_when_done(self, worker: PodWorker) -> None:
        def forget(_: asyncio.Task[None]) -> None:
            if self.workers.get(worker.key) is worker:
                del self.workers[worker.key]

        worker.task.add_done_callback(forget)

    def _should_bind(self, pod: JsonObject) -> bool:
        spec = pod.get("spec") or {}
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") or _phase_done(pod) or spec.get("schedulingGates"):
            return False
        if spec.get("schedulerName") not in (None, "", "default-scheduler"):
            return False
        selector = spec.get("nodeSelector") or {}
        labels = self.labels
        return (
            all(labels.get(k) == v for k, v in selector.items())
            and meta["uid"] not in self._binding
        )

    async def _bind(self, pod: JsonObject) -> None:
        meta = pod["metadata"]
        uid = str(meta["uid"])
        self._binding.add(uid)
        try:
            await _forever(
                f"bind pod {_pod_key(pod)}",
                lambda: bind_pod(self.kube, meta["namespace"], meta["name"], self.node_name, uid),
                give_up=lambda e: isinstance(e, NotFound | Conflict | Invalid),
            )
            log.info("bound pod %s to %s", _pod_key(pod), self.node_name)
        finally:
            self._binding.discard(uid)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ----------------------------------------------------------------- probes

    async def run_probe(self, probe: Mapping[str, Any], container: Mapping[str, Any]) -> bool:
        """One probe attempt from the node (127.0.0.1): httpGet and tcpSocket for real; exec
        and grpc count as passing (there is nothing to exec into)."""
        limit_s = float(probe.get("timeoutSeconds", 1))
        try:
            if "httpGet" in probe:
                return await self._http_probe(probe["httpGet"], container, limit_s)
            if "tcpSocket" in probe:
                return await self._tcp_probe(probe["tcpSocket"], container, limit_s)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
            log.debug("probe of %s failed: %s", container.get("name"), e)
            return False
        return True

    async def _http_probe(
        self, get: Mapping[str, Any], container: Mapping[str, Any], limit_s: float
    ) -> bool:
        port = probe_port(get.get("port"), container)
        scheme = str(get.get("scheme") or "HTTP").lower()
        host = str(get.get("host") or "127.0.0.1")
        path = str(get.get("path") or "/")
        headers = {str(h["name"]): str(h["value"]) for h in get.get("httpHeaders") or []}
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession()
        async with self._http.get(
            f"{scheme}://{host}:{port}{path}",
            headers=headers,
            ssl=False,
            timeout=aiohttp.ClientTimeout(total=limit_s),
        ) as resp:
            return 200 <= resp.status < 400

    async def _tcp_probe(
        self, sock: Mapping[str, Any], container: Mapping[str, Any], limit_s: float
    ) -> bool:
        port = probe_port(sock.get("port"), container)
        host = str(sock.get("host") or "127.0.0.1")
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), limit_s)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True


async def _forever(
    what: str,
    call: Callable[[], Awaitable[Any]],
    *,
    give_up: Callable[[Exception], bool] = lambda e: False,
) -> None:
    """Retry ``call`` with a doubling delay until it succeeds (or ``give_up`` says so)."""
    delay = 1.0
    while True:
        try:
            await call()
            return
        except (KubeError, aiohttp.ClientError, TimeoutError, OSError) as e:
            if give_up(e):
                log.info("%s: %s (not retrying)", what, e)
                return
            log.warning("cannot %s: %s; retrying in %.0fs", what, e, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 10.0)
