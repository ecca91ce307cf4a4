"""Watching a rollout as a user would, and judging it afterwards: phases seen in
`status.rollout`, pods created per slot and protocol, and ownership from members' logs."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from e2e.cluster import Cluster
from e2e.fleet import PodSighting, member_logs_from_text
from e2e.groups import group_status
from staticfleet.demo.ownership import (
    MemberLog,
    all_holdings,
    max_simultaneous_owners,
    ownership_overlaps,
)


@dataclass
class PhaseWatcher:
    """Polls `status.rollout.phase` in a thread and keeps the sequence of phases seen."""

    cluster: Cluster
    namespace: str
    name: str
    phases: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PhaseWatcher:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        # One last look: the caller stops once it has seen the final phase itself, which may be
        # between two of the thread's polls (each a kubectl call, slow on a loaded machine).
        self._poll()
        return self.phases

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(0.3)

    def _poll(self) -> None:
        try:
            phase = (
                group_status(self.cluster, self.namespace, self.name).get("rollout") or {}
            ).get("phase")
        except Exception:  # the API server briefly busy: keep watching
            phase = None
        if phase and (not self.phases or self.phases[-1] != phase):
            self.phases.append(phase)


def bounces_per_slot(sightings: Iterable[PodSighting], since: float) -> dict[str, list[str]]:
    """slot -> protocols of the pods created for it after `since`, in creation order."""
    per_slot: dict[str, list[str]] = {}
    for sighting in sorted(sightings, key=lambda s: s.seen_at):
        if sighting.seen_at >= since and sighting.slot is not None:
            per_slot.setdefault(sighting.slot, []).append(sighting.protocol or "?")
    return per_slot


def member_logs(
    cluster: Cluster, namespace: str, pod_names: Iterable[str], container: str = "member"
) -> list[MemberLog]:
    """Every member process's event log from these pods' `container` (every incarnation's, on
    a cluster that follows them), one MemberLog per process."""
    logs: list[MemberLog] = []
    for pod in sorted(set(pod_names)):
        logs.extend(member_logs_from_text(pod, cluster.container_log(namespace, pod, container)))
    return logs


@dataclass(frozen=True)
class Ownership:
    processes: int
    max_owners: int
    overlaps: int


def ownership(logs: list[MemberLog]) -> Ownership:
    holdings = all_holdings(logs)
    end_ms = int(time.time() * 1000)
    return Ownership(
        processes=len(logs),
        max_owners=max_simultaneous_owners(holdings, end_ms),
        overlaps=len(ownership_overlaps(holdings, end_ms)),
    )


def doubly_assigned(journal: Iterable[dict[str, Any]]) -> list[tuple[int, str, int]]:
    """(generation, topic, partition) the coordinator gave to two members in one generation."""
    counts: Counter[tuple[int, str, int]] = Counter()
    for row in journal:
        if row["kind"] == "assignment":
            for topic, partition in (row.get("detail") or {}).get("partitions") or []:
                counts[(int(row["generation_id"]), str(topic), int(partition))] += 1
    return sorted(key for key, count in counts.items() if count > 1)
