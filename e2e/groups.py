"""ConsumerGroups for the scenarios: manifests, and waiting for what a user would watch
(`kubectl get cg`): the group Stable with its members, a rollout completed."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from e2e.cluster import IMAGE_REPOSITORY, IMAGE_TAG, Cluster, pod_ready
from e2e.fleet import wait_for

IMAGE = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"
# A librdkafka member's image (image/clients.Dockerfile's rdkafka target).
RDKAFKA_IMAGE = f"{IMAGE_REPOSITORY}-rdkafka:{IMAGE_TAG}"
# The Java peer's (image/clients.Dockerfile's java target).
JAVA_IMAGE = f"{IMAGE_REPOSITORY}-java:{IMAGE_TAG}"
# The Spark executors' (image/clients.Dockerfile's spark target; scenarios 9 and 9d).
SPARK_IMAGE = f"{IMAGE_REPOSITORY}-spark:{IMAGE_TAG}"
TOPIC = "orders"
PARTITIONS = 24
SESSION_TIMEOUT_MS = 30_000


def member_container() -> dict[str, Any]:
    """The member process every scenario runs (the image's entrypoint is `staticfleet`)."""
    return {
        "name": "member",
        "image": IMAGE,
        "args": ["member", "run", "--topics", TOPIC, "--records-per-second", "5"],
    }


def consumer_group(name: str, mode_spec: dict[str, Any]) -> dict[str, Any]:
    """A ConsumerGroup over the scenarios' topic, group id = name; `mode_spec` adds the rest."""
    return {
        "apiVersion": "staticfleet.dev/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "groupId": name,
            "topics": [{"name": TOPIC, "partitions": PARTITIONS}],
            **mode_spec,
        },
    }


def managed_group(
    name: str,
    *,
    replicas: int = 6,
    protocol: str = "eager",
    session_timeout_ms: int = SESSION_TIMEOUT_MS,
) -> dict[str, Any]:
    return consumer_group(
        name,
        {
            "replicas": replicas,
            "membership": {"instanceIdPrefix": name, "sessionTimeoutMs": session_timeout_ms},
            "rebalance": {"protocol": protocol},
            "rollout": {"memberReadyTimeoutSeconds": 180},
            # The scenarios time a scale step itself; the scale-down window (30 s by default)
            # is the kmock tests' (test_scale_step_kmock) and Getting started's (scenario 12).
            "scaleDown": {"stabilizationWindowSeconds": 0},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": f"{name}-consumer"}},
                "spec": {"terminationGracePeriodSeconds": 10, "containers": [member_container()]},
            },
        },
    )


def adopted_group(name: str, app: str) -> dict[str, Any]:
    return consumer_group(
        name,
        {
            "selector": {
                "matchLabels": {
                    "staticfleet.dev/group": name,
                    "spark-role": "executor",
                    "spark-app-name": app,
                }
            },
            "replacementGracePeriodSeconds": 20,
            "membership": {"instanceIdPrefix": name, "sessionTimeoutMs": SESSION_TIMEOUT_MS},
            "rebalance": {"protocol": "cooperative", "cooperativeAssignor": "static-sticky"},
        },
    )


@contextlib.contextmanager
def namespace(cluster: Cluster, name: str) -> Iterator[str]:
    """A namespace for one scenario, deleted afterwards (its ConsumerGroups go through the
    operator's finalizer, so the members leave and the coordinator forgets the group)."""
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=true", "--timeout=180s", check=False)


def apply(cluster: Cluster, namespace_name: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("-n", namespace_name, "apply", "-f", "-", input=json.dumps(manifest))


def group_status(cluster: Cluster, namespace_name: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = (
        cluster.get_json("-n", namespace_name, "get", "consumergroup", name).get("status") or {}
    )
    return status


def wait_stable(
    cluster: Cluster, namespace_name: str, name: str, members: int, *, timeout_s: float = 180
) -> dict[str, Any]:
    """The group Stable in the coordinator with `members` members, each in a Ready pod."""

    def probe() -> dict[str, Any] | None:
        described = cluster.admin().describe(name)
        pods = [
            pod
            for pod in cluster.member_pods(namespace_name, name)
            if not pod["metadata"].get("deletionTimestamp")
        ]
        if (
            described.get("group_state") == "Stable"
            and len(described.get("members") or []) == members
            and len(pods) == members
            and all(pod_ready(pod) for pod in pods)
        ):
            return described
        return None

    def describe() -> str:
        with contextlib.suppress(Exception):
            described = cluster.admin().describe(name)
            return (
                f"coordinator: {described.get('group_state')} "
                f"{len(described.get('members') or [])} members; "
                f"cg status: {json.dumps(group_status(cluster, namespace_name, name))[:800]}"
            )
        return "(no description)"

    return wait_for(
        f"group {name} Stable with {members} members",
        probe,
        timeout_s=timeout_s,
        interval_s=1.0,
        describe=describe,
    )


def patch_spec(cluster: Cluster, namespace_name: str, name: str, spec: dict[str, Any]) -> None:
    """`kubectl patch cg NAME --type merge -p '{"spec": ...}'`, as a user changes a group."""
    cluster.kubectl(
        "-n",
        namespace_name,
        "patch",
        "consumergroup",
        name,
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": spec}),
    )


def wait_rollout_completed(
    cluster: Cluster, namespace_name: str, name: str, protocol: str, *, timeout_s: float = 600
) -> None:
    """status.rollout Completed with the fleet running `protocol`."""

    def completed() -> bool:
        status = group_status(cluster, namespace_name, name)
        return (
            status.get("effectiveRebalanceProtocol") == protocol
            and (status.get("rollout") or {}).get("phase") == "Completed"
        )

    wait_for(
        f"the rollout to complete on {protocol}",
        completed,
        timeout_s=timeout_s,
        interval_s=2,
        describe=lambda: str(group_status(cluster, namespace_name, name).get("rollout")),
    )
