"""Prometheus metrics for one server, in a registry of its own (never the global one), so
two servers in one process (tests, the operator) do not share or clash on series.

Counters follow the journal (every rebalance is a journal event, whoever caused it); the
per-group gauges are refreshed from `describe_groups` at scrape time, so they show the
coordinator's truth rather than an echo of events, and groups that are gone disappear.
"""

from __future__ import annotations

import contextlib
import logging
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from coordinator.errors import ErrorCode
from coordinator.journal import JournalEvent, JournalKind
from coordinator.messages import DescribedGroup, ListedGroup
from coordinator.server.default_metrics import register_defaults
from coordinator.state import GroupState

log = logging.getLogger(__name__)

_STATES = [state.value for state in GroupState]

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Joins and syncs are long polls: they last as long as the join phase or the leader's
# assignment takes, which can be seconds to minutes, so the buckets reach far.
LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)


def safe_label(value: str) -> str:
    """A label value with control characters written as escapes. New ids cannot contain
    them (the coordinator refuses them), but a store written by an older version may."""
    return "".join(
        f"\\x{ord(char):02x}" if unicodedata.category(char) == "Cc" else char for char in value
    )


class GroupSource(Protocol):
    async def list_groups(self) -> list[ListedGroup]: ...

    async def describe_groups(self, group_ids: list[str]) -> list[DescribedGroup]: ...


class ServingCertificate(Protocol):
    """The serving TLS (coordinator/server/tls.py `ReloadingTls`): when its certificate
    expires, None when unknown."""

    @property
    def not_after(self) -> float | None: ...


class ConnectionCounts(Protocol):
    """The connection guard's counts (coordinator/server/connections.py `ConnectionGuard`)."""

    @property
    def open_total(self) -> int: ...

    @property
    def refused(self) -> Mapping[str, int]: ...


class ConnectionsCollector(Collector):
    """Open connections and refusals by reason, read from the guard at scrape time: the
    guard keeps plain integers, so admitting a connection costs no metric update."""

    def __init__(self, counts: ConnectionCounts, reasons: tuple[str, ...]) -> None:
        self._counts = counts
        self._reasons = reasons

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(
            "staticfleet_coordinator_connections_open",
            "Client connections the server holds open",
            value=self._counts.open_total,
        )
        refused = CounterMetricFamily(
            "staticfleet_coordinator_connections_refused",
            "Connections closed as soon as accepted, by reason: descriptors (at the "
            "open-file limit), per_address (the cap on connections per client address)",
            labels=["reason"],
        )
        # Every reason, so a refusal shows as an increase from an explicit 0.
        for reason in self._reasons:
            refused.add_metric([reason], self._counts.refused.get(reason, 0))
        yield refused


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        register_defaults(self.registry)
        self._certificate_expiry: Gauge | None = None
        # A group's label is `group`, as in the operator's series (staticfleet_operator_*).
        self.rebalances = Counter(
            "staticfleet_group_rebalances",
            "Rebalances started per group (journal rebalance_started events)",
            ["group"],
            registry=self.registry,
        )
        self.generation = Gauge(
            "staticfleet_group_generation",
            "Current generation id per group",
            ["group"],
            registry=self.registry,
        )
        self.members = Gauge(
            "staticfleet_group_members",
            "Current number of members per group",
            ["group"],
            registry=self.registry,
        )
        # A gauge per (group, state) rather than prometheus_client's Enum, whose state label
        # is named after the metric: `state` reads better in PromQL and matches the docs.
        self.state = Gauge(
            "staticfleet_group_state",
            "Current state per group: 1 for the state the group is in, 0 for the others",
            ["group", "state"],
            registry=self.registry,
        )
        self.join_latency = Histogram(
            "staticfleet_join_latency_seconds",
            "Time from a JoinGroup request to its response (long poll)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.sync_latency = Histogram(
            "staticfleet_sync_latency_seconds",
            "Time from a SyncGroup request to its response (followers wait for the leader)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.heartbeats = Counter(
            "staticfleet_heartbeats",
            "Heartbeats answered, by result",
            ["error"],
            registry=self.registry,
        )
        self.request_errors = Counter(
            "staticfleet_request_errors",
            "Requests answered with an error code (Kafka code in a 200 body, or a 4xx/5xx)",
            ["operation", "error"],
            registry=self.registry,
        )

    def serve_certificate(self, tls: ServingCertificate) -> None:
        """Export when the serving certificate expires (read at scrape time, so a reload
        shows at once). No series without TLS, or when its expiry cannot be read."""
        if tls.not_after is None or self._certificate_expiry is not None:
            return
        self._certificate_expiry = Gauge(
            "staticfleet_coordinator_tls_certificate_expiry_timestamp_seconds",
            "When the coordinator's serving certificate expires (notAfter, Unix seconds)",
            registry=self.registry,
        )
        self._certificate_expiry.set_function(lambda: tls.not_after or 0.0)

    def watch_connections(self, counts: ConnectionCounts, reasons: tuple[str, ...]) -> None:
        """Export the server's open connections and its refusals (`reasons`: every label
        value, shown from 0)."""
        self.registry.register(ConnectionsCollector(counts, reasons))

    def on_journal_event(self, event: JournalEvent) -> None:
        """Journal listener; runs inside the coordinator, so it must never raise."""
        try:
            self._apply(event)
        except Exception:
            log.exception("metrics: cannot apply journal event %s", event.kind)

    def _apply(self, event: JournalEvent) -> None:
        if event.kind == JournalKind.REBALANCE_STARTED:
            self.rebalances.labels(safe_label(event.group_id)).inc()
        elif event.kind == JournalKind.GENERATION_STARTED:
            self.generation.labels(safe_label(event.group_id)).set(event.generation_id)
        elif event.kind == JournalKind.GROUP_DELETED:
            group = safe_label(event.group_id)
            for metric in (self.rebalances, self.generation, self.members):
                with contextlib.suppress(KeyError):
                    metric.remove(group)
            for state in _STATES:
                with contextlib.suppress(KeyError):
                    self.state.remove(group, state)

    def observe_error(self, operation: str, code: ErrorCode) -> None:
        if code is not ErrorCode.NONE:
            self.request_errors.labels(operation, code.name).inc()

    def observe_heartbeat(self, code: ErrorCode) -> None:
        self.heartbeats.labels(code.name).inc()

    async def refresh(self, source: GroupSource) -> None:
        """Reset the per-group gauges to what the coordinator describes right now."""
        listed = await source.list_groups()
        described = await source.describe_groups([group.group_id for group in listed])
        # Clear after the awaits: nothing else runs between here and the exposition, so a
        # scrape never sees a half-refreshed set.
        self.generation.clear()
        self.members.clear()
        self.state.clear()
        for group in described:
            if group.error_code is not ErrorCode.NONE:
                continue
            self.generation.labels(safe_label(group.group_id)).set(group.generation_id)
            self.members.labels(safe_label(group.group_id)).set(len(group.members))
            # Touch the counter so a group that never rebalanced shows an explicit 0.
            self.rebalances.labels(safe_label(group.group_id))
            if group.group_state in _STATES:
                for state in _STATES:
                    value = 1 if state == group.group_state else 0
                    self.state.labels(safe_label(group.group_id), state).set(value)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
