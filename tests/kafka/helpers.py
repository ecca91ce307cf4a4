"""Small helpers the broker-backed tests share: records in, offsets and group state out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupState, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType

from staticfleet.demo.ownership import MemberLog, acknowledged_offsets, holdings
from staticfleet.member.events import read_events
from staticfleet.processes import terminate


def produce(
    bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0
) -> None:
    """`per_partition` records into every partition, values `partition:n` from n = start."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for n in range(start, start + per_partition):
            producer.produce(topic, value=f"{partition}:{n}".encode(), partition=partition)
    assert producer.flush(30) == 0


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-watermarks"})
    try:
        return {
            (topic, partition): consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), timeout=10
            )[1]
            for partition in range(partitions)
        }
    finally:
        consumer.close()


def group_assignor(bootstrap: str, group_id: str) -> tuple[str, str]:
    """(the group's selected assignor, its state) as the broker describes the group."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group_id])[group_id].result(10)
    state = description.state
    name = state.name if isinstance(state, ConsumerGroupState) else str(state)
    return description.partition_assignor, name


def set_group_session(bootstrap: str, group_id: str, session_ms: int) -> None:
    """The consumer-protocol group's own session (`consumer.session.timeout.ms`, a group
    config of KIP-848), set before its members join; at least the broker's
    `group.consumer.min.session.timeout.ms`."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(
        "consumer.session.timeout.ms",
        str(session_ms),
        incremental_operation=AlterConfigOpType.SET,
    )
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not reached in {timeout}s: {what}"
        time.sleep(0.1)


def member_logs(paths: Iterable[tuple[str, Path]]) -> list[MemberLog]:
    """(owner, event log path) pairs -> logs; the path's stem names the process."""
    return [
        MemberLog(owner=owner, process=path.stem, rows=read_events(path))
        for owner, path in paths
        if path.exists()
    ]


def owned_now(logs: Iterable[MemberLog]) -> dict[str, set[tuple[str, int]]]:
    owned: dict[str, set[tuple[str, int]]] = {}
    for log in logs:
        for holding in holdings(log):
            if holding.end_ms is None:
                owned.setdefault(holding.owner, set()).add(holding.partition)
    return owned


def complete_and_disjoint(
    owned: dict[str, set[tuple[str, int]]], every: set[tuple[str, int]], owners: int
) -> bool:
    union: set[tuple[str, int]] = set().union(*owned.values()) if owned else set()
    return (
        len(owned) == owners
        and all(owned.values())
        and union == every
        and sum(map(len, owned.values())) == len(every)
    )


class MemberProcess:
    """A member process (ours or librdkafka's pod program), stopped with SIGTERM."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path, stdout: bool) -> None:
        self.stderr_path = log.with_suffix(".err")
        self.process = subprocess.Popen(
            command,
            env={**os.environ, **env},
            stdout=log.open("ab") if stdout else subprocess.DEVNULL,
            stderr=self.stderr_path.open("ab"),
        )

    def stop(self) -> int:
        return terminate(self.process, 30)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def member_command(
    bootstrap: str, group: str, topic: str, instance: str | None, log: Path, *options: str
) -> list[str]:
    """`staticfleet member run` with its group on the broker and its records from it, a
    commit every 500 ms and its event log at `log`; `options` say the rest (the protocol)."""
    return [
        sys.executable,
        "-m",
        "staticfleet.cli",
        "member",
        "run",
        "--coordinator",
        f"kafka://{bootstrap}",
        "--source",
        f"kafka://{bootstrap}",
        "--group-id",
        group,
        *(["--instance-id", instance] if instance else []),
        "--topics",
        topic,
        *options,
        "--commit-interval-ms",
        "500",
        "--event-log",
        str(log),
    ]


def our_member(
    bootstrap: str,
    group: str,
    topic: str,
    instance: str,
    phase: str,
    log: Path,
    config: Path | None = None,
) -> MemberProcess:
    """Our member on the classic protocol in `phase`; `config`: its --kafka-config
    (STATICFLEET_KAFKA_CONFIG) for a secured listener."""
    command = member_command(
        bootstrap,
        group,
        topic,
        instance,
        log,
        "--rebalance-protocol",
        phase,
        "--eager-assignor",
        "range",
        "--cooperative-assignor",
        "cooperative-sticky",
        "--session-timeout-ms",
        "10000",
        "--heartbeat-interval-ms",
        "500",
    )
    env = {"STATICFLEET_KAFKA_CONFIG": str(config)} if config is not None else {}
    return MemberProcess(command, env, log, stdout=False)


class MemberRuns:
    """`member run` processes by name, each with its event log (`NAME.jsonl`) and stderr
    (`NAME.err`) in `directory`; a test's subclass says how one is started (`start`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def event_log(self, name: str) -> Path:
        return self.directory / f"{name}.jsonl"

    def launch(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.processes[name] = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stderr=open(self.directory / f"{name}.err", "w"),  # noqa: SIM115
        )

    def stop(self, name: str) -> int:
        process = self.processes[name]
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=30)

    def stderr(self, name: str) -> str:
        return (self.directory / f"{name}.err").read_text()

    def logs(self) -> list[MemberLog]:
        return [
            MemberLog(owner=name, process=name, rows=read_events(self.event_log(name)))
            for name in self.processes
            if self.event_log(name).exists()
        ]

    def owned_now(self) -> dict[str, set[tuple[str, int]]]:
        return owned_now(self.logs())

    def committed(self) -> dict[tuple[str, int], int]:
        return acknowledged_offsets(self.logs(), before_ms=2**62)

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
