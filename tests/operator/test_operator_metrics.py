"""`OperatorMetrics`: the series, their labels, removal with the group, the shared registry."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from coordinator.errors import ErrorCode
from coordinator.server.metrics import ServerMetrics
from staticfleet_operator.blockers import BlockerCode
from staticfleet_operator.metrics import BLOCKERS, PHASES, OperatorMetrics


def value(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def series_of(metrics: OperatorMetrics, group: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (sample.name, dict(sample.labels))
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.labels.get("group") == group
    ]


def test_reconciles_count_by_result_and_time_every_pass() -> None:
    metrics = OperatorMetrics()
    # Explicit zeros before the first pass.
    assert value(metrics, "staticfleet_operator_reconciles_total", result="ok") == 0
    assert value(metrics, "staticfleet_operator_reconciles_total", result="error") == 0
    metrics.reconciled(0.02, ok=True)
    metrics.reconciled(0.03, ok=True)
    metrics.reconciled(1.5, ok=False)
    assert value(metrics, "staticfleet_operator_reconciles_total", result="ok") == 2
    assert value(metrics, "staticfleet_operator_reconciles_total", result="error") == 1
    assert value(metrics, "staticfleet_operator_reconcile_duration_seconds_count") == 3
    assert value(metrics, "staticfleet_operator_reconcile_duration_seconds_sum") == pytest.approx(
        1.55
    )
    assert value(metrics, "staticfleet_operator_reconcile_duration_seconds_bucket", le="0.025") == 1


def test_group_gauges_show_the_last_pass_and_one_phase_at_a_time() -> None:
    metrics = OperatorMetrics()
    metrics.observe_group("ns", "orders", desired=3, ready=2, slots=3, phase="Bounce1")
    members = "staticfleet_operator_group_members"
    labels = {"namespace": "ns", "group": "orders"}
    assert value(metrics, members, **labels, kind="desired") == 3
    assert value(metrics, members, **labels, kind="ready") == 2
    assert value(metrics, members, **labels, kind="slots") == 3
    phase = "staticfleet_operator_rollout_phase"
    # One series, for the phase the group is in (no zeros for the others).
    assert [value(metrics, phase, **labels, phase=p) for p in PHASES] == [
        1 if p == "Bounce1" else None for p in PHASES
    ]
    assert value(metrics, "staticfleet_operator_rollout_paused", **labels) == 0
    # A group with no leave yet shows explicit zeros.
    assert value(metrics, "staticfleet_operator_batch_leaves_total", **labels) == 0

    metrics.observe_group("ns", "orders", desired=3, ready=2, slots=3, phase="Paused")
    assert value(metrics, phase, **labels, phase="Paused") == 1
    assert value(metrics, phase, **labels, phase="Bounce1") is None
    assert value(metrics, "staticfleet_operator_rollout_paused", **labels) == 1
    metrics.observe_group("ns", "orders", desired=3, ready=3, slots=3, phase="Completed")
    assert value(metrics, "staticfleet_operator_rollout_paused", **labels) == 0
    assert value(metrics, members, **labels, kind="ready") == 3
    with pytest.raises(ValueError):
        metrics.observe_group("ns", "orders", desired=0, ready=0, slots=0, phase="Sideways")


def test_the_rollout_blocker_is_one_label_at_a_time_and_goes_with_the_group() -> None:
    metrics = OperatorMetrics()
    labels = {"namespace": "ns", "group": "orders"}
    blocked = "staticfleet_operator_rollout_blocked"
    metrics.observe_group(
        "ns",
        "orders",
        desired=3,
        ready=2,
        slots=3,
        phase="Paused",
        blocker=BlockerCode.POD_NOT_READY,
    )
    assert [value(metrics, blocked, **labels, reason=r) for r in BLOCKERS] == [
        1 if r == "PodNotReady" else None for r in BLOCKERS
    ]
    metrics.observe_group(
        "ns",
        "orders",
        desired=3,
        ready=2,
        slots=3,
        phase="Bounce1",
        blocker=BlockerCode.GROUP_NOT_STABLE,
    )
    assert value(metrics, blocked, **labels, reason="PodNotReady") is None
    assert value(metrics, blocked, **labels, reason="GroupNotStable") == 1
    metrics.observe_group("ns", "orders", desired=3, ready=3, slots=3, phase="Bounce1")
    assert all(value(metrics, blocked, **labels, reason=r) is None for r in BLOCKERS)
    metrics.observe_group(
        "ns",
        "orders",
        desired=3,
        ready=2,
        slots=3,
        phase="Paused",
        blocker=BlockerCode.POD_NOT_READY,
    )
    metrics.forget_group("ns", "orders")
    assert value(metrics, blocked, **labels, reason="PodNotReady") is None


def test_event_counters() -> None:
    metrics = OperatorMetrics()
    labels = {"namespace": "ns", "group": "orders"}
    metrics.bounced("ns", "orders", "Bounce1")
    metrics.bounced("ns", "orders", "Bounce1")
    metrics.bounced("ns", "orders", "Bounce2")
    metrics.batch_left("ns", "orders", 2)
    metrics.batch_left("ns", "orders", 3)
    metrics.slot_allocated("ns", "orders")
    for result in ("stamped", "stamped", "skipped", "rejected"):
        metrics.admission(result)
    bounces = "staticfleet_operator_member_bounces_total"
    assert value(metrics, bounces, **labels, phase="Bounce1") == 2
    assert value(metrics, bounces, **labels, phase="Bounce2") == 1
    assert value(metrics, "staticfleet_operator_batch_leaves_total", **labels) == 2
    assert value(metrics, "staticfleet_operator_batch_leave_members_total", **labels) == 5
    assert value(metrics, "staticfleet_operator_slot_allocations_total", **labels) == 1
    admissions = "staticfleet_operator_webhook_admissions_total"
    assert value(metrics, admissions, result="stamped") == 2
    assert value(metrics, admissions, result="skipped") == 1
    assert value(metrics, admissions, result="rejected") == 1
    with pytest.raises(ValueError):
        metrics.admission("maybe")


def test_forget_group_removes_that_groups_series_only() -> None:
    metrics = OperatorMetrics()
    for group in ("orders", "payments"):
        metrics.observe_group("ns", group, desired=2, ready=2, slots=2, phase="Bounce2")
        metrics.bounced("ns", group, "Bounce2")
        metrics.batch_left("ns", group, 1)
        metrics.slot_allocated("ns", group)
    metrics.reconciled(0.1, ok=True)
    assert series_of(metrics, "orders")
    before = series_of(metrics, "payments")

    metrics.forget_group("ns", "orders")
    assert series_of(metrics, "orders") == []
    assert series_of(metrics, "payments") == before
    assert value(metrics, "staticfleet_operator_reconciles_total", result="ok") == 1
    metrics.forget_group("ns", "orders")  # twice is harmless
    metrics.forget_group("other", "never-seen")


def test_labels_stay_per_group() -> None:
    metrics = OperatorMetrics()
    metrics.observe_group("ns", "orders", desired=500, ready=500, slots=500, phase="Idle")
    for _ in range(500):
        metrics.bounced("ns", "orders", "StaticBounce")
        metrics.slot_allocated("ns", "orders")
    # However many members: 3 member kinds, one series per phase, a handful of counters.
    assert len(series_of(metrics, "orders")) < 3 + 2 * len(PHASES) + 10
    label_names = {name for _, labels in series_of(metrics, "orders") for name in labels}
    assert label_names <= {"namespace", "group", "kind", "phase"}


def test_a_shared_registry_exposes_the_coordinators_and_the_operators_series() -> None:
    server = ServerMetrics()
    operator = OperatorMetrics(server.registry)
    assert operator.registry is server.registry
    operator.reconciled(0.01, ok=True)
    server.observe_heartbeat(ErrorCode.NONE)
    text = server.exposition().decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert "staticfleet_operator_reconciles" in names
    assert "staticfleet_heartbeats" in names
    # Two operators on one registry would clash: the operator registers once per process.
    with pytest.raises(ValueError):
        OperatorMetrics(server.registry)
    # Without a registry, each has its own.
    assert OperatorMetrics().registry is not OperatorMetrics().registry
    assert isinstance(OperatorMetrics().registry, CollectorRegistry)


def test_a_consumer_protocol_group_has_convergence_and_epoch_series_a_classic_one_none() -> None:
    metrics = OperatorMetrics()
    labels = {"namespace": "ns", "group": "orders"}
    converged, epoch = "staticfleet_operator_group_converged", "staticfleet_operator_group_epoch"
    common: dict[str, Any] = {"desired": 3, "ready": 3, "slots": 3, "phase": "Completed"}
    metrics.observe_group("ns", "orders", **common, converged=False, group_epoch=4)
    assert (value(metrics, converged, **labels), value(metrics, epoch, **labels)) == (0, 4)
    metrics.observe_group("ns", "orders", **common, converged=True, group_epoch=5)
    assert (value(metrics, converged, **labels), value(metrics, epoch, **labels)) == (1, 5)
    metrics.observe_group("ns", "orders", **common)  # back on the classic protocol
    assert value(metrics, converged, **labels) is None and value(metrics, epoch, **labels) is None
    metrics.observe_group("ns", "orders", **common, converged=True, group_epoch=6)
    metrics.forget_group("ns", "orders")
    assert value(metrics, converged, **labels) is None and value(metrics, epoch, **labels) is None


def test_a_kafka_cluster_unreachable_or_refusing_has_one_series_until_it_answers() -> None:
    metrics = OperatorMetrics()
    name = "staticfleet_operator_kafka_unreachable"
    metrics.kafka_reached("ns", "orders", "CoordinatorUnreachable")
    metrics.kafka_reached("ns", "other", "KafkaAuthenticationFailed")
    assert value(metrics, name, namespace="ns", group="orders", reason="CoordinatorUnreachable")
    # Reached, but refused: the reason moves, never two series for one group.
    metrics.kafka_reached("ns", "orders", "KafkaAuthenticationFailed")
    assert [labels["reason"] for n, labels in series_of(metrics, "orders") if n == name] == [
        "KafkaAuthenticationFailed"
    ]
    metrics.kafka_reached("ns", "orders", None)
    assert [n for n, _ in series_of(metrics, "orders") if n == name] == []
    assert value(metrics, name, namespace="ns", group="other", reason="KafkaAuthenticationFailed")
    metrics.forget_group("ns", "other")
    assert [n for n, _ in series_of(metrics, "other") if n == name] == []
