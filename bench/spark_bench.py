"""The journal analytics at scale: generate a synthetic journal (10 million events; 200k with
--quick), convert it once to the columnar journal (`spark-submit pipeline/columnar.py`),
then run `spark-submit pipeline/analytics.py` over the Parquet; record each step's wall
time and the peak memory of its whole process tree (the driver JVM, which in local mode
also runs the executor threads, and the Python driver/workers).

Not part of `make test`; `make bench` runs it (bench/results/spark.json).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pipeline import generate

ROOT = Path(__file__).resolve().parent.parent
MASTER = "local[2]"
DRIVER_MEMORY = "6g"
SHUFFLE_PARTITIONS = 16


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(root: int) -> tuple[int, int]:
    """(total RSS of root and its descendants, the largest single process's RSS), KiB."""
    children = _children()
    stack, total, largest = [root], 0, 0
    while stack:
        pid = stack.pop()
        rss = _rss_kib(pid)
        total += rss
        largest = max(largest, rss)
        stack.extend(children.get(pid, []))
    return total, largest


def measure(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    peak = {"tree": 0, "largest": 0}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )

    def poll() -> None:
        while process.poll() is None:
            total, largest = tree_rss_kib(process.pid)
            peak["tree"] = max(peak["tree"], total)
            peak["largest"] = max(peak["largest"], largest)
            time.sleep(0.25)

    watcher = threading.Thread(target=poll, daemon=True)
    clock = time.perf_counter()
    watcher.start()
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - clock
    watcher.join()
    if process.returncode != 0:
        raise RuntimeError(f"spark-submit failed ({process.returncode}): {stderr[-3000:]}")
    return {
        "wall_seconds": round(wall, 3),
        "peak_tree_rss_mib": round(peak["tree"] / 1024, 1),
        "peak_largest_process_rss_mib": round(peak["largest"] / 1024, 1),
        "stdout_tail": stdout[-1500:],
    }


def run(quick: bool) -> dict[str, Any]:
    events = 200_000 if quick else 10_000_000
    groups = 40 if quick else 2000
    workdir = Path(tempfile.mkdtemp(prefix="staticfleet-spark-bench-"))
    try:
        journal = workdir / "journal"
        generated = generate.generate(journal, events, groups=groups, shards=16, workers=2)
        submit = Path(sys.executable).parent / "spark-submit"
        spark_args = [
            str(submit),
            "--master",
            MASTER,
            "--driver-memory",
            DRIVER_MEMORY,
            "--conf",
            "spark.ui.showConsoleProgress=false",
            "--conf",
            f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
        ]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        columnar = workdir / "columnar"
        convert_command = [
            *spark_args,
            str(ROOT / "pipeline" / "columnar.py"),
            "--journal",
            str(journal),
            "--output",
            str(columnar),
        ]
        analytics_command = [
            *spark_args,
            str(ROOT / "pipeline" / "analytics.py"),
            "--journal",
            str(columnar),
            "--output",
            str(workdir / "out"),
            "--shuffle-partitions",
            str(SHUFFLE_PARTITIONS),
        ]
        load_before = os.getloadavg()
        converted = measure(convert_command, env)
        converted["parquet_bytes"] = sum(f.stat().st_size for f in columnar.glob("*.parquet"))
        measured = measure(analytics_command, env)
        measured["load_average_1m_before_after"] = [
            round(load_before[0], 2),
            round(os.getloadavg()[0], 2),
        ]
        outputs = {
            path.name: sum(f.stat().st_size for f in path.rglob("*.parquet"))
            for path in (workdir / "out").iterdir()
            if path.is_dir()
        }
        return {
            "journal": generated,
            "conversion_to_parquet": converted,
            "analytics": measured,
            "output_parquet_bytes": outputs,
            "spark": {
                "master": MASTER,
                "driver_memory": DRIVER_MEMORY,
                "executor_memory": "in local mode the executors are threads of the driver JVM",
                "shuffle_partitions": SHUFFLE_PARTITIONS,
            },
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
