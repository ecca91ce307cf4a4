"""What the scenarios observe about a fleet: pods over time, member logs, the journal.

Shared by every cluster bootstrap (the local control plane and kind): it talks to the
cluster only through `kubectl` and to the coordinator only over HTTP, as a user would.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from staticfleet.demo.ownership import MemberLog

T = TypeVar("T")
# The `record` fixture: a figure for e2e/results.json under the running scenario.
Record = Callable[[str, Any], None]

GROUP_LABEL = "staticfleet.dev/group"
SLOT_ANNOTATION = "staticfleet.dev/slot"
INSTANCE_ANNOTATION = "staticfleet.dev/instance-id"
PROTOCOL_ANNOTATION = "staticfleet.dev/protocol"


class Timeout(AssertionError):
    """A condition a scenario waits for did not come true in time."""


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    interval_s: float = 0.5,
    describe: Callable[[], str] | None = None,
) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` (and, if given, a
    description of the last state) after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\nlast state: {describe()}" if describe else ""
            raise Timeout(f"timed out after {timeout_s:.0f}s waiting for {what}{detail}")
        time.sleep(interval_s)


# --- the coordinator, over HTTP ---------------------------------------------------------------


def answers_ready(base_url: str, timeout_s: float = 5) -> bool:
    """The coordinator at `base_url` answers /readyz with 200 (anything else, a refused
    connection included: not yet)."""
    try:
        with urllib.request.urlopen(f"{base_url}/readyz", timeout=timeout_s) as response:
            return int(response.status) == 200
    except OSError:  # urllib's URLError and HTTPError are OSErrors
        return False


@dataclass(frozen=True)
class CoordinatorAdmin:
    """The embedded coordinator's admin API (the operator's /v1 routes), with the chart's
    admin token."""

    base_url: str
    token: str

    def _get(self, path: str, **query: Any) -> Any:
        url = f"{self.base_url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def describe(self, group_id: str) -> dict[str, Any]:
        described: dict[str, Any] = self._get(f"/v1/groups/{urllib.parse.quote(group_id)}")
        return described

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """Every offset the group has committed (OffsetFetch with no partition list)."""
        path = f"/v1/groups/{urllib.parse.quote(group_id)}/offsets/fetch"
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            data=json.dumps({"group_id": group_id}).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.loads(response.read())
        return {
            (str(item["topic"]), int(item["partition"])): int(item["committed_offset"])
            for item in answer.get("partitions") or []
            if int(item.get("error_code", 0)) == 0 and int(item["committed_offset"]) >= 0
        }

    def journal(self, group_id: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        since = 0
        while True:
            page = self._get("/v1/journal", group_id=group_id, since=since, limit=5000)
            rows.extend(page["events"])
            if not page["events"]:
                return rows
            since = int(page["next_since"])

    def metrics(self) -> str:
        request = urllib.request.Request(f"{self.base_url}/metrics")
        with urllib.request.urlopen(request, timeout=10) as response:
            text: str = response.read().decode()
            return text


def static_rejoins(
    journal: Iterable[dict[str, Any]], instance_id: str, since_ms: int
) -> list[dict[str, Any]]:
    """The coordinator's record of `instance_id` coming back as the same static member."""
    return [
        r
        for r in rows_of(journal, "static_rejoin", since_ms)
        if r["group_instance_id"] == instance_id
    ]


def rows_of(
    journal: Iterable[dict[str, Any]], kind: str, since_ms: int = 0
) -> list[dict[str, Any]]:
    return [row for row in journal if row["kind"] == kind and int(row["ts_ms"]) >= since_ms]


# --- member event logs --------------------------------------------------------------------------


def member_logs_from_text(owner: str, text: str) -> list[MemberLog]:
    """Split one container log (every incarnation of a pod name, appended) into one
    MemberLog per member process: a process starts with its `started` event. Lines that
    are not member events (the runtime's headers, Python logging) are skipped."""
    logs: list[MemberLog] = []
    rows: list[dict[str, Any]] = []

    def close() -> None:
        if rows:
            logs.append(MemberLog(owner, f"{owner}#{len(logs)}", list(rows)))
            rows.clear()

    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict) or "event" not in row or "ts_ms" not in row:
            continue
        if row["event"] == "started":
            close()
        rows.append(row)
    close()
    return logs


# --- pods, as they come and go -------------------------------------------------------------------


@dataclass(frozen=True)
class PodSighting:
    """One pod object the recorder saw created (one incarnation of a slot)."""

    name: str
    uid: str
    slot: str | None
    instance_id: str | None
    protocol: str | None
    seen_at: float  # time.time() when first seen


class PodRecorder:
    """Watches the pods of a namespace (`kubectl get pods -w`) and remembers every pod
    object created, so a scenario can count bounces afterwards: a bounce is a new pod uid
    in a slot. A thread, because the scenarios are plain synchronous code."""

    def __init__(self, kubectl: Sequence[str], namespace: str) -> None:
        self._command = [
            *kubectl,
            "-n",
            namespace,
            "get",
            "pods",
            "-l",
            GROUP_LABEL,
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ]
        self._lock = threading.Lock()
        self._seen: dict[str, PodSighting] = {}
        self._process: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> PodRecorder:
        self._process = subprocess.Popen(
            self._command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def sightings(self) -> list[PodSighting]:
        with self._lock:
            return sorted(self._seen.values(), key=lambda sighting: sighting.seen_at)

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        for chunk in self._process.stdout:
            buffer += chunk
            while True:
                buffer = buffer.lstrip()
                try:
                    event, end = decoder.raw_decode(buffer)
                except json.JSONDecodeError:
                    break
                buffer = buffer[end:]
                self._observe(event)

    def _observe(self, event: dict[str, Any]) -> None:
        pod = event.get("object") or {}
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if not uid or event.get("type") == "DELETED":
            return
        annotations = meta.get("annotations") or {}
        with self._lock:
            if uid not in self._seen:
                self._seen[uid] = PodSighting(
                    name=meta.get("name", ""),
                    uid=uid,
                    slot=annotations.get(SLOT_ANNOTATION),
                    instance_id=annotations.get(INSTANCE_ANNOTATION),
                    protocol=annotations.get(PROTOCOL_ANNOTATION),
                    seen_at=time.time(),
                )
