"""The process's open-file limit: raised at start, and kept from being reached.

Every member holds a connection of its own, and each is a descriptor, so the open-file soft
limit is the server's member ceiling: a default soft limit of 1,024 stops it near 1,000
members however high the hard limit is. A long-lived server (`coordinator serve`, `operator
run`) raises its soft limit to the hard one at start (`raise_open_file_limit`).

Reaching the limit is silent under uvloop, which `coordinator serve` runs on: libuv answers
EMFILE from accept() by closing a descriptor it keeps in reserve, accepting and closing every
pending connection, and reopening the reserve, with no callback and no log line (measured:
docs/server.md, "The open-file limit"). So the connection guard refuses connections itself a little
before the limit (`connection_ceiling`), where it can count and log them, and the server keeps
descriptors for its store, its TLS files and a /metrics scrape.
"""

from __future__ import annotations

import logging
import os
import resource

log = logging.getLogger(__name__)

# Descriptors kept free for the server's own files (the store, TLS reloads) and a scrape.
DEFAULT_DESCRIPTOR_RESERVE = 32


def raised_soft_limit(soft: int, hard: int, infinity: int = resource.RLIM_INFINITY) -> int | None:
    """The soft limit to set (the hard limit), or None when the soft limit is already there.

    An unlimited hard limit is kept as is: not every platform accepts an unlimited soft one."""
    if infinity in (soft, hard):
        return None
    return hard if soft < hard else None


def raise_open_file_limit() -> tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit; log one line; return (soft, hard)
    as they are afterwards. A refusal by the system is logged, not raised: the server still
    runs, on the limit it has."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = raised_soft_limit(soft, hard)
    if target is None:
        log.info("open-file limit: soft %s, hard %s (already at the hard limit)", soft, hard)
        return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as error:
        log.warning("open-file limit: soft %s, hard %s; cannot raise it: %s", soft, hard, error)
        return soft, hard
    log.info("open-file limit: soft %s raised to the hard limit %s", soft, target)
    return target, hard


def soft_open_file_limit() -> int | None:
    """The soft open-file limit, None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def connection_ceiling(soft_limit: int | None, other_descriptors: int, reserve: int) -> int | None:
    """How many connections the server may hold: the soft limit less the descriptors that are
    not connections and the reserve. None: no ceiling (an unlimited soft limit)."""
    if soft_limit is None:
        return None
    return max(0, soft_limit - other_descriptors - reserve)


def open_descriptors() -> int | None:
    """How many descriptors this process has open (Linux /proc, or /dev/fd elsewhere);
    None when neither can be listed. Lists a directory: call it rarely, not per connection."""
    for directory in ("/proc/self/fd", "/dev/fd"):
        try:
            # The listing's own descriptor is in the list.
            return len(os.listdir(directory)) - 1
        except OSError:
            continue
    return None
