"""httpGet probes on the member's health endpoints, where the operator builds member pods."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import parse_spec
from staticfleet_operator.member_probes import with_health_probes
from staticfleet_operator.members import MemberSettings, managed_pod
from tests.operator.test_examples import MANAGED_EXAMPLE

MEMBER = {"name": "member", "image": "staticfleet:0.1.0", "args": ["member", "run"]}


def health_env(port: str) -> list[dict[str, str]]:
    return [{"name": env.HEALTH_PORT, "value": port}]


def test_a_member_serving_its_endpoints_gets_both_probes_and_a_port() -> None:
    container = with_health_probes({**MEMBER, "env": health_env("8081")})
    assert container["startupProbe"]["httpGet"] == {"path": "/livez", "port": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": 8081}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081}
    assert container["ports"] == [
        {"name": "member-health", "containerPort": 8081, "protocol": "TCP"}
    ]


@pytest.mark.parametrize(
    "container",
    [
        MEMBER,  # the endpoints are off unless the template turns them on
        {**MEMBER, "env": health_env("0")},
        {**MEMBER, "env": health_env("eighty")},  # the member refuses it, with a clear error
        {**MEMBER, "args": ["member", "run", "--health-port", "0"], "env": health_env("8081")},
        # Not a member: a sidecar, another client family, a Spark executor.
        {"name": "sidecar", "image": "envoy", "args": ["--health-port", "9901"]},
        {"name": "java", "image": "peer", "command": ["java", "-jar", "peer.jar"]},
    ],
)
def test_left_as_it_is(container: dict[str, Any]) -> None:
    assert with_health_probes(container) == container


def test_the_flag_wins_over_the_variable_and_a_command_counts() -> None:
    container = with_health_probes(
        {
            "name": "member",
            "command": ["staticfleet", "member", "run"],
            "args": ["--health-port=9100"],
            "env": health_env("8081"),
        }
    )
    assert container["livenessProbe"]["httpGet"]["port"] == 9100
    assert container["ports"][0]["containerPort"] == 9100


def test_a_users_probes_and_ports_are_kept() -> None:
    own_liveness = {"exec": {"command": ["true"]}, "periodSeconds": 30}
    own_port = {"name": "health", "containerPort": 8081}
    given = {
        **MEMBER,
        "env": health_env("8081"),
        "livenessProbe": own_liveness,
        "ports": [own_port],
    }
    container = with_health_probes(copy.deepcopy(given))
    assert container["livenessProbe"] == own_liveness
    assert container["ports"] == [own_port]  # that port is there already, under its own name
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081}


def test_the_managed_example_pod_gets_the_probes_on_its_member_only() -> None:
    group = yaml.safe_load(MANAGED_EXAMPLE.read_text())
    template = group["spec"]["template"]["spec"]
    template["containers"].append({"name": "sidecar", "image": "busybox", "args": ["sleep"]})
    pod = managed_pod(
        parse_spec(group["spec"]),
        MemberSettings("http://coordinator:9092", group["metadata"]["name"]),
        namespace="orders",
        owner_uid="uid-1",
        slot=0,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="key-1",
    )
    member, sidecar = pod["spec"]["containers"]
    port = next(e["value"] for e in member["env"] if e["name"] == env.HEALTH_PORT)
    assert member["livenessProbe"]["httpGet"] == {"path": "/livez", "port": int(port)}
    assert member["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": int(port)}
    assert "livenessProbe" not in sidecar and "ports" not in sidecar
