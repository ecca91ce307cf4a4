"""How the coordinator logs the store failing under it: the first failure with its traceback,
then one line per interval with how many more there were, and one line when a write
succeeds again.

Every request that writes fails while the store cannot write (a full disk, a volume gone
read-only), and members commit and heartbeat on: a traceback each was 16 tracebacks a second
for eight members in the soak's full-disk fault (docs/soak.md), and would be thousands for
a real fleet, filling the very disk that is full. Each failed request is still answered
COORDINATOR_NOT_AVAILABLE and counted by its operation's error metric.
"""

from __future__ import annotations

import logging
from typing import Final

from coordinator.clock import Clock

# At most one summary line per this many ms while the store keeps failing.
SUMMARY_INTERVAL_MS: Final = 10_000


class StoreFailures:
    def __init__(self, clock: Clock, log: logging.Logger) -> None:
        self._clock = clock
        self._log = log
        self._since_ms: int | None = None  # the first failure of the current run of them
        self._unreported = 0
        self._total = 0
        self._reported_ms = 0
        self._last_error = ""

    @property
    def failing(self) -> bool:
        return self._since_ms is not None

    def failed(self, error: BaseException) -> None:
        """A request failed on the store (call from an `except` block: the first logs it
        with its traceback)."""
        now = self._clock.now_ms()
        self._total += 1
        self._last_error = str(error)
        if self._since_ms is None:
            self._since_ms = self._reported_ms = now
            self._log.exception(
                "store failure while handling a request (answered COORDINATOR_NOT_AVAILABLE; "
                "further failures are summed every %d s)",
                SUMMARY_INTERVAL_MS // 1000,
            )
            return
        self._unreported += 1
        if now - self._reported_ms >= SUMMARY_INTERVAL_MS:
            self._log.error(
                "store still failing: %d more request(s) answered COORDINATOR_NOT_AVAILABLE in "
                "the last %.0f s (last: %s)",
                self._unreported,
                (now - self._reported_ms) / 1000,
                self._last_error,
            )
            self._unreported = 0
            self._reported_ms = now

    def succeeded(self) -> None:
        """A request went through: after failures, say the store works again."""
        if self._since_ms is None:
            return
        self._log.warning(
            "store writes succeed again after %.1f s and %d failed request(s)",
            (self._clock.now_ms() - self._since_ms) / 1000,
            self._total,
        )
        self._since_ms = None
        self._unreported = self._total = 0
