"""`staticfleet member run --coordinator kafka://...`: a member process whose group and
offsets live on the broker."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator.client.kafka_transport import KafkaTransport
from coordinator.errors import ErrorCode
from coordinator.messages import OffsetFetchRequest, OffsetFetchResponse
from staticfleet.kafka.broker import KafkaBroker
from staticfleet.member.events import read_events
from staticfleet.member.runtime import EXIT_OK

pytestmark = pytest.mark.kafka


def test_member_run_with_a_kafka_coordinator_joins_and_commits_on_the_cluster(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(4)
    group = f"{topic}-group"
    log = tmp_path / "member.jsonl"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "staticfleet.cli",
            "member",
            "run",
            "--coordinator",
            f"kafka://{kafka_broker.bootstrap}",
            "--group-id",
            group,
            "--instance-id",
            "m0",
            "--topics",
            topic,
            "--session-timeout-ms",
            "6000",
            "--heartbeat-interval-ms",
            "500",
            "--commit-interval-ms",
            "200",
            "--event-log",
            str(log),
        ],
        stderr=open(tmp_path / "member.err", "w"),  # noqa: SIM115
    )
    try:
        deadline = time.monotonic() + 60
        while _committed_partitions(log) != {0, 1, 2, 3}:
            assert process.poll() is None, (tmp_path / "member.err").read_text()
            assert time.monotonic() < deadline, "not every partition committed within 60 s"
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code == EXIT_OK, (tmp_path / "member.err").read_text()
    assigned = [e for e in _events(log) if e["event"] == "assigned"]
    assert sorted(p for e in assigned for _, p in e["partitions"]) == [0, 1, 2, 3]

    committed = asyncio.run(_committed(kafka_broker.bootstrap, group))
    assert committed.error_code is ErrorCode.NONE
    assert {p.partition for p in committed.partitions if p.committed_offset >= 0} == {0, 1, 2, 3}


def _committed_partitions(log: Path) -> set[int]:
    return {p for e in _events(log) if e["event"] == "commit" for _, p, _ in e["offsets"]}


def _events(log: Path) -> list[dict[str, Any]]:
    return read_events(log) if log.exists() else []


async def _committed(bootstrap: str, group: str) -> OffsetFetchResponse:
    transport = KafkaTransport(f"kafka://{bootstrap}")
    try:
        return await transport.fetch_offsets(OffsetFetchRequest(group))
    finally:
        await transport.close()
