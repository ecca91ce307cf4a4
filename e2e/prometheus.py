"""A real Prometheus server for the e2e: it scrapes the operator pod's /metrics and evaluates
the chart's PrometheusRule, so the alerts and the dashboard are checked against live series.

The server is built from its Go module (tools/prometheus/go.mod, the same release as the
promtool of `make chart-lint`) by `scripts/build-go-tool.sh prometheus`, and runs as a host
process on loopback beside the control plane. There is no Prometheus Operator: the scrape
config is written here from the chart's rendered ServiceMonitor (its path and honorLabels),
with the target labels the Prometheus Operator would give (job = the coordinator Service,
namespace, pod, service, endpoint), so rules that select on them (StaticfleetOperatorDown)
see what they would see in a cluster.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from e2e.controlplane import free_ports
from e2e.fleet import wait_for

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / "build" / "bin" / "prometheus"
RULE_FILE = "rules.yaml"


@dataclass(frozen=True)
class ScrapeTarget:
    """One static target: `address` (host:port) scraped at `path`, with `labels` on it;
    `honor_labels` as the ServiceMonitor's honorLabels (scraped labels win a clash)."""

    job: str
    address: str
    labels: Mapping[str, str]
    path: str = "/metrics"
    honor_labels: bool = False


def build() -> Path:
    """The Prometheus binary, built once from tools/prometheus/go.mod (reused afterwards)."""
    subprocess.run([str(ROOT / "scripts" / "build-go-tool.sh"), "prometheus"], check=True)
    return BINARY


def _rule_groups() -> Callable[[str], list[dict[str, object]]]:
    """scripts/check_rules.py's extraction (the one promtool's unit tests use). scripts/ is
    a folder of scripts, not a package: loaded from its path, as tests/ do."""
    spec = importlib.util.spec_from_file_location(
        "check_rules", ROOT / "scripts" / "check_rules.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return cast(Callable[[str], list[dict[str, object]]], module.rule_groups)


def chart_rule_file(manifest: str) -> str:
    """The rule file Prometheus loads: the groups of the rendered PrometheusRule, unchanged."""
    groups = _rule_groups()(manifest)
    if not groups:
        raise ValueError("the rendered chart holds no PrometheusRule (metrics.prometheusRule)")
    return yaml.safe_dump({"groups": groups}, sort_keys=False)


def service_monitor_endpoint(manifest: str) -> dict[str, Any]:
    """The one endpoint of the rendered chart's ServiceMonitor (metrics.serviceMonitor)."""
    for doc in yaml.safe_load_all(manifest):
        if isinstance(doc, dict) and doc.get("kind") == "ServiceMonitor":
            (endpoint,) = doc["spec"]["endpoints"]
            return dict(endpoint)
    raise ValueError("the rendered chart holds no ServiceMonitor (metrics.serviceMonitor)")


def dashboard_of(manifest: str) -> dict[str, Any]:
    """The Grafana dashboard JSON carried by the rendered chart's dashboard ConfigMap."""
    for doc in yaml.safe_load_all(manifest):
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
            for key, value in (doc.get("data") or {}).items():
                if key.endswith(".json"):
                    board: dict[str, Any] = json.loads(value)
                    return board
    raise ValueError("the rendered chart holds no dashboard ConfigMap (grafana.dashboard)")


def config(
    targets: Sequence[ScrapeTarget], *, scrape_interval_s: float, evaluation_interval_s: float
) -> dict[str, Any]:
    """prometheus.yml: the static targets and the chart's rule file."""
    return {
        "global": {
            "scrape_interval": f"{scrape_interval_s:g}s",
            "scrape_timeout": f"{min(scrape_interval_s, 1.0):g}s",
            "evaluation_interval": f"{evaluation_interval_s:g}s",
        },
        "rule_files": [RULE_FILE],
        "scrape_configs": [
            {
                "job_name": target.job,
                "metrics_path": target.path,
                "honor_labels": target.honor_labels,
                "static_configs": [{"targets": [target.address], "labels": dict(target.labels)}],
            }
            for target in targets
        ],
    }


class PrometheusError(RuntimeError):
    """The HTTP API answered with status error, or not at all."""


@dataclass(frozen=True)
class PrometheusApi:
    """The few /api/v1 calls the scenario makes."""

    base_url: str

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.base_url}{path}{query}", timeout=10) as response:
                body = json.loads(response.read())
        except OSError as exc:
            raise PrometheusError(f"GET {path}: {exc}") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"GET {path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (a scalar comes back as one sample)."""
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        data = self._get("/api/v1/query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def series(self, match: str, start: float) -> list[dict[str, str]]:
        """Every series matching `match` that had a sample since `start`."""
        data: list[dict[str, str]] = self._get(
            "/api/v1/series", {"match[]": match, "start": f"{start:.3f}"}
        )
        return data

    def alerts(self) -> list[dict[str, Any]]:
        """The pending and firing alerts (resolved ones are not listed)."""
        alerts: list[dict[str, Any]] = self._get("/api/v1/alerts")["alerts"]
        return alerts

    def targets_up(self) -> bool:
        active = self._get("/api/v1/targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


@contextlib.contextmanager
def running_prometheus(
    workdir: Path,
    targets: Sequence[ScrapeTarget],
    rule_file: str,
    *,
    scrape_interval_s: float = 1.0,
    evaluation_interval_s: float = 1.0,
) -> Iterator[PrometheusApi]:
    """A Prometheus process on a free loopback port, its targets scraped once before it is
    handed over; stopped (SIGTERM, then SIGKILL) on exit. `workdir` is emptied first; the
    log is workdir/prometheus.log and the TSDB workdir/data (kept after the run to look at)."""
    binary = build()
    shutil.rmtree(workdir, ignore_errors=True)  # a fresh TSDB: no series of an earlier run
    workdir.mkdir(parents=True)
    (workdir / RULE_FILE).write_text(rule_file)
    cfg = config(
        targets, scrape_interval_s=scrape_interval_s, evaluation_interval_s=evaluation_interval_s
    )
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (port,) = free_ports(1)
    log = (workdir / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            str(binary),
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
        start_new_session=True,
    )
    api = PrometheusApi(f"http://127.0.0.1:{port}")
    try:
        wait_for("Prometheus to be ready", api.ready, timeout_s=60, interval_s=0.5)
        wait_for("every scrape target up", api.targets_up, timeout_s=30, interval_s=0.5)
        yield api
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def firing(api: PrometheusApi, alert: str, labels: Mapping[str, str]) -> bool:
    """`alert` is firing with (at least) these labels."""
    return any(
        a["labels"].get("alertname") == alert
        and a["state"] == "firing"
        and all(a["labels"].get(k) == v for k, v in labels.items())
        for a in api.alerts()
    )


def listed(api: PrometheusApi, alert: str, labels: Mapping[str, str]) -> bool:
    """`alert` is pending or firing with these labels (not yet resolved)."""
    return any(
        a["labels"].get("alertname") == alert
        and all(a["labels"].get(k) == v for k, v in labels.items())
        for a in api.alerts()
    )
