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
from staticfleet_operator.webhook import pod_mutation
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


# --- the operator's default port (`operator run --member-health-port`, the chart's 8081) ----


def test_the_default_port_turns_the_endpoints_on_where_the_template_sets_none() -> None:
    container = with_health_probes(MEMBER, default_port=8081)
    assert container["env"] == health_env("8081")  # the member serves what is probed
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081}
    assert container["ports"][0]["containerPort"] == 8081


@pytest.mark.parametrize(
    ("container", "port"),
    [
        ({**MEMBER, "env": health_env("9100")}, 9100),
        ({**MEMBER, "args": ["member", "run", "--health-port=9200"]}, 9200),
    ],
)
def test_a_templates_own_port_wins_over_the_default(container: dict[str, Any], port: int) -> None:
    probed = with_health_probes(container, default_port=8081)
    assert probed["livenessProbe"]["httpGet"]["port"] == port
    assert probed.get("env") == container.get("env")  # no second variable


@pytest.mark.parametrize(
    "container",
    [
        {**MEMBER, "env": health_env("0")},  # the group turned them off
        {"name": "java", "image": "peer", "command": ["java", "-jar", "peer.jar"]},
    ],
)
def test_the_default_leaves_a_template_that_turned_them_off_and_other_containers(
    container: dict[str, Any],
) -> None:
    assert with_health_probes(container, default_port=8081) == container


def test_a_managed_pod_gets_the_operators_default_port() -> None:
    spec = parse_spec(
        {
            "groupId": "orders",
            "topics": [{"name": "orders", "partitions": 6}],
            "replicas": 1,
            "template": {"spec": {"containers": [MEMBER]}},
        }
    )

    def built(settings: MemberSettings) -> dict[str, Any]:
        pod = managed_pod(
            spec,
            settings,
            namespace="orders",
            owner_uid="uid-1",
            slot=0,
            protocol=RebalanceProtocolSetting.EAGER,
            pod_key="key-1",
        )
        container: dict[str, Any] = pod["spec"]["containers"][0]
        return container

    on = built(MemberSettings("http://coordinator:9092", "orders", member_health_port=8081))
    assert {"name": env.HEALTH_PORT, "value": "8081"} in on["env"]
    assert on["startupProbe"]["httpGet"] == {"path": "/livez", "port": 8081}
    off = built(MemberSettings("http://coordinator:9092", "orders"))
    assert "startupProbe" not in off
    assert env.HEALTH_PORT not in {e["name"] for e in off["env"]}


def test_an_adopted_pod_admitted_by_the_webhook_gets_the_default_port() -> None:
    spec = parse_spec(
        {
            "groupId": "orders",
            "topics": [{"name": "orders", "partitions": 6}],
            "selector": {"matchLabels": {"app": "orders"}},
        }
    )
    pod = {"metadata": {"name": "orders-abc"}, "spec": {"containers": [MEMBER]}}
    mutation = pod_mutation(
        pod,
        spec,
        MemberSettings("http://coordinator:9092", "orders", member_health_port=8081),
        slot=0,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="key-1",
    )
    (container,) = mutation.spec["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": 8081}
    assert {"name": env.HEALTH_PORT, "value": "8081"} in container["env"]


@pytest.mark.parametrize(("argv", "port"), [([], None), (["--member-health-port", "8081"], 8081)])
def test_the_operator_flag_reaches_its_options(argv: list[str], port: int | None) -> None:
    from staticfleet.cli import build_parser
    from staticfleet.commands.operator_cmd import options_from_args

    args = build_parser().parse_args(["operator", "run", *argv])
    assert options_from_args(args).member_health_port == port


@pytest.mark.parametrize("value", ["70000", "-1", "eighty"])
def test_a_port_the_member_would_refuse_is_refused_at_start(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from staticfleet.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "run", "--member-health-port", value])
    assert "--member-health-port" in capsys.readouterr().err
