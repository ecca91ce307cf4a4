"""Scenario 2: `helm install` of charts/staticfleet on the bare node (the chart's CRDs with
it) brings up a Ready operator running with the chart's RBAC (the kubelet mounts the pod's
ServiceAccount token), and `helm uninstall` removes everything the release made (CRDs stay,
as Helm keeps them, and so does the coordinator's PersistentVolumeClaim, kept on purpose:
fleet_node's install of the release after this scenario adopts it)."""

from __future__ import annotations

import time

from e2e.cluster import FULLNAME, OPERATOR_NAMESPACE, RELEASE, Cluster
from e2e.fleet import Record, wait_for
from e2e.node.conftest import BareNode, install_chart

CLUSTER_SCOPED = ("clusterroles", "clusterrolebindings", "mutatingwebhookconfigurations")


def _release_objects(cluster: Cluster) -> list[str]:
    selector = f"app.kubernetes.io/instance={RELEASE}"
    found = []
    namespaced = cluster.kubectl(
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "all,secrets,serviceaccounts,roles,rolebindings",
        "-l",
        selector,
        "-o",
        "name",
        check=False,
    ).stdout.split()
    found.extend(namespaced)
    for kind in CLUSTER_SCOPED:
        found.extend(cluster.kubectl("get", kind, "-l", selector, "-o", "name").stdout.split())
    return found


def test_helm_install_runs_the_operator_and_uninstall_cleans_up(
    bare_node: BareNode, record: Record
) -> None:
    cluster = bare_node.cluster
    installed = install_chart(cluster)
    record("install_to_ready_s", installed["chart_install_to_operator_ready_s"])
    record("ready_to_service_routed_s", installed["operator_ready_to_service_routed_s"])

    objects = _release_objects(cluster)
    for expected in (
        f"deployment.apps/{FULLNAME}",
        f"service/{FULLNAME}-coordinator",
        f"service/{FULLNAME}-webhook",
        f"serviceaccount/{FULLNAME}",
    ):
        assert expected in objects, objects
    webhooks = [o for o in objects if o.startswith("mutatingwebhookconfiguration")]
    assert webhooks, objects

    # The operator acts with the chart's RBAC, not as an admin: its ServiceAccount may
    # list pods and create secrets, and may not delete secrets or touch nodes.
    sa = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{FULLNAME}"

    def can(verb: str, resource: str) -> bool:
        answer = cluster.kubectl("auth", "can-i", verb, resource, "-A", "--as", sa, check=False)
        return answer.stdout.strip() == "yes"

    assert can("list", "pods") and can("create", "pods") and can("patch", "consumergroups/status")
    assert not can("delete", "secrets") and not can("delete", "nodes")

    # The operator answers on its coordinator port: healthy, and the webhook's Service
    # has the operator pod behind it (the API server calls it through that Service).
    admin = cluster.admin()
    assert "staticfleet_" in admin.metrics()
    wait_for(
        "the webhook Service's endpoints",
        lambda: cluster.kubectl(
            "-n",
            OPERATOR_NAMESPACE,
            "get",
            "endpointslices",
            "-l",
            f"kubernetes.io/service-name={FULLNAME}-webhook",
            "-o",
            "jsonpath={.items[*].endpoints[*].addresses[*]}",
        ).stdout.strip(),
        timeout_s=60,
    )

    started = time.monotonic()
    cluster.helm("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait", "--timeout", "120s")
    wait_for(
        "the operator pod to be gone",
        lambda: cluster.operator_pod() is None,
        timeout_s=120,
    )
    leftovers = wait_for(
        "no object of the release left",
        lambda: (lambda objs: ["none"] if not objs else None)(_release_objects(cluster)),
        timeout_s=60,
        describe=lambda: str(_release_objects(cluster)),
    )
    assert leftovers == ["none"]
    record("uninstall_s", round(time.monotonic() - started, 1))
    # The coordinator's store is kept on purpose (helm.sh/resource-policy: keep): a reinstall
    # of the release adopts it with every static member and offset (docs/operator.md).
    cluster.kubectl("-n", OPERATOR_NAMESPACE, "get", "pvc", f"{FULLNAME}-data")
    # Helm never deletes CRDs: the ConsumerGroup type stays for other releases and data.
    cluster.kubectl("get", "crd", "consumergroups.staticfleet.dev")
