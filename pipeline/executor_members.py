"""Spark executors as static fleet members (docs/spark.md, "Executors as members").

    spark-submit --master local-cluster[2,1,1024] pipeline/executor_members.py \
        --executors 2 --slot-dir DIR --output results.json
    staticfleet spark members --executors 2 --slot-dir DIR ...

One long-running task per executor (`mapPartitions` over N partitions, N = executors, one
core each). Each task is one `staticfleet member run` (the same code: `run_member`), over
HTTP, configured by the `STATICFLEET_*` environment (`spark.executorEnv.*` passes the
coordinator URL, group, topics, token). Its `group.instance.id`:

- `STATICFLEET_INSTANCE_ID` if the environment has one (on Kubernetes the operator's
  webhook injects the executor pod's slot);
- else a slot derived here the way the webhook assigns one: the lowest slot not held by a
  live executor. A task holds its slot with an exclusive `flock` on `SLOT_DIR/slot-<n>.lock`
  for its whole life; the kernel drops the lock when the process dies, so the task Spark
  reruns on a replacement executor takes the freed slot and rejoins as the same static
  member (no rebalance). Locally every executor gets the same `spark.executorEnv.*`, so the
  slot cannot come from the environment; the lock directory must be shared by the executors
  (one machine here; a shared volume elsewhere).

A task stops when `SLOT_DIR/stop` exists or after `--duration-s`; it also stops at once when
its executor JVM is gone (a Python worker outliving its executor must not keep the slot).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a file by spark-submit: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.client import env

if TYPE_CHECKING:
    from staticfleet.member.settings import Settings

EXECUTOR_BACKEND = "CoarseGrainedExecutorBackend"
# The Kubernetes scheduler's executor JVM (its class extends the one above).
KUBERNETES_EXECUTOR_BACKEND = "KubernetesExecutorBackend"


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def executor_process() -> tuple[str, int]:
    """(executor id, executor JVM pid) of the executor running this Python worker: from
    SPARK_EXECUTOR_ID if set, else from the ancestor JVM's `--executor-id` argument
    ("driver", 0 when there is none: local mode)."""
    pid = os.getpid()
    while pid > 1:
        args = _cmdline(pid)
        backends = (EXECUTOR_BACKEND, KUBERNETES_EXECUTOR_BACKEND)
        if any(b in arg for arg in args for b in backends) and "--executor-id" in args:
            return args[args.index("--executor-id") + 1], pid
        pid = _parent(pid)
    return os.environ.get("SPARK_EXECUTOR_ID", "driver"), 0


def claim_slot(slot_dir: Path, slots: int, timeout_s: float = 120.0) -> tuple[int, int]:
    """The lowest free slot, held by an exclusive flock: (slot, file descriptor)."""
    slot_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        for slot in range(slots):
            fd = os.open(slot_dir / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return slot, fd
        if time.monotonic() > deadline:
            raise RuntimeError(f"no free slot among {slots} in {slot_dir}")
        time.sleep(0.2)


def _member_settings(environ: dict[str, str]) -> Settings:
    from staticfleet.member.settings import Overrides, settings_from

    return settings_from(Overrides(commit_interval_ms=500), environ)


async def _run(environ: dict[str, str], stop_file: Path, duration_s: float) -> int:
    from staticfleet.member.runtime import run_member

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    done = threading.Event()

    def watch() -> None:  # a thread: the stop file is polled off the event loop
        deadline = time.monotonic() + duration_s
        while not done.wait(0.2):
            if stop_file.exists() or time.monotonic() >= deadline:
                loop.call_soon_threadsafe(stop.set)
                return

    threading.Thread(target=watch, daemon=True).start()
    try:
        return await run_member(_member_settings(environ), stop=stop)
    finally:
        done.set()


def _die_with(executor_pid: int) -> None:
    """Exit this worker as soon as its executor JVM is gone, like a pod's containers."""

    def watch() -> None:
        while True:
            try:
                os.kill(executor_pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()


def member_task(
    slot_dir: str, slots: int, duration_s: float, prefix: str
) -> Any:  # a mapPartitions function
    def task(_rows: Iterator[Any]) -> Iterator[str]:
        directory = Path(slot_dir)
        executor_id, executor_pid = executor_process()
        if executor_pid:
            _die_with(executor_pid)
        environ = dict(os.environ)
        given = env.text(environ, env.INSTANCE_ID)
        fd = None
        if given is None:
            slot, fd = claim_slot(directory, slots)
            instance_id = f"{prefix}-{slot}"
        else:
            instance_id = given
        started_ms = time.time_ns() // 1_000_000
        log = directory / f"{instance_id}.exec-{executor_id}.{os.getpid()}.jsonl"
        environ[env.INSTANCE_ID] = instance_id
        environ[env.EVENT_LOG] = str(log)
        try:
            code = asyncio.run(_run(environ, directory / "stop", duration_s))
        finally:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        yield json.dumps(
            {
                "instance_id": instance_id,
                "executor_id": executor_id,
                "pid": os.getpid(),
                "exit_code": code,
                "started_ms": started_ms,
                "event_log": str(log),
            }
        )

    return task


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("staticfleet-executor-members")
    if args.master:
        builder = builder.master(args.master)
    spark = (
        builder.config("spark.ui.showConsoleProgress", "false")
        .config("spark.speculation", "false")
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "60s")
        .getOrCreate()
    )
    try:
        context = spark.sparkContext
        task = member_task(str(args.slot_dir), args.executors, args.duration_s, args.prefix)
        rows = context.parallelize(range(args.executors), args.executors)
        return [json.loads(line) for line in rows.mapPartitions(task).collect()]
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    from pipeline import options

    args = options.members_parser().parse_args(argv)
    return run_args(args)


def run_args(args: argparse.Namespace) -> int:
    from pipeline import options

    if code := options.report_problems("members", options.members_problems(args)):
        return code
    results = run(args)
    text = json.dumps(results, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text)
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
