"""A synthetic rebalance journal for the scale test: many groups, realistic rows.

    python -m pipeline.generate --events 10000000 --output /tmp/journal [--workers 2]

Writes JSON lines (the same rows `coordinator.journal.write_jsonl` writes), one file per
shard (`journal-00000.jsonl`, ...), each holding whole groups. Each group lives a life a
coordinator would journal: members join, the first generation is assigned (`range` over
the instance ids), then episodes until the group has its share of rows: static restarts
(`member_replaced` + `static_rejoin`, no rebalance), a member removed after its session
timeout or leaving, a member joining; each membership change is a rebalance
(`rebalance_started`, `generation_started`, one `assignment` per member, `stable`). Eager
groups reassign by `range` (partitions move); cooperative groups keep what they can and
hand over revoked partitions one generation later (two generations per rebalance).
Deterministic for a seed.

With `--format parquet` the same rows go straight to the columnar journal the analytics
reads (`pipeline.columnar`: the narrow schema, one Parquet file per shard, each group's
rows together in seq order, with the marker saying so): no JSON to write, keep or convert,
which is what lets 100 million events fit this machine's disk and time.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TextIO

from pipeline import options

TOPIC = "events"


class Sink(Protocol):
    def row(
        self,
        seq: int,
        ts: int,
        group: str,
        kind: str,
        generation: int,
        member: str | None,
        instance: str | None,
        detail: str,
        assigned: str | None,
    ) -> None: ...


class JsonSink:
    """JSON lines, as `coordinator.journal.write_jsonl` writes them."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def row(
        self,
        seq: int,
        ts: int,
        group: str,
        kind: str,
        generation: int,
        member: str | None,
        instance: str | None,
        detail: str,
        assigned: str | None,
    ) -> None:
        member_json = "null" if member is None else f'"{member}"'
        instance_json = "null" if instance is None else f'"{instance}"'
        self.out.write(
            f'{{"detail":{detail},"generation_id":{generation},"group_id":"{group}",'
            f'"group_instance_id":{instance_json},"kind":"{kind}","member_id":{member_json},'
            f'"seq":{seq},"ts_ms":{ts}}}\n'
        )


class ColumnarSink:
    """Rows of the columnar journal (`pipeline.analytics.COLUMNAR_SCHEMA`), written to one
    Parquet file in row groups of `batch_rows`."""

    NAMES = (
        "seq",
        "ts_ms",
        "group_id",
        "kind",
        "generation_id",
        "member_id",
        "group_instance_id",
        "assigned",
    )

    def __init__(self, path: str, batch_rows: int = 1_000_000) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.schema = pa.schema(
            [
                pa.field("seq", pa.int64(), False),
                pa.field("ts_ms", pa.int64(), False),
                pa.field("group_id", pa.string(), False),
                pa.field("kind", pa.string(), False),
                pa.field("generation_id", pa.int64(), False),
                pa.field("member_id", pa.string()),
                pa.field("group_instance_id", pa.string()),
                pa.field("assigned", pa.string()),
            ]
        )
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")
        self.batch_rows = batch_rows
        self.columns: list[list[Any]] = [[] for _ in self.NAMES]

    def row(
        self,
        seq: int,
        ts: int,
        group: str,
        kind: str,
        generation: int,
        member: str | None,
        instance: str | None,
        detail: str,
        assigned: str | None,
    ) -> None:
        values = (seq, ts, group, kind, generation, member, instance, assigned)
        for column, value in zip(self.columns, values, strict=True):
            column.append(value)
        if len(self.columns[0]) >= self.batch_rows:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if self.columns[0]:
            arrays = [
                pa.array(column, field.type)
                for column, field in zip(self.columns, self.schema, strict=True)
            ]
            self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
            self.columns = [[] for _ in self.NAMES]

    def close(self) -> None:
        self.flush()
        self.writer.close()


def _partitions_json(partitions: Sequence[int]) -> str:
    return '{"partitions":[' + ",".join(f'["{TOPIC}",{p}]' for p in partitions) + "]}"


def _assigned(partitions: Sequence[int]) -> str:
    return f"{TOPIC}:" + ",".join(map(str, partitions))


def _range(slots: Sequence[str], partitions: int) -> dict[str, list[int]]:
    ordered = sorted(slots)
    share, extra = divmod(partitions, len(ordered))
    result: dict[str, list[int]] = {}
    start = 0
    for index, slot in enumerate(ordered):
        count = share + (1 if index < extra else 0)
        result[slot] = list(range(start, start + count))
        start += count
    return result


def _sticky(
    current: dict[str, list[int]], slots: Sequence[str], partitions: int
) -> dict[str, list[int]]:
    """Cooperative-sticky-like target: keep what members have, balance by moving the rest."""
    target = {slot: list(current.get(slot, [])) for slot in slots}
    free = sorted(p for slot, held in current.items() if slot not in target for p in held)
    share, extra = divmod(partitions, len(slots))
    for index, slot in enumerate(sorted(slots, key=lambda s: -len(target[s]))):
        quota = share + (1 if index < extra else 0)
        while len(target[slot]) > quota:
            free.append(target[slot].pop())
    for index, slot in enumerate(sorted(slots, key=lambda s: len(target[s]))):
        quota = share + (1 if index < extra else 0)
        while len(target[slot]) < quota and free:
            target[slot].append(free.pop())
    return {slot: sorted(held) for slot, held in target.items()}


class GroupWriter:
    def __init__(self, out: Sink, group: str, rng: random.Random, start_ms: int) -> None:
        self.out = out
        self.group = group
        self.rng = rng
        self.ts = start_ms
        self.seq = 0
        self.generation = 0
        self.rows = 0
        self.member_ids: dict[str, str] = {}

    def emit(
        self,
        kind: str,
        member: str | None = None,
        detail: str = "{}",
        partitions: Sequence[int] | None = None,
    ) -> None:
        self.seq += 1
        self.rows += 1
        instance = member
        member_id = None if member is None else self.member_ids[member]
        assigned = None if partitions is None else _assigned(partitions)
        self.out.row(
            self.seq,
            self.ts,
            self.group,
            kind,
            self.generation,
            member_id,
            instance,
            detail,
            assigned,
        )

    def tick(self, low: int, high: int) -> None:
        self.ts += self.rng.randint(low, high)

    def new_member_id(self, slot: str) -> None:
        self.member_ids[slot] = f"{slot}-{self.rng.getrandbits(64):016x}"

    def generation_round(self, assignment: dict[str, list[int]]) -> None:
        self.tick(20, 3000)  # the join phase (initial delay or rebalance timeout)
        self.generation += 1
        self.emit("generation_started", None, f'{{"members":{len(assignment)}}}')
        self.tick(1, 40)
        for slot in sorted(assignment):
            held = assignment[slot]
            self.emit("assignment", slot, _partitions_json(held), held)
        self.emit("stable", None, f'{{"members":{len(assignment)}}}')


def write_group(out: Sink, index: int, rows_wanted: int, seed: int) -> int:
    rng = random.Random(seed * 1_000_003 + index)
    group = f"group-{index:06d}"
    cooperative = rng.random() < 0.5
    partitions = rng.choice((12, 24, 48, 64, 96))
    slots = [f"member-{i}" for i in range(rng.randint(3, 12))]
    next_slot = len(slots)
    writer = GroupWriter(out, group, rng, 1_790_000_000_000 + rng.randint(0, 86_400_000))
    for slot in slots:
        writer.new_member_id(slot)
        writer.emit("member_joined", slot, '{"reason":"the member is starting"}')
        if slot == slots[0]:
            writer.emit("rebalance_started", None, '{"reason":"new member joined"}')
        writer.tick(0, 30)
    current = _range(slots, partitions)
    writer.generation_round(current)
    while writer.rows < rows_wanted:
        writer.tick(500, 120_000)
        roll = rng.random()
        if roll < 0.6:  # a static restart: no rebalance
            slot = rng.choice(slots)
            writer.new_member_id(slot)
            writer.emit("member_replaced", slot, "{}")
            writer.tick(0, 5)
            writer.emit("static_rejoin", slot, '{"leader":false}')
            continue
        if roll < 0.8 and len(slots) > 2:  # a member goes: timeout or LeaveGroup
            slot = rng.choice(slots)
            kind = "member_removed" if rng.random() < 0.5 else "member_left"
            writer.emit(kind, slot, '{"reason":"session timeout"}')
            slots.remove(slot)
        else:  # a member arrives
            slot = f"member-{next_slot}"
            next_slot += 1
            writer.new_member_id(slot)
            writer.emit("member_joined", slot, '{"reason":"the member is starting"}')
            slots.append(slot)
        writer.emit("rebalance_started", None, '{"reason":"membership changed"}')
        if not cooperative:
            current = _range(slots, partitions)
            writer.generation_round(current)
            continue
        target = _sticky(current, slots, partitions)
        # First generation: everyone keeps what it keeps; revoked partitions are unassigned.
        kept = {s: [p for p in target[s] if p in set(current.get(s, []))] for s in slots}
        writer.generation_round(kept)
        if kept != target:  # the revoking members rejoin: a second generation hands over
            writer.tick(5, 200)
            writer.emit("rebalance_started", None, '{"reason":"revoked partitions"}')
            writer.generation_round(target)
        current = target
    return writer.rows


def write_shard(path: str, groups: Sequence[int], rows_per_group: int, seed: int) -> int:
    total = 0
    if path.endswith(".parquet"):
        sink = ColumnarSink(path)
        try:
            for index in groups:
                total += write_group(sink, index, rows_per_group, seed)
        finally:
            sink.close()
        return total
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        for index in groups:
            total += write_group(JsonSink(out), index, rows_per_group, seed)
    return total


def generate(
    output: Path,
    events: int,
    groups: int = 2000,
    shards: int = 16,
    workers: int = 2,
    seed: int = 1,
    fmt: str = "jsonl",
) -> dict[str, Any]:
    """Write at least `events` rows over `groups` groups in `shards` files: JSON lines
    (`fmt` "jsonl") or the columnar journal (`fmt` "parquet")."""
    output.mkdir(parents=True, exist_ok=True)
    suffix = "parquet" if fmt == "parquet" else "jsonl"
    for old in [*output.glob("journal-*.jsonl"), *output.glob("journal-*.parquet")]:
        old.unlink()
    rows_per_group = max(1, -(-events // groups))
    plan = [
        (str(output / f"journal-{shard:05d}.{suffix}"), list(range(shard, groups, shards)))
        for shard in range(min(shards, groups))
    ]
    clock = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(write_shard, path, members, rows_per_group, seed) for path, members in plan
        ]
        total = sum(future.result() for future in futures)
    if fmt == "parquet":
        from pipeline.columnar import mark_clustered

        mark_clustered(output)
    size = sum(Path(path).stat().st_size for path, _ in plan)
    return {
        "events": total,
        "groups": groups,
        "files": len(plan),
        "bytes": size,
        "format": suffix,
        "seconds": round(time.perf_counter() - clock, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    return run_args(options.generate_parser().parse_args(argv))


def run_args(args: argparse.Namespace) -> int:
    if code := options.report_problems("generate", options.generate_problems(args)):
        return code
    result = generate(
        args.output, args.events, args.groups, args.shards, args.workers, args.seed, args.format
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
