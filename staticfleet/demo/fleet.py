"""The processes of the demo: one coordinator (`staticfleet coordinator serve`) and the
member processes (`staticfleet member run`) of one group at a time.

Every child runs in its own session, so a Ctrl-C in the terminal reaches only the demo,
which then stops its children in order (members first, coordinator last). Secrets travel in
the environment, never on a command line (`ps` shows those).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from coordinator.client import env as member_env
from staticfleet.demo.ownership import MemberLog
from staticfleet.demo.settings import DemoSettings
from staticfleet.processes import NotReady, wait_ready_port


class FleetError(RuntimeError):
    """A process did not start or stop as expected."""


def now_ms() -> int:
    """Wall-clock ms, the clock of the journal and of the member event logs."""
    return time.time_ns() // 1_000_000


def staticfleet_command(*args: str) -> list[str]:
    # The interpreter running the demo, so the children use the same installation.
    return [sys.executable, "-m", "staticfleet.cli", *args]


def clean_environment() -> dict[str, str]:
    # A STATICFLEET_* variable inherited from the caller's shell must not configure a child
    # (the server, for one, reads STATICFLEET_GROUP_ID and STATICFLEET_MEMBER_TOKEN).
    return {key: value for key, value in os.environ.items() if not key.startswith("STATICFLEET_")}


def stop_process(process: subprocess.Popen[bytes], sig: signal.Signals, timeout_s: float) -> int:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def read_rows(path: Path) -> list[dict[str, Any]]:
    """JSON lines; a line cut short by a killed writer is skipped."""
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8") as stream:
        for line in stream:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


class CoordinatorProcess:
    """`staticfleet coordinator serve` on a SQLite file; can be killed and restarted on the
    same file and port (the members keep their URL)."""

    def __init__(
        self,
        *,
        settings: DemoSettings,
        db_path: Path,
        run_dir: Path,
        log_path: Path,
        admin_token: str,
        member_tokens: Mapping[str, str],
        host: str = "127.0.0.1",
    ) -> None:
        self._settings = settings
        self.host = host
        self.db_path = db_path
        self._ready_file = run_dir / "coordinator.port"
        self._log_path = log_path
        self.admin_token = admin_token
        self._member_tokens = dict(member_tokens)
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.port = 0
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, timeout_s: float = 30.0) -> None:
        """Start (port 0 the first time, the same port after a kill) and wait until it
        listens."""
        if self._process is not None and self._process.poll() is None:
            raise FleetError("the coordinator is already running")
        # A ready file left by a killed process would point at a stale state.
        self._ready_file.unlink(missing_ok=True)
        environment = clean_environment()
        environment["STATICFLEET_ADMIN_TOKEN"] = self.admin_token
        environment["STATICFLEET_MEMBER_TOKEN"] = ",".join(
            f"{group}:{token}" for group, token in self._member_tokens.items()
        )
        settings = self._settings
        self._log = self._log_path.open("ab")
        self._process = subprocess.Popen(
            staticfleet_command(
                "coordinator",
                "serve",
                "--store",
                f"sqlite:///{self.db_path.resolve()}",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--ready-file",
                str(self._ready_file),
                "--min-session-timeout-ms",
                str(settings.min_session_timeout_ms),
                "--initial-rebalance-delay-ms",
                str(settings.initial_rebalance_delay_ms),
                "--log-level",
                "WARNING",
                # Off loopback only on a test's private network (the soak's bridge), with
                # throwaway tokens.
                *([] if self.host == "127.0.0.1" else ["--insecure-http"]),
            ),
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        try:
            self.port = wait_ready_port(
                self._ready_file, self._process, timeout_s, "the coordinator"
            )
        except NotReady as error:
            raise FleetError(f"{error}; see {self._log_path}") from None

    def kill(self) -> None:
        """SIGKILL: no flush, no goodbye — the crash scenario."""
        if self._process is None:
            return
        stop_process(self._process, signal.SIGKILL, 10.0)
        self.restarts += 1
        self._close_log()

    def stop(self) -> int | None:
        if self._process is None:
            return None
        code = stop_process(self._process, signal.SIGTERM, 15.0)
        self._close_log()
        return code

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass
class MemberProcess:
    slot: str
    incarnation: int
    instance_id: str | None
    protocol: str
    log_path: Path
    popen: subprocess.Popen[bytes]
    stderr: IO[bytes]
    started_ms: int
    exited_ms: int | None = None
    exit_code: int | None = None
    # Set: a hot standby process (`member run --standby-id`), a member only once promoted.
    standby_id: str | None = None

    @property
    def process(self) -> str:
        return f"{self.slot}#{self.incarnation}"

    @property
    def alive(self) -> bool:
        return self.exit_code is None and self.popen.poll() is None

    def rows(self) -> list[dict[str, Any]]:
        return read_rows(self.log_path)

    def member_log(self) -> MemberLog:
        return MemberLog(owner=self.slot, process=self.process, rows=self.rows())

    @property
    def waiting_standby(self) -> bool:
        """A standby not promoted yet: a live process that is not a group member."""
        return self.standby_id is not None and not any(
            row.get("event") == "promoted" for row in self.rows()
        )


def slot_name(index: int) -> str:
    return f"member-{index}"


@dataclass
class Fleet:
    """The member processes of one group."""

    settings: DemoSettings
    coordinator_url: str
    group_id: str
    token: str
    log_dir: Path
    source_epoch_ms: int
    # kafka://host:port: the members read real topics there (else the synthetic source).
    source_url: str | None = None
    # A Kafka client settings file for a secured listener (STATICFLEET_KAFKA_CONFIG).
    kafka_config: Path | None = None
    processes: list[MemberProcess] = field(default_factory=list)
    # Put before a slot's command, e.g. `ip netns exec <namespace>` (the soak's network);
    # it must exec the command, so the process's pid is the member's.
    command_prefix: Callable[[str], list[str]] | None = None

    def start(self, index: int, *, static: bool, protocol: str) -> MemberProcess:
        return self._start(slot_name(index), static=static, protocol=protocol)

    def start_standby(self, name: str, *, protocol: str) -> MemberProcess:
        """A hot standby process: holds nothing until the coordinator promotes it."""
        return self._start(name, static=False, protocol=protocol, standby_id=name)

    def _start(
        self, slot: str, *, static: bool, protocol: str, standby_id: str | None = None
    ) -> MemberProcess:
        if self.live(slot) is not None:
            raise FleetError(f"{slot} is already running")
        incarnation = sum(1 for p in self.processes if p.slot == slot) + 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{slot}.{incarnation}.jsonl"
        stderr = (self.log_dir / f"{slot}.{incarnation}.stderr").open("wb")
        settings = self.settings
        environment = clean_environment()
        environment.update(
            {
                member_env.COORDINATOR_URL: self.coordinator_url,
                member_env.GROUP_ID: self.group_id,
                # The instance id is the slot: the operator's `<prefix>-<slot>`.
                member_env.INSTANCE_ID: slot if static else "",
                member_env.TOPICS: settings.topic,
                member_env.REBALANCE_PROTOCOL: protocol,
                member_env.SESSION_TIMEOUT_MS: str(settings.session_timeout_ms),
                member_env.REBALANCE_TIMEOUT_MS: str(settings.rebalance_timeout_ms),
                member_env.HEARTBEAT_INTERVAL_MS: str(settings.heartbeat_interval_ms),
                member_env.TOKEN: self.token,
                member_env.EVENT_LOG: str(log_path),
            }
        )
        if standby_id is not None:
            environment[member_env.STANDBY_ID] = standby_id
        if self.source_url is not None:
            environment[member_env.SOURCE] = self.source_url
        if self.kafka_config is not None:
            environment[member_env.KAFKA_CONFIG] = str(self.kafka_config)
        popen = subprocess.Popen(
            (self.command_prefix(slot) if self.command_prefix else [])
            + staticfleet_command(
                "member",
                "run",
                # No --client-id: like pods of one Deployment, dynamic members get ids that
                # sort randomly, so an eager `range` rebalance reshuffles partitions as it
                # would in production. The logs tell the demo which id is which slot.
                "--commit-interval-ms",
                str(settings.commit_interval_ms),
                "--records-per-second",
                str(settings.records_per_second),
                "--source-epoch-ms",
                str(self.source_epoch_ms),
            ),
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
        member = MemberProcess(
            slot=slot,
            incarnation=incarnation,
            instance_id=slot if static else None,
            protocol=protocol,
            log_path=log_path,
            popen=popen,
            stderr=stderr,
            started_ms=now_ms(),
            standby_id=standby_id,
        )
        self.processes.append(member)
        return member

    def live(self, slot: str) -> MemberProcess | None:
        for member in self.processes:
            if member.slot == slot and member.alive:
                return member
        return None

    def live_processes(self) -> list[MemberProcess]:
        return [member for member in self.processes if member.alive]

    def stop(self, slots: Iterable[str], timeout_s: float = 20.0) -> int:
        """SIGTERM the slots' processes together; returns when the last one has exited
        (wall-clock ms). A process that does not exit in time is killed."""
        members = [m for m in (self.live(slot) for slot in slots) if m is not None]
        for member in members:
            member.popen.send_signal(signal.SIGTERM)
        for member in members:
            try:
                member.exit_code = member.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                member.popen.kill()
                member.exit_code = member.popen.wait()
            member.exited_ms = now_ms()
            member.stderr.close()
        return max((m.exited_ms or 0 for m in members), default=now_ms())

    def stop_all(self) -> None:
        self.stop([member.slot for member in self.live_processes()])

    def logs(self) -> list[MemberLog]:
        return [member.member_log() for member in self.processes]

    def failures(self) -> list[str]:
        """Processes that exited with an error (not from our SIGTERM), with their stderr."""
        problems = []
        for member in self.processes:
            code = member.popen.poll()
            if code not in (None, 0):
                tail = (self.log_dir / f"{member.slot}.{member.incarnation}.stderr").read_text(
                    errors="replace"
                )[-600:]
                problems.append(f"{member.process} exited {code}: {tail.strip()}")
        return problems
