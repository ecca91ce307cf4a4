"""A small node agent for the end-to-end tests: it stands in for the kubelet.

It registers a Node, binds pending pods to it (there is no scheduler), and runs each pod's
containers as local ``staticfleet`` processes with the environment a kubelet would resolve
(including whatever admission webhooks injected into the pod). It reports the pod status
(phase, conditions, containerStatuses, probes) and on deletion stops the processes within the
grace period before finishing the deletion. See e2e/README.md, "Node agent".

What it does NOT pretend: there are no images, no container runtime, no filesystem or network
namespaces. Only the ``staticfleet`` image can run (as the venv's ``staticfleet`` executable);
every pod shares the node's IP and ports; paths under a volumeMount's mountPath in
command/args/env are rewritten to a per-pod host directory; a ServiceAccount token mount is
turned into a kubeconfig file (``KUBECONFIG``) because the in-cluster token path does not exist.

    python -m e2e.node_agent --kubeconfig PATH --workdir DIR [--node-name e2e-node] [--node-ip IP]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import fcntl
import logging
import math
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import yaml

from e2e.kube_client import (
    JsonObject,
    KubeClient,
    KubeError,
    config_map_path,
    node_path,
    pod_path,
    resource_path,
    secret_path,
)

log = logging.getLogger("e2e.node_agent")

# The staticfleet image's Dockerfile: ENTRYPOINT ["staticfleet"], CMD ["operator", "run"].
IMAGE_NAME = "staticfleet"
IMAGE_ENTRYPOINT = ("staticfleet",)
IMAGE_CMD = ("operator", "run")
SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
NODE_STATUS_S = 20.0
CONFIG_RETRY_S = 2.0
BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 10.0
# A run this long resets the crash backoff (the kubelet uses 10 minutes; tests are short).
BACKOFF_RESET_AFTER_S = 30.0
VANISHED_GRACE_S = 2.0
# The agent's own variables a process keeps (there is no image environment to supply them).
KEPT_ENV_NAMES = ("PATH", "HOME")
KEPT_ENV_PREFIXES = ("PYTHON",)


class ConfigError(Exception):
    """A container cannot start yet: a Secret/ConfigMap (key) it needs is missing."""


class VolumeError(Exception):
    """A volume cannot be set up yet (e.g. its Secret does not exist)."""


# =============================================================================== pure helpers


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: ``$$`` escapes a ``$``; an unknown or unterminated
    reference stays literal (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        ch = value[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = value[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = value.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
            else:
                name = value[i + 2 : close]
                out.append(env.get(name, f"$({name})"))
                i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def image_repository_name(image: str) -> str:
    """The last path component of an image's repository: ``ghcr.io/x/staticfleet:1`` →
    ``staticfleet`` (a registry port such as ``host:5000/...`` is not a tag)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def image_runnable(image: str) -> bool:
    return image_repository_name(image) == IMAGE_NAME


def unrunnable_message(image: str) -> str:
    return (
        f"image {image} cannot run on the e2e node agent: it runs only the "
        f"{IMAGE_NAME} image as local processes"
    )


def container_argv(container: Mapping[str, Any]) -> list[str]:
    """Docker/Kubernetes semantics: ``command`` replaces the ENTRYPOINT (and drops the CMD),
    ``args`` replace the CMD."""
    command = container.get("command")
    args = container.get("args")
    if command:
        return [*command, *(args or [])]
    return [*IMAGE_ENTRYPOINT, *(args if args is not None else IMAGE_CMD)]


def map_executable(argv: list[str], executable: Path) -> list[str]:
    """Run the image's programs from the venv: ``staticfleet`` (also by absolute path) is the
    venv's console script; ``python``/``python3`` the venv's interpreter."""
    if not argv:
        return argv
    base = os.path.basename(argv[0])
    if base == IMAGE_NAME:
        return [str(executable), *argv[1:]]
    if base in ("python", "python3"):
        return [str(executable.parent / "python"), *argv[1:]]
    return argv


# A value that is a path, optionally behind a ``--flag=`` and/or a ``scheme://`` prefix.
_PATHLIKE = re.compile(
    r"^(?P<flag>--?[A-Za-z0-9][A-Za-z0-9_.-]*=)?(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?"
    r"(?P<path>/.*)$",
    re.DOTALL,
)


def rewrite_path(value: str, mounts: Sequence[tuple[str, Path]]) -> str:
    """Point a container path at its host directory: there is no container filesystem.

    ``mounts`` is ``(mountPath, host dir)``, longest mountPath first. A value is rewritten when
    it starts with a mountPath (``/data/x.db``), or has it right after ``scheme://``
    (``sqlite:///data/x.db``) or after a ``--flag=`` (``--webhook-cert=/certs/tls.crt``).
    """
    m = _PATHLIKE.match(value)
    if not m:
        return value
    path = m["path"]
    for mount_path, host in mounts:
        mp = mount_path.rstrip("/")
        if mp and (path == mp or path.startswith(mp + "/")):
            return f"{m['flag'] or ''}{m['scheme'] or ''}{host}{path[len(mp) :]}"
    return value


def longest_first(mounts: Iterable[tuple[str, Path]]) -> list[tuple[str, Path]]:
    return sorted(mounts, key=lambda m: len(m[0].rstrip("/")), reverse=True)


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def field_ref(pod: Mapping[str, Any], path: str, node_ip: str) -> str | None:
    """A downward API fieldRef; None when the field is unset (or unsupported)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = _SUBSCRIPT.match(path)
    if m:
        value = (meta.get(m[1]) or {}).get(m[2])
        return None if value is None else str(value)
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": node_ip,
        "status.hostIPs": node_ip,
        "status.podIP": node_ip,
        "status.podIPs": node_ip,
    }
    if path in ("metadata.labels", "metadata.annotations"):
        items = sorted((meta.get(path.split(".")[1]) or {}).items())
        return "\n".join(f'{k}="{v}"' for k, v in items)
    value = simple.get(path)
    return None if value is None else str(value)


_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(q: str | int | float) -> float:
    m = _QUANTITY.match(str(q).strip())
    if not m or m[2] not in _SUFFIX:
        raise ValueError(f"not a quantity: {q!r}")
    return float(m[1]) * _SUFFIX[m[2]]


def resource_field(
    container: Mapping[str, Any], ref: Mapping[str, Any], allocatable: Mapping[str, str]
) -> str:
    """An approximate resourceFieldRef: the container's request/limit (limits default to the
    node's allocatable), divided by ``divisor`` and rounded up, as the kubelet does."""
    kind, _, resource = str(ref.get("resource", "")).partition(".")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(resource)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(resource, "0")
    if raw is None:
        raw = allocatable.get(resource, "0")
    divisor = parse_quantity(ref.get("divisor") or "1") or 1.0
    return str(math.ceil(parse_quantity(raw) / divisor))


def exit_code_of(returncode: int) -> int:
    # Like a container runtime: death by signal N is exit code 128+N.
    return returncode if returncode >= 0 else 128 - returncode


def probe_port(port: Any, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    text = str(port)
    if text.isdigit():
        return int(text)
    for p in container.get("ports") or []:
        if p.get("name") == text:
            return int(p["containerPort"])
    raise ValueError(f"container {container.get('name')} has no port named {text!r}")


def kept_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v for k, v in environ.items() if k in KEPT_ENV_NAMES or k.startswith(KEPT_ENV_PREFIXES)
    }


def first_ipv4() -> str:
    """The first non-loopback IPv4 address (the route to a TEST-NET address picks it)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.254", 9))
        ip = str(s.getsockname()[0])
        if not ip.startswith("127."):
            return ip
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            ip = str(info[4][0])
            if not ip.startswith("127."):
                return ip
    return "127.0.0.1"


def memory_bytes() -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 4 * 2**30


# =============================================================================== containers


@dataclass
class ContainerStatus:
    """What the agent reports for one container (a containerStatuses entry)."""

    name: str
    image: str
    restart_count: int = 0
    state: JsonObject = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: JsonObject = field(default_factory=dict)
    ready: bool = False
    started: bool = False
    pid: int | None = None

    def to_json(self) -> JsonObject:
        status: JsonObject = {
            "name": self.name,
            "image": self.image,
            "imageID": f"e2e://{self.image}",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.pid is not None:
            status["containerID"] = f"e2e://{self.pid}"
        return status


class ContainerRunner:
    """Runs one container as a local process, with restarts and probes."""

    def __init__(self, pod: PodWorker, spec: JsonObject, *, init: bool, restarts: int) -> None:
        self.pod = pod
        self.spec = spec
        self.name = str(spec["name"])
        self.init = init
        self.status = ContainerStatus(self.name, str(spec.get("image", "")), restarts)
        self.proc: asyncio.subprocess.Process | None = None
        self.last_exit: int | None = None
        self._stopping = asyncio.Event()
        self._kill_now = asyncio.Event()
        self._idle = asyncio.Event()  # set while run() is not active
        self._idle.set()
        self._grace = 0.0

    # ----------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        """Run (and restart per restartPolicy) until the container is done or stopped."""
        self._idle.clear()
        try:
            await self._run_loop()
        finally:
            self._idle.set()

    async def _run_loop(self) -> None:
        backoff = BACKOFF_START_S
        first = True
        while not self._stopping.is_set():
            prepared = await self._prepare()
            if prepared is None or self._stopping.is_set():
                return
            if not first:
                self.status.restart_count += 1
            first = False
            started = time.monotonic()
            self.last_exit = await self._run_once(*prepared)
            if self._stopping.is_set() or not self._should_restart(self.last_exit):
                return
            if time.monotonic() - started > BACKOFF_RESET_AFTER_S:
                backoff = BACKOFF_START_S
            self._set_waiting("CrashLoopBackOff", f"back-off {backoff:.0f}s restarting failed")
            await self._sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _should_restart(self, code: int) -> bool:
        policy = self.pod.restart_policy
        if self.init:
            return code != 0 and policy != "Never"
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    async def _prepare(self) -> tuple[list[str], dict[str, str]] | None:
        """The argv and environment; waits (and reports why) while config is missing."""
        while not self._stopping.is_set():
            try:
                await self.pod.materialize_volumes()
            except VolumeError as e:
                self._set_waiting("ContainerCreating", str(e))
                await self._sleep(CONFIG_RETRY_S)
                continue
            try:
                return await self.pod.process_config(self.spec)
            except ConfigError as e:
                self._set_waiting("CreateContainerConfigError", str(e))
                await self._sleep(CONFIG_RETRY_S)
        return None

    async def _run_once(self, argv: list[str], env: dict[str, str]) -> int:
        started_at = now_iso()
        proc = await self._spawn(argv, env)
        if proc is None:
            return 128
        self.proc = proc
        self.status.pid = proc.pid
        self.pod.pid_file(self.name).write_text(f"{proc.pid}\n")
        self.status.state = {"running": {"startedAt": started_at}}
        self.status.started = False
        self.status.ready = False
        self.pod.changed()
        probes = asyncio.create_task(self._probe_all(proc))
        try:
            returncode = await self._wait_or_stop(proc)
        finally:
            probes.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probes
            self.pod.pid_file(self.name).unlink(missing_ok=True)
        code = exit_code_of(returncode)
        self._record_exit(code, started_at, proc.pid)
        log.info("%s/%s exited with %d", self.pod.key, self.name, code)
        return code

    async def _spawn(
        self, argv: list[str], env: dict[str, str]
    ) -> asyncio.subprocess.Process | None:
        log_path = self.pod.dir / f"{self.name}.log"
        header = (
            f"=== {now_micro()} start container {self.name} "
            f"(restart {self.status.restart_count}): {shlex.join(argv)}\n"
        )
        with log_path.open("ab") as out:
            out.write(header.encode())
            out.flush()
            try:
                return await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=self.pod.dir,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as e:
                out.write(f"=== cannot start: {e}\n".encode())
                log.warning("%s/%s cannot start %s: %s", self.pod.key, self.name, argv, e)
                self.status.last_state = self.status.state
                self.status.state = {
                    "terminated": {"exitCode": 128, "reason": "StartError", "message": str(e)}
                }
                self.pod.changed()
                return None

    def _record_exit(self, code: int, started_at: str, pid: int) -> None:
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started_at,
            "finishedAt": now_iso(),
            "containerID": f"e2e://{pid}",
        }
        self.proc = None
        self.status.ready = False
        self.status.started = False
        self.status.last_state = {"terminated": terminated}
        self.status.state = {"terminated": terminated}
        self.pod.changed()

    def _set_waiting(self, reason: str, message: str) -> None:
        state = {"waiting": {"reason": reason, "message": message}}
        if state != self.status.state:
            if "terminated" in self.status.state:
                self.status.last_state = self.status.state
            self.status.state = state
            self.pod.changed()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # ----------------------------------------------------------------- stopping

    async def terminate(self, grace: float) -> None:
        """No more restarts; a running process gets SIGTERM, then SIGKILL after ``grace``
        seconds (or at once when `kill_now` is called meanwhile). Returns once run() is over."""
        self._grace = grace
        self._stopping.set()
        await self._idle.wait()

    async def _wait_or_stop(self, proc: asyncio.subprocess.Process) -> int:
        exited = asyncio.create_task(proc.wait())
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():
                await self._stop_process(proc, exited)
            return await exited
        finally:
            stopping.cancel()
            exited.cancel()

    async def _stop_process(
        self, proc: asyncio.subprocess.Process, exited: asyncio.Task[int]
    ) -> None:
        log.info("%s/%s: SIGTERM (grace %.0fs)", self.pod.key, self.name, self._grace)
        _signal_group(proc.pid, signal.SIGTERM)
        kill = asyncio.create_task(self._kill_now.wait())
        await asyncio.wait(
            {exited, kill}, timeout=max(self._grace, 0.0), return_when="FIRST_COMPLETED"
        )
        kill.cancel()
        if not exited.done():
            log.info("%s/%s: grace period over, SIGKILL", self.pod.key, self.name)
            _signal_group(proc.pid, signal.SIGKILL)
        await asyncio.wait({exited})
        # Stragglers in the group (children that ignored SIGTERM) go too.
        _signal_group(proc.pid, signal.SIGKILL)

    def kill_now(self) -> None:
        self._kill_now.set()

    # ----------------------------------------------------------------- probes

    async def _probe_all(self, proc: asyncio.subprocess.Process) -> None:
        startup = self.spec.get("startupProbe")
        if startup and not await self._until_passing(startup, proc):
            log.info("%s/%s failed its startup probe: restarting", self.pod.key, self.name)
            await self._kill_for_restart(proc)
            return
        self.status.started = True
        self.status.ready = not self.spec.get("readinessProbe")
        self.pod.changed()
        loops = [self._readiness_loop(p) for p in [self.spec.get("readinessProbe")] if p]
        loops += [self._liveness_loop(p, proc) for p in [self.spec.get("livenessProbe")] if p]
        if loops:
            await asyncio.gather(*loops)

    async def _until_passing(self, probe: JsonObject, proc: asyncio.subprocess.Process) -> bool:
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        failures = 0
        while proc.returncode is None:
            if await self.pod.agent.run_probe(probe, self.spec):
                return True
            failures += 1
            if failures >= int(probe.get("failureThreshold", 3)):
                return False
            await asyncio.sleep(float(probe.get("periodSeconds", 10)))
        return False

    async def _readiness_loop(self, probe: JsonObject) -> None:
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        successes = failures = 0
        while True:
            if await self.pod.agent.run_probe(probe, self.spec):
                successes, failures = successes + 1, 0
                if successes >= int(probe.get("successThreshold", 1)):
                    self._set_ready(True)
            else:
                successes, failures = 0, failures + 1
                if failures >= int(probe.get("failureThreshold", 3)):
                    self._set_ready(False)
            await asyncio.sleep(float(probe.get("periodSeconds", 10)))

    async def _liveness_loop(self, probe: JsonObject, proc: asyncio.subprocess.Process) -> None:
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        failures = 0
        # No liveness verdicts while the container is being stopped anyway.
        while proc.returncode is None and not self._stopping.is_set():
            if await self.pod.agent.run_probe(probe, self.spec):
                failures = 0
            else:
                failures += 1
                if failures >= int(probe.get("failureThreshold", 3)):
                    log.info("%s/%s failed its liveness probe: restarting", self.pod.key, self.name)
                    await self._kill_for_restart(proc)
                    return
            await asyncio.sleep(float(probe.get("periodSeconds", 10)))

    def _set_ready(self, ready: bool) -> None:
        if self.status.ready != ready:
            self.status.ready = ready
            self.pod.changed()

    async def _kill_for_restart(self, proc: asyncio.subprocess.Process) -> None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), self.pod.grace_seconds())
        except TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# =============================================================================== pods


class PodWorker:
    """One pod on this node: its volumes, containers, status and termination."""

    def __init__(self, agent: NodeAgent, pod: JsonObject, predecessor: PodWorker | None) -> None:
        self.agent = agent
        self.pod = pod
        meta = pod["metadata"]
        self.namespace = str(meta["namespace"])
        self.name = str(meta["name"])
        self.uid = str(meta["uid"])
        self.key = f"{self.namespace}/{self.name}"
        self.dir = agent.workdir / "pods" / self.namespace / self.name
        self.runners: dict[str, ContainerRunner] = {}
        self.init_runners: list[ContainerRunner] = []
        self.phase = "Pending"
        self.reason: str | None = None
        self.message: str | None = None
        self.initialized = False
        self.start_time = now_iso()
        self._conditions: dict[str, tuple[str, str]] = {}
        self._predecessor = predecessor
        self._changed = asyncio.Event()
        self._terminate = asyncio.Event()
        self._delete_after = False
        self._grace: float = 0.0
        self._last_report: JsonObject | None = None
        self._volume_dirs: dict[str, Path] = {}
        self._gone = False
        # Finished before this agent saw it (e.g. an agent restart): run and report nothing.
        self._frozen = _phase_done(pod)
        self._volumes_lock = asyncio.Lock()
        self.task = asyncio.create_task(self._main(), name=f"pod {self.key}")

    # ----------------------------------------------------------------- inputs

    @property
    def restart_policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy") or "Always")

    def grace_seconds(self) -> float:
        value = self.pod["spec"].get("terminationGracePeriodSeconds")
        return float(30 if value is None else value)

    def update(self, pod: JsonObject) -> None:
        self.pod = pod
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds")
            self.request_stop(self.grace_seconds() if grace is None else float(grace), True)

    def vanished(self) -> None:
        """The pod is gone from the API (force-deleted): just stop its processes."""
        self._gone = True
        self.request_stop(VANISHED_GRACE_S, False)

    def request_stop(self, grace: float, delete_after: bool) -> None:
        if self._terminate.is_set():
            if grace < self._grace:  # a second, shorter delete
                self._grace = grace
                if grace <= 0:
                    for runner in self._all_runners():
                        runner.kill_now()
            return
        self._grace = grace
        self._delete_after = delete_after
        if not delete_after:
            # Agent shutdown or a vanished pod: like a stopped kubelet, report nothing more
            # (a successor agent must not find a running pod marked Failed).
            self._frozen = True
        self._terminate.set()

    def changed(self) -> None:
        self._changed.set()

    def pid_file(self, container: str) -> Path:
        return self.dir / f"{container}.pid"

    # ----------------------------------------------------------------- main flow

    async def _main(self) -> None:
        if self._predecessor is not None:
            # A same-named pod's worker (an earlier uid) must release the directory first.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._predecessor.task)
        self._prepare_dir()
        self._create_runners()
        reporter = asyncio.create_task(self._report_loop())
        runner_task = asyncio.create_task(self._run_pod())
        try:
            await self._terminate.wait()
            await self._stop_containers()
            try:
                await asyncio.wait_for(asyncio.shield(runner_task), 5.0)
            except TimeoutError:
                log.warning("pod %s: containers did not wind down; cancelling", self.key)
            if self._delete_after:
                await self._finish_deletion()
        except Exception:
            log.exception("pod %s: worker failed", self.key)
        finally:
            runner_task.cancel()
            reporter.cancel()
            for runner in self._all_runners():
                if runner.proc is not None and runner.proc.returncode is None:
                    _signal_group(runner.proc.pid, signal.SIGKILL)

    def _prepare_dir(self) -> None:
        uid_file = self.dir / "uid"
        if uid_file.exists() and uid_file.read_text().strip() != self.uid:
            # A new pod with an old name: its emptyDirs start empty (logs are kept, appended).
            shutil.rmtree(self.dir / "volumes", ignore_errors=True)
            (self.dir / "kubeconfig").unlink(missing_ok=True)
        (self.dir / "volumes").mkdir(parents=True, exist_ok=True)
        uid_file.write_text(self.uid + "\n")

    async def _run_pod(self) -> None:
        try:
            await self._run_containers()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("pod %s: cannot run", self.key)
            self._fail("AgentError", f"the e2e node agent could not run the pod: {e}")

    def _create_runners(self) -> None:
        spec = self.pod["spec"]
        self.initialized = not spec.get("initContainers")
        previous = self._previous_restart_counts()
        self.init_runners = [
            ContainerRunner(self, c, init=True, restarts=previous.get(c["name"], 0))
            for c in spec.get("initContainers") or []
        ]
        self.runners = {
            c["name"]: ContainerRunner(self, c, init=False, restarts=previous.get(c["name"], 0))
            for c in spec.get("containers") or []
        }

    async def _run_containers(self) -> None:
        if self._frozen or self._terminate.is_set():
            return
        bad = [c for c in self._all_specs() if not image_runnable(str(c.get("image", "")))]
        if bad:
            self._fail("UnsupportedImage", unrunnable_message(str(bad[0].get("image"))))
            return
        self.changed()
        for runner in self.init_runners:
            await runner.run()
            if self._terminate.is_set():
                return
            if runner.last_exit != 0:
                self._fail("InitContainerFailed", f"init container {runner.name} failed")
                return
        self.initialized = True
        self.changed()
        await asyncio.gather(*(r.run() for r in self.runners.values()))
        self._finish_phase()

    def _previous_restart_counts(self) -> dict[str, int]:
        status = self.pod.get("status") or {}
        entries = (status.get("containerStatuses") or []) + (
            status.get("initContainerStatuses") or []
        )
        return {str(s["name"]): int(s.get("restartCount", 0)) for s in entries}

    def _all_specs(self) -> list[JsonObject]:
        spec = self.pod["spec"]
        return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]

    def _all_runners(self) -> list[ContainerRunner]:
        return [*self.init_runners, *self.runners.values()]

    def _fail(self, reason: str, message: str) -> None:
        log.warning("pod %s failed: %s", self.key, message)
        self.phase, self.reason, self.message = "Failed", reason, message
        for runner in self._all_runners():
            if "waiting" in runner.status.state:
                runner.status.state = {"waiting": {"reason": reason, "message": message}}
        self.changed()

    def _finish_phase(self) -> None:
        codes = [r.last_exit for r in self.runners.values()]
        if codes and all(c is not None for c in codes):
            self.phase = "Succeeded" if all(c == 0 for c in codes) else "Failed"
            self.changed()

    async def _stop_containers(self) -> None:
        grace = self._grace
        log.info("pod %s: stopping containers (grace %.0fs)", self.key, grace)
        await asyncio.gather(*(r.terminate(grace) for r in self._all_runners()))
        if self.phase not in ("Succeeded", "Failed"):
            self._finish_phase()

    async def _finish_deletion(self) -> None:
        """Let the API server remove the pod, but only this pod (a uid precondition)."""
        await self._report_once()
        while True:
            try:
                await self.agent.kube.delete(
                    pod_path(self.namespace, self.name), grace_period_seconds=0, uid=self.uid
                )
                log.info("pod %s: deletion finished", self.key)
                return
            except KubeError as e:
                if e.status in (404, 409):
                    return
                log.warning("pod %s: delete failed (%s); retrying", self.key, e)
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                log.warning("pod %s: delete failed (%s); retrying", self.key, e)
            await asyncio.sleep(1.0)

    # ----------------------------------------------------------------- volumes

    async def materialize_volumes(self) -> None:
        """(Re)write every volume's files; emptyDir and PVC directories keep their content."""
        async with self._volumes_lock:  # containers of one pod start concurrently
            dirs: dict[str, Path] = {}
            for volume in self.pod["spec"].get("volumes") or []:
                dirs[volume["name"]] = await self._materialize(volume)
            self._volume_dirs = dirs

    async def _materialize(self, volume: JsonObject) -> Path:
        name = str(volume["name"])
        if "persistentVolumeClaim" in volume:
            claim = str(volume["persistentVolumeClaim"]["claimName"])
            target = self.agent.workdir / "pvcs" / self.namespace / claim
            target.mkdir(parents=True, exist_ok=True)
            return target
        target = self.dir / "volumes" / name
        target.mkdir(parents=True, exist_ok=True)
        files: dict[str, bytes] = {}
        if "secret" in volume:
            files = await self._secret_files(volume["secret"])
        elif "configMap" in volume:
            files = await self._config_map_files(volume["configMap"])
        elif "downwardAPI" in volume:
            files = self._downward_files(volume["downwardAPI"])
        elif "projected" in volume:
            files = await self._projected_files(volume["projected"])
        elif "emptyDir" not in volume:
            log.info("pod %s: volume %s is an empty directory here", self.key, name)
        for rel, data in files.items():
            _write_atomic(target / rel, data)
        return target

    async def _secret_files(self, source: JsonObject) -> dict[str, bytes]:
        name = str(source.get("secretName") or source.get("name"))
        secret = await self._fetch(secret_path(self.namespace, name), bool(source.get("optional")))
        if secret is None:
            return {}
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        return _select_items(data, source.get("items"), f'secret "{name}"')

    async def _config_map_files(self, source: JsonObject) -> dict[str, bytes]:
        name = str(source["name"])
        cm = await self._fetch(config_map_path(self.namespace, name), bool(source.get("optional")))
        if cm is None:
            return {}
        data = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
        return _select_items(data, source.get("items"), f'configmap "{name}"')

    def _downward_files(self, source: JsonObject) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for item in source.get("items") or []:
            if "fieldRef" in item:
                value = field_ref(self.pod, item["fieldRef"]["fieldPath"], self.agent.node_ip)
            else:
                value = self._resource_value(item.get("resourceFieldRef") or {})
            files[str(item["path"])] = (value or "").encode()
        return files

    async def _projected_files(self, source: JsonObject) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for src in source.get("sources") or []:
            if "serviceAccountToken" in src:
                sat = src["serviceAccountToken"]
                token = await self.service_account_token(sat)
                files[str(sat.get("path", "token"))] = token.encode()
            elif "secret" in src:
                files.update(await self._secret_files(src["secret"]))
            elif "configMap" in src:
                files.update(await self._config_map_files(src["configMap"]))
            elif "downwardAPI" in src:
                files.update(self._downward_files(src["downwardAPI"]))
        return files

    async def service_account_token(self, source: Mapping[str, Any]) -> str:
        sa = str(self.pod["spec"].get("serviceAccountName") or "default")
        audience = source.get("audience")
        try:
            token, _ = await self.agent.kube.request_token(
                self.namespace,
                sa,
                audiences=[str(audience)] if audience else None,
                expiration_seconds=int(source.get("expirationSeconds") or 3607),
                bound_pod=self.pod,
            )
        except KubeError as e:
            raise VolumeError(f"cannot get a token for serviceaccount {sa}: {e}") from e
        return token

    async def _fetch(self, path: str, optional: bool) -> JsonObject | None:
        try:
            return await self.agent.kube.get(path)
        except KubeError as e:
            if e.not_found and optional:
                return None
            if e.not_found:
                raise VolumeError(
                    f"{path.rsplit('/', 2)[-2][:-1]} {path.rsplit('/', 1)[-1]!r} not found"
                ) from e
            raise VolumeError(f"cannot read {path}: {e}") from e

    def _resource_value(self, ref: Mapping[str, Any]) -> str:
        containers = {c["name"]: c for c in self._all_specs()}
        container = containers.get(str(ref.get("containerName", "")), {})
        try:
            return resource_field(container, ref, self.agent.allocatable)
        except ValueError:
            return "0"

    # ----------------------------------------------------------------- processes

    def mounts(self, container: Mapping[str, Any]) -> list[tuple[str, Path]]:
        """``(mountPath, host path)`` for the container's volumeMounts, longest first."""
        table: list[tuple[str, Path]] = []
        for mount in container.get("volumeMounts") or []:
            host = self._volume_dirs.get(str(mount["name"]))
            if host is None:
                continue
            if mount.get("subPath"):
                host = host / str(mount["subPath"])
                if not host.exists():
                    host.mkdir(parents=True, exist_ok=True)
            table.append((str(mount["mountPath"]), host))
        return longest_first(table)

    async def process_config(self, container: JsonObject) -> tuple[list[str], dict[str, str]]:
        """The process's argv and environment: the pod env resolved and expanded, the
        command/args expanded, container paths rewritten to host directories."""
        pod_env = await self.resolve_env(container)
        mounts = self.mounts(container)
        argv = [rewrite_path(expand(a, pod_env), mounts) for a in container_argv(container)]
        argv = map_executable(argv, self.agent.executable)
        env = kept_environment(os.environ)
        env["HOSTNAME"] = self.name
        env.update(await self._mount_environment(mounts))
        env.update({k: rewrite_path(v, mounts) for k, v in pod_env.items()})
        return argv, env

    async def _mount_environment(self, mounts: Sequence[tuple[str, Path]]) -> dict[str, str]:
        extra: dict[str, str] = {}
        for mount_path, host in mounts:
            if mount_path.rstrip("/") == "/tmp":
                extra["TMPDIR"] = str(host)
            if mount_path.rstrip("/") == SA_MOUNT_PATH and (host / "token").exists():
                extra["KUBECONFIG"] = str(self._write_kubeconfig(host))
        return extra

    def _write_kubeconfig(self, sa_dir: Path) -> Path:
        """The pod ServiceAccount's credentials as a kubeconfig: Kopf's in-cluster login reads
        a fixed path that does not exist here, so it falls back to ``KUBECONFIG``."""
        cfg = self.agent.kube.config
        cluster: JsonObject = {"server": cfg.server}
        if cfg.ca_pem:
            cluster["certificate-authority-data"] = base64.b64encode(cfg.ca_pem).decode()
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": cluster}],
            "users": [
                {
                    "name": "serviceaccount",
                    "user": {
                        "token": (sa_dir / "token").read_text().strip(),
                        "tokenFile": str(sa_dir / "token"),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "serviceaccount",
                    "context": {
                        "cluster": "e2e",
                        "user": "serviceaccount",
                        "namespace": self.namespace,
                    },
                }
            ],
            "current-context": "serviceaccount",
        }
        path = self.dir / "kubeconfig"
        _write_atomic(path, yaml.safe_dump(doc).encode(), mode=0o600)
        return path

    async def resolve_env(self, container: Mapping[str, Any]) -> dict[str, str]:
        """The container's environment as the kubelet builds it: envFrom first, then env in
        order, each value ``$(VAR)``-expanded against the variables defined before it."""
        env: dict[str, str] = {}
        cache: dict[str, JsonObject | None] = {}
        for source in container.get("envFrom") or []:
            env.update(await self._env_from(source, cache))
        for entry in container.get("env") or []:
            value = await self._env_value(entry, container, env, cache)
            if value is not None:
                env[str(entry["name"])] = value
        return env

    async def _env_from(
        self, source: Mapping[str, Any], cache: dict[str, JsonObject | None]
    ) -> dict[str, str]:
        prefix = str(source.get("prefix") or "")
        if "secretRef" in source:
            ref = source["secretRef"]
            obj = await self._lookup("secret", str(ref["name"]), bool(ref.get("optional")), cache)
            data = {
                k: base64.b64decode(v).decode() for k, v in ((obj or {}).get("data") or {}).items()
            }
        else:
            ref = source.get("configMapRef") or {}
            obj = await self._lookup(
                "configmap", str(ref["name"]), bool(ref.get("optional")), cache
            )
            data = {k: str(v) for k, v in ((obj or {}).get("data") or {}).items()}
        return {prefix + k: v for k, v in data.items()}

    async def _env_value(
        self,
        entry: Mapping[str, Any],
        container: Mapping[str, Any],
        env: Mapping[str, str],
        cache: dict[str, JsonObject | None],
    ) -> str | None:
        if "valueFrom" not in entry:
            return expand(str(entry.get("value", "")), env)
        source = entry["valueFrom"]
        if "secretKeyRef" in source or "configMapKeyRef" in source:
            return await self._key_ref(source, cache)
        if "fieldRef" in source:
            return field_ref(self.pod, str(source["fieldRef"]["fieldPath"]), self.agent.node_ip)
        if "resourceFieldRef" in source:
            ref = dict(source["resourceFieldRef"])
            ref.setdefault("containerName", container.get("name"))
            return self._resource_value(ref)
        return None

    async def _key_ref(
        self, source: Mapping[str, Any], cache: dict[str, JsonObject | None]
    ) -> str | None:
        kind = "secret" if "secretKeyRef" in source else "configmap"
        ref = source["secretKeyRef"] if kind == "secret" else source["configMapKeyRef"]
        name, key, optional = str(ref["name"]), str(ref["key"]), bool(ref.get("optional"))
        obj = await self._lookup(kind, name, optional, cache)
        if obj is None:
            return None
        if kind == "secret":
            raw = (obj.get("data") or {}).get(key)
            value = None if raw is None else base64.b64decode(raw).decode()
        else:
            value = (obj.get("data") or {}).get(key)
        if value is None and not optional:
            raise ConfigError(
                f"couldn't find key {key} in {kind.capitalize()} {self.namespace}/{name}"
            )
        return value

    async def _lookup(
        self, kind: str, name: str, optional: bool, cache: dict[str, JsonObject | None]
    ) -> JsonObject | None:
        key = f"{kind}/{name}"
        if key not in cache:
            path = (
                secret_path(self.namespace, name)
                if kind == "secret"
                else config_map_path(self.namespace, name)
            )
            try:
                cache[key] = await self.agent.kube.get(path)
            except KubeError as e:
                if not e.not_found:
                    raise ConfigError(f"cannot read {kind} {name}: {e}") from e
                cache[key] = None
        if cache[key] is None and not optional:
            raise ConfigError(f'{kind} "{name}" not found')
        return cache[key]

    # ----------------------------------------------------------------- status

    async def _report_loop(self) -> None:
        while not self._gone:
            await self._changed.wait()
            await asyncio.sleep(0.05)  # coalesce bursts of changes into one patch
            self._changed.clear()
            if not await self._report_once():
                self._changed.set()
                await asyncio.sleep(1.0)

    async def _report_once(self) -> bool:
        """Patch the pod's status subresource; False when it should be retried."""
        if self._gone or self._frozen:
            return True
        status = self.build_status()
        if status == self._last_report:
            return True
        try:
            await self.agent.kube.patch(
                pod_path(self.namespace, self.name, "status"),
                {"metadata": {"uid": self.uid}, "status": status},
                patch_type="strategic",
            )
        except KubeError as e:
            if e.not_found or e.conflict:
                return True  # gone (or a successor with the same name): nothing to report
            log.warning("pod %s: status update failed: %s", self.key, e)
            return False
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.warning("pod %s: status update failed: %s", self.key, e)
            return False
        self._last_report = status
        return True

    def build_status(self) -> JsonObject:
        ip = self.agent.node_ip
        mains = [r.status for r in self.runners.values()]
        phase = self.phase
        if phase == "Pending" and any(
            "running" in s.state or s.last_state or "terminated" in s.state for s in mains
        ):
            phase = "Running"
        status: JsonObject = {
            "phase": phase,
            "hostIP": ip,
            "hostIPs": [{"ip": ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.start_time,
            "conditions": self._build_conditions(phase, mains),
            "containerStatuses": [s.to_json() for s in mains] or self._pending_statuses(False),
        }
        if self.pod["spec"].get("initContainers"):
            inits = [r.status.to_json() for r in self.init_runners]
            status["initContainerStatuses"] = inits or self._pending_statuses(True)
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message
        return status

    def _pending_statuses(self, init: bool) -> list[JsonObject]:
        specs = self.pod["spec"].get("initContainers" if init else "containers") or []
        return [ContainerStatus(c["name"], str(c.get("image", ""))).to_json() for c in specs]

    def _build_conditions(self, phase: str, mains: list[ContainerStatus]) -> list[JsonObject]:
        done = phase in ("Succeeded", "Failed")
        all_ready = bool(mains) and all(s.ready for s in mains) and not done
        gates = [g["conditionType"] for g in self.pod["spec"].get("readinessGates") or []]
        current = {c["type"]: c for c in (self.pod.get("status") or {}).get("conditions") or []}
        gates_ok = all(current.get(g, {}).get("status") == "True" for g in gates)
        wanted = {
            "PodScheduled": (True, None),
            "Initialized": (
                self.initialized,
                None if self.initialized else "ContainersNotInitialized",
            ),
            "ContainersReady": (all_ready, None if all_ready else "ContainersNotReady"),
            "Ready": (
                all_ready and gates_ok,
                None if all_ready and gates_ok else "ContainersNotReady",
            ),
        }
        if done:
            wanted["ContainersReady"] = (False, "PodCompleted")
            wanted["Ready"] = (False, "PodCompleted")
        return [self._condition(t, ok, reason) for t, (ok, reason) in wanted.items()]

    def _condition(self, kind: str, ok: bool, reason: str | None) -> JsonObject:
        status = "True" if ok else "False"
        before = self._conditions.get(kind)
        if before is None or before[0] != status:
            self._conditions[kind] = (status, now_iso())
        condition: JsonObject = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": self._conditions[kind][1],
        }
        if reason:
            condition["reason"] = reason
        return condition


def _select_items(data: Mapping[str, bytes], items: Any, what: str) -> dict[str, bytes]:
    if not items:
        return dict(data)
    out: dict[str, bytes] = {}
    for item in items:
        key = str(item["key"])
        if key not in data:
            raise VolumeError(f"{what} has no key {key!r}")
        out[str(item.get("path") or key)] = data[key]
    return out


def _write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


# =============================================================================== node agent


class NodeAgent:
    """The node: registration, heartbeats, binding and one `PodWorker` per pod on it."""

    def __init__(
        self,
        kube: KubeClient,
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
            node = await self.kube.create(node_path(), body)
            log.info("registered node %s", self.node_name)
        except KubeError as e:
            if not e.conflict:
                raise
            node = await self.kube.patch(
                node_path(self.node_name), {"metadata": {"labels": self.labels}}
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
        await self.kube.patch(
            node_path(self.node_name, "status"), {"status": status}, patch_type="strategic"
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
        path = resource_path("coordination.k8s.io/v1", "leases", LEASE_NAMESPACE, self.node_name)
        spec = {
            "holderIdentity": self.node_name,
            "leaseDurationSeconds": LEASE_DURATION_S,
            "renewTime": now_micro(),
        }
        try:
            await self.kube.patch(path, {"spec": spec})
        except KubeError as e:
            if not e.not_found:
                raise
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
            await self.kube.create(
                resource_path("coordination.k8s.io/v1", "leases", LEASE_NAMESPACE), lease
            )

    # ----------------------------------------------------------------- pods

    async def _watch_pods(self) -> None:
        while True:
            try:
                async for kind, pod in self.kube.watch(pod_path()):
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
                lambda: self.kube.bind_pod(meta["namespace"], meta["name"], self.node_name, uid),
                give_up=lambda e: isinstance(e, KubeError) and e.status in (404, 409, 422),
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


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _phase_done(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


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


# =============================================================================== CLI


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.node_agent",
        description="Stand in for the kubelet: run pods as local staticfleet processes.",
    )
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--node-name", default="e2e-node")
    parser.add_argument("--node-ip", default=None, help="default: the first non-loopback IPv4")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with KubeClient.from_kubeconfig(args.kubeconfig) as kube:
        agent = NodeAgent(kube, args.workdir, node_name=args.node_name, node_ip=args.node_ip)
        await agent.run(stop)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(amain(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
