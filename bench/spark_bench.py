"""The journal analytics at scale, on local[2]:

- 10 million events: generate a synthetic journal as JSON lines, convert it once to the
  columnar journal (`spark-submit pipeline/columnar.py`), run `spark-submit
  pipeline/analytics.py` over the Parquet;
- 100 million events: generate the columnar journal directly (`python -m pipeline.generate
  --format parquet`: 23.6 GB of JSON would be written only to be converted), run the
  analytics over it.

(--quick: 100k JSON events and 200k columnar ones.) Each step records its wall time
and the peak memory of its whole process tree (the driver JVM, which in local mode also
runs the executor threads, and the Python workers). Not part of `make test`; `make bench`
runs it (bench/results/spark.json).
"""

from __future__ import annotations

import os
import resource
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
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    clock = time.perf_counter()
    watcher.start()
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - clock
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    watcher.join()
    if process.returncode != 0:
        raise RuntimeError(f"spark-submit failed ({process.returncode}): {stderr[-3000:]}")
    return {
        "wall_seconds": round(wall, 3),
        # CPU of the finished process tree (user + system): on a shared machine, wall time
        # well above cpu/2 means the step waited for the cores.
        "cpu_seconds": round(
            after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1
        ),
        "peak_tree_rss_mib": round(peak["tree"] / 1024, 1),
        "peak_largest_process_rss_mib": round(peak["largest"] / 1024, 1),
        "stdout_tail": stdout[-1500:],
    }


def spark_command(script: str, *args: str) -> list[str]:
    submit = Path(sys.executable).parent / "spark-submit"
    return [
        str(submit),
        "--master",
        MASTER,
        "--driver-memory",
        DRIVER_MEMORY,
        "--conf",
        "spark.ui.showConsoleProgress=false",
        "--conf",
        f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
        str(ROOT / "pipeline" / script),
        *args,
    ]


def run_size(events: int, groups: int, columnar_first: bool) -> dict[str, Any]:
    """One size: the journal (JSON lines then converted, or columnar directly), then the
    analytics over the columnar journal."""
    workdir = Path(tempfile.mkdtemp(prefix="staticfleet-spark-bench-"))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    try:
        columnar = workdir / "columnar"
        result: dict[str, Any] = {}
        if columnar_first:
            result["journal"] = generate.generate(
                columnar, events, groups=groups, shards=16, workers=2, fmt="parquet"
            )
        else:
            journal = workdir / "journal"
            result["journal"] = generate.generate(journal, events, groups=groups, shards=16)
            converted = measure(
                spark_command("columnar.py", "--journal", str(journal), "--output", str(columnar)),
                env,
            )
            converted["parquet_bytes"] = sum(f.stat().st_size for f in columnar.glob("*.parquet"))
            result["conversion_to_parquet"] = converted
            shutil.rmtree(journal)
        load_before = os.getloadavg()
        measured = measure(
            spark_command(
                "analytics.py",
                "--journal",
                str(columnar),
                "--output",
                str(workdir / "out"),
                "--shuffle-partitions",
                str(SHUFFLE_PARTITIONS),
            ),
            env,
        )
        measured["load_average_1m_before_after"] = [
            round(load_before[0], 2),
            round(os.getloadavg()[0], 2),
        ]
        result["analytics"] = measured
        result["output_parquet_bytes"] = {
            path.name: sum(f.stat().st_size for f in path.rglob("*.parquet"))
            for path in (workdir / "out").iterdir()
            if path.is_dir()
        }
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(quick: bool) -> dict[str, Any]:
    sizes = (
        {"100k_json": (100_000, 20, False), "200k_columnar": (200_000, 40, True)}
        if quick
        else {"10M_json": (10_000_000, 2000, False), "100M_columnar": (100_000_000, 2000, True)}
    )
    results: dict[str, Any] = {
        name: run_size(events, groups, columnar_first)
        for name, (events, groups, columnar_first) in sizes.items()
    }
    results["spark"] = {
        "master": MASTER,
        "driver_memory": DRIVER_MEMORY,
        "executor_memory": "in local mode the executors are threads of the driver JVM",
        "shuffle_partitions": SHUFFLE_PARTITIONS,
    }
    return results


if __name__ == "__main__":  # one size: python -m bench.spark_bench EVENTS GROUPS json|columnar
    import json

    events, groups, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    print(json.dumps(run_size(events, groups, kind == "columnar"), indent=2))
