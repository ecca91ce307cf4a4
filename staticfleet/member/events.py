"""The member's event log: one JSON object per line for every ownership event.

It is the evidence the tests and the demo use to prove no partition was owned by two
members at once.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from coordinator.client.consumer_protocol_member import ConsumerProtocolMember
from coordinator.client.member import GroupMember
from coordinator.protocol import TopicPartition
from staticfleet.source import wall_clock_ms

# A member on the classic protocol or on the consumer protocol (KIP-848): the same events.
Member = GroupMember | ConsumerProtocolMember

# Event kinds, the `event` field of each line.
STARTED = "started"
ASSIGNED = "assigned"
REVOKED = "revoked"
LOST = "lost"
COMMIT = "commit"
COMMIT_FAILED = "commit_failed"
FATAL = "fatal"
STOPPED = "stopped"
STANDBY = "standby"  # waiting as a hot standby
PROMOTED = "promoted"  # the standby is now `instance_id`


class EventLog:
    """One JSON object per line, flushed at once so a killed process loses nothing."""

    def __init__(self, stream: TextIO, *, group_id: str, instance_id: str | None) -> None:
        self._stream = stream
        self._group_id = group_id
        self.instance_id = instance_id
        self.member: Member | None = None

    @classmethod
    def open(cls, path: str | None, *, group_id: str, instance_id: str | None) -> EventLog:
        stream: TextIO
        if path is None or path == "-":
            stream = sys.stdout
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            stream = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        return cls(stream, group_id=group_id, instance_id=instance_id)

    def write(self, event: str, **fields: Any) -> None:
        member = self.member
        line = {
            "ts_ms": wall_clock_ms(),
            "event": event,
            "group_id": self._group_id,
            "instance_id": self.instance_id,
            "member_id": member.member_id if member else "",
            "generation_id": member.generation_id if member else -1,
            **fields,
        }
        self._stream.write(json.dumps(line, sort_keys=True) + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._stream is not sys.stdout:
            self._stream.close()


def partition_list(partitions: Iterable[TopicPartition]) -> list[list[Any]]:
    return [[tp.topic, tp.partition] for tp in sorted(partitions)]


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """Parse an event log (a line cut short by a kill is skipped)."""
    events = []
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events
