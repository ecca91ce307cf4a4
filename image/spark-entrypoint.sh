#!/usr/bin/env bash
# The Spark executor image's entrypoint (image/clients.Dockerfile, target spark): what
# Spark's own image entrypoint does for a pod a Spark driver on Kubernetes creates. The
# driver gives each executor container the single argument `executor` and its settings in
# the environment (SPARK_DRIVER_URL, SPARK_EXECUTOR_ID, ...; Spark's BasicExecutorFeatureStep);
# this turns them into one KubernetesExecutorBackend JVM on PySpark's jars. Anything else is
# run as given.
set -euo pipefail

if [[ "${1:-}" != executor ]]; then
    exec "$@"
fi

# The driver's executor ConfigMap (SPARK_CONF_DIR, when mounted) and any extra class path
# come before Spark's jars, as in Spark's image.
classpath="$SPARK_HOME/jars/*"
[[ -z "${SPARK_CLASSPATH:-}" ]] || classpath="$SPARK_CLASSPATH:$classpath"
[[ -z "${SPARK_CONF_DIR:-}" ]] || classpath="$SPARK_CONF_DIR:$classpath"

# The driver passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ...: in numeric order.
java_opts=()
while IFS= read -r -d '' name; do
    java_opts+=("${!name}")
done < <(compgen -e | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4 -n | tr '\n' '\0')

# An IPv6 pod address is bracketed in a host:port URL.
host="${SPARK_EXECUTOR_POD_IP:-127.0.0.1}"
[[ "$host" != *:* ]] || host="[$host]"

memory="${SPARK_EXECUTOR_MEMORY:-1g}"
command=(
    java "${java_opts[@]}" "-Xms$memory" "-Xmx$memory" -cp "$classpath"
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend
    --driver-url "$SPARK_DRIVER_URL"
    --executor-id "${SPARK_EXECUTOR_ID:-}"
    --cores "${SPARK_EXECUTOR_CORES:-1}"
    --app-id "${SPARK_APPLICATION_ID:-}"
    --hostname "$host"
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}"
)
[[ -z "${SPARK_EXECUTOR_POD_NAME:-}" ]] || command+=(--podName "$SPARK_EXECUTOR_POD_NAME")

# tini as PID 1 (-s: also when it is not): it forwards the kubelet's SIGTERM to the JVM and
# reaps the Python workers' orphans, which a JVM as PID 1 would leave as zombies.
exec tini -s -- "${command[@]}"
