"""The operator's Prometheus metrics, in the registry of the embedded coordinator's server.

One class holds every series; the glue (`reconcile`, `webhook`, the handlers) calls it at the
edges, the pure logic (`rollout/`, `identity/`) never does. Labels are bounded: per
ConsumerGroup (`namespace`, `group`) at most, never per pod or member, and a group's series
go when its ConsumerGroup is deleted (`forget_group`).

The registry is passed in: the operator process hands over the coordinator server's, so
`/metrics` on the coordinator port shows both (one scrape target). Without one (tests, a
second operator in one process) the metrics get a registry of their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from coordinator.server.default_metrics import register_defaults
from staticfleet_operator.blockers import BlockerCode
from staticfleet_operator.crd import RolloutPhase
from staticfleet_operator.lag import PartitionLag

PREFIX: Final = "staticfleet_operator"
RESULTS: Final = ("ok", "error")
ADMISSION_RESULTS: Final = ("stamped", "skipped", "rejected")
MEMBER_KINDS: Final = ("desired", "ready", "slots", "missing_expected", "standbys")
PHASES: Final = tuple(phase.value for phase in RolloutPhase)
BLOCKERS: Final = tuple(code.value for code in BlockerCode)

# A pass is a few API calls and a describe: milliseconds, seconds when the API server is slow.
DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class OperatorMetrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, *, partition_lag: bool = False
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        # Per-partition lag series: one per partition of every group, so off by default.
        self.partition_lag = partition_lag
        register_defaults(self.registry)  # once per registry: the server's may hold them
        self.reconciles = Counter(
            f"{PREFIX}_reconciles",
            "Reconcile passes over ConsumerGroups, by result (error: the pass raised)",
            ["result"],
            registry=self.registry,
        )
        self.reconcile_duration = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            "Time one reconcile pass took (lock wait included)",
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.group_members = Gauge(
            f"{PREFIX}_group_members",
            "Member pods per ConsumerGroup: desired (replicas, or live adopted pods), ready "
            "(live pods Ready), slots (identity slots in use, vacant and retiring included), "
            "missing_expected (expected members the coordinator does not list yet), standbys "
            "(hot standbys the coordinator hears from)",
            ["namespace", "group", "kind"],
            registry=self.registry,
        )
        self.rollout_phase = Gauge(
            f"{PREFIX}_rollout_phase",
            "status.rollout.phase per ConsumerGroup: 1 for the phase it is in; no series for the "
            "others",
            ["namespace", "group", "phase"],
            registry=self.registry,
        )
        self.rollout_paused = Gauge(
            f"{PREFIX}_rollout_paused",
            "1 while the ConsumerGroup's rollout is paused (memberReadyTimeoutSeconds passed)",
            ["namespace", "group"],
            registry=self.registry,
        )
        self.rollout_blocked = Gauge(
            f"{PREFIX}_rollout_blocked",
            "status.rollout.blocker per ConsumerGroup: 1, for what its rollout waits for or "
            "paused on (the reason of its Degraded condition and pause Event); no series while "
            "nothing blocks it",
            ["namespace", "group", "reason"],
            registry=self.registry,
        )
        # The consumer protocol (KIP-848): no series for a classic group.
        self.group_converged = Gauge(
            f"{PREFIX}_group_converged",
            "1 while a consumer-protocol (KIP-848) ConsumerGroup has converged (every member "
            "at the group epoch holding its target assignment), 0 while not; no series for a "
            "classic group",
            ["namespace", "group"],
            registry=self.registry,
        )
        self.group_epoch = Gauge(
            f"{PREFIX}_group_epoch",
            "A consumer-protocol ConsumerGroup's group epoch (bumped by every change of "
            "membership or subscription); no series for a classic group",
            ["namespace", "group"],
            registry=self.registry,
        )
        # Kafka-coordinated groups (lag.py): no series until lag was read.
        self.group_lag = Gauge(
            f"{PREFIX}_group_lag",
            "Records a Kafka-coordinated ConsumerGroup is behind, summed over its topics' "
            "partitions (log end offset - committed offset; no commit counts 0), as last read",
            ["namespace", "group"],
            registry=self.registry,
        )
        self.group_partition_lag = Gauge(
            f"{PREFIX}_group_partition_lag",
            "Records behind per partition (only with the operator's --partition-lag-metrics); "
            "no series for a partition the group has no commit for",
            ["namespace", "group", "topic", "partition"],
            registry=self.registry,
        )
        self.kafka_unreachable = Gauge(
            f"{PREFIX}_kafka_unreachable",
            "1 while a Kafka-coordinated ConsumerGroup's cluster does not answer the operator "
            "(reason CoordinatorUnreachable) or refuses it (the refusal's reason, e.g. "
            "KafkaAuthenticationFailed); no series while it answers",
            ["namespace", "group", "reason"],
            registry=self.registry,
        )
        self.member_bounces = Counter(
            f"{PREFIX}_member_bounces",
            "Members recreated by a rollout, by phase (Bounce1, Bounce2, StaticBounce)",
            ["namespace", "group", "phase"],
            registry=self.registry,
        )
        self.batch_leaves = Counter(
            f"{PREFIX}_batch_leaves",
            "Batch LeaveGroup requests sent (scale-down, adopted pods not replaced in time)",
            ["namespace", "group"],
            registry=self.registry,
        )
        self.batch_leave_members = Counter(
            f"{PREFIX}_batch_leave_members",
            "Instance ids named in batch LeaveGroup requests",
            ["namespace", "group"],
            registry=self.registry,
        )
        self.webhook_admissions = Counter(
            f"{PREFIX}_webhook_admissions",
            "Pod admissions by the mutating webhook: stamped (given a slot), skipped (no such "
            "group, invalid spec, managed group, selector mismatch), rejected (the handler failed)",
            ["result"],
            registry=self.registry,
        )
        self.slot_allocations = Counter(
            f"{PREFIX}_slot_allocations",
            "Identity slots handed out to adopted pods at admission (a re-admission of a pod "
            "that already holds its slot does not count)",
            ["namespace", "group"],
            registry=self.registry,
        )
        self.promotions = Counter(
            f"{PREFIX}_standby_promotions",
            "Hot standby promotions, by result (promoted: took over a missing member with no "
            "rebalance; failed: given up, the slot got a plain static replacement)",
            ["namespace", "group", "result"],
            registry=self.registry,
        )
        self.promotion_seconds = Histogram(
            f"{PREFIX}_standby_promotion_seconds",
            "From the pass that decided a promotion to the standby holding the instance id",
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        # Explicit zeros, so `rate()` and absence alerts work before the first event.
        for result in RESULTS:
            self.reconciles.labels(result)
        for admission in ADMISSION_RESULTS:
            self.webhook_admissions.labels(admission)

    # --- per pass ----------------------------------------------------------------------------

    def reconciled(self, seconds: float, *, ok: bool) -> None:
        self.reconciles.labels("ok" if ok else "error").inc()
        self.reconcile_duration.observe(seconds)

    def observe_group(
        self,
        namespace: str,
        group: str,
        *,
        desired: int,
        ready: int,
        slots: int,
        phase: RolloutPhase | str,
        missing_expected: int = 0,
        standbys: int = 0,
        blocker: BlockerCode | None = None,
        converged: bool | None = None,
        group_epoch: int | None = None,
        lag: int | None = None,
        lag_partitions: Sequence[PartitionLag] = (),
    ) -> None:
        """What one pass saw: member counts, the rollout phase and what it waits for; for a
        consumer-protocol group, its convergence and epoch (None: a classic group)."""
        counts = (desired, ready, slots, missing_expected, standbys)
        for kind, value in zip(MEMBER_KINDS, counts, strict=True):
            self.group_members.labels(namespace, group, kind).set(value)
        current = RolloutPhase(phase).value
        # Only the current phase has a series (as for the blocker below): seven explicit
        # zeros per group were 7 of its 16 series, about 4 MiB of the operator at 1,000 groups
        # (docs/performance.md); every query and rule reads `== 1`.
        for name in PHASES:
            if name == current:
                self.rollout_phase.labels(namespace, group, name).set(1)
            else:
                with contextlib.suppress(KeyError):
                    self.rollout_phase.remove(namespace, group, name)
        self.rollout_paused.labels(namespace, group).set(
            1 if current == RolloutPhase.PAUSED.value else 0
        )
        # Only the current blocker has a series: fourteen explicit zeros per group would
        # be most of a thousand groups' series for nothing an alert needs.
        for reason in BLOCKERS:
            if blocker is not None and reason == blocker.value:
                self.rollout_blocked.labels(namespace, group, reason).set(1)
            else:
                with contextlib.suppress(KeyError):
                    self.rollout_blocked.remove(namespace, group, reason)
        consumer: tuple[tuple[Gauge, int | None], ...] = (
            (self.group_converged, None if converged is None else int(converged)),
            (self.group_epoch, group_epoch),
        )
        for gauge, reading in consumer:
            if reading is None:
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, group)
            else:
                gauge.labels(namespace, group).set(reading)
        if lag is not None:
            self.group_lag.labels(namespace, group).set(lag)
        if self.partition_lag:
            for row in lag_partitions:
                if row.committed is not None:
                    self.group_partition_lag.labels(
                        namespace, group, row.topic, str(row.partition)
                    ).set(row.lag)
        # Touch the counters so a group shows explicit zeros from its first pass.
        self.batch_leaves.labels(namespace, group)
        self.batch_leave_members.labels(namespace, group)

    def kafka_reached(self, namespace: str, group: str, problem: str | None) -> None:
        """A Kafka group's pass reached its cluster (`problem` None) or did not (its reason):
        one series while a problem stands, none once the cluster answers again."""
        for labels in _series_of(self.kafka_unreachable, namespace, group):
            if labels["reason"] != problem:
                with contextlib.suppress(KeyError):
                    self.kafka_unreachable.remove(namespace, group, labels["reason"])
        if problem is not None:
            self.kafka_unreachable.labels(namespace, group, problem).set(1)

    # --- events ------------------------------------------------------------------------------

    def bounced(self, namespace: str, group: str, phase: RolloutPhase | str) -> None:
        self.member_bounces.labels(namespace, group, RolloutPhase(phase).value).inc()

    def batch_left(self, namespace: str, group: str, members: int) -> None:
        self.batch_leaves.labels(namespace, group).inc()
        self.batch_leave_members.labels(namespace, group).inc(members)

    def promoted(self, namespace: str, group: str, seconds: float) -> None:
        self.promotions.labels(namespace, group, "promoted").inc()
        self.promotion_seconds.observe(max(seconds, 0.0))

    def promotion_failed(self, namespace: str, group: str) -> None:
        self.promotions.labels(namespace, group, "failed").inc()

    def admission(self, result: str) -> None:
        if result not in ADMISSION_RESULTS:
            raise ValueError(f"unknown admission result {result!r}")
        self.webhook_admissions.labels(result).inc()

    def slot_allocated(self, namespace: str, group: str) -> None:
        self.slot_allocations.labels(namespace, group).inc()

    # --- the ConsumerGroup is gone -------------------------------------------------------------

    def forget_group(self, namespace: str, group: str) -> None:
        """Remove every series of the group (after its finalizer ran)."""
        for kind in MEMBER_KINDS:
            with contextlib.suppress(KeyError):
                self.group_members.remove(namespace, group, kind)
        for result in ("promoted", "failed"):
            with contextlib.suppress(KeyError):
                self.promotions.remove(namespace, group, result)
        for name in PHASES:
            with contextlib.suppress(KeyError):
                self.rollout_phase.remove(namespace, group, name)
            with contextlib.suppress(KeyError):
                self.member_bounces.remove(namespace, group, name)
        for reason in BLOCKERS:
            with contextlib.suppress(KeyError):
                self.rollout_blocked.remove(namespace, group, reason)
        self._forget_partition_lag(namespace, group)
        self.kafka_reached(namespace, group, None)
        for metric in (
            self.group_lag,
            self.group_converged,
            self.group_epoch,
            self.rollout_paused,
            self.batch_leaves,
            self.batch_leave_members,
            self.slot_allocations,
        ):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, group)

    def _forget_partition_lag(self, namespace: str, group: str) -> None:
        for labels in _series_of(self.group_partition_lag, namespace, group):
            with contextlib.suppress(KeyError):
                self.group_partition_lag.remove(
                    namespace, group, labels["topic"], labels["partition"]
                )


def _series_of(gauge: Gauge, namespace: str, group: str) -> list[dict[str, str]]:
    """The label sets of `gauge`'s series for one group (prometheus_client cannot remove
    by a label prefix, so the group's series are found first)."""
    return [
        sample.labels
        for metric in gauge.collect()
        for sample in metric.samples
        if sample.labels["namespace"] == namespace and sample.labels["group"] == group
    ]
