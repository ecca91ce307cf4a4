"""Executors as static members: kill one executor JVM of a `local-cluster[2,1,1024]` job; Spark
reruns its task on a replacement executor, which takes the freed slot and rejoins under the
same instance id, with no rebalance and no partition owned twice.

Locally the executor's identity cannot come from a pod: every executor gets the same
`spark.executorEnv.*`, so the slot is derived as the webhook would assign it (the lowest slot
not held by a live executor, a flock per slot; pipeline/executor_members.py).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.executor_members import EXECUTOR_BACKEND
from staticfleet.demo import ownership as om
from staticfleet.demo.admin import AdminClient
from staticfleet.demo.fleet import read_rows
from staticfleet.processes import wait_ready_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GROUP = "spark-members"
TOPIC = "events"
PARTITIONS = 8
ROOT = Path(__file__).resolve().parents[2]


def _wait(predicate: Callable[[], object], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("STATICFLEET_")}


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


def _executor_jvms(job_pid: int) -> dict[str, int]:
    """executor id -> pid of the CoarseGrainedExecutorBackend JVMs started by our job (the
    local-cluster workers run in the driver JVM, the executors are its children)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parts = args.split("\0")
        if (
            any(EXECUTOR_BACKEND in p for p in parts)
            and "--executor-id" in parts
            and _descends_from(int(entry), job_pid)
        ):
            found[parts[parts.index("--executor-id") + 1]] = int(entry)
    return found


def _logs(slot_dir: Path) -> dict[Path, list[dict[str, Any]]]:
    return {path: read_rows(path) for path in sorted(slot_dir.glob("*.jsonl"))}


def _assigned(rows: list[dict[str, Any]]) -> bool:
    return any(row.get("event") == "assigned" and row.get("partitions") for row in rows)


@pytest.mark.timeout(600)
def test_killed_executor_rejoins_as_the_same_static_member(tmp_path: Path) -> None:
    admin_token, member_token = secrets.token_hex(16), secrets.token_hex(16)
    ready = tmp_path / "coordinator.port"
    coordinator_env = _clean_env()
    coordinator_env["STATICFLEET_ADMIN_TOKEN"] = admin_token
    coordinator_env["STATICFLEET_MEMBER_TOKEN"] = f"{GROUP}:{member_token}"
    coordinator_log = (tmp_path / "coordinator.log").open("wb")
    coordinator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "staticfleet.cli",
            "coordinator",
            "serve",
            "--store",
            f"sqlite:///{tmp_path / 'store.db'}",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--initial-rebalance-delay-ms",
            "3000",
        ],
        env=coordinator_env,
        stdout=coordinator_log,
        stderr=coordinator_log,
        start_new_session=True,
    )
    job: subprocess.Popen[bytes] | None = None
    slot_dir = tmp_path / "slots"
    try:
        url = f"http://127.0.0.1:{wait_ready_port(ready, coordinator, 30, 'the coordinator')}"
        admin = AdminClient(url, admin_token)
        admin.set_topics({TOPIC: PARTITIONS})

        member_env = {
            "STATICFLEET_COORDINATOR_URL": url,
            "STATICFLEET_GROUP_ID": GROUP,
            "STATICFLEET_TOPICS": TOPIC,
            "STATICFLEET_TOKEN": member_token,
            "STATICFLEET_SESSION_TIMEOUT_MS": "60000",
            "STATICFLEET_REBALANCE_TIMEOUT_MS": "30000",
            "STATICFLEET_HEARTBEAT_INTERVAL_MS": "1000",
        }
        command = [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local-cluster[2,1,1024]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
        ]
        for name, value in member_env.items():
            command += ["--conf", f"spark.executorEnv.{name}={value}"]
        command += [
            str(ROOT / "pipeline" / "executor_members.py"),
            "--executors",
            "2",
            "--slot-dir",
            str(slot_dir),
            "--duration-s",
            "240",
            "--output",
            str(tmp_path / "results.json"),
        ]
        job_env = {**_clean_env(), "PYSPARK_PYTHON": sys.executable}
        job_log = (tmp_path / "job.log").open("wb")
        job = subprocess.Popen(
            command, env=job_env, stdout=job_log, stderr=job_log, start_new_session=True
        )

        def both_stable() -> bool:
            described = admin.describe(GROUP)
            logs = _logs(slot_dir)
            return (
                described.get("group_state") == "Stable"
                and len(described.get("members") or []) == 2
                and sum(1 for rows in logs.values() if _assigned(rows)) == 2
            )

        _wait(both_stable, 150, "two executor members in a Stable group")
        generation = admin.describe(GROUP)["generation_id"]
        before = _logs(slot_dir)
        victim_log = next(p for p in before if p.name.startswith("executor-0."))
        victim_executor = victim_log.name.split(".")[1].removeprefix("exec-")
        jvms = _executor_jvms(job.pid)
        assert victim_executor in jvms, (victim_executor, jvms)
        kill_ms = time.time_ns() // 1_000_000
        os.kill(jvms[victim_executor], signal.SIGKILL)

        def replacement() -> Path | None:
            return next(
                (
                    path
                    for path, rows in _logs(slot_dir).items()
                    if path not in before and _assigned(rows)
                ),
                None,
            )

        _wait(replacement, 150, "the task rerun on a replacement executor")
        new_log = replacement()
        assert new_log is not None
        time.sleep(2)  # a few heartbeats and commits in the same generation
        described = admin.describe(GROUP)
        journal = admin.journal(GROUP)
        (slot_dir / "stop").touch()
        assert job.wait(timeout=90) == 0, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        coordinator.send_signal(signal.SIGTERM)
        coordinator.wait(timeout=20)
        coordinator_log.close()

    # The same instance id came back on another executor, and the generation did not move.
    assert new_log.name.startswith("executor-0.")
    assert new_log.name.split(".")[1] != f"exec-{victim_executor}"
    assert described["generation_id"] == generation
    assert described["group_state"] == "Stable"
    assert sorted(m["group_instance_id"] for m in described["members"]) == [
        "executor-0",
        "executor-1",
    ]
    after_kill = [row for row in journal if int(row["ts_ms"]) >= kill_ms]
    assert not [row for row in after_kill if row["kind"] == "rebalance_started"]
    assert any(
        row["kind"] == "static_rejoin" and row["group_instance_id"] == "executor-0"
        for row in after_kill
    )

    # No partition owned by two processes: the killed one held nothing after its death.
    logs = []
    for path, rows in _logs(slot_dir).items():
        rows = list(rows)
        if path == victim_log:
            rows.append({"event": "stopped", "ts_ms": kill_ms})
        logs.append(om.MemberLog(owner=path.name.split(".")[0], process=path.name, rows=rows))
    held = om.all_holdings(logs)
    end = max(int(row["ts_ms"]) for log in logs for row in log.rows)
    assert om.ownership_overlaps(held, end) == []
    assert om.max_simultaneous_owners(held, end) == 1
    replacement_rows = read_rows(new_log)
    assert any(row.get("event") == "commit" for row in replacement_rows)
