"""kubeconform against schemas generated offline (scripts/build-kube-schemas.sh): the chart's
renders are valid, and the strict schemas refuse what the API server would refuse."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.operator.test_chart import ROOT, builds_helm, render, slow
from tests.operator.test_chart import helm as helm

SCHEMAS = ROOT / "build" / "kube-schemas"
LOCATION = str(SCHEMAS) + "/{{ .ResourceKind }}_{{ .Group }}_{{ .ResourceAPIVersion }}.json"


def kube_schemas_module():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("kube_schemas")
    finally:
        sys.path.pop(0)


@pytest.fixture(scope="module")
def kubeconform() -> Path:
    proc = subprocess.run(
        ["make", "--no-print-directory", "kubeconform", "kube-schemas"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ROOT / "build" / "bin" / "kubeconform"


def validate(kubeconform: Path, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubeconform), "-strict", "-summary", "-schema-location", LOCATION, "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )


@slow
@builds_helm
@pytest.mark.parametrize(
    "values",
    [
        (),
        (
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "grafana.dashboard.enabled=true",
            "--set",
            "webhook.certManager.enabled=true",
        ),
    ],
    ids=["default", "every-optional-part"],
)
def test_chart_renders_are_valid(helm: Path, kubeconform: Path, values: tuple[str, ...]) -> None:
    proc = validate(kubeconform, render(helm, *values))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in proc.stdout


@slow
@builds_helm
def test_misspelt_fields_and_wrong_types_are_refused(helm: Path, kubeconform: Path) -> None:
    docs = [
        d
        for d in yaml.safe_load_all(render(helm, "--set", "metrics.serviceMonitor.enabled=true"))
        if d
    ]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    deployment["spec"]["replica"] = deployment["spec"].pop("replicas")
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    monitor["spec"]["endpoints"][0]["interval"] = 30
    proc = validate(kubeconform, yaml.safe_dump_all([deployment, monitor]))
    assert proc.returncode != 0
    assert "replica" in proc.stdout and "interval" in proc.stdout, proc.stdout
    assert "Invalid: 2" in proc.stdout


@slow
def test_an_unknown_kind_has_no_schema(kubeconform: Path) -> None:
    doc = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    proc = validate(kubeconform, yaml.safe_dump(doc))
    assert proc.returncode != 0 and "could not find schema" in proc.stdout + proc.stderr


def test_strict_refuses_unknown_properties_but_keeps_property_maps() -> None:
    strict = kube_schemas_module().strict
    schema = {
        "type": "object",
        "properties": {
            # A property named like a keyword: a map entry, not a schema's keyword.
            "properties": {"type": "object", "additionalProperties": {"type": "string"}},
            "port": {"x-kubernetes-int-or-string": True, "type": "string"},
            "free": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {},
            },
        },
    }
    out = strict(schema)
    assert out["additionalProperties"] is False
    assert set(out["properties"]) == {"properties", "port", "free"}
    assert out["properties"]["properties"]["additionalProperties"] == {"type": "string"}
    assert "type" not in out["properties"]["port"] and len(out["properties"]["port"]["anyOf"]) == 2
    assert "additionalProperties" not in out["properties"]["free"]


def test_file_names_follow_kubeconforms_template() -> None:
    file_name = kube_schemas_module().file_name
    assert file_name("Deployment", "apps/v1") == "deployment_apps_v1.json"
    assert file_name("Service", "v1") == "service_v1_v1.json"
    assert file_name("ServiceMonitor", "monitoring.coreos.com/v1") == (
        "servicemonitor_monitoring.coreos.com_v1.json"
    )
