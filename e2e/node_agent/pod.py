"""One pod on the node: its containers' lifecycle, environment, process configuration,
status reports and termination."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import yaml

from e2e.kube_api import RAW, STRATEGIC_PATCH, JsonObject, KubeError, answer
from e2e.node_agent.container import ContainerRunner, ContainerStatus, _signal_group
from e2e.node_agent.errors import ConfigError
from e2e.node_agent.spec import (
    SA_MOUNT_PATH,
    _phase_done,
    container_argv,
    expand,
    field_ref,
    image_runnable,
    kept_environment,
    longest_first,
    map_executable,
    now_iso,
    resource_field,
    rewrite_path,
    unrunnable_message,
)
from e2e.node_agent.volumes import PodVolumes, _write_atomic
from staticfleet_operator.kube import Conflict, NotFound

if TYPE_CHECKING:
    from e2e.node_agent.agent import NodeAgent

log = logging.getLogger("e2e.node_agent")

VANISHED_GRACE_S = 2.0


class PodWorker(PodVolumes):
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
                options = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
                await answer(
                    self.agent.kube.core.delete_namespaced_pod(
                        self.name, self.namespace, body=options, **RAW
                    )
                )
                log.info("pod %s: deletion finished", self.key)
                return
            except (NotFound, Conflict):
                return
            except KubeError as e:
                log.warning("pod %s: delete failed (%s); retrying", self.key, e)
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                log.warning("pod %s: delete failed (%s); retrying", self.key, e)
            await asyncio.sleep(1.0)

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
        cluster: JsonObject = {"server": self.agent.kube.server}
        ca_pem = self.agent.kube.ca_pem()
        if ca_pem:
            cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
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
            core = self.agent.kube.core
            read = (
                core.read_namespaced_secret if kind == "secret" else core.read_namespaced_config_map
            )
            try:
                cache[key] = await answer(read(name, self.namespace, **RAW))
            except NotFound:
                cache[key] = None
            except KubeError as e:
                raise ConfigError(f"cannot read {kind} {name}: {e}") from e
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
            await answer(
                self.agent.kube.core.patch_namespaced_pod_status(
                    self.name,
                    self.namespace,
                    {"metadata": {"uid": self.uid}, "status": status},
                    _content_type=STRATEGIC_PATCH,
                    **RAW,
                )
            )
        except (NotFound, Conflict):
            return True  # gone (or a successor with the same name): nothing to report
        except KubeError as e:
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
