"""The analytics' figures for whole groups at once, in numpy over Arrow columns.

`pipeline.analytics` hands each Spark task its groups (every row of a group in one task, in
seq order) through `mapInArrow`; this module turns a chunk of whole groups into the three
result tables (windows, generations, moves) with vectorised numpy: a few sorts and scans
per chunk instead of one Spark shuffle, sort and cache per figure. The definitions are the
ones in docs/spark.md; `pipeline.reference` computes the same numbers row by row in plain
Python and the Spark tests compare the two.

No library computes these figures; this is the hand-written part, kept to sorts and scans.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.reference import ALL_WINDOW
from pipeline.reference import Window as RolloutWindow

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

WINDOWS, GENERATIONS, MOVES = 0, 1, 2

WINDOW_FIELDS = [
    pa.field("group_id", pa.string()),
    pa.field("window", pa.string()),
    pa.field("start_ms", pa.int64()),
    pa.field("end_ms", pa.int64()),
    pa.field("rebalances", pa.int64()),
    pa.field("moved", pa.int64()),
    pa.field("unowned_partition_ms", pa.int64()),
    pa.field("unowned_partition_s", pa.float64()),
    pa.field("time_to_stable_ms", pa.int64()),
]
GENERATION_FIELDS = [
    pa.field("group_id", pa.string()),
    pa.field("generation_id", pa.int64()),
    pa.field("assigned_ts_ms", pa.int64()),
    pa.field("members", pa.int64()),
    pa.field("partitions", pa.int64()),
    pa.field("min_partitions", pa.int64()),
    pa.field("max_partitions", pa.int64()),
    pa.field("skew", pa.int64()),
    pa.field("skew_ratio", pa.float64()),
    pa.field("moved", pa.int64()),
    pa.field("rebalance_ts_ms", pa.int64()),
    pa.field("stable_ts_ms", pa.int64()),
    pa.field("time_to_stable_ms", pa.int64()),
]
MOVE_FIELDS = [
    pa.field("group_id", pa.string()),
    pa.field("generation_id", pa.int64()),
    pa.field("gen_ts_ms", pa.int64()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("from_owner", pa.string()),
    pa.field("to_owner", pa.string()),
]
TABLE_FIELDS = {WINDOWS: WINDOW_FIELDS, GENERATIONS: GENERATION_FIELDS, MOVES: MOVE_FIELDS}


def _union_schema() -> pa.Schema:
    fields = [pa.field("table", pa.int8())]
    seen = {"table"}
    for table_fields in TABLE_FIELDS.values():
        for field in table_fields:
            if field.name not in seen:
                seen.add(field.name)
                fields.append(field)
    return pa.schema(fields)


# What each task yields: the three tables' rows in one schema, told apart by `table`.
UNION_SCHEMA = _union_schema()

NO_SEQ = np.iinfo(np.int64).min


def _np(values: pa.Array | pa.ChunkedArray) -> Ints:
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)


def _flag(values: pa.Array | pa.ChunkedArray) -> Bools:
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)


def _run_ends(*keys: Ints) -> Bools:
    """True at the last element of each run of equal keys (arrays already sorted by them)."""
    size = len(keys[0])
    ends = np.ones(size, dtype=bool)
    if size:
        changed = np.zeros(size - 1, dtype=bool)
        for key in keys:
            changed |= key[1:] != key[:-1]
        ends[:-1] = changed
    return ends


def _next_position(marked: Bools) -> Ints:
    """For each position i, the first marked position >= i (len(marked) when none)."""
    size = len(marked)
    positions = np.where(marked, np.arange(size, dtype=np.int64), size)
    return np.minimum.accumulate(positions[::-1])[::-1] if size else positions


def _gen_key(group: Ints, generation: Ints) -> Ints:
    # Generation ids are int32 in the protocol: (group, generation) packed in one int64.
    return (group << 32) | (generation + 2**31)


def _nullable(values: Ints, valid: Bools) -> pa.Array:
    return pa.array(values, type=pa.int64(), mask=~valid)


def _owners(table: pa.Table, aliases: Mapping[str, str]) -> pa.Array:
    """The alias of the member id if one is given, else the instance id, else the member id
    (coordinator.journal_metrics.owner_of), else ""."""
    member = table.column("member_id").combine_chunks()
    instance = table.column("group_instance_id").combine_chunks()
    empty = pa.scalar(None, pa.string())
    named = pc.if_else(pc.equal(instance, ""), empty, instance)
    choices = [named, member]
    if aliases:
        keys = pa.array(list(aliases), pa.string())
        values = pa.array(list(aliases.values()), pa.string())
        alias = values.take(pc.index_in(member, value_set=keys))
        choices.insert(0, pc.if_else(pc.equal(alias, ""), empty, alias))
    return pc.coalesce(*choices, pa.scalar("", pa.string()))


def _in_group_order(journal: pa.Table) -> pa.Table:
    """`journal` in (group, seq) order; as it is when it already is (a task's input is)."""
    if journal.num_rows < 2:
        return journal
    codes = _np(pc.dictionary_encode(journal.column("group_id").combine_chunks()).indices)
    seq = _np(journal.column("seq"))
    same = codes[1:] == codes[:-1]
    runs = 1 + int(np.count_nonzero(~same))
    if runs == len(np.unique(codes)) and bool(np.all(seq[1:][same] > seq[:-1][same])):
        return journal
    return journal.sort_by([("group_id", "ascending"), ("seq", "ascending")]).combine_chunks()


def _entries(assigned: pa.ChunkedArray, is_assignment: Bools) -> tuple[Ints, Ints, Ints, pa.Array]:
    """Unpack "topic:0,1;other:5" strings (pipeline.analytics.pack_partitions) of the
    assignment rows: per partition named, its assignment row (index among the assignment
    rows), topic code, partition number; and the topic names the codes index. In row order."""
    rows = pa.array(is_assignment)
    text = pc.if_else(rows, assigned.combine_chunks(), pa.scalar(None, pa.string()))
    parts = pc.split_pattern(text, ";")
    part = pc.list_flatten(parts)
    part_row = _np(pc.list_parent_indices(parts))
    kept = _flag(pc.not_equal(part, ""))
    part, part_row = part.filter(pa.array(kept)), part_row[kept]
    pair = pc.split_pattern(part, ":", max_splits=1)
    topic_codes = pc.dictionary_encode(pc.list_element(pair, 0))
    numbers = pc.split_pattern(pc.list_element(pair, 1), ",")
    number_text = pc.list_flatten(numbers)
    number_part = _np(pc.list_parent_indices(numbers))
    kept = _flag(pc.not_equal(number_text, ""))
    number = _np(pc.cast(number_text.filter(pa.array(kept)), pa.int64()))
    number_part = number_part[kept]
    row_of = np.cumsum(is_assignment) - 1  # journal row -> assignment row
    parent = row_of[part_row[number_part]]
    topic = _np(topic_codes.indices)[number_part]
    return parent, topic, number, topic_codes.dictionary


def _dense(topic: Ints, number: Ints) -> Ints:
    """(topic code, partition) as one small non-negative int, in (topic, partition) order."""
    if len(number) and int(number.min()) >= 0 and int(number.max()) < 2**20:
        return (topic + 1) * (int(number.max()) + 1) + number  # topic -1 (null) is 0
    keys = (topic << 32) | (number + 2**31)
    inverse: Ints = np.unique(keys, return_inverse=True)[1].astype(np.int64)
    return inverse


def _generations_follow_seq(row_group: Ints, row_gen: Ints) -> bool:
    """Whether generation ids never go down along a group's assignment rows (seq order)."""
    same = row_group[1:] == row_group[:-1]
    return bool(np.all(row_gen[1:][same] >= row_gen[:-1][same]))


def compute(
    journal: pa.Table,
    windows: Sequence[RolloutWindow] = (),
    aliases: Mapping[str, str] | None = None,
) -> dict[int, pa.Table]:
    """The windows, generations and moves tables of the whole groups in `journal` (rows in
    the columnar shape, any order; cheapest in (group, seq) order)."""
    journal = _in_group_order(journal.combine_chunks())
    size = journal.num_rows
    if size == 0:
        return {key: pa.schema(fields).empty_table() for key, fields in TABLE_FIELDS.items()}
    names = journal.column("group_id").combine_chunks()
    codes = _np(pc.dictionary_encode(names).indices)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    group_count = len(starts)
    group = np.repeat(np.arange(group_count, dtype=np.int64), np.diff(np.r_[starts, size]))
    group_names = names.take(pa.array(starts))
    seq = _np(journal.column("seq"))
    ts = _np(journal.column("ts_ms"))
    generation = _np(journal.column("generation_id"))
    kind = journal.column("kind")
    is_rebalance = _flag(pc.equal(kind, "rebalance_started"))
    is_generation = _flag(pc.equal(kind, "generation_started"))
    is_stable = _flag(pc.equal(kind, "stable"))
    is_assignment = _flag(pc.equal(kind, "assignment"))
    group_start = np.minimum.reduceat(ts, starts)
    group_end = np.maximum.reduceat(ts, starts)

    # Assignment rows and their owners (as codes into owner_names).
    rows = np.flatnonzero(is_assignment)
    row_group, row_gen, row_seq, row_ts = group[rows], generation[rows], seq[rows], ts[rows]
    who = journal.select(["member_id", "group_instance_id"]).take(pa.array(rows))
    owner_codes = pc.dictionary_encode(_owners(who, aliases or {}))
    owner_names = owner_codes.dictionary
    row_owner = _np(owner_codes.indices)
    # Generations: (group, generation) with an assignment row; the store time is the
    # generation's last assignment row.
    gen_keys, row_gid = np.unique(_gen_key(row_group, row_gen), return_inverse=True)
    row_gid = row_gid.astype(np.int64)
    gen_count = len(gen_keys)
    by_gen = np.lexsort((row_seq, row_gid))
    last_rows = by_gen[_run_ends(row_gid[by_gen])]
    gen_ts = row_ts[last_rows]
    gen_group = row_group[last_rows]
    gen_id = row_gen[last_rows]

    # One entry per assignment row and partition it names, in (group, seq) order.
    parent, topic, number, topic_names = _entries(journal.column("assigned"), is_assignment)
    tp = _dense(topic, number)
    e_group, e_seq, e_ts = row_group[parent], row_seq[parent], row_ts[parent]
    e_gid, e_owner, e_row = row_gid[parent], row_owner[parent], rows[parent]

    # Entries by (group, partition, generation), seq order kept within each: one stable
    # sort (on a packed key when it fits in 63 bits).
    span = int(tp.max()) + 1 if len(tp) else 1
    if group_count * span * max(gen_count, 1) < 2**62:
        by_owner = np.argsort((e_group * span + tp) * gen_count + e_gid, kind="stable")
    else:
        by_owner = np.lexsort((e_seq, e_gid, tp, e_group))
    # Owners: per (group, partition, generation), the last assignment row naming it.
    owned = by_owner[_run_ends(e_group[by_owner], tp[by_owner], e_gid[by_owner])]
    o_group, o_tp, o_gid, o_owner = e_group[owned], tp[owned], e_gid[owned], e_owner[owned]
    # Partitions each assignment row is the last word on (for the per-member load).
    held_by_row = np.bincount(parent[owned], minlength=len(rows)).astype(np.int64)
    # Moves: the owner differs from the partition's owner in the previous generation.
    same = (o_group[1:] == o_group[:-1]) & (o_tp[1:] == o_tp[:-1])
    moved_at = np.flatnonzero(same & (o_owner[1:] != o_owner[:-1])) + 1
    m_gid = o_gid[moved_at]
    m_entry = owned[moved_at]
    moves = pa.table(
        {
            "group_id": group_names.take(pa.array(gen_group[m_gid])),
            "generation_id": pa.array(gen_id[m_gid], pa.int64()),
            "gen_ts_ms": pa.array(gen_ts[m_gid], pa.int64()),
            "topic": topic_names.take(pa.array(topic[m_entry])),
            "partition": pa.array(number[m_entry], pa.int32()),
            "from_owner": owner_names.take(pa.array(o_owner[moved_at - 1])),
            "to_owner": owner_names.take(pa.array(o_owner[moved_at])),
        },
        schema=pa.schema(MOVE_FIELDS),
    )
    m_ts = gen_ts[m_gid]
    m_group = gen_group[m_gid]

    # Unowned intervals: from the first rebalance after an assignment naming the partition,
    # when it comes before the partition's next assignment, to that next assignment (or
    # the group's last row).
    if _generations_follow_seq(row_group, row_gen):
        by_time = by_owner  # (group, partition, generation, seq) is (group, partition, seq)
    else:
        by_time = np.lexsort((e_seq, tp, e_group))
    t_group, t_tp, t_seq, t_ts = e_group[by_time], tp[by_time], e_seq[by_time], e_ts[by_time]
    has_next = np.r_[(t_group[1:] == t_group[:-1]) & (t_tp[1:] == t_tp[:-1]), False]
    next_seq = np.r_[t_seq[1:], 0]
    next_ts = np.r_[t_ts[1:], 0]
    rebalance_at = _next_position(is_rebalance)[e_row[by_time]]
    found = rebalance_at < size
    rebalance_at = np.where(found, rebalance_at, 0)
    found &= group[rebalance_at] == t_group
    starts_gap = found & (~has_next | (seq[rebalance_at] < next_seq))
    i_group = t_group[starts_gap]
    i_lo = ts[rebalance_at[starts_gap]]
    i_hi = np.where(has_next, next_ts, group_end[t_group])[starts_gap]

    tables = {
        WINDOWS: _window_table(
            windows,
            group_names,
            group,
            seq,
            ts,
            is_rebalance,
            is_stable,
            (group_start, group_end),
            (m_group, m_ts),
            (i_group, i_lo, i_hi),
        ),
        GENERATIONS: _generation_table(
            group_names,
            group,
            seq,
            ts,
            generation,
            (is_rebalance, is_generation, is_stable),
            (gen_keys, gen_group, gen_id, gen_ts),
            (row_gid, row_owner, len(owner_names), held_by_row),
            m_gid,
        ),
        MOVES: moves,
    }
    return tables


def _window_table(
    windows: Sequence[RolloutWindow],
    group_names: pa.Array,
    group: Ints,
    seq: Ints,
    ts: Ints,
    is_rebalance: Bools,
    is_stable: Bools,
    bounds: tuple[Ints, Ints],
    move_rows: tuple[Ints, Ints],
    intervals: tuple[Ints, Ints, Ints],
) -> pa.Table:
    """Per group and window: rebalances, moved, unowned_partition_ms, time_to_stable_ms."""
    group_count = len(bounds[0])
    names = [str(name) for name in group_names.to_pylist()]
    specs: list[tuple[str, Ints, Ints, Bools]] = [
        (ALL_WINDOW, bounds[0], bounds[1], np.ones(group_count, dtype=bool))
    ]
    for window in windows:
        applies = np.array([window.group_id in (None, name) for name in names], dtype=bool)
        start = np.full(group_count, window.start_ms, dtype=np.int64)
        end = np.full(group_count, window.end_ms, dtype=np.int64)
        specs.append((window.label, start, end, applies))
    m_group, m_ts = move_rows
    i_group, i_lo, i_hi = intervals
    parts: list[pa.Table] = []
    for label, start, end, applies in specs:
        inside = applies[group] & (ts >= start[group]) & (ts <= end[group])
        rebalance_rows = np.flatnonzero(inside & is_rebalance)
        rebalances = np.bincount(group[rebalance_rows], minlength=group_count).astype(np.int64)
        last_rebalance = np.full(group_count, NO_SEQ, dtype=np.int64)
        np.maximum.at(last_rebalance, group[rebalance_rows], seq[rebalance_rows])
        settling = inside & is_stable & (rebalances[group] > 0) & (seq > last_rebalance[group])
        stable_rows = np.flatnonzero(settling)  # in (group, seq) order: first is the earliest
        settled_groups, first = np.unique(group[stable_rows], return_index=True)
        settled = np.zeros(group_count, dtype=bool)
        settled[settled_groups] = True
        settled_ts = np.zeros(group_count, dtype=np.int64)
        settled_ts[settled_groups] = ts[stable_rows[first]]
        in_moves = applies[m_group] & (m_ts >= start[m_group]) & (m_ts <= end[m_group])
        moved = np.bincount(m_group[in_moves], minlength=group_count).astype(np.int64)
        lo, hi = start[i_group], end[i_group]
        overlaps = applies[i_group] & (i_lo <= hi) & (i_hi >= lo)
        clipped = np.maximum(0, np.minimum(i_hi, hi) - np.maximum(i_lo, lo))[overlaps]
        unowned = np.zeros(group_count, dtype=np.int64)
        np.add.at(unowned, i_group[overlaps], clipped)
        tts = np.where(rebalances == 0, 0, settled_ts - start)
        chosen = np.flatnonzero(applies)
        parts.append(
            pa.table(
                {
                    "group_id": group_names.take(pa.array(chosen)),
                    "window": pa.array([label] * len(chosen), pa.string()),
                    "start_ms": pa.array(start[chosen], pa.int64()),
                    "end_ms": pa.array(end[chosen], pa.int64()),
                    "rebalances": pa.array(rebalances[chosen], pa.int64()),
                    "moved": pa.array(moved[chosen], pa.int64()),
                    "unowned_partition_ms": pa.array(unowned[chosen], pa.int64()),
                    "unowned_partition_s": pa.array(unowned[chosen] / 1000.0, pa.float64()),
                    "time_to_stable_ms": _nullable(
                        tts[chosen], (rebalances == 0)[chosen] | settled[chosen]
                    ),
                },
                schema=pa.schema(WINDOW_FIELDS),
            )
        )
    return pa.concat_tables(parts)


def _generation_table(
    group_names: pa.Array,
    group: Ints,
    seq: Ints,
    ts: Ints,
    generation: Ints,
    kinds: tuple[Bools, Bools, Bools],
    generations: tuple[Ints, Ints, Ints, Ints],
    assignment_rows: tuple[Ints, Ints, int, Ints],
    m_gid: Ints,
) -> pa.Table:
    """Per group and generation with an assignment: members, partitions, load skew, moves,
    time to Stable."""
    is_rebalance, is_generation, is_stable = kinds
    gen_keys, gen_group, gen_id, gen_ts = generations
    row_gid, row_owner, owner_count, held_by_row = assignment_rows
    count = len(gen_keys)
    # Members: the distinct owners of the generation's assignment rows, each with the
    # partitions it owns (0 for a member whose assignment was empty).
    members_of, member_of_row = np.unique(row_gid * owner_count + row_owner, return_inverse=True)
    n = np.bincount(member_of_row, weights=held_by_row, minlength=len(members_of))
    n = n.astype(np.int64)
    runs = np.flatnonzero(np.r_[True, np.diff(members_of // owner_count) != 0])
    members = np.diff(np.r_[runs, len(members_of)]).astype(np.int64)
    partitions = np.add.reduceat(n, runs)
    low = np.minimum.reduceat(n, runs)
    high = np.maximum.reduceat(n, runs)
    mean = partitions / members
    ratio = np.divide(high, mean, out=np.zeros(count), where=mean > 0)
    moved = np.bincount(m_gid, minlength=count).astype(np.int64)

    def lookup(keys: Ints) -> tuple[Ints, Bools]:
        at = np.minimum(np.searchsorted(gen_keys, keys), count - 1)
        return at, gen_keys[at] == keys

    # Time to Stable: the generation's first `stable` ...
    stable_rows = np.flatnonzero(is_stable)
    stable_keys = _gen_key(group[stable_rows], generation[stable_rows])
    first_keys, first = np.unique(stable_keys, return_index=True)
    at, known = lookup(first_keys)
    stable_ts = np.zeros(count, dtype=np.int64)
    has_stable = np.zeros(count, dtype=bool)
    stable_ts[at[known]] = ts[stable_rows[first[known]]]
    has_stable[at[known]] = True
    # ... minus the rebalance that led to it: the first rebalance_started after the
    # previous generation_started, whose next generation_started starts this generation.
    markers = np.flatnonzero(is_rebalance | is_generation)
    m_group = group[markers]
    m_is_gen = is_generation[markers]
    first_in_group = np.r_[True, m_group[1:] != m_group[:-1]]
    after_generation = first_in_group | np.r_[False, m_is_gen[:-1]]
    next_gen = _next_position(m_is_gen)
    found = next_gen < len(markers)
    next_gen = np.where(found, next_gen, 0)
    found &= m_group[next_gen] == m_group
    leads = np.flatnonzero(is_rebalance[markers] & after_generation & found)
    lead_keys = _gen_key(m_group[leads], generation[markers[next_gen[leads]]])
    lead_keys, first = np.unique(lead_keys, return_index=True)
    at, known = lookup(lead_keys)
    rebalance_ts = np.zeros(count, dtype=np.int64)
    has_rebalance = np.zeros(count, dtype=bool)
    rebalance_ts[at[known]] = ts[markers[leads[first[known]]]]
    has_rebalance[at[known]] = True
    return pa.table(
        {
            "group_id": group_names.take(pa.array(gen_group)),
            "generation_id": pa.array(gen_id, pa.int64()),
            "assigned_ts_ms": pa.array(gen_ts, pa.int64()),
            "members": pa.array(members, pa.int64()),
            "partitions": pa.array(partitions, pa.int64()),
            "min_partitions": pa.array(low, pa.int64()),
            "max_partitions": pa.array(high, pa.int64()),
            "skew": pa.array(high - low, pa.int64()),
            "skew_ratio": pa.array(ratio, pa.float64()),
            "moved": pa.array(moved, pa.int64()),
            "rebalance_ts_ms": _nullable(rebalance_ts, has_rebalance),
            "stable_ts_ms": _nullable(stable_ts, has_stable),
            "time_to_stable_ms": _nullable(stable_ts - rebalance_ts, has_rebalance & has_stable),
        },
        schema=pa.schema(GENERATION_FIELDS),
    )


def union(tables: Mapping[int, pa.Table]) -> pa.Table:
    """The three tables as rows of UNION_SCHEMA (the columns a table lacks are null)."""
    parts = []
    for key, table in tables.items():
        columns = {
            field.name: (
                table.column(field.name)
                if field.name in table.column_names
                else pa.nulls(table.num_rows, field.type)
            )
            for field in UNION_SCHEMA
            if field.name != "table"
        }
        tag = pa.array(np.full(table.num_rows, key, dtype=np.int8), pa.int8())
        parts.append(pa.table({"table": tag, **columns}, schema=UNION_SCHEMA))
    return pa.concat_tables(parts)


def whole_groups(
    batches: Iterable[pa.RecordBatch], chunk_rows: int = 1_000_000
) -> Iterator[pa.Table]:
    """Tables of whole groups from batches in which each group's rows are contiguous (a
    task's input sorted or clustered by group): cut after `chunk_rows` rows at the start of
    the group still arriving. A group seen again after another one began is an error (its
    figures would be split)."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    done: set[str] = set()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows < chunk_rows:
            continue
        table = pa.Table.from_batches(pending)
        names = table.column("group_id")
        last = names[-1]
        keep_from = table.num_rows - int(_flag(pc.equal(names, last)).sum())
        if keep_from == 0:
            continue  # one group larger than a chunk: wait for its end
        ready = table.slice(0, keep_from)
        pending = table.slice(keep_from).to_batches()
        rows = table.num_rows - keep_from
        _check_new(ready, done)
        yield ready
    if pending:
        table = pa.Table.from_batches(pending)
        _check_new(table, done)
        yield table


def _check_new(table: pa.Table, done: set[str]) -> None:
    names = {str(name) for name in pc.unique(table.column("group_id")).to_pylist()}
    if names & done:
        raise ValueError(f"journal rows of {sorted(names & done)[:3]} are not contiguous")
    done |= names


def partition_figures(
    batches: Iterable[pa.RecordBatch],
    windows: Sequence[RolloutWindow] = (),
    aliases: Mapping[str, str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """A Spark task's figures (`DataFrame.mapInArrow`): UNION_SCHEMA batches."""
    for chunk in whole_groups(batches):
        yield from union(compute(chunk, windows, aliases)).to_batches()
