"""Hand-made member event-log lines and journal rows for the demo's metric tests."""

from __future__ import annotations

from typing import Any

from staticfleet.demo.ownership import MemberLog

TOPIC = "t"


def tp(partition: int) -> list[Any]:
    return [TOPIC, partition]


def event(
    ts: int, kind: str, *partitions: int, member_id: str = "m", **extra: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {"ts_ms": ts, "event": kind, "member_id": member_id, **extra}
    if partitions:
        row["partitions"] = [tp(p) for p in partitions]
    return row


def commit(ts: int, offsets: dict[int, int], member_id: str = "m") -> dict[str, Any]:
    return {
        "ts_ms": ts,
        "event": "commit",
        "member_id": member_id,
        "offsets": [[TOPIC, p, o] for p, o in sorted(offsets.items())],
    }


def log(owner: str, *rows: dict[str, Any], incarnation: int = 1) -> MemberLog:
    return MemberLog(owner=owner, process=f"{owner}#{incarnation}", rows=list(rows))


_seq = iter(range(1, 1_000_000))


def journal(ts: int, kind: str, generation: int = 1, **fields: Any) -> dict[str, Any]:
    detail = fields.pop("detail", {})
    return {
        "seq": next(_seq),
        "ts_ms": ts,
        "group_id": "g",
        "kind": kind,
        "generation_id": generation,
        "member_id": fields.get("member_id"),
        "group_instance_id": fields.get("instance"),
        "detail": detail,
    }


def assignment(
    ts: int, generation: int, member_id: str, *partitions: int, instance: str | None = None
) -> dict[str, Any]:
    return journal(
        ts,
        "assignment",
        generation,
        member_id=member_id,
        instance=instance,
        detail={"partitions": [tp(p) for p in partitions]},
    )


def partitions(count: int) -> list[tuple[str, int]]:
    return [(TOPIC, p) for p in range(count)]
