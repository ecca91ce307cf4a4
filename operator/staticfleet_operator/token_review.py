"""The TokenReview call behind `coordinator.server.pod_identity.ReviewCache`: the operator
has API access, so it reviews member tokens for its embedded coordinator (docs/server.md,
"Members known by their pod"). Needs `create` on `tokenreviews.authentication.k8s.io`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.server.pod_identity import Reviewer
from staticfleet_operator.kube import AUTHENTICATION, KubeApi, path


def token_reviewer(kube: KubeApi) -> Reviewer:
    """A `Reviewer` that asks the API server (with the operator's credentials)."""

    async def review(token: str, audiences: tuple[str, ...]) -> Mapping[str, Any]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": list(audiences)},
        }
        result = await kube.call("POST", path(AUTHENTICATION, "tokenreviews"), body=body)
        status: Mapping[str, Any] = result.get("status") or {}
        return status

    return review
