"""The Spark driver of scenario 9, run by spark-submit in client mode against the e2e API
server (`e2e/node/test_9_spark_on_k8s.py` gives the `--master k8s://…` and the confs):

    spark-submit --master k8s://https://127.0.0.1:PORT --deploy-mode client ... \
        e2e/spark_driver.py --executors 3 --control-dir DIR

One long-running member task per executor (`pipeline.executor_members.member_task`: each
joins with the `STATICFLEET_INSTANCE_ID` the webhook stamped on its executor pod and logs its
events to `DIR/members/`). The test steers the driver through files in DIR: it writes
`kill-<n>.ids` (executor ids, whitespace-separated) and the driver asks the scheduler
backend to kill exactly those executors without replacing them
(`SparkContext.killExecutors`: the target number of executors goes down), then writes
`kill-<n>.done`. `DIR/app-id` holds the application id once the context is up.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.executor_members import member_task


def kill_executors(context: Any, ids: list[str]) -> bool:
    """`SparkContext.killExecutors(Seq)`: one request to the cluster manager for all ids."""
    jvm = context._jvm
    seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(ids).toSeq()
    return bool(context._jsc.sc().killExecutors(seq))


def watch_control(context: Any, control: Path) -> None:
    done: set[str] = set()
    while True:
        for request in sorted(control.glob("kill-*.ids")):
            if request.name in done:
                continue
            done.add(request.name)
            ids = request.read_text().split()
            accepted = kill_executors(context, ids)
            request.with_suffix(".done").write_text(f"{accepted}\n")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    parser = argparse.ArgumentParser()
    parser.add_argument("--executors", type=int, required=True)
    parser.add_argument("--control-dir", type=Path, required=True)
    parser.add_argument("--duration-s", type=float, default=1800.0)
    args = parser.parse_args(argv)
    control: Path = args.control_dir
    members = control / "members"
    members.mkdir(parents=True, exist_ok=True)

    spark = SparkSession.builder.getOrCreate()
    context = spark.sparkContext
    (control / "app-id").write_text(context.applicationId + "\n")
    threading.Thread(target=watch_control, args=(context, control), daemon=True).start()
    try:
        # The instance id comes from the pod's env; the slot arguments are never used then.
        task = member_task(str(members), args.executors, args.duration_s, "unused")
        rows = context.parallelize(range(args.executors), args.executors)
        rows.mapPartitions(task).collect()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
