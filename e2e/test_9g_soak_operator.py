"""The fault soak's operator variant, short (docs/soak.md, "The operator variant"): a control
plane of its own (the session's must not lose its API server under other scenarios), the
operator's embedded coordinator holding the soak's three groups as adopted ConsumerGroups,
eight member processes, and one of each kind only this variant has (the operator's kill -9,
the API server's kill -9 and restart) with a pause of the operator past the session timeout,
a member's kill -9 and, as root, a partition past the session timeout between a member and
the operator on the soak's bridge. Judged by the checker from the members' logs, the
operator's store and the coordinator's public API."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import BUILD
from e2e.soak_operator import operator_hosts
from staticfleet.soak.checker import check, load_run
from staticfleet.soak.driver import Soak, SoakConfig
from staticfleet.soak.network import missing_privileges
from staticfleet.soak.plan import FaultKind

pytestmark = pytest.mark.timeout(420)

SEED = 36


def test_the_operator_and_its_api_server_killed_lose_no_commit_and_no_member(
    tmp_path: Path, record: Callable[[str, Any], None]
) -> None:
    deck = (
        FaultKind.OPERATOR_KILL,
        FaultKind.APISERVER_RESTART,
        FaultKind.COORDINATOR_PAUSE_LONG,
        FaultKind.MEMBER_KILL,
        *([] if missing_privileges() else [FaultKind.PARTITION_LONG]),
    )
    config = SoakConfig(
        seed=SEED,
        duration_s=300,
        run_dir=tmp_path / "run",
        max_faults=len(deck),
        deck=deck,
        coordinator="operator",
    )
    with operator_hosts(BUILD / "e2e" / "soak-operator") as make_host:
        Soak(config, make_host).run(progress=print)
    report = check(load_run(config.run_dir))
    record("faults_by_kind", report["faults_by_kind"])
    record("recovery_ms", report["recovery_ms"])
    record("restart_ms_by_kind", report["restart_ms_by_kind"])

    assert report["coordinator"] == "operator"
    assert report["faults_by_kind"] == {kind.value: 1 for kind in deck}
    assert report["violations_total"] == 0, report["violations"]
    assert report["final_convergence_ms"] is not None
    assert report["acknowledged_commits"] > 0
    # The operator came back on its store and its coordinator served again only with every
    # group's token registered; the API server came back on its etcd.
    assert set(report["restart_ms_by_kind"]) == {"operator_kill", "apiserver_restart"}
    assert "static_member_not_back_in_journal" not in report.get("not_checked", [])
