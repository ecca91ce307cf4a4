"""image/spark-entrypoint.sh, the Spark executor image's entrypoint: the command line it
builds from the environment a Spark driver gives an executor pod (run with a stand-in
`tini` that prints what it was asked to run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "image" / "spark-entrypoint.sh"

EXECUTOR_ENV = {
    "SPARK_HOME": "/py/pyspark",
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.244.0.1:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_EXECUTOR_MEMORY": "512m",
    "SPARK_APPLICATION_ID": "spark-app-1",
    "SPARK_EXECUTOR_POD_IP": "10.244.0.5",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "clicks-exec-3",
    "SPARK_CONF_DIR": "/opt/spark/conf",
    "SPARK_JAVA_OPT_10": "-Dten",
    "SPARK_JAVA_OPT_2": "-Dtwo",
    "SPARK_JAVA_OPT_0": "-Dzero",
}


def run(tmp_path: Path, env: dict[str, str], *args: str) -> list[str]:
    tini = tmp_path / "tini"
    tini.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    tini.chmod(0o755)
    path = f"{tmp_path}:{os.environ['PATH']}"
    result = subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env={"PATH": path, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return result.stdout.splitlines()


def test_an_executor_runs_one_backend_jvm_under_tini(tmp_path: Path) -> None:
    # Options in numeric order (2 before 10), then the heap, the class path with the
    # executor's conf dir first, then the backend and its arguments from the env.
    assert run(tmp_path, EXECUTOR_ENV, "executor") == [
        "-s",
        "--",
        "java",
        "-Dzero",
        "-Dtwo",
        "-Dten",
        "-Xms512m",
        "-Xmx512m",
        "-cp",
        "/opt/spark/conf:/py/pyspark/jars/*",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        "--driver-url",
        "spark://CoarseGrainedScheduler@10.244.0.1:7078",
        "--executor-id",
        "3",
        "--cores",
        "1",
        "--app-id",
        "spark-app-1",
        "--hostname",
        "10.244.0.5",
        "--resourceProfileId",
        "0",
        "--podName",
        "clicks-exec-3",
    ]


def test_an_ipv6_pod_address_is_bracketed_and_other_commands_run_as_given(
    tmp_path: Path,
) -> None:
    argv = run(tmp_path, {**EXECUTOR_ENV, "SPARK_EXECUTOR_POD_IP": "fd00::5"}, "executor")
    assert argv[argv.index("--hostname") + 1] == "[fd00::5]"
    assert run(tmp_path, {}, "echo", "not an executor") == ["not an executor"]
