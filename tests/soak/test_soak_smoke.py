"""The soak, short: a real coordinator and eight real member processes in three groups, the
five fault kinds once each (seed 97 draws all five first), judged by the checker. About
35-45 s on two busy cores; `make soak` is the long run (docs/soak.md)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from staticfleet.soak.checker import check, load_run
from staticfleet.soak.driver import Soak, SoakConfig
from staticfleet.soak.plan import FaultKind, draw_fault

pytestmark = [pytest.mark.slow, pytest.mark.crash]

SEED = 97


def test_five_fault_kinds_leave_no_violation(tmp_path: Path) -> None:
    config = SoakConfig(seed=SEED, duration_s=60, run_dir=tmp_path / "run", max_faults=5)
    rng = random.Random(SEED)
    planned = [draw_fault(rng, config.slot_names(), config.session_timeout_ms) for _ in range(5)]
    assert {fault.kind for fault in planned} == set(FaultKind)

    Soak(config).run(progress=lambda _line: None)
    report = check(load_run(config.run_dir))

    assert report["faults_by_kind"] == {kind.value: 1 for kind in FaultKind}
    assert report["violations_total"] == 0, report["violations"]
    assert report["recovery_ms"]["count"] == 5
    assert report["final_convergence_ms"] is not None
    assert report["acknowledged_commits"] > 0
    # The zombie (a static member stopped past its session) came back under its id.
    assert report["journal_kinds"].get("member_removed", 0) >= 1
