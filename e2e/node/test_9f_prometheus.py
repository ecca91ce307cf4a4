"""Scenario 9f: a real Prometheus scrapes the operator pod and evaluates the chart's alerts.

A template rollout is paused the way a user pauses one by mistake: the new template's member
cannot start (an unknown flag), so the bounced member never rejoins and, after
`memberReadyTimeoutSeconds`, the rollout pauses. StaticfleetRolloutPaused must fire while it
is paused and clear once the template is fixed and the rollout resumes. A scale-down then
causes the batch LeaveGroup series. Afterwards every metric docs/operator.md and
docs/server.md name has a series, and every query of the chart's Grafana dashboard returns
data, except the short lists below of series only an event this scenario does not cause makes.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from typing import Any

from coordinator.server.metrics import ServerMetrics
from e2e.cluster import CHART, OPERATOR_NAMESPACE, RELEASE, ROOT, Cluster
from e2e.fleet import Record, wait_for
from e2e.groups import (
    apply,
    group_status,
    managed_group,
    member_container,
    namespace,
    patch_spec,
    wait_rollout_completed,
    wait_stable,
)
from e2e.prometheus import (
    PrometheusApi,
    ScrapeTarget,
    chart_rule_file,
    dashboard_of,
    firing,
    listed,
    running_prometheus,
    service_monitor_endpoint,
)
from staticfleet_operator.metrics import OperatorMetrics

GROUP = "prom"
NS = "e2e-prometheus"
REPLICAS = 3
ALERT = "StaticfleetRolloutPaused"
# The chart's default is 10m; the e2e sets the threshold through its value, not the rule text.
PAUSED_FOR = "5s"
READY_TIMEOUT_S = 10  # memberReadyTimeoutSeconds: the CRD's minimum

# Metrics the docs name that only an event this scenario does not cause creates (a labelled
# series appears at its first event): they may be absent, and nothing else may.
EVENT_ONLY_METRICS = {
    # Consumer-protocol (KIP-848) groups only; the e2e's groups here are classic groups on the
    # embedded coordinator (tests/operator/test_kafka_kmock.py covers these series).
    "staticfleet_operator_group_converged": "consumer-protocol groups only",
    "staticfleet_operator_group_epoch": "consumer-protocol groups only",
    # A hot standby taking over (scenario 9c), adopted pods given a slot (scenarios 6, 9).
    "staticfleet_operator_standby_promotions_total": "a hot standby promotion (scenario 9c)",
    "staticfleet_operator_slot_allocations_total": "adopted pods admitted (scenarios 6, 9)",
    # Lag is read for Kafka-coordinated groups only (embedded groups have none: docs/operator.md,
    # Autoscaling); the per-partition series also needs --partition-lag-metrics.
    "staticfleet_operator_group_lag": "Kafka-coordinated groups only",
    "staticfleet_operator_group_partition_lag": "Kafka groups, with --partition-lag-metrics",
    # A Kafka cluster that does not answer or refuses (tests/operator/test_kafka_secured_kmock.py);
    # the coordinator's certificate when it serves TLS (tests/server/test_tls.py): 9f is plain.
    "staticfleet_operator_kafka_unreachable": "a Kafka cluster unreachable or refusing",
    "staticfleet_coordinator_tls_certificate_expiry_timestamp_seconds": "a coordinator on TLS",
}
# Dashboard queries that select only those series, so they have no data here either.
EVENT_ONLY_QUERIES = re.compile(
    r"staticfleet_operator_(group_converged|group_epoch|standby_promotions_total"
    r"|slot_allocations_total|group_lag|group_partition_lag)"
)
DOCUMENTED = re.compile(r"\b((?:staticfleet|process|python)_[a-z0-9_]*[a-z0-9])\b")


def test_rollout_paused_alert_fires_and_clears_and_the_dashboard_has_data(
    cluster: Cluster, operator_release: None, record: Record
) -> None:
    manifest = render_monitoring(cluster)
    started = time.time()
    workdir = ROOT / "build" / "e2e" / "prometheus"
    with (
        running_prometheus(
            workdir, [operator_target(cluster, manifest)], chart_rule_file(manifest)
        ) as api,
        namespace(cluster, NS) as ns,
    ):
        group = managed_group(GROUP, replicas=REPLICAS)
        group["spec"]["rollout"] = {"memberReadyTimeoutSeconds": READY_TIMEOUT_S}
        apply(cluster, ns, group)
        wait_stable(cluster, ns, GROUP, REPLICAS)
        labels = {"namespace": ns, "group": GROUP}

        # Pause: a template whose member exits at once (an unknown flag) never rejoins.
        broken = member_container()
        broken["args"] = [*broken["args"], "--no-such-flag"]
        patch_spec(cluster, ns, GROUP, template_with(broken))
        wait_for(
            "the rollout to pause",
            lambda: (
                (group_status(cluster, ns, GROUP).get("rollout") or {}).get("phase") == "Paused"
            ),
            timeout_s=READY_TIMEOUT_S + 120,
            describe=lambda: str(group_status(cluster, ns, GROUP).get("rollout")),
        )
        seen_paused = time.time()
        wait_for(
            f"{ALERT} to fire",
            lambda: firing(api, ALERT, labels),
            timeout_s=120,
            describe=lambda: (
                f"alerts {api.alerts()}; series {api.query('staticfleet_operator_rollout_paused')}"
            ),
        )
        fired = time.time()
        during_pause = time.time()
        # The target's job and namespace are the ones StaticfleetOperatorDown selects: were
        # they not, its absent() branch would be pending by now.
        assert not listed(api, "StaticfleetOperatorDown", {}), api.alerts()

        # Resume: the template fixed, the broken member is replaced first and the rollout
        # completes; the alert must leave /api/v1/alerts.
        patch_spec(cluster, ns, GROUP, template_with(member_container()))
        fixed = time.time()
        wait_for(f"{ALERT} to clear", lambda: not listed(api, ALERT, labels), timeout_s=180)
        cleared = time.time()
        wait_rollout_completed(cluster, ns, GROUP, "eager", timeout_s=300)
        wait_stable(cluster, ns, GROUP, REPLICAS)

        # A scale-down: one batch LeaveGroup (the batch_leave* series).
        patch_spec(cluster, ns, GROUP, {"replicas": REPLICAS - 1})
        wait_stable(cluster, ns, GROUP, REPLICAS - 1)
        time.sleep(3)  # two more scrapes after the last change

        paused_at, resumed_at = paused_interval(api, labels)
        record("alert_fire_after_metric_paused_s", round(fired - paused_at, 1))
        record("alert_fire_after_status_paused_s", round(fired - seen_paused, 1))
        record("alert_clear_after_metric_resumed_s", round(cleared - resumed_at, 1))
        record("alert_clear_after_template_fixed_s", round(cleared - fixed, 1))
        record("rollout_paused_for_value", PAUSED_FOR)
        # Firing needs the `for:` to pass at least once, on top of the pause being scraped.
        assert fired - paused_at >= 5, (fired, paused_at)
        assert resumed_at >= fixed - 1

        missing = absent_metrics(api, documented_metrics(), started)
        record("documented_metrics_without_series", sorted(missing))
        assert sorted(missing - EVENT_ONLY_METRICS.keys()) == []

        empty, checked = empty_panel_queries(api, dashboard_of(manifest), ns, during_pause)
        record("dashboard_queries_checked", checked)
        record("dashboard_queries_without_data", empty)
        assert [q for q in empty if not EVENT_ONLY_QUERIES.search(q)] == []


def render_monitoring(cluster: Cluster) -> str:
    """`helm template` of the installed release's values, with the ServiceMonitor, the rule
    and the dashboard on."""
    return cluster.helm(
        "template",
        RELEASE,
        str(CHART),
        "-n",
        OPERATOR_NAMESPACE,
        *cluster.chart_values(),
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        f"metrics.prometheusRule.rolloutPausedFor={PAUSED_FOR}",
        "--set",
        "grafana.dashboard.enabled=true",
    ).stdout


def operator_target(cluster: Cluster, manifest: str) -> ScrapeTarget:
    """The coordinator port of the operator pod (/metrics holds the operator's series too),
    scraped and labelled as the chart's ServiceMonitor has the Prometheus Operator do."""
    pod = cluster.operator_pod()
    assert pod is not None
    service = f"{RELEASE}-staticfleet-coordinator"
    endpoint = service_monitor_endpoint(manifest)
    assert endpoint["port"] == "coordinator", endpoint
    return ScrapeTarget(
        path=endpoint["path"],
        honor_labels=bool(endpoint.get("honorLabels", False)),
        job=service,
        address=urllib.parse.urlsplit(cluster.coordinator_base_url()).netloc,
        labels={
            "namespace": OPERATOR_NAMESPACE,
            "pod": pod["metadata"]["name"],
            "service": service,
            "endpoint": "coordinator",
        },
    )


def template_with(container: dict[str, Any]) -> dict[str, Any]:
    spec = managed_group(GROUP)["spec"]["template"]
    spec["spec"]["containers"] = [container]
    return {"template": spec}


def paused_interval(api: PrometheusApi, labels: dict[str, str]) -> tuple[float, float]:
    """When the scraped staticfleet_operator_rollout_paused went to 1, and back to 0."""
    selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
    (series,) = api.query(f"staticfleet_operator_rollout_paused{{{selector}}}[15m]")
    samples = [(float(t), float(v)) for t, v in series["values"]]
    paused_at = next(t for t, v in samples if v == 1)
    resumed_at = next(t for t, v in samples if t > paused_at and v == 0)
    return paused_at, resumed_at


def documented_metrics() -> set[str]:
    """The sample names docs/operator.md and docs/server.md name, as Prometheus stores them
    (a histogram named by its family is looked up by `_count`). Backticked words that are
    no metric (a prefix such as `staticfleet_group`) are dropped by matching the registry."""
    registry = ServerMetrics().registry
    OperatorMetrics(registry)  # `operator run` shares the coordinator's registry
    sample_of: dict[str, str] = {}  # any name a doc may use -> the sample name looked up
    for family in registry.collect():
        if family.type == "histogram":
            for suffix in ("", "_bucket", "_count", "_sum"):
                sample_of[family.name + suffix] = family.name + "_count"
        else:
            suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
            sample_of[family.name] = sample_of[family.name + suffix] = family.name + suffix
    text = "\n".join((ROOT / "docs" / doc).read_text() for doc in ("operator.md", "server.md"))
    named = set(DOCUMENTED.findall(text))
    documented = {sample_of[name] for name in named if name in sample_of}
    if "process_*" in text:  # docs/server.md names the process collector's series as one
        documented |= {v for k, v in sample_of.items() if k.startswith("process_")}
    assert len(documented) >= 20, sorted(documented)  # the docs' tables were found
    return documented


def absent_metrics(api: PrometheusApi, names: set[str], since: float) -> set[str]:
    return {name for name in names if not api.series(name, since)}


def empty_panel_queries(
    api: PrometheusApi, board: dict[str, Any], ns: str, during_pause: float
) -> tuple[list[str], int]:
    """Every panel target's query, Grafana's $namespace set to the scenario's namespace, run
    at the pause and now: those that fail are errors, those empty at both are returned."""
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    empty = []
    for query in queries:
        concrete = query.replace("${namespace}", ns).replace("$namespace", ns)
        assert "$" not in concrete, concrete  # an unknown Grafana variable
        if not (api.query(concrete, at=during_pause) or api.query(concrete)):
            empty.append(query)
    return empty, len(queries)
