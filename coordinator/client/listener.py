"""Rebalance callbacks, as Kafka's ConsumerRebalanceListener has them.

Each callback may be a plain function or a coroutine function. They run on the member's
own task, in protocol order, and the member waits for each to finish: a listener that
commits offsets in `on_partitions_revoked` has committed before the partitions are given
away.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from coordinator.protocol import TopicPartition

logger = logging.getLogger(__name__)

Partitions = frozenset[TopicPartition]


class RebalanceListener(Protocol):
    def on_partitions_revoked(self, partitions: Partitions) -> Awaitable[None] | None:
        """Partitions this member gives up while it still owns them: commit here."""
        ...

    def on_partitions_assigned(self, partitions: Partitions) -> Awaitable[None] | None:
        """Partitions this member now owns (all of them when eager, the new ones when
        cooperative; called after every completed rebalance, possibly with none)."""
        ...

    def on_partitions_lost(self, partitions: Partitions) -> Awaitable[None] | None:
        """Partitions that may already belong to someone else: do not commit them."""
        ...


class NoopRebalanceListener:
    """A listener that does nothing, for members that only need `member.assignment`."""

    def on_partitions_revoked(self, partitions: Partitions) -> None:
        return None

    def on_partitions_assigned(self, partitions: Partitions) -> None:
        return None

    def on_partitions_lost(self, partitions: Partitions) -> None:
        return None


async def invoke(
    callback: Callable[[Partitions], Awaitable[None] | None], partitions: Partitions
) -> None:
    """Run one callback, sync or async. A failing listener is logged, not propagated:
    the member must finish the protocol step (and keep its ownership bookkeeping honest)
    whatever the application code does."""
    name = getattr(callback, "__name__", "listener")
    try:
        result = callback(partitions)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception("rebalance listener %s failed for %d partition(s)", name, len(partitions))
