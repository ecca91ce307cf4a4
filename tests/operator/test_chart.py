"""The Helm chart (charts/staticfleet): lint, render, schema, CRD copies, examples.

The rendering tests need helm, which `make helm` builds once from its Go module into
build/bin/helm (a few minutes the first time, reused afterwards); they are marked slow.
The CRD-copy and example checks need no helm and run with the fast tests.
"""

from __future__ import annotations

import filecmp
import importlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "staticfleet"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
CHECK = ROOT / "scripts" / "check_manifests.py"
NAMESPACE = "staticfleet-system"
# CRDs the chart owns itself (Kopf's peering resources); every other file in the chart's
# crds/ must be a copy of crds/ (`make chart-crds`).
CHART_ONLY_CRDS = {"kopf-peerings.yaml"}

slow = pytest.mark.slow
# The first `make helm` builds helm from source: allow it more than the default timeout.
builds_helm = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def helm() -> Path:
    proc = subprocess.run(
        ["make", "--no-print-directory", "helm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"make helm failed:\n{proc.stdout}\n{proc.stderr}"
    binary = ROOT / "build" / "bin" / "helm"
    assert binary.is_file()
    return binary


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=120
    )


def render(helm: Path, *extra: str, release: str = "sf") -> str:
    proc = run_helm(
        helm, "template", release, str(CHART), "--namespace", NAMESPACE, "--include-crds", *extra
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def check_manifests(text: str, profile: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), "--profile", profile],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )


def deployment_args(docs: list[dict[str, Any]]) -> list[str]:
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    args: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


# --- helm lint and render ----------------------------------------------------------------


@slow
@builds_helm
@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_helm_lint_passes(helm: Path, values: Path | None) -> None:
    extra = ["-f", str(values)] if values else []
    proc = run_helm(helm, "lint", "--strict", str(CHART), *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@slow
@builds_helm
def test_default_values_render_expected_kinds(helm: Path) -> None:
    text = render(helm)
    docs = documents(text)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ClusterKopfPeering",
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",  # clusterkopfpeerings.kopf.dev
            "CustomResourceDefinition",  # kopfpeerings.kopf.dev
            "CustomResourceDefinition",  # consumergroups.staticfleet.dev
            "Deployment",
            "MutatingWebhookConfiguration",
            "PersistentVolumeClaim",  # the coordinator's store
            "Secret",  # admin token
            "Secret",  # webhook serving certificate
            "Service",  # coordinator
            "Service",  # webhook
            "ServiceAccount",
        ]
    )
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert "consumergroups.staticfleet.dev" in crds
    proc = check_manifests(text, "default")
    assert proc.returncode == 0, proc.stderr


@slow
@builds_helm
def test_partition_lag_metrics_only_when_asked(helm: Path) -> None:
    assert "--partition-lag-metrics" not in deployment_args(documents(render(helm)))
    on = deployment_args(documents(render(helm, "--set", "metrics.partitionLag=true")))
    assert "--partition-lag-metrics" in on


@slow
@builds_helm
def test_member_health_probes_off_with_0(helm: Path) -> None:
    """On by default (the contract test above); 0 passes no port, so templates decide."""
    off = deployment_args(documents(render(helm, "--set", "members.healthPort=0")))
    assert not any(a.startswith("--member-health-port") for a in off)


def test_default_deployment_follows_the_operator_contract(helm: Path) -> None:
    docs = documents(render(helm))
    assert deployment_args(docs) == [
        "operator",
        "run",
        "--store=sqlite:///data/coordinator.db",
        "--coordinator-host=0.0.0.0",
        "--coordinator-port=9092",
        "--coordinator-url=http://sf-staticfleet-coordinator.staticfleet-system.svc:9092",
        "--webhook-port=9443",
        "--webhook-cert=/certs/tls.crt",
        "--webhook-key=/certs/tls.key",
        "--peering=staticfleet-system-sf-staticfleet",
        "--health-port=8080",
        "--log-format=text",
        "--member-health-port=8081",
    ]
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    assert "sf-staticfleet-coordinator" in services
    (mwc,) = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    (webhook,) = mwc["webhooks"]
    assert webhook["clientConfig"]["service"]["path"] == "/staticfleet-mutate-pod"
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["timeoutSeconds"] == 5
    assert webhook["objectSelector"] == {
        "matchExpressions": [{"key": "staticfleet.dev/group", "operator": "Exists"}]
    }
    assert {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kube-system", NAMESPACE],
    } in webhook["namespaceSelector"]["matchExpressions"]


@slow
@builds_helm
def test_full_values_render_namespaced_persistent_cert_manager(helm: Path) -> None:
    text = render(helm, "-f", str(FULL_VALUES))
    proc = check_manifests(text, "full")
    assert proc.returncode == 0, proc.stderr
    docs = documents(text)
    args = deployment_args(docs)
    assert [a for a in args if a.startswith("--namespace=")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    roles = {(d["kind"], d["metadata"].get("namespace")) for d in docs if "Role" in d["kind"]}
    assert ("Role", "team-a") in roles and ("RoleBinding", "team-b") in roles
    (cluster_role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    cluster_resources = {r for rule in cluster_role["rules"] for r in rule["resources"]}
    assert "pods" not in cluster_resources and "secrets" not in cluster_resources


@slow
@builds_helm
def test_default_render_is_not_accepted_as_the_full_profile(helm: Path) -> None:
    # The check script really looks at what it is given.
    proc = check_manifests(render(helm), "full")
    assert proc.returncode == 1
    assert "profile: expected cert_manager=True" in proc.stderr
    proc = check_manifests(render(helm), "ephemeral")
    assert proc.returncode == 1
    assert "profile: expected persistence=False" in proc.stderr


# --- the coordinator's store ------------------------------------------------------------------


@slow
@builds_helm
def test_default_store_is_a_claim_that_outlives_the_operator_pod(helm: Path) -> None:
    docs = documents(render(helm))
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    (data,) = [v for v in pod["volumes"] if v["name"] == "data"]
    assert data == {"persistentVolumeClaim": {"claimName": "sf-staticfleet-data"}, "name": "data"}
    (claim,) = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert claim["metadata"]["name"] == "sf-staticfleet-data"
    # Neither a pod replacement nor `helm uninstall` takes the state with it.
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # One pod at a time mounts the ReadWriteOnce claim.
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert dep["spec"]["replicas"] == 1


@slow
@builds_helm
def test_an_empty_dir_only_when_asked_and_with_the_risk_said(helm: Path) -> None:
    text = render(helm, "--set", "store.persistence.enabled=false")
    assert check_manifests(text, "ephemeral").returncode == 0
    docs = documents(text)
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert "LOST whenever" in rendered_notes(helm, "--set", "store.persistence.enabled=false")
    assert "LOST whenever" not in rendered_notes(helm)
    values = (CHART / "values.yaml").read_text()
    assert "RISK: every static member and committed offset is LOST" in values


@slow
@builds_helm
@pytest.mark.parametrize(
    "settings",
    [
        ["replicaCount=2"],
        ["replicaCount=3", "store.persistence.enabled=false"],
        ["replicaCount=2", "store.persistence.existingClaim=mine"],
    ],
    ids=["rwo-claim", "empty-dir", "existing-rwo-claim"],
)
def test_several_replicas_without_a_shared_store_do_not_render(
    helm: Path, settings: list[str]
) -> None:
    extra = [arg for setting in settings for arg in ("--set", setting)]
    proc = run_helm(helm, "template", "sf", str(CHART), *extra)
    assert proc.returncode != 0, f"{settings} rendered"
    assert "replicaCount=" in proc.stderr and "ReadWriteMany" in proc.stderr


@slow
@builds_helm
def test_check_manifests_refuses_replicas_without_a_shared_store(helm: Path) -> None:
    # The checker sees it too, whatever rendered the manifests.
    docs = documents(render(helm, "--set", "store.persistence.enabled=false"))
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    dep["spec"]["replicas"] = 2
    proc = check_manifests(yaml.safe_dump_all(docs), "none")
    assert proc.returncode == 1
    assert "2 replicas, each with its own /data" in proc.stderr


def rendered_notes(helm: Path, *extra: str) -> str:
    """NOTES.txt as `helm install` prints it (rendered through a copy of the chart, since
    `helm template` leaves NOTES out and `helm install --dry-run` needs a cluster)."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "staticfleet"
        shutil.copytree(CHART, chart)
        shutil.copy(CHART / "templates" / "NOTES.txt", chart / "notes-source.txt")
        probe = 'notes: |\n{{ tpl (.Files.Get "notes-source.txt") . | indent 2 }}\n'
        (chart / "templates" / "notes-probe.yaml").write_text(probe)
        proc = run_helm(
            helm, "template", "sf", str(chart), "--show-only", "templates/notes-probe.yaml", *extra
        )
        assert proc.returncode == 0, proc.stderr
        notes: str = yaml.safe_load(proc.stdout)["notes"]
        return notes


@slow
@builds_helm
@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("replicaCount=two", "replicaCount"),
        ("webhook.failurePolicy=Sometimes", "failurePolicy"),
        ("store.persistence.enabled=maybe", "enabled"),
        ("podLabels.staticfleet\\.dev/group=x", "podLabels"),
        ("no.such.key=1", "additional properties"),
        ("members.healthPort=70000", "healthPort"),
        # Without an objectSelector every pod would depend on the webhook.
        ("webhook.objectSelector=null", "objectSelector"),
    ],
)
def test_values_schema_rejects_bad_values(helm: Path, setting: str, complaint: str) -> None:
    proc = run_helm(helm, "template", "sf", str(CHART), "--set", setting)
    assert proc.returncode != 0, f"{setting} was accepted"
    assert complaint in proc.stderr


@slow
@builds_helm
def test_release_namespace_among_watched_needs_the_exclusion_off(helm: Path) -> None:
    proc = run_helm(
        helm, "template", "sf", str(CHART), "-n", "apps", "--set", "watchNamespaces={apps}"
    )
    assert proc.returncode != 0 and "excludeOwnNamespace" in proc.stderr
    text = render(
        helm,
        "--set",
        "watchNamespaces={" + NAMESPACE + "}",
        "--set",
        "webhook.excludeOwnNamespace=false",
    )
    assert check_manifests(text, "none").returncode == 0


@slow
@builds_helm
def test_existing_secret_issuer_and_extra_args(helm: Path) -> None:
    text = render(
        helm,
        "--set",
        "auth.adminToken.existingSecret=my-admin",
        "--set",
        "webhook.certManager.enabled=true",
        "--set",
        "webhook.certManager.issuerRef.name=corp-ca",
        "--set",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
        "--set",
        "extraArgs={--verbose}",
    )
    assert check_manifests(text, "none").returncode == 0
    docs = documents(text)
    assert deployment_args(docs)[-1] == "--verbose"
    assert not [d for d in docs if d["kind"] == "Secret"]  # both come from elsewhere
    assert not [d for d in docs if d["kind"] == "Issuer"]
    (cert,) = [d for d in docs if d["kind"] == "Certificate"]
    assert cert["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}


@slow
@builds_helm
def test_kafka_config_secret_is_mounted_and_passed(helm: Path) -> None:
    text = render(helm, "--set", "kafkaConfig.secretName=operator-kafka")
    assert check_manifests(text, "none").returncode == 0
    docs = documents(text)
    assert "--kafka-config=/etc/staticfleet/operator-kafka/client.properties" in deployment_args(
        docs
    )
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "kafka-config", "secret": {"secretName": "operator-kafka"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {
        "name": "kafka-config",
        "mountPath": "/etc/staticfleet/operator-kafka",
        "readOnly": True,
    } in mounts
    # Without it: no flag, no volume.
    assert not [a for a in deployment_args(documents(render(helm))) if "kafka-config" in a]


# --- no helm needed ------------------------------------------------------------------------


def test_chart_crds_are_copies_of_crds() -> None:
    source = {p.name for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name for p in (CHART / "crds").glob("*.yaml")}
    assert source, "crds/ is empty: run `make crds`"
    assert chart - CHART_ONLY_CRDS == source, "run `make chart-crds`"
    stale = [n for n in sorted(source) if not filecmp.cmp(ROOT / "crds" / n, CHART / "crds" / n)]
    assert not stale, f"charts/staticfleet/crds/{stale} differ from crds/: run `make chart-crds`"


def test_kopf_peering_crds_in_the_chart() -> None:
    docs = documents((CHART / "crds" / "kopf-peerings.yaml").read_text())
    by_name = {d["metadata"]["name"]: d["spec"] for d in docs}
    assert by_name["clusterkopfpeerings.kopf.dev"]["scope"] == "Cluster"
    assert by_name["kopfpeerings.kopf.dev"]["scope"] == "Namespaced"
    for spec in by_name.values():
        assert spec["group"] == "kopf.dev"
        assert [v["name"] for v in spec["versions"]] == ["v1"]


@pytest.mark.parametrize(
    "example", ["examples/managed-group.yaml", "examples/spark/consumergroup.yaml"]
)
def test_examples_are_valid_consumer_groups(example: str) -> None:
    (crd,) = documents((CHART / "crds" / "consumergroups.staticfleet.dev.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    (doc,) = documents((ROOT / example).read_text())
    assert doc["apiVersion"] == f"{crd['spec']['group']}/{version['name']}"
    assert doc["kind"] == crd["spec"]["names"]["kind"]
    jsonschema.Draft7Validator(schema).validate(doc)
    # The CEL rules, as the operator applies them (staticfleet_operator.crd.validate_spec).
    crd_models = importlib.import_module("staticfleet_operator.crd")
    assert crd_models.validate_spec(doc["spec"]) == []


def test_spark_example_selects_its_own_label() -> None:
    (group,) = documents((ROOT / "examples" / "spark" / "consumergroup.yaml").read_text())
    template = yaml.safe_load(
        (ROOT / "examples" / "spark" / "executor-pod-template.yaml").read_text()
    )
    labels = group["spec"]["selector"]["matchLabels"]
    assert labels["staticfleet.dev/group"] == group["metadata"]["name"]
    assert template["metadata"]["labels"]["staticfleet.dev/group"] == group["metadata"]["name"]
    readme = (ROOT / "examples" / "spark" / "README.md").read_text()
    assert (
        f"spark.kubernetes.executor.label.staticfleet.dev/group={group['metadata']['name']}"
        in readme
    )


@slow
@builds_helm
@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_operator_may_keep_each_managed_groups_disruption_budget(
    helm: Path, values: Path | None
) -> None:
    docs = documents(render(helm, *(["-f", str(values)] if values else [])))
    roles = [d for d in docs if d["kind"] in ("ClusterRole", "Role")]
    budget_rules = [
        rule
        for role in roles
        for rule in role["rules"]
        if "poddisruptionbudgets" in rule["resources"]
    ]
    # The namespaced rules: the ClusterRole (all namespaces) or each watched namespace's Role.
    assert len(budget_rules) == (1 if values is None else 2)
    for rule in budget_rules:
        assert rule["apiGroups"] == ["policy"]
        assert set(rule["verbs"]) == {"get", "list", "watch", "create", "patch", "delete"}


@slow
@builds_helm
def test_operator_disruption_budget_only_when_enabled(helm: Path) -> None:
    default = [d for d in documents(render(helm)) if d["kind"] == "PodDisruptionBudget"]
    assert default == []
    (budget,) = [
        d
        for d in documents(render(helm, "-f", str(FULL_VALUES)))
        if d["kind"] == "PodDisruptionBudget"
    ]
    assert budget["spec"]["minAvailable"] == 1
    (deployment,) = [
        d for d in documents(render(helm, "-f", str(FULL_VALUES))) if d["kind"] == "Deployment"
    ]
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
