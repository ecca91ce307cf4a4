"""The soak's Kafka variant, short: a Kafka broker of its own (a kill -9 of the session's
shared broker would break other tests), eight real member processes in three groups on it,
each of the variant's process kinds once (broker kill -9 and restart, broker SIGSTOP below
and past the session timeout, member kill -9, a member zombie) and, as root, a partition
past the session timeout between a member and the broker (through the soak's bridge and
relay), judged by the checker from the members' logs and the broker's public API. 45-90 s
on two cores (more when busy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from staticfleet.soak.checker import check, load_run
from staticfleet.soak.driver import KAFKA_LEFT_OUT, Soak, SoakConfig
from staticfleet.soak.network import missing_privileges
from staticfleet.soak.plan import BROKER_KINDS, FaultKind

# A broker start and a restart after kill -9 take 10-20 s each on two busy cores.
pytestmark = [pytest.mark.slow, pytest.mark.crash, pytest.mark.kafka, pytest.mark.timeout(300)]

SEED = 97


def test_one_round_on_a_kafka_broker_leaves_no_violation(tmp_path: Path) -> None:
    deck = (
        *sorted(BROKER_KINDS),
        FaultKind.MEMBER_KILL,
        FaultKind.MEMBER_PAUSE,
        *([] if missing_privileges() else [FaultKind.PARTITION_LONG]),
    )
    config = SoakConfig(
        seed=SEED,
        duration_s=120,
        run_dir=tmp_path / "run",
        max_faults=len(deck),
        deck=deck,
        coordinator="kafka",
    )
    Soak(config).run(progress=lambda _line: None)
    report = check(load_run(config.run_dir))

    assert report["coordinator"] == "kafka"
    assert report["fault_kinds"] == [kind.value for kind in deck]
    assert set(report["fault_kinds_left_out"]) <= {kind.value for kind in KAFKA_LEFT_OUT}
    assert report["faults_by_kind"] == {kind.value: 1 for kind in deck}
    assert report["violations_total"] == 0, report["violations"]
    assert report["recovery_ms"]["count"] == len(deck)
    assert report["final_convergence_ms"] is not None
    assert report["acknowledged_commits"] > 0
    # The broker came back from its kill -9 on the same log directory: the checker compared
    # the offsets it served after the restart with those acknowledged before the kill.
    assert report["restart_ms_by_kind"]["broker_kill"]["count"] == 1
    assert "static_member_not_back_in_journal" in report["not_checked"]
    # The zombie and the members behind the stopped broker lost their partitions first.
    lost = [
        row
        for process in load_run(config.run_dir).processes
        for row in process.rows
        if row.get("event") == "lost"
    ]
    assert lost
