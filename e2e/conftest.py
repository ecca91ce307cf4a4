"""e2e/results.json: what the end-to-end scenarios measured, merged per scenario.

The scenarios are numbered and run on the real node in the order e2e/node/conftest.py gives
them (1 and 2 on the bare node first, the others with its release), but 9g, which runs a
control plane of its own (docs/soak.md).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import BUILD, ROOT
from e2e.results import merged

RESULTS_FILE = ROOT / "e2e" / "results.json"

_figures: dict[str, dict[str, Any]] = {}
_outcomes: dict[str, dict[str, Any]] = {}
_started = time.time()


def _scenario_of(nodeid: str) -> str:
    return Path(nodeid.split("::")[0]).stem.removeprefix("test_")


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[[str, Any], None]:
    """Record a figure for e2e/results.json under this scenario."""
    scenario = _scenario_of(request.node.nodeid)

    def put(key: str, value: Any) -> None:
        _figures.setdefault(scenario, {})[key] = value

    return put


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Only the numbered scenarios go to results.json (not the unit tests beside them).
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
        "cluster": "node",
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
