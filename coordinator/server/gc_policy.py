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

A process whose frozen objects may later die in reference cycles (the operator: Kopf's
per-object workers and their tasks) would never get those back. `full_interval_s` bounds
that: every so often everything is unfrozen, fully collected once (one long pause: about
1 s with 1,000 groups in the operator) and frozen again. `coordinator serve` does not use
it (its objects are released by reference counting, see above).
"""

from __future__ import annotations

import asyncio
import gc
import math
from typing import Final

DEFAULT_FREEZE_INTERVAL_S: Final = 0.5
# The operator's full collection: rare enough that its pause (about 1 s at 1,000 groups) is
# one in ten minutes, often enough that reclaimable cycles do not pile up.
DEFAULT_FULL_INTERVAL_S: Final = 600.0


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


async def freeze_periodically(
    interval_s: float = DEFAULT_FREEZE_INTERVAL_S, full_interval_s: float | None = None
) -> None:
    """Freeze at startup and every `interval_s` after, until cancelled; with
    `full_interval_s`, a full collection (`collect_all`) that often as well."""
    if interval_s <= 0:
        raise ValueError("interval_s must be positive")
    if full_interval_s is not None and full_interval_s <= 0:
        raise ValueError("full_interval_s must be positive")
    loop = asyncio.get_running_loop()
    full_every = math.inf if full_interval_s is None else full_interval_s
    next_full = loop.time() + full_every
    while True:
        if loop.time() >= next_full:
            collect_all()
            next_full = loop.time() + full_every
        else:
            freeze_now()
        await asyncio.sleep(interval_s)
