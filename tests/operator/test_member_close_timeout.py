"""The member's close timeout, set from the pod's grace period where the operator builds
member pods: a stopping member gives its partitions up of itself before the kubelet's SIGKILL."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet.member.settings import Overrides, settings_from
from staticfleet_operator.crd import parse_spec
from staticfleet_operator.members import MemberSettings, close_timeout_entry, managed_pod
from staticfleet_operator.webhook import pod_mutation

MEMBER = {"name": "member", "image": "staticfleet:0.1.0", "args": ["member", "run"]}
SETTINGS = MemberSettings("http://coordinator:9092", "orders")


@pytest.mark.parametrize(
    ("grace", "timeout_ms"),
    [(None, "25000"), (30, "25000"), (10, "8000"), (2, "1600"), (120, "115000")],
)
def test_the_close_ends_before_the_grace_period(grace: int | None, timeout_ms: str) -> None:
    assert close_timeout_entry(grace) == {"name": env.CLOSE_TIMEOUT_MS, "value": timeout_ms}


def test_no_grace_period_no_close_timeout() -> None:
    assert close_timeout_entry(0) is None


def managed(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    spec = parse_spec(
        {
            "groupId": "orders",
            "topics": [{"name": "orders", "partitions": 6}],
            "replicas": 1,
            "template": {"spec": pod_spec},
        }
    )
    pod = managed_pod(
        spec,
        SETTINGS,
        namespace="orders",
        owner_uid="uid-1",
        slot=0,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="key-1",
    )
    containers: list[dict[str, Any]] = pod["spec"]["containers"]
    return containers


def test_a_managed_pod_closes_within_its_templates_grace_period() -> None:
    (container,) = managed({"terminationGracePeriodSeconds": 10, "containers": [MEMBER]})
    assert {"name": env.CLOSE_TIMEOUT_MS, "value": "8000"} in container["env"]
    # What the member process makes of its pod's environment.
    environ = {e["name"]: e.get("value", "token") for e in container["env"]}
    assert settings_from(Overrides(), environ).close_timeout_ms == 8000


def test_a_templates_own_close_timeout_is_kept() -> None:
    own = {**MEMBER, "env": [{"name": env.CLOSE_TIMEOUT_MS, "value": "3000"}]}
    (container,) = managed({"terminationGracePeriodSeconds": 10, "containers": [own]})
    values = [e["value"] for e in container["env"] if e["name"] == env.CLOSE_TIMEOUT_MS]
    assert values == ["3000"]


def test_an_adopted_pod_closes_within_its_own_grace_period() -> None:
    spec = parse_spec(
        {
            "groupId": "orders",
            "topics": [{"name": "orders", "partitions": 6}],
            "selector": {"matchLabels": {"app": "orders"}},
        }
    )
    pod = {
        "metadata": {"name": "orders-abc"},
        "spec": {"terminationGracePeriodSeconds": 60, "containers": [MEMBER]},
    }
    mutation = pod_mutation(
        pod, spec, SETTINGS, slot=0, protocol=RebalanceProtocolSetting.EAGER, pod_key="key-1"
    )
    (container,) = mutation.spec["containers"]
    assert {"name": env.CLOSE_TIMEOUT_MS, "value": "55000"} in container["env"]


def test_a_close_timeout_the_member_cannot_use_is_refused() -> None:
    environ = {
        env.COORDINATOR_URL: "http://coordinator:9092",
        env.GROUP_ID: "orders",
        env.TOPICS: "orders",
        env.CLOSE_TIMEOUT_MS: "0",
    }
    with pytest.raises(ValueError, match="CLOSE_TIMEOUT_MS must be positive"):
        settings_from(Overrides(), environ)
    assert settings_from(Overrides(), {**environ, env.CLOSE_TIMEOUT_MS: ""}).close_timeout_ms == (
        30_000
    )
