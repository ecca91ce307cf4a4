"""Identity slots: lowest free slot reused, never two live pods on one slot, rebuilt from
annotations after a restart, scale-down and the adopted-mode grace period."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from staticfleet_operator.identity import (
    SlotAllocator,
    SlotClaim,
    SlotTable,
    SlotTakenError,
    plan_scale_down,
    rebuild,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
PREFIX = "orders"


def table_with(*pod_keys: str) -> SlotTable:
    table = SlotTable(PREFIX)
    for key in pod_keys:
        table.assign(key)
    return table


# --- the table -----------------------------------------------------------------------------


def test_slots_are_handed_out_lowest_first_and_name_the_instance_id() -> None:
    table = table_with("a", "b", "c")
    assert table.held == {0: "a", 1: "b", 2: "c"}
    assert table.instance_id(2) == "orders-2"
    assert table.assign("b") == 1  # a retried admission gets the same answer


def test_a_replacement_takes_over_its_predecessors_identity() -> None:
    table = table_with("a", "b", "c")
    assert table.pod_gone("b", T0) == 1
    assert table.vacant == {1: T0}
    assert table.assign("b-replacement") == 1
    assert table.vacant == {}
    assert table.assign("d") == 3


def test_the_lowest_free_slot_wins_even_over_a_higher_vacant_one() -> None:
    table = table_with("a", "b", "c")
    table.pod_gone("c", T0)
    table.pod_gone("a", T0 + timedelta(seconds=1))
    assert table.assign("new") == 0
    assert table.assign("newer") == 2


def test_claiming_a_specific_slot() -> None:
    table = table_with("a", "b")
    with pytest.raises(SlotTakenError, match="held by a"):
        table.claim("x", 0)
    assert table.claim("x", 5) == 5
    assert table.claim("x", 5) == 5
    with pytest.raises(SlotTakenError, match="already holds slot 5"):
        table.claim("x", 6)
    table.retire([6])
    with pytest.raises(SlotTakenError, match="LeaveGroup"):
        table.claim("y", 6)
    with pytest.raises(ValueError, match="non-negative"):
        table.claim("y", -1)


def test_scale_down_takes_the_highest_slots_first() -> None:
    assert plan_scale_down([0, 1, 2, 3, 4], 2) == [4, 3, 2]
    assert plan_scale_down([3, 0, 7], 1) == [7, 3]
    assert plan_scale_down([0, 1], 2) == []
    assert plan_scale_down([0, 1], 5) == []
    assert plan_scale_down([], 0) == []
    with pytest.raises(ValueError):
        plan_scale_down([0], -1)


def test_scale_down_frees_slots_only_after_the_leave_was_sent() -> None:
    table = table_with("a", "b", "c", "d")
    removed = plan_scale_down(table.held, 2)
    table.retire(removed)
    # Pods still running: a LeaveGroup now would only make them rejoin as new members.
    assert table.pending_leave() == []
    table.pod_gone("d", T0)
    assert table.pending_leave() == ["orders-3"]
    table.pod_gone("c", T0)
    assert table.pending_leave() == ["orders-2", "orders-3"]
    # Not reusable until the coordinator was told: the leave would evict the newcomer.
    assert table.assign("e") == 4
    assert table.leave_sent(["orders-2", "orders-3", "elsewhere-1", "orders-x"]) == [2, 3]
    assert table.pending_leave() == []
    assert table.assign("f") == 2


def test_vacant_slots_expiring_close_together_retire_in_one_batch() -> None:
    table = table_with("exec-a", "exec-b", "exec-c", "exec-d")
    table.pod_gone("exec-a", T0)
    table.pod_gone("exec-b", T0 + timedelta(seconds=2))  # seen gone one pass later
    table.pod_gone("exec-c", T0 + timedelta(seconds=30))
    # Nothing expired yet: the window alone never retires a slot.
    assert table.expire_vacant(T0 + timedelta(seconds=59), 60, batch_window_seconds=5) == []
    # Slot 0 expires; slot 1 would expire 2 s later and goes in the same batch; slot 2 not.
    assert table.expire_vacant(T0 + timedelta(seconds=61), 60, batch_window_seconds=5) == [0, 1]
    assert table.pending_leave() == ["orders-0", "orders-1"]
    assert table.expire_vacant(T0 + timedelta(seconds=91), 60, batch_window_seconds=5) == [2]


def test_adopted_pods_that_vanish_are_released_after_the_grace_period() -> None:
    table = table_with("exec-a", "exec-b", "exec-c")
    table.pod_gone("exec-b", T0)
    table.pod_gone("exec-c", T0)
    assert table.expire_vacant(T0 + timedelta(seconds=30), grace_seconds=60) == []
    # A replacement executor arrives in time and takes over slot 1.
    assert table.assign("exec-b2") == 1
    assert table.expire_vacant(T0 + timedelta(seconds=61), grace_seconds=60) == [2]
    assert table.pending_leave() == ["orders-2"]
    assert table.assign("exec-d") == 3  # slot 2 waits for its LeaveGroup
    table.leave_sent(table.pending_leave())
    assert table.assign("exec-e") == 2


def test_an_assignment_whose_write_failed_is_undone() -> None:
    table = table_with("a", "b")
    table.pod_gone("a", T0)
    table.assign("x")
    table.unassign("x", T0)
    assert table.held == {1: "b"} and table.vacant == {0: T0}
    table.assign("y")
    table.unassign("y", None)
    assert table.vacant == {} and table.lowest_free() == 0


# --- rebuild after a restart ---------------------------------------------------------------


def claim(key: str, slot: int | None, seconds: int = 0, name: str | None = None) -> SlotClaim:
    return SlotClaim(key, name or f"pod-{key}", slot, T0 + timedelta(seconds=seconds))


def test_rebuild_reads_the_annotations_back() -> None:
    rebuilt = rebuild(PREFIX, [claim("a", 0), claim("b", 2), claim("c", None)])
    assert rebuilt.table.held == {0: "a", 2: "b"}
    assert rebuilt.unslotted == ("c",)
    assert rebuilt.conflicts == ()
    assert rebuilt.table.assign("d") == 1


def test_two_live_pods_on_one_slot_the_older_keeps_it() -> None:
    rebuilt = rebuild(
        PREFIX,
        [claim("young", 1, seconds=50), claim("old", 1, seconds=10), claim("mid", 1, 20)],
    )
    assert rebuilt.table.held == {1: "old"}
    (conflict,) = rebuilt.conflicts
    assert (conflict.slot, conflict.keeper, conflict.evicted) == (1, "old", ("mid", "young"))
    assert rebuilt.pods_to_delete == ("mid", "young")


def test_conflict_ties_are_broken_by_name_so_every_replica_agrees() -> None:
    claims = [claim("k1", 0, name="pod-b"), claim("k2", 0, name="pod-a")]
    assert rebuild(PREFIX, claims).table.held == {0: "k2"}
    assert rebuild(PREFIX, list(reversed(claims))).table.held == {0: "k2"}


def test_rebuild_restores_vacant_slots_with_a_fresh_grace_period() -> None:
    rebuilt = rebuild(PREFIX, [claim("a", 0)], vacant_slots=[0, 3], now=T0)
    assert rebuilt.table.vacant == {3: T0}
    with pytest.raises(ValueError, match="now"):
        rebuild(PREFIX, [], vacant_slots=[1])


def test_a_pod_listed_twice_counts_once() -> None:
    rebuilt = rebuild(PREFIX, [claim("a", 0), claim("a", 0)])
    assert rebuilt.table.held == {0: "a"} and rebuilt.conflicts == ()


# --- the asyncio allocator -----------------------------------------------------------------


async def test_concurrent_admissions_get_distinct_lowest_slots() -> None:
    allocator = SlotAllocator()
    written: list[tuple[int, str]] = []

    async def persist(slot: int, instance_id: str) -> None:
        await asyncio.sleep(0)  # the annotation write yields to the other admissions
        written.append((slot, instance_id))

    grants = await asyncio.gather(
        *(allocator.admit("g", PREFIX, f"pod-{i}", persist) for i in range(6))
    )
    assert sorted(grant.slot for grant in grants) == list(range(6))
    assert sorted(written) == [(i, f"orders-{i}") for i in range(6)]


async def test_a_failed_write_gives_the_slot_back() -> None:
    allocator = SlotAllocator()
    await allocator.admit("g", PREFIX, "a")
    await allocator.pod_gone("g", PREFIX, "a", T0)

    async def conflict(slot: int, instance_id: str) -> None:
        raise RuntimeError("409 Conflict: resourceVersion changed")

    with pytest.raises(RuntimeError, match="409"):
        await allocator.admit("g", PREFIX, "b", conflict)
    async with allocator.locked("g", PREFIX) as table:
        assert table.held == {} and table.vacant == {0: T0}
    assert (await allocator.admit("g", PREFIX, "c")).slot == 0


async def test_an_admission_waits_for_a_concurrent_write_and_takes_the_lowest_slot() -> None:
    """The lock covers the write: had `second` not waited, it would have taken slot 1
    while slot 0 was only tentatively given to `first`, whose write then failed."""
    allocator = SlotAllocator()

    async def slow_conflict(slot: int, instance_id: str) -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("409 Conflict")

    first, second = await asyncio.gather(
        allocator.admit("g", PREFIX, "first", slow_conflict),
        allocator.admit("g", PREFIX, "second"),
        return_exceptions=True,
    )
    assert isinstance(first, RuntimeError)
    assert not isinstance(second, BaseException) and second.slot == 0


async def test_groups_are_separate_and_keep_their_prefix() -> None:
    allocator = SlotAllocator()
    assert (await allocator.admit("g1", "a", "p")).instance_id == "a-0"
    assert (await allocator.admit("g2", "b", "p")).instance_id == "b-0"
    with pytest.raises(ValueError, match="prefix"):
        await allocator.admit("g1", "b", "q")
    assert (await allocator.claim("g1", "a", "m", 4)).instance_id == "a-4"
    rebuilt = await allocator.rebuild("g1", "c", [claim("z", 2)])
    assert rebuilt.table.held == {2: "z"}
    assert (await allocator.admit("g1", "c", "y")).instance_id == "c-0"
    allocator.forget("g1")
    assert (await allocator.admit("g1", "d", "y")).instance_id == "d-0"


# --- properties ----------------------------------------------------------------------------


@dataclass
class Cluster:
    """Live pods and the slot annotation each carries; the allocator's view must match."""

    allocator: SlotAllocator = field(default_factory=SlotAllocator)
    annotations: dict[str, int] = field(default_factory=dict)
    created: dict[str, datetime] = field(default_factory=dict)
    pods: int = 0
    now: datetime = T0

    async def table(self) -> SlotTable:
        async with self.allocator.locked("g", PREFIX) as table:
            return table

    def claims(self) -> list[SlotClaim]:
        return [
            SlotClaim(key, key, slot, self.created[key]) for key, slot in self.annotations.items()
        ]


Step = tuple[str, int, int]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), st.integers(1, 6), st.integers(0, 2**16)),
        st.tuples(st.just("delete"), st.integers(0, 100), st.integers(0, 0)),
        st.tuples(st.just("restart"), st.integers(0, 0), st.integers(0, 0)),
        st.tuples(st.just("expire"), st.integers(0, 120), st.integers(0, 0)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_slot_invariants_under_random_pod_events(script: list[Step]) -> None:
    asyncio.run(play(script))


async def play(script: list[Step]) -> None:
    cluster = Cluster()
    for kind, amount, seed in script:
        if kind == "admit":
            await admit_concurrently(cluster, amount, random.Random(seed))
        elif kind == "delete" and cluster.annotations:
            keys = sorted(cluster.annotations)
            key = keys[amount % len(keys)]
            del cluster.annotations[key]
            await cluster.allocator.pod_gone("g", PREFIX, key, cluster.now)
        elif kind == "restart":
            # The operator restarts: only the live pods' annotations survive.
            table = await cluster.table()
            before = table.held
            rebuilt = await cluster.allocator.rebuild("g", PREFIX, cluster.claims())
            assert rebuilt.conflicts == () and rebuilt.unslotted == ()
            assert rebuilt.table.held == before
        elif kind == "expire":
            cluster.now += timedelta(seconds=amount)
            async with cluster.allocator.locked("g", PREFIX) as table:
                table.expire_vacant(cluster.now, grace_seconds=60)
                leaving = table.pending_leave()
                # One batch LeaveGroup, then the slots are free.
                assert table.leave_sent(leaving) == sorted(
                    int(i.rsplit("-", 1)[1]) for i in leaving
                )
        await check(cluster)


async def admit_concurrently(cluster: Cluster, count: int, rnd: random.Random) -> None:
    table = await cluster.table()
    allocatable = [
        slot
        for slot in range(len(table.held) + len(table.retiring) + count + 1)
        if table.holder(slot) is None and slot not in table.retiring
    ]

    async def admit(key: str, fails: bool) -> int | None:
        async def persist(slot: int, instance_id: str) -> None:
            for _ in range(rnd.randint(0, 3)):
                await asyncio.sleep(0)  # interleave with the other admissions
            if fails:
                raise RuntimeError("conflict")
            cluster.annotations[key] = slot
            cluster.created[key] = cluster.now

        try:
            return (await cluster.allocator.admit("g", PREFIX, key, persist)).slot
        except RuntimeError:
            return None

    keys = [f"pod-{cluster.pods + i}" for i in range(count)]
    cluster.pods += count
    results = await asyncio.gather(*(admit(key, rnd.random() < 0.25) for key in keys))
    granted = sorted(slot for slot in results if slot is not None)
    # Each admission took the lowest allocatable slot; a failed one gave it back.
    assert granted == allocatable[: len(granted)]


async def check(cluster: Cluster) -> None:
    table = await cluster.table()
    held = table.held
    # No slot held by two live pods; every live pod holds the slot its annotation names.
    assert len(set(held.values())) == len(held)
    assert {key: table.slot_of(key) for key in cluster.annotations} == cluster.annotations
    assert set(held.values()) == set(cluster.annotations)
    # Vacant and retiring slots are never held.
    assert not (set(table.vacant) | table.retiring) & set(held)
    # A rebuild from the annotations equals the live table.
    assert rebuild(PREFIX, cluster.claims()).table.held == held
