"""`member run --health-port` with a Kafka cluster's group coordinator: /readyz says joining
until the first assignment, then stable with every partition, on the classic protocol and on
the consumer protocol (KIP-848, whose generation is the member epoch)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from staticfleet.kafka.broker import KafkaBroker, free_port
from staticfleet.member.events import read_events
from staticfleet.member.runtime import EXIT_OK

pytestmark = pytest.mark.kafka


def _get(port: int, path: str) -> tuple[int, dict[str, Any]] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)
    except OSError:
        return None  # not listening yet


@pytest.mark.parametrize("protocol", ["eager", "consumer"])
def test_readyz_on_a_kafka_coordinator(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path, protocol: str
) -> None:
    topic = kafka_topic(4)
    port = free_port()
    errors = tmp_path / "member.err"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "staticfleet.cli",
            "member",
            "run",
            "--coordinator",
            f"kafka://{kafka_broker.bootstrap}",
            "--group-protocol",
            protocol,
            "--group-id",
            f"{topic}-group",
            "--instance-id",
            "m0",
            "--topics",
            topic,
            "--session-timeout-ms",
            "6000",
            "--heartbeat-interval-ms",
            "500",
            "--event-log",
            str(tmp_path / "member.jsonl"),
            "--health-port",
            str(port),
        ],
        stderr=errors.open("w"),
    )
    reasons: list[str] = []
    seen: list[tuple[int, str]] = []  # (wall-clock ms once answered, reason): every change
    try:
        deadline = time.monotonic() + 60
        while not reasons or reasons[-1] != "stable":
            assert process.poll() is None, errors.read_text()
            assert time.monotonic() < deadline, (reasons, errors.read_text())
            answer = _get(port, "/readyz")
            if answer is not None and (not reasons or reasons[-1] != answer[1]["reason"]):
                assert answer[0] == (200 if answer[1]["reason"] == "stable" else 503), answer
                reasons.append(answer[1]["reason"])
                seen.append((int(time.time() * 1000), answer[1]["reason"]))
            time.sleep(0.05)
        _, body = _get(port, "/readyz") or (0, {})
        assert body["partitions"] == 4 and body["generation_id"] >= 1, body
        assert body["last_contact_ms_ago"] < 6000, body
        live = _get(port, "/livez")
        assert live is not None and live[0] == 200, live
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code == EXIT_OK, errors.read_text()
    assert reasons[-1] == "stable", reasons
    # Before its first assignment the member is joining (503). Whether a probe lands in that
    # window depends on scheduling (a consumer-protocol join can finish before this loop's
    # first poll on a loaded machine), so the check is against the member's own log: every
    # answer given before its first `assigned` event said joining.
    assigned_ms = min(
        int(row["ts_ms"])
        for row in read_events(tmp_path / "member.jsonl")
        if row["event"] == "assigned"
    )
    early = [reason for at_ms, reason in seen if at_ms < assigned_ms]
    assert all(reason == "joining" for reason in early), (seen, assigned_ms)
