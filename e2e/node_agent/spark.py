"""Spark executor pods: the command the Spark image's entrypoint runs for them, as a pure
function of the container's resolved environment.

A Spark driver on Kubernetes creates each executor pod with the image named by
`spark.kubernetes.container.image`, the single argument ``executor`` and the executor's
settings in the environment (SPARK_DRIVER_URL, SPARK_EXECUTOR_ID, ...). The image's
entrypoint (Spark's `resource-managers/kubernetes/docker/.../entrypoint.sh`, "executor"
case) turns that into one JVM: `KubernetesExecutorBackend` on `$SPARK_HOME/jars/*`, with
`-Xms`/`-Xmx` the executor memory and the `SPARK_JAVA_OPT_<n>` options in order. The node
agent runs that JVM from the pip PySpark's jars (no container image is pretended).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

EXECUTOR_ARG = "executor"
EXECUTOR_BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
# Set by Spark's BasicExecutorFeatureStep on every executor container.
EXECUTOR_ENV_MARKER = "SPARK_DRIVER_URL"
_JAVA_OPT = re.compile(r"^SPARK_JAVA_OPT_(\d+)$")


def is_spark_executor(args: Sequence[str] | None, env: Mapping[str, str]) -> bool:
    """An executor container as a Spark driver makes it: args ``["executor"]`` (the image's
    entrypoint dispatches on it) and the driver's URL in the environment."""
    return list(args or []) == [EXECUTOR_ARG] and EXECUTOR_ENV_MARKER in env


def is_executor_container(container: Mapping[str, object]) -> bool:
    """The same test on a container spec, before its environment is resolved."""
    env = container.get("env") or []
    names = (
        {str(e.get("name")) for e in env if isinstance(e, dict)} if isinstance(env, list) else set()
    )
    args = container.get("args")
    return is_spark_executor(args if isinstance(args, list) else None, dict.fromkeys(names, ""))


def java_options(env: Mapping[str, str]) -> list[str]:
    """``SPARK_JAVA_OPT_<n>`` values in numeric order of n (the entrypoint's `sort -k4 -n`)."""
    numbered = [(int(m[1]), v) for k, v in env.items() if (m := _JAVA_OPT.match(k))]
    return [v for _, v in sorted(numbered)]


def executor_argv(env: Mapping[str, str], *, java: str, spark_home: Path) -> list[str]:
    """The entrypoint's executor command line. ``spark_home`` holds ``jars/`` (the pip
    PySpark's package directory); `SPARK_CONF_DIR` (the driver's executor ConfigMap, when
    mounted) comes first on the class path, as in the entrypoint."""
    classpath = [f"{spark_home / 'jars'}/*"]
    if env.get("SPARK_CLASSPATH"):
        classpath.insert(0, env["SPARK_CLASSPATH"])
    if env.get("SPARK_CONF_DIR"):
        classpath.insert(0, env["SPARK_CONF_DIR"])
    memory = env.get("SPARK_EXECUTOR_MEMORY", "1g")
    argv = [
        java,
        *java_options(env),
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        ":".join(classpath),
        EXECUTOR_BACKEND,
        "--driver-url",
        env["SPARK_DRIVER_URL"],
        "--executor-id",
        env.get("SPARK_EXECUTOR_ID", ""),
        "--cores",
        env.get("SPARK_EXECUTOR_CORES", "1"),
        "--app-id",
        env.get("SPARK_APPLICATION_ID", ""),
        "--hostname",
        env.get("SPARK_EXECUTOR_POD_IP", "127.0.0.1"),
        "--resourceProfileId",
        env.get("SPARK_RESOURCE_PROFILE_ID", "0"),
    ]
    if env.get("SPARK_EXECUTOR_POD_NAME"):
        argv += ["--podName", env["SPARK_EXECUTOR_POD_NAME"]]
    return argv


def executor_environment(
    env: Mapping[str, str], *, spark_home: Path, python: Path
) -> dict[str, str]:
    """What the Spark image sets besides the pod's env: SPARK_HOME, and the interpreter the
    executor's Python workers run with (PySpark from the same venv)."""
    return {"SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": str(python), **env}
