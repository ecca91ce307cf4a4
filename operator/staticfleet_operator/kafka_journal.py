"""A rebalance journal for groups on a Kafka cluster, written from what describe shows.

A Kafka cluster keeps no journal the analytics (`pipeline/analytics.py`) could read, so the
operator writes one: each pass's DescribeGroups is compared with the last one seen, and a
change becomes journal rows in the embedded coordinator's format (`coordinator.journal`,
JSON lines, one file per group id): `rebalance_started` when the group is seen rebalancing
(or, if a whole rebalance fell between two passes, when its result is seen),
`generation_started` + one `assignment` per member + `stable` when a new assignment is seen
Stable (and for the assignment found at the first sight), `static_rejoin` when an
instance id got a new member id and kept its partitions.

What it cannot see: anything shorter than a pass (the interval, 2 s by default), and the
broker's generation (DescribeGroups has none: the rows carry the generation read from the
members' subscriptions, see `backends.from_kafka`). Timestamps are the operator's clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from coordinator import DescribedGroup, ErrorCode
from coordinator.journal import JournalEvent, JournalKind
from coordinator.protocol import ProtocolError, decode_assignment

_REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance"})


@dataclass
class _Seen:
    rebalancing: bool = False
    protocol: str = ""
    generation: int = -1
    # instance id (or member id for dynamic members) -> (member id, partitions)
    owners: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = field(default_factory=dict)


def _partitions(raw: bytes) -> tuple[tuple[str, int], ...]:
    if not raw:
        return ()
    try:
        return tuple(sorted((tp.topic, tp.partition) for tp in decode_assignment(raw).partitions))
    except ProtocolError:
        return ()


_Row = tuple[str, str | None, str | None, dict[str, Any]]


def _assignments(owners: dict[str, tuple[str, tuple[tuple[str, int], ...]]]) -> list[_Row]:
    rows: list[_Row] = []
    for key, (member_id, parts) in sorted(owners.items()):
        instance = key if key != member_id else None
        detail = {"partitions": [[topic, p] for topic, p in parts]}
        rows.append((JournalKind.ASSIGNMENT, member_id, instance, detail))
    return rows


class RebalanceJournal:
    """Appends journal rows to `<directory>/<group id>.jsonl`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._seen: dict[str, _Seen] = {}
        self._seq: dict[str, int] = {}

    def path(self, group_id: str) -> Path:
        return self.directory / f"{group_id}.jsonl"

    def observe(self, group: DescribedGroup, now: datetime) -> list[JournalEvent]:
        """Rows for what changed since the last describe of this group (written, returned)."""
        if group.error_code is not ErrorCode.NONE:
            return []
        ts_ms = int(now.timestamp() * 1000)
        seen = self._seen.get(group.group_id)
        rows: list[_Row] = []
        rebalancing = group.group_state in _REBALANCING
        owners = {
            (m.group_instance_id or m.member_id): (m.member_id, _partitions(m.member_assignment))
            for m in group.members
        }
        started = seen is not None and seen.rebalancing
        if rebalancing and not started:
            rows.append((JournalKind.REBALANCE_STARTED, None, None, {"reason": "seen by describe"}))
            started = True
        if group.group_state == "Stable" and seen is None:
            # The first sight: the assignment as found (what later moves are counted from).
            rows.append((JournalKind.GENERATION_STARTED, None, None, {}))
            rows.extend(_assignments(owners))
            rows.append((JournalKind.STABLE, None, None, {}))
        if group.group_state == "Stable" and seen is not None:
            moved = (
                group.protocol_data != seen.protocol or group.generation_id != seen.generation
            ) or {key: parts for key, (_, parts) in owners.items()} != {
                key: parts for key, (_, parts) in seen.owners.items()
            }
            if moved:
                if not started:
                    rows.append(
                        (JournalKind.REBALANCE_STARTED, None, None, {"reason": "seen by describe"})
                    )
                rows.append((JournalKind.GENERATION_STARTED, None, None, {}))
                rows.extend(_assignments(owners))
                rows.append((JournalKind.STABLE, None, None, {}))
            else:
                for key, (member_id, _) in sorted(owners.items()):
                    before = seen.owners.get(key)
                    if before is not None and before[0] != member_id and key != member_id:
                        rows.append((JournalKind.STATIC_REJOIN, member_id, key, {}))
        if group.group_state == "Stable" or seen is None:
            self._seen[group.group_id] = _Seen(
                rebalancing, group.protocol_data, group.generation_id, owners
            )
        else:
            seen.rebalancing = started
        events = [
            JournalEvent(
                seq=self._next_seq(group.group_id),
                ts_ms=ts_ms,
                group_id=group.group_id,
                kind=str(kind),
                generation_id=group.generation_id,
                member_id=member_id,
                group_instance_id=instance_id,
                detail=detail,
            )
            for kind, member_id, instance_id, detail in rows
        ]
        if events:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self.path(group.group_id).open("a", encoding="utf-8") as out:
                for event in events:
                    out.write(json.dumps(event.to_row(), separators=(",", ":"), sort_keys=True))
                    out.write("\n")
        return events

    def _next_seq(self, group_id: str) -> int:
        if group_id not in self._seq:
            path = self.path(group_id)
            # Continue after the rows a previous operator process wrote.
            self._seq[group_id] = (
                sum(1 for _ in path.open(encoding="utf-8")) if path.exists() else 0
            )
        self._seq[group_id] += 1
        return self._seq[group_id]
