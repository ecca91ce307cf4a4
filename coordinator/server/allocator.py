"""The C allocator's policy for a long-running process: large blocks go back to the system.

glibc's malloc serves a block of 128 KiB or more with its own `mmap` and unmaps it when it
is freed, but the first time such a block is freed it raises that threshold to the block's
size (up to 32 MiB): from then on those blocks come from the heap, among small objects, and
a heap is only given back from its top. The operator's large blocks are short-lived and
come in bursts: asyncio's 256 KiB read buffer for each TLS connection to the API server
(a fleet coming up opens a hundred at once) and the text of every LIST answer. After a burst
the process kept them as resident memory it would never use again (docs/performance.md,
"The allocator's threshold"). Fixing the threshold keeps those blocks mapped on their own,
so freeing one returns it (a block the heap's free top already holds is still served from
there: the threshold only decides how the heap grows).

glibc only: another C library (musl in an Alpine image) has no `mallopt`, and this does
nothing there. A user who set `MALLOC_MMAP_THRESHOLD_` themselves keeps their value.
No library exposes `mallopt`; this is ctypes over the C library Python itself links.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Final

log = logging.getLogger("staticfleet.allocator")

M_MMAP_THRESHOLD: Final = -3  # malloc.h
MMAP_THRESHOLD_BYTES: Final = 128 * 1024  # glibc's own starting value, no longer moved
ENV: Final = "MALLOC_MMAP_THRESHOLD_"


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold at `threshold` bytes. False where it is not glibc's
    malloc, or where the environment already set it."""
    if os.environ.get(ENV):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    log.debug("malloc: mmap threshold fixed at %d bytes: %s", threshold, done)
    return done
