"""The files a soak run leaves behind, and their names: what the driver writes and the
checker reads (JSON lines, one object a line, flushed at once)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

PROCESSES = "processes.jsonl"  # one row per member process: its log file, start, end, how
FAULTS = "faults.jsonl"  # one row per injected fault: kind, target, start, end
SAMPLES = "samples.jsonl"  # the public API, polled: describe and committed offsets
RUN = "run.json"  # the run's settings: groups, members, partitions, seed, bounds
MEMBERS_DIR = "members"  # <group>/<slot>.<incarnation>.jsonl: the members' event logs
STORE = "coordinator.db"  # the coordinator's SQLite store
# The Kafka variant: the broker's log directory, and the committed offsets read from its
# public API once the members have stopped (it has no store file of ours).
BROKER_DIR = "kafka"
FINAL_OFFSETS = "final_offsets.json"


class JsonLines:
    """Append-only, thread-safe (the sampler thread writes beside the driver)."""

    def __init__(self, path: Path) -> None:
        self._stream = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._stream.write(json.dumps(row, sort_keys=True) + "\n")
            self._stream.flush()

    def close(self) -> None:
        with self._lock:
            self._stream.close()
