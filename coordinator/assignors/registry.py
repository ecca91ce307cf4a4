"""Assignors by protocol name, as members offer them in JoinGroup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from coordinator.assignors.base import PartitionAssignor
from coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from coordinator.assignors.range_assignor import RangeAssignor
from coordinator.assignors.roundrobin import RoundRobinAssignor
from coordinator.assignors.static_sticky import StaticStickyAssignor
from coordinator.assignors.sticky import StickyAssignor

_FACTORIES: Final[dict[str, Callable[[], PartitionAssignor]]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    StickyAssignor.name: StickyAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
    StaticStickyAssignor.name: StaticStickyAssignor,
}

ASSIGNOR_NAMES: Final[tuple[str, ...]] = tuple(_FACTORIES)


def get_assignor(name: str) -> PartitionAssignor:
    """A fresh assignor for `name`; fresh because sticky assignors keep member-side state."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown assignor {name!r}; known assignors: {', '.join(ASSIGNOR_NAMES)}")
    return factory()
