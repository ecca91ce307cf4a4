"""The chart's day-two parts: ServiceMonitor, PrometheusRule (unit-tested with promtool),
the Grafana dashboard ConfigMap, the log format value; and every metric name the rules and
the dashboard query exists in the coordinator's and the operator's registries."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from coordinator.server.metrics import ServerMetrics
from staticfleet_operator.metrics import OperatorMetrics
from tests.operator.test_chart import (
    CHART,
    ROOT,
    builds_helm,
    deployment_args,
    documents,
    render,
    run_helm,
    slow,
)
from tests.operator.test_chart import helm as helm

DASHBOARD = CHART / "dashboards" / "staticfleet.json"
MONITORING = (
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "grafana.dashboard.enabled=true",
)
# Series a query may name that no staticfleet registry holds: Prometheus' own.
PROMETHEUS_SERIES = {"up"}
NAME = re.compile(r"\b(staticfleet_[a-z0-9_]+|process_[a-z0-9_]+|python_[a-z0-9_]+|up)\b")


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def exposed_names() -> set[str]:
    """Every sample name the two registries can expose (as `operator run` shares one)."""
    server = ServerMetrics()
    server.serve_certificate(ServedCertificate())  # only a server on TLS has its expiry
    OperatorMetrics(server.registry)
    return names_of(server.registry)


@dataclass(frozen=True)
class ServedCertificate:
    not_after: float | None = 1.0e9


def names_of(registry: CollectorRegistry) -> set[str]:
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_sum", "_count"),
        "gauge": ("",),
        "info": ("_info",),
    }
    names: set[str] = set()
    for family in registry.collect():
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    return queries


def rule_queries() -> list[str]:
    text = (CHART / "templates" / "prometheusrule.yaml").read_text()
    return re.findall(r"expr: \|?\n?((?:.*\n)+?)\s+(?:for|labels):", text)


def test_every_metric_the_dashboard_and_the_rules_name_exists() -> None:
    exposed = exposed_names() | PROMETHEUS_SERIES
    queries = dashboard_queries() + rule_queries()
    assert len(rule_queries()) == 14 and len(dashboard_queries()) > 20
    named = {name for q in queries for name in NAME.findall(q)}
    assert "staticfleet_operator_rollout_paused" in named
    assert sorted(named - exposed) == []


def test_the_name_check_catches_a_missing_metric() -> None:
    assert "staticfleet_group_lag" not in exposed_names()
    assert "staticfleet_group_state" in exposed_names()
    assert "process_resident_memory_bytes" in exposed_names()
    assert "staticfleet_build_info" in exposed_names()


def test_dashboard_panels_are_well_formed() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in board["panels"] if p["type"] == "row"}
    assert {"Fleet health", "Rebalances and their causes", "Rollout progress"} <= titles
    assert "Coordinator latency" in titles
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}"


@slow
@builds_helm
def test_monitoring_is_off_by_default(helm: Path) -> None:
    kinds = {d["kind"] for d in documents(render(helm))}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "ConfigMap"}


@slow
@builds_helm
def test_service_monitor_rule_and_dashboard_render(helm: Path) -> None:
    docs = documents(render(helm, *MONITORING, "--set", "metrics.serviceMonitor.labels.release=kp"))
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "coordinator" and endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True  # the groups' namespace label, not the pod's
    assert monitor["metadata"]["labels"]["release"] == "kp"
    services = [
        s
        for s in of_kind(docs, "Service")
        if all(
            s["metadata"]["labels"].get(k) == v
            for k, v in monitor["spec"]["selector"]["matchLabels"].items()
        )
        and any(p["name"] == "coordinator" for p in s["spec"]["ports"])
    ]
    assert [s["metadata"]["name"] for s in services] == ["sf-staticfleet-coordinator"]
    (rule,) = of_kind(docs, "PrometheusRule")
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "StaticfleetRolloutPaused",
        "StaticfleetMembersMissing",
        "StaticfleetGroupNotStable",
    } <= alerts
    (board,) = of_kind(docs, "ConfigMap")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["staticfleet.json"]) == json.loads(DASHBOARD.read_text())


@slow
@builds_helm
def test_log_format_value(helm: Path) -> None:
    assert "--log-format=json" in deployment_args(
        documents(render(helm, "--set", "logFormat=json"))
    )
    for setting, complaint in [
        ("logFormat=xml", "logFormat"),
        ("metrics.serviceMonitor.interval=soon", "interval"),
        ("grafana.dashboard.enabled=yes", "enabled"),
    ]:
        proc = run_helm(helm, "template", "sf", str(CHART), "--set", setting)
        assert proc.returncode != 0, setting
        assert complaint in proc.stderr


@pytest.fixture(scope="module")
def promtool() -> Path:
    proc = subprocess.run(
        ["make", "--no-print-directory", "promtool"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ROOT / "build" / "bin" / "promtool"


def check_rules(helm: Path, promtool: Path, *values: str) -> subprocess.CompletedProcess[str]:
    rendered = render(helm, "--set", "metrics.prometheusRule.enabled=true", *values)
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_rules.py"), "--promtool", str(promtool)],
        input=rendered,
        capture_output=True,
        text=True,
        check=False,
    )


@slow
@builds_helm
def test_alert_rules_pass_their_promtool_unit_tests(helm: Path, promtool: Path) -> None:
    proc = check_rules(helm, promtool)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@slow
@builds_helm
def test_promtool_unit_tests_catch_a_changed_rule(helm: Path, promtool: Path) -> None:
    """A rollout paused for 2m alerting (instead of 10m) fails the tests: they measure."""
    proc = check_rules(helm, promtool, "--set", "metrics.prometheusRule.rolloutPausedFor=2m")
    assert proc.returncode != 0
    assert "StaticfleetRolloutPaused" in proc.stdout + proc.stderr


def test_rule_file_is_extracted_from_the_manifest() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        check_rules = importlib.import_module("check_rules")
    finally:
        sys.path.pop(0)
    text = yaml.safe_dump_all(
        [
            {"kind": "Service", "metadata": {"name": "x"}},
            {"kind": "PrometheusRule", "spec": {"groups": [{"name": "g", "rules": []}]}},
        ]
    )
    assert check_rules.rule_groups(text) == [{"name": "g", "rules": []}]
