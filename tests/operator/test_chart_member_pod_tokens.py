"""The chart's switch for members known by their pod: off by default (no flag, no
TokenReview permission); on, the operator gets the audience and `create tokenreviews` in its
ClusterRole, whether it watches every namespace or some."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.operator.test_chart import builds_helm, deployment_args, documents, helm, render, slow

__all__ = ["helm"]  # the module-scoped fixture, shared

FLAG = "--member-token-audience=staticfleet-coordinator"
TOKEN_REVIEWS = {
    "apiGroups": ["authentication.k8s.io"],
    "resources": ["tokenreviews"],
    "verbs": ["create"],
}


def cluster_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


@slow
@builds_helm
def test_default_install_has_no_pod_tokens_and_no_token_review_permission(helm: Path) -> None:
    docs = documents(render(helm))
    assert not any(a.startswith("--member-token-audience") for a in deployment_args(docs))
    assert TOKEN_REVIEWS not in cluster_rules(docs)


@slow
@builds_helm
@pytest.mark.parametrize("scope", [[], ["--set", "watchNamespaces={team}"]], ids=["all", "some"])
def test_an_audience_passes_the_flag_and_grants_token_reviews(helm: Path, scope: list[str]) -> None:
    docs = documents(
        render(helm, "--set", "auth.memberPodTokens.audience=staticfleet-coordinator", *scope)
    )
    assert FLAG in deployment_args(docs)
    assert TOKEN_REVIEWS in cluster_rules(docs)
