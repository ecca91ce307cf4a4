"""Session fixtures for the end-to-end scenarios, and e2e/results.json.

`STATICFLEET_E2E_CLUSTER=local` (default, `make e2e`): our control plane and node agent.
`STATICFLEET_E2E_CLUSTER=kind` (`make e2e-kind`): the cluster in $KUBECONFIG.
The scenarios are numbered and run in file order: 1 and 2 here (2 installs and uninstalls the
chart itself); the others run on the real node, with its own release (e2e/node/conftest.py),
but 9g, which runs a control plane of its own (docs/soak.md).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import (
    BUILD,
    CHART,
    OPERATOR_NAMESPACE,
    RELEASE,
    ROOT,
    Cluster,
    cluster_for,
    pod_ready,
)
from e2e.fleet import wait_for
from e2e.results import merged

CLUSTER_KIND = os.environ.get("STATICFLEET_E2E_CLUSTER", "local")
RESULTS_FILE = ROOT / "e2e" / ("results.json" if CLUSTER_KIND == "local" else "results-kind.json")

_figures: dict[str, dict[str, Any]] = {}
_outcomes: dict[str, dict[str, Any]] = {}
_started = time.time()


def _scenario_of(nodeid: str) -> str:
    return Path(nodeid.split("::")[0]).stem.removeprefix("test_")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    workdir = BUILD / "e2e" / f"run-{CLUSTER_KIND}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    started = time.monotonic()
    with cluster_for(CLUSTER_KIND, workdir) as running:
        _figures.setdefault("_session", {})["cluster_start_s"] = round(
            time.monotonic() - started, 1
        )
        yield running


@pytest.fixture(scope="session")
def crds_applied(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", str(ROOT / "crds"))
    cluster.wait_crd_established("consumergroups.staticfleet.dev")


def install_chart(cluster: Cluster) -> None:
    cluster.helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        OPERATOR_NAMESPACE,
        "--create-namespace",
        *cluster.chart_values(),
        "--wait",
        "--timeout",
        "180s",
    )
    wait_for(
        "the operator pod to be Ready",
        lambda: (pod := cluster.operator_pod()) is not None and pod_ready(pod),
        timeout_s=120,
    )


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[[str, Any], None]:
    """Record a figure for e2e/results.json under this scenario."""
    scenario = _scenario_of(request.node.nodeid)

    def put(key: str, value: Any) -> None:
        _figures.setdefault(scenario, {})[key] = value

    return put


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Only the numbered scenarios go to results.json (not the node agent's unit tests).
    if not _scenario_of(report.nodeid)[:1].isdigit():
        return
    if report.when == "call" or report.outcome != "passed":
        scenario = _scenario_of(report.nodeid)
        entry = _outcomes.setdefault(scenario, {"seconds": 0.0, "outcome": "passed"})
        entry["seconds"] = round(entry["seconds"] + report.duration, 1)
        if report.outcome != "passed":
            entry["outcome"] = report.outcome


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _outcomes:
        return
    build_times_file = BUILD / "e2e" / "build-times.json"
    build = json.loads(build_times_file.read_text()) if build_times_file.exists() else {}
    # The first build from empty Go caches, measured once (see e2e/README.md, "Time").
    cold_file = ROOT / "e2e" / "cold-build.json"
    cold = json.loads(cold_file.read_text()) if cold_file.exists() else None
    results = {
        "cluster": CLUSTER_KIND,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "session_seconds": round(time.time() - _started, 1),
        "build": build,
        "first_build_cold": cold,
        "session": _figures.get("_session", {}),
        "scenarios": {
            name: {**outcome, **_figures.get(name, {})}
            for name, outcome in sorted(_outcomes.items())
        },
    }
    # Merged: a session of a few scenarios keeps the others' figures (e2e/results.py).
    previous = json.loads(RESULTS_FILE.read_text()) if RESULTS_FILE.exists() else None
    known = {
        _scenario_of(str(path.relative_to(ROOT))) for path in (ROOT / "e2e").rglob("test_*.py")
    }
    RESULTS_FILE.write_text(
        json.dumps(merged(previous, results, known), indent=2, sort_keys=True) + "\n"
    )
