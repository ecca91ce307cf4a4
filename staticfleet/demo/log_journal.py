"""A journal rebuilt from the members' own event logs, for a group on a Kafka broker.

A Kafka cluster keeps no rebalance journal, so on Kafka the journal figures (rebalances,
moved, to Stable) are computed from journal-shaped rows derived here from what the members
logged: every `assigned` line carries the generation the broker's JoinGroup answered and
when the member started owning. Pure functions over rows, like `coordinator.journal_metrics`, which
then computes the figures exactly as for the embedded coordinator's journal:

- `rebalance_started` for generation G: the first `assigned` line of G (a generation the
  broker made is a rebalance; a static member rejoining into the current generation, as
  KIP-345 promises, makes none);
- `assignment` for generation G: for each member (slot) of G, every partition its process
  holds right after its first `assigned` line of G (a cooperative `assigned` names only
  what was added; a static member's later process rejoining G adds nothing);
- `stable` for generation G: when the last member of G logged its first `assigned` of G.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coordinator.journal import JournalKind
from staticfleet.demo.ownership import (
    ASSIGNED,
    FATAL,
    LOST,
    REVOKED,
    STOPPED,
    MemberLog,
    partitions_of,
)


def journal_from_logs(group_id: str, logs: Iterable[MemberLog]) -> list[dict[str, Any]]:
    assignments: list[dict[str, Any]] = []
    # generation -> owner -> first assigned ts of that owner in that generation
    first_by_owner: dict[int, dict[str, int]] = {}
    for log in logs:
        held: set[tuple[str, int]] = set()
        for row in log.rows:
            kind = row.get("event")
            if kind == ASSIGNED:
                held.update(partitions_of(row))
                generation = int(row.get("generation_id", -1))
                if generation < 0:
                    continue
                ts = int(row["ts_ms"])
                owners = first_by_owner.setdefault(generation, {})
                if log.owner in owners:
                    # A static member's new process rejoining the same generation: the broker
                    # handed it the stored assignment; nothing new was assigned (the embedded
                    # journal stores no assignment row for it either).
                    continue
                owners[log.owner] = ts
                assignments.append(
                    {
                        "ts_ms": ts,
                        "kind": JournalKind.ASSIGNMENT,
                        "generation_id": generation,
                        "member_id": str(row.get("member_id") or ""),
                        "group_instance_id": row.get("instance_id") or None,
                        # The slot: the owner name the journal metrics compare.
                        "detail": {"partitions": sorted(held), "owner": log.owner},
                    }
                )
            elif kind in (REVOKED, LOST):
                held.difference_update(partitions_of(row))
            elif kind in (STOPPED, FATAL):
                held.clear()
    rows = list(assignments)
    for generation, owners in first_by_owner.items():
        rows.append(
            {
                "ts_ms": min(owners.values()),
                "kind": JournalKind.REBALANCE_STARTED,
                "generation_id": generation,
            }
        )
        rows.append(
            {"ts_ms": max(owners.values()), "kind": JournalKind.STABLE, "generation_id": generation}
        )
    # Ties: a generation starts before its assignments, which come before its `stable`.
    order = {JournalKind.REBALANCE_STARTED: 0, JournalKind.ASSIGNMENT: 1, JournalKind.STABLE: 2}
    rows.sort(key=lambda row: (int(row["ts_ms"]), order[row["kind"]]))
    for seq, row in enumerate(rows, start=1):
        row["seq"] = seq
        row["group_id"] = group_id
        row.setdefault("member_id", None)
        row.setdefault("group_instance_id", None)
        row.setdefault("detail", {})
    return rows
