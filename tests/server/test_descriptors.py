"""The open-file limit's decisions: what soft limit to set, how many connections fit, when a
refusal is logged, and the connection guard refusing at its ceiling (unit tests: fake limits,
a fake descriptor count and a manual clock)."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from coordinator.server.connections import (
    REFUSED_DESCRIPTORS,
    REFUSED_PER_ADDRESS,
    ConnectionGuard,
    ConnectionLimits,
    ThrottledCount,
    _GuardedProtocol,
)
from coordinator.server.descriptors import (
    connection_ceiling,
    open_descriptors,
    raised_soft_limit,
)

INFINITY = -1


@pytest.mark.parametrize(
    ("soft", "hard", "expected"),
    [
        (1024, 20_000, 20_000),  # the usual case: raised to the hard limit
        (20_000, 20_000, None),  # already there
        (64, 64, None),
        (1024, INFINITY, None),  # an unlimited hard limit is not a soft limit to set
        (INFINITY, INFINITY, None),
    ],
)
def test_the_soft_limit_is_raised_to_the_hard_limit(
    soft: int, hard: int, expected: int | None
) -> None:
    assert raised_soft_limit(soft, hard, infinity=INFINITY) == expected


def test_the_ceiling_leaves_the_other_descriptors_and_the_reserve() -> None:
    assert connection_ceiling(1024, other_descriptors=20, reserve=32) == 972
    assert connection_ceiling(40, other_descriptors=20, reserve=32) == 0
    assert connection_ceiling(None, other_descriptors=20, reserve=32) is None


def test_open_descriptors_counts_this_process() -> None:
    before = open_descriptors()
    assert before is not None
    with open(__file__, "rb"), open(__file__, "rb"):
        assert open_descriptors() == before + 2


def test_a_refusal_line_is_due_at_most_once_per_interval() -> None:
    count = ThrottledCount(interval_s=1.0)
    assert count.add(10.0) == 1  # the first is logged at once
    assert count.add(10.2) is None
    assert count.add(10.9) is None
    assert count.add(11.0) == 3  # with the two held back
    assert count.add(11.5) is None
    assert count.total == 5


class _Transport:
    def abort(self) -> None:
        pass


def _protocol(guard: ConnectionGuard) -> _GuardedProtocol:
    protocol = _GuardedProtocol(guard, asyncio.Protocol)
    protocol.transport = cast(asyncio.Transport, _Transport())
    return protocol


class _Fakes:
    def __init__(self, soft: int | None, other: int) -> None:
        self.now = 0.0
        self.soft = soft
        self.other = other
        self.counted = 0
        self.connections = 0

    def guard(self, reserve: int, per_address: int | None = None) -> ConnectionGuard:
        limits = ConnectionLimits(
            descriptor_reserve=reserve, max_connections_per_address=per_address
        )
        guard = ConnectionGuard(
            limits,
            clock=lambda: self.now,
            soft_limit=lambda: self.soft,
            count_descriptors=lambda: self.count(guard),
        )
        return guard

    def count(self, guard: ConnectionGuard) -> int:
        self.counted += 1
        return self.other + guard.open_total + 1  # and the connection being admitted


def _admit(guard: ConnectionGuard, address: str = "127.0.0.1") -> bool:
    return guard._admit(_protocol(guard), address)


def test_the_guard_refuses_at_the_descriptor_ceiling_and_recounts_it() -> None:
    fakes = _Fakes(soft=50, other=10)
    guard = fakes.guard(reserve=30)  # room for 10 connections
    assert all(_admit(guard) for _ in range(10))
    assert fakes.counted == 1  # counted once, at the first connection
    fakes.now = 0.5
    assert not _admit(guard)
    assert not _admit(guard)
    assert guard.refused[REFUSED_DESCRIPTORS] == 2
    assert guard.open_total == 10
    assert fakes.counted == 1  # at most one count per second

    # The server's other descriptors drop (a file closed): seen at the next count.
    fakes.other = 5
    fakes.now = 1.0
    assert all(_admit(guard) for _ in range(5))
    assert fakes.counted == 2
    assert not _admit(guard)
    assert guard.refused[REFUSED_DESCRIPTORS] == 3
    assert guard.open_total == 15


def test_no_ceiling_without_a_soft_limit() -> None:
    fakes = _Fakes(soft=None, other=10)
    guard = fakes.guard(reserve=30)
    assert all(_admit(guard) for _ in range(100))
    assert fakes.counted == 0  # nothing to count against


def test_the_per_address_cap_is_counted_as_its_own_reason() -> None:
    fakes = _Fakes(soft=1000, other=10)
    guard = fakes.guard(reserve=30, per_address=2)
    assert _admit(guard, "10.0.0.1") and _admit(guard, "10.0.0.1")
    assert not _admit(guard, "10.0.0.1")
    assert _admit(guard, "10.0.0.2")
    assert dict(guard.refused) == {REFUSED_PER_ADDRESS: 1}
    assert guard.open_total == 3


def test_the_reserve_is_checked() -> None:
    with pytest.raises(ValueError):
        ConnectionLimits(descriptor_reserve=-1)
