"""Numbers from the coordinator's rebalance journal: what a rebalance, a partition move
and the time to Stable are (docs/spark.md, "Definitions"), for the demo and the pipeline.

Pure functions over journal rows (`JournalEvent.to_row()` dicts, as `/v1/journal` returns
them); a row's kind is one of `JournalKind`'s values. The journal is the coordinator's view:
what it decided and when (rebalances, generations, assignments, membership), not what the
member processes did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.journal import JournalKind

Row = Mapping[str, Any]
Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class GenerationAssignment:
    generation_id: int
    ts_ms: int  # when the leader's assignment was stored
    owners: dict[Partition, str]


@dataclass(frozen=True, slots=True)
class Move:
    partition: Partition
    from_owner: str
    to_owner: str
    generation_id: int
    ts_ms: int


def _ordered(journal: Iterable[Row]) -> list[Row]:
    return sorted(journal, key=lambda row: int(row["seq"]))


def _within(row: Row, start_ms: int, end_ms: int) -> bool:
    return start_ms <= int(row["ts_ms"]) <= end_ms


def owner_of(row: Row, aliases: Mapping[str, str]) -> str:
    """The stable name of the member a row is about: the alias of its member id (the slot
    of a dynamic member), else its instance id, else its member id."""
    member_id = str(row.get("member_id") or "")
    return aliases.get(member_id) or row.get("group_instance_id") or member_id


def rebalance_count(journal: Iterable[Row], start_ms: int, end_ms: int) -> int:
    """Rebalances started in [start_ms, end_ms] (the group left Stable/Empty to rejoin)."""
    return sum(
        1
        for row in journal
        if row["kind"] == JournalKind.REBALANCE_STARTED and _within(row, start_ms, end_ms)
    )


def generation_assignments(
    journal: Iterable[Row], aliases: Mapping[str, str]
) -> list[GenerationAssignment]:
    """Each generation's stored assignment, in order: partition -> owner name. Partitions
    no member was given (a cooperative revocation in flight) are absent."""
    by_generation: dict[int, tuple[int, dict[Partition, str]]] = {}
    for row in _ordered(journal):
        if row["kind"] != JournalKind.ASSIGNMENT:
            continue
        generation = int(row["generation_id"])
        _ts, owners = by_generation.get(generation, (0, {}))
        owner = owner_of(row, aliases)
        for topic, partition in (row.get("detail") or {}).get("partitions") or []:
            owners[(str(topic), int(partition))] = owner
        by_generation[generation] = (int(row["ts_ms"]), owners)
    return [
        GenerationAssignment(generation, ts, owners)
        for generation, (ts, owners) in sorted(by_generation.items())
    ]


def partition_moves(
    journal: Iterable[Row], aliases: Mapping[str, str], start_ms: int, end_ms: int
) -> list[Move]:
    """Partitions that changed owner, in generations stored within [start_ms, end_ms].

    Compared with the partition's last owner in any earlier generation, so a cooperative
    hand-over (revoked in one generation, given to the new owner in the next) is one move,
    and a partition that comes back to its old owner is none.
    """
    last_owner: dict[Partition, str] = {}
    moves = []
    for generation in generation_assignments(journal, aliases):
        counted = start_ms <= generation.ts_ms <= end_ms
        for partition, owner in sorted(generation.owners.items()):
            previous = last_owner.get(partition)
            if counted and previous is not None and previous != owner:
                moves.append(
                    Move(partition, previous, owner, generation.generation_id, generation.ts_ms)
                )
            last_owner[partition] = owner
    return moves


def time_to_stable_ms(journal: Iterable[Row], start_ms: int, end_ms: int) -> int | None:
    """From `start_ms` (a disturbance) to the end of the last rebalance it caused: the
    first `stable` after the last `rebalance_started` in [start_ms, end_ms].

    0 when no rebalance started (the group never left Stable); None when the last one had
    not finished by `end_ms`.
    """
    rows = [row for row in _ordered(journal) if _within(row, start_ms, end_ms)]
    last_rebalance = max(
        (index for index, row in enumerate(rows) if row["kind"] == JournalKind.REBALANCE_STARTED),
        default=None,
    )
    if last_rebalance is None:
        return 0
    for row in rows[last_rebalance + 1 :]:
        if row["kind"] == JournalKind.STABLE:
            return int(row["ts_ms"]) - start_ms
    return None


def first_stable_after(journal: Iterable[Row], after_ms: int) -> int | None:
    """Timestamp of the first `stable` (an assignment stored) at or after `after_ms`."""
    return min(
        (
            int(row["ts_ms"])
            for row in journal
            if row["kind"] == JournalKind.STABLE and int(row["ts_ms"]) >= after_ms
        ),
        default=None,
    )


def departures(journal: Iterable[Row], start_ms: int, end_ms: int) -> list[Row]:
    """Members removed (session, join or sync timeout) or gone by LeaveGroup in the window."""
    return [
        row
        for row in _ordered(journal)
        if row["kind"] in (JournalKind.MEMBER_REMOVED, JournalKind.MEMBER_LEFT)
        and _within(row, start_ms, end_ms)
    ]


def static_departures(journal: Sequence[Row], start_ms: int, end_ms: int) -> list[str]:
    """Instance ids of static members that left or were removed in the window."""
    return sorted(
        {
            str(row["group_instance_id"])
            for row in departures(journal, start_ms, end_ms)
            if row.get("group_instance_id")
        }
    )
