"""Expected members (KIP-345's "Future Works"): the rule that holds a join phase until
every expected static member has joined, or until the expected members' deadline.

Pure data and rules; the coordinator calls `hold_ms` where it would end a join phase. Kafka
has no such API: a group on a Kafka broker rebalances once per member that arrives in a
separate join phase.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ExpectedMembers:
    """The instance ids the group should have, and when waiting for them stops."""

    instance_ids: frozenset[str]
    timeout_ms: int
    # Absolute (the clock's ms; wall time for the SystemClock), so a coordinator restart
    # keeps the same deadline rather than starting the wait again.
    deadline_ms: int

    def missing(self, joined_instance_ids: Iterable[str]) -> frozenset[str]:
        return self.instance_ids - frozenset(joined_instance_ids)

    def hold_ms(self, joined_instance_ids: Iterable[str], now_ms: int) -> int:
        """How much longer the join phase waits (0: it may end now)."""
        if now_ms >= self.deadline_ms or not self.missing(joined_instance_ids):
            return 0
        return self.deadline_ms - now_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_ids": sorted(self.instance_ids),
            "timeout_ms": self.timeout_ms,
            "deadline_ms": self.deadline_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExpectedMembers:
        return cls(
            instance_ids=frozenset(str(i) for i in data["instance_ids"]),
            timeout_ms=int(data["timeout_ms"]),
            deadline_ms=int(data["deadline_ms"]),
        )
