"""One container as a local process: its reported status, restarts with backoff, probes
and stopping with a grace period."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from e2e.kube_api import JsonObject
from e2e.node_agent.errors import ConfigError, VolumeError
from e2e.node_agent.spec import exit_code_of, now_iso, now_micro

if TYPE_CHECKING:
    from e2e.node_agent.pod import PodWorker

log = logging.getLogger("e2e.node_agent")

CONFIG_RETRY_S = 2.0
BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 10.0
# A run this long resets the crash backoff (the kubelet uses 10 minutes; tests are short).
BACKOFF_RESET_AFTER_S = 30.0


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
