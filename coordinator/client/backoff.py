"""Exponential retry backoff with jitter, as Kafka's retry.backoff.ms / retry.backoff.max.ms."""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, initial_ms: int, maximum_ms: int, *, jitter: float = 0.2) -> None:
        self._initial_ms = initial_ms
        self._maximum_ms = maximum_ms
        self._jitter = jitter
        self._attempts = 0

    def next_delay_s(self) -> float:
        """The wait before the next attempt; grows until `reset()`."""
        delay = min(self._maximum_ms, self._initial_ms * (1 << min(self._attempts, 30)))
        self._attempts += 1
        # Jitter spreads a fleet's retries after a coordinator restart instead of having
        # every member knock at the same instant.
        factor = 1.0 + random.uniform(-self._jitter, self._jitter)
        return max(0.0, delay * factor / 1000)

    def next_delay_ms(self) -> int:
        """`next_delay_s` in whole milliseconds (for a `Clock`)."""
        return round(self.next_delay_s() * 1000)

    def reset(self) -> None:
        self._attempts = 0
