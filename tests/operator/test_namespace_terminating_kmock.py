"""A namespace being deleted refuses every create with 403 and the cause
`NamespaceTerminating` (the API server's NamespaceLifecycle admission). The group in it goes
too, so a pass refused that way is no reconcile error: before, each one counted in
`staticfleet_operator_reconciles_total{result="error"}` and a namespace teardown set off
`StaticfleetReconcileErrors`."""

from __future__ import annotations

import json

import kmock

from staticfleet_operator.kube import Forbidden, NamespaceTerminating, error_of
from tests.operator.kube_harness import NAMESPACE, managed_spec, running_cluster

# What kube-apiserver answers a create in a terminating namespace (a StatusCause's type is
# serialized as `reason`).
TERMINATING = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": f'pods "orders-0" is forbidden: unable to create new content in namespace '
    f"{NAMESPACE} because it is being terminated",
    "reason": "Forbidden",
    "details": {
        "name": "orders-0",
        "kind": "pods",
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": f"namespace {NAMESPACE} is being terminated",
                "field": "metadata.namespace",
            }
        ],
    },
    "code": 403,
}


def test_the_cause_makes_its_own_error_and_a_plain_403_stays_forbidden() -> None:
    plain = error_of(403, "Forbidden")
    assert type(plain) is Forbidden
    found = error_of(403, "Forbidden", json.dumps(TERMINATING).encode())
    assert isinstance(found, NamespaceTerminating) and isinstance(found, Forbidden)
    assert "being terminated" in found.message


def creates_a_pod(request: kmock.Request) -> bool:
    plural = request.resource.plural if request.resource is not None else None
    method = str(request.method.value).upper() if request.method is not None else ""
    return plural == "pods" and method == "POST"


async def test_passes_refused_by_a_terminating_namespace_are_not_errors() -> None:
    async with running_cluster() as cluster:
        cluster.emulator[creates_a_pod] << 403 << TERMINATING
        await cluster.create_group("orders", managed_spec(replicas=2))
        await cluster.passes(3)
        assert cluster.metric("staticfleet_operator_reconciles_total", result="error") == 0
        assert cluster.passes_done() >= 3
        assert len(list(cluster.emulator[creates_a_pod])) >= 2  # each pass's creates refused
