"""The operator's TokenReview call (token_review.py) against kmock's API scaffold, feeding
the coordinator's pod-identity cache: a pod's token maps to its instance id only."""

from __future__ import annotations

from typing import Any

import kmock
import kopf

from coordinator.server.pod_identity import (
    POD_NAME_EXTRA,
    POD_UID_EXTRA,
    Binding,
    PodIdentity,
    Refused,
    ReviewCache,
    instance_problem,
)
from staticfleet_operator.kube import KubeApi
from staticfleet_operator.token_review import token_reviewer

AUDIENCE = "staticfleet-coordinator"
PODS = {"token-a": ("orders-0", "uid-0"), "token-b": ("orders-1", "uid-1")}


def review_answer(request: kmock.Request) -> dict[str, Any]:
    """What a kube-apiserver answers for a projected, pod-bound ServiceAccount token."""
    spec = request.data["spec"]
    pod = PODS.get(spec["token"])
    status: dict[str, Any] = {"authenticated": False}
    if pod is not None and AUDIENCE in spec.get("audiences", []):
        status = {
            "authenticated": True,
            "audiences": [AUDIENCE],
            "user": {
                "username": "system:serviceaccount:team:orders",
                "extra": {POD_NAME_EXTRA: [pod[0]], POD_UID_EXTRA: [pod[1]]},
            },
        }
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}


def is_review(request: kmock.Request) -> bool:
    return request.method == "POST" and str(request.url).endswith(
        "/apis/authentication.k8s.io/v1/tokenreviews"
    )


async def test_a_reviewed_pod_token_may_act_only_as_its_pods_instance_id():
    # The scaffold answers what it is told and stores nothing (a TokenReview is not stored).
    async with kmock.KubernetesScaffold() as emulator, kmock.Server(emulator) as server:
        emulator[is_review] << review_answer
        kube = KubeApi.connect(kopf.ConnectionInfo(server=str(server.url).rstrip("/"), token="op"))
        try:
            cache = ReviewCache(token_reviewer(kube), AUDIENCE, lambda: 0.0)
            bindings = {
                ("team", "orders-0"): Binding("orders", "orders-0", "uid-0"),
                ("team", "orders-1"): Binding("orders", "orders-1", "uid-1"),
            }
            a = await cache.identify("token-a")
            assert a == PodIdentity("team", "orders", "orders-0", "uid-0")
            assert isinstance(a, PodIdentity)
            assert instance_problem(a, bindings, "orders", "orders-0") is None
            assert instance_problem(a, bindings, "orders", "orders-1") is not None
            forged = await cache.identify("forged")
            assert isinstance(forged, Refused) and "does not accept" in forged.reason
            await cache.identify("token-a")
            reviews = list(emulator[is_review])
            assert len(reviews) == 2  # the second token-a came from the cache
            assert reviews[0].data["spec"] == {"token": "token-a", "audiences": [AUDIENCE]}
        finally:
            await kube.close()
