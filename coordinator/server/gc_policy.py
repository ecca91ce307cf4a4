"""Garbage collection for a long-running server: no stop-the-world pause that grows with
the fleet.

CPython's full collection scans every tracked object; with 20,000 members one took
0.23-0.32 s, stalling every heartbeat (issue 13). `freeze_periodically` moves what has
survived so far out of the collector's sight (`gc.freeze()`, constant time) every half
second, after a young collection, so automatic collections only ever scan what is newer
than the last freeze. Objects that die later are still freed by reference counting; only
reference cycles that became garbage after being frozen are never reclaimed, and the
coordinator's long-lived objects (groups, members, their timers) are released by reference
counting when they go (a timer clears its handle when it fires).

Why half a second: in steady state young objects pile up in generation 0 without ever
triggering an automatic collection (each heartbeat allocates a timer while the one it
replaces, already frozen, is freed, and CPython counts that free against generation 0), so
the young collection before each freeze is the pause, and it grows with the interval. At
20,000 members it took 4-10 ms with a 2 s interval and 2-3 ms of CPU with 0.5 s; the total
work per second is the same (bench/capacity.py, docs/performance.md "Capacity").

A process whose frozen objects may later die in reference cycles (the operator: every
event Kopf handles builds a `Body` and a `Patch` whose views point back at them, and the ones
in flight at a freeze die frozen) would never get those back. `full_interval_s` bounds that
as CPython bounds its oldest generation: once what is frozen has grown by a quarter
(`FULL_GROWTH`) since the last full collection, everything is unfrozen, fully collected once
and frozen again; never twice within `full_interval_s`. While the operator's fleet came up,
with a full collection at most every 10 minutes, 111,000 of the 327,000 objects it had frozen
at 1,000 groups were such garbage (54 MiB, which its arenas then kept); one full collection
took 0.14 s over 216,000 objects (docs/performance.md, "What the operator's memory held").
Idle, nothing frozen grows, so nothing pauses. `coordinator serve` does not use it (its
objects are released by reference counting, see above).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Final

DEFAULT_FREEZE_INTERVAL_S: Final = 0.5
# The operator's full collections: one once what is frozen grew by a quarter (CPython's own
# threshold for its oldest generation: long-lived objects pending over a quarter of those
# collected), and never two within half a minute, so that a fleet coming up pauses the
# event loop (0.14 s over 216,000 objects at 1,000 groups) at most twice a minute.
FULL_GROWTH: Final = 0.25
DEFAULT_FULL_INTERVAL_S: Final = 30.0


def freeze_now() -> None:
    """Collect the young generations (cheap), then freeze everything that survived."""
    gc.collect(1)
    gc.freeze()


def collect_all() -> int:
    """Unfreeze, collect everything (the reference cycles among formerly frozen objects
    too), freeze again. Returns what the collection found unreachable."""
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    return found


def full_collection_due(
    frozen: int, frozen_after_last: int, since_last_s: float, full_interval_s: float
) -> bool:
    """Whether to collect fully now: `frozen` objects, `frozen_after_last` right after the
    last full collection, `since_last_s` seconds ago."""
    return since_last_s >= full_interval_s and frozen > frozen_after_last * (1 + FULL_GROWTH)


async def freeze_periodically(
    interval_s: float = DEFAULT_FREEZE_INTERVAL_S, full_interval_s: float | None = None
) -> None:
    """Freeze at startup and every `interval_s` after, until cancelled; with
    `full_interval_s`, a full collection (`collect_all`) too whenever `full_collection_due`."""
    if interval_s <= 0:
        raise ValueError("interval_s must be positive")
    if full_interval_s is not None and full_interval_s <= 0:
        raise ValueError("full_interval_s must be positive")
    loop = asyncio.get_running_loop()
    freeze_now()
    frozen_after_last, last_full = gc.get_freeze_count(), loop.time()
    while True:
        await asyncio.sleep(interval_s)
        freeze_now()
        if full_interval_s is not None and full_collection_due(
            gc.get_freeze_count(), frozen_after_last, loop.time() - last_full, full_interval_s
        ):
            collect_all()
            frozen_after_last, last_full = gc.get_freeze_count(), loop.time()
