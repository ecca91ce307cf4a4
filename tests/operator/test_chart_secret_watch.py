"""The chart's `rbac.secretWatch`: on by default (the Secret informer needs list and watch);
off, `secrets` keeps only get, create and patch, in the ClusterRole or in each watched
namespace's Role, and the operator is told `--no-secret-watch`. The cluster-wide rendering
without the watch passes the manifest check (test_chart.py checks the default one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.operator.test_chart import (
    builds_helm,
    check_manifests,
    deployment_args,
    documents,
    helm,
    render,
    slow,
)

__all__ = ["helm"]  # the module-scoped fixture, shared

WATCHED = ["get", "list", "watch", "create", "patch"]
GET_ONLY = ["get", "create", "patch"]
SOME = ["--set", "watchNamespaces={team,other}"]


def secret_verbs(docs: list[dict[str, Any]]) -> list[list[str]]:
    """The `secrets` verbs of every (Cluster)Role that grants any."""
    return [
        rule["verbs"]
        for doc in docs
        if doc["kind"] in ("Role", "ClusterRole")
        for rule in doc["rules"]
        if "secrets" in rule.get("resources", [])
    ]


@slow
@builds_helm
@pytest.mark.parametrize("scope", [[], SOME], ids=["all", "some"])
def test_default_install_watches_secrets(helm: Path, scope: list[str]) -> None:
    docs = documents(render(helm, *scope))
    verbs = secret_verbs(docs)
    assert verbs and all(v == WATCHED for v in verbs)
    assert "--no-secret-watch" not in deployment_args(docs)


@slow
@builds_helm
@pytest.mark.parametrize("scope", [[], SOME], ids=["all", "some"])
def test_secret_watch_off_drops_list_and_watch(helm: Path, scope: list[str]) -> None:
    text = render(
        helm,
        "--set",
        "rbac.secretWatch=false",
        "--set",
        "auth.memberPodTokens.audience=staticfleet-coordinator",
        *scope,
    )
    docs = documents(text)
    verbs = secret_verbs(docs)
    assert len(verbs) == (2 if scope else 1)  # one Role per watched namespace
    assert all(v == GET_ONLY for v in verbs)
    assert "--no-secret-watch" in deployment_args(docs)
    if not scope:  # the check's "default" profile is the cluster-wide install
        proc = check_manifests(text, "default")
        assert proc.returncode == 0, proc.stderr
