"""Our member on Kafka's consumer protocol (KIP-848, ConsumerGroupHeartbeat) on the 4.4 broker.

`staticfleet member run --group-protocol consumer`: alone it gets every partition; two Java
members (kafka-clients 4.4, `group.protocol=consumer`) join its group and the broker moves
partitions with no partition owned by two members at once (event logs); a static restart
within the session keeps its partitions (no member's assignment changes); a second process
with the instance id still held is refused (UNRELEASED_INSTANCE_ID, exit code 3). The
session broker keeps Kafka's defaults (heartbeat 5 s, session 45 s), so a reassignment takes
up to a few heartbeats; docs/kafka.md, "The consumer protocol", has the figures.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.client.kafka_groups import ConsumerGroupDescription
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.transport import TransportError
from staticfleet.demo.ownership import all_holdings, ownership_overlaps
from staticfleet.kafka.broker import KafkaBroker
from staticfleet.kafka.java_peer import JavaPeer
from staticfleet.member.events import read_events
from staticfleet.member.runtime import EXIT_FENCED, EXIT_OK

from .helpers import MemberProcess, member_command, member_logs, owned_now

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 6


def consumer_member(
    bootstrap: str, group: str, topic: str, instance: str | None, log: Path
) -> MemberProcess:
    command = member_command(bootstrap, group, topic, instance, log, "--group-protocol", "consumer")
    return MemberProcess(command, {}, log, stdout=False)


async def converged(
    transport: KafkaTransport, group_id: str, members: int, limit_s: float = 60.0
) -> ConsumerGroupDescription:
    deadline = time.monotonic() + limit_s
    last = None
    while time.monotonic() < deadline:
        try:
            found = await transport.describe_consumer_group(group_id)
        except TransportError:  # the coordinator not found or loading yet
            await asyncio.sleep(0.1)
            continue
        last = found
        if found.error_code == 0 and len(found.members) == members and found.converged:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"{group_id}: not converged with {members} members: {last}")


async def logs_show(
    logs: Callable[[], dict[str, set[tuple[str, int]]]],
    expected: dict[str, set[tuple[str, int]]],
    limit_s: float = 15.0,
) -> None:
    """Until the event logs' current holdings are `expected` (a log line follows the ack)."""
    deadline = time.monotonic() + limit_s
    while (now := logs()) != expected:
        assert time.monotonic() < deadline, (now, expected)
        await asyncio.sleep(0.05)


def first_assignment_ms(log: Path) -> int:
    rows = read_events(log)
    started = next(int(r["ts_ms"]) for r in rows if r["event"] == "started")
    assigned = next(int(r["ts_ms"]) for r in rows if r["event"] == "assigned" and r["partitions"])
    return assigned - started


async def test_our_member_shares_a_consumer_group_with_java_members_and_restarts_in_place(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(PARTITIONS)
    group_id = f"{topic}-group"
    bootstrap = kafka_broker.bootstrap
    every = {(topic, p) for p in range(PARTITIONS)}
    ours_log = tmp_path / "ours.jsonl"
    ours = consumer_member(bootstrap, group_id, topic, "ours", ours_log)
    peers: dict[str, JavaPeer] = {}
    transport = KafkaTransport(bootstrap)
    try:
        # --- alone: every partition, at the epoch the broker gave.
        alone = await converged(transport, group_id, 1)
        assert {tp for m in alone.members for tp in m.assignment} == every
        [member] = alone.members
        assert member.instance_id == "ours" and member.member_epoch == alone.group_epoch
        await logs_show(lambda: owned_now(member_logs([("ours", ours_log)])), {"ours": every})
        print(f"join -> first assignment: {first_assignment_ms(ours_log)} ms")

        # --- two Java members join: each partition moves only once its owner released it.
        for slot in range(2):
            name = f"java-{slot}"
            peers[name] = JavaPeer(
                bootstrap,
                group_id,
                [topic],
                tmp_path / f"{name}.jsonl",
                instance_id=name,
                group_protocol="consumer",
            )
            peers[name].start()
        started = time.monotonic()
        three = await converged(transport, group_id, 3)
        print(f"two Java members joined, converged in {time.monotonic() - started:.1f} s")
        by_member = {str(m.instance_id): set(m.assignment) for m in three.members}
        assert set().union(*by_member.values()) == every
        assert sum(map(len, by_member.values())) == PARTITIONS
        assert all(by_member.values()), by_member
        paths = [("ours", ours_log)] + [(n, p.event_log) for n, p in peers.items()]
        await logs_show(lambda: owned_now(member_logs(paths)), by_member)
        end_ms = int(time.time() * 1000)
        assert ownership_overlaps(all_holdings(member_logs(paths)), end_ms) == []

        # --- a static restart within the session: the same partitions, nobody else moves.
        ours_before = by_member["ours"]
        assert ours.stop() == EXIT_OK, ours.stderr_path.read_text()
        stopped_ms = int(time.time() * 1000)
        ours = consumer_member(bootstrap, group_id, topic, "ours", ours_log)
        again = await converged(transport, group_id, 3)
        assert {str(m.instance_id): set(m.assignment) for m in again.members} == by_member
        await logs_show(lambda: owned_now(member_logs(paths)), by_member)
        for name, peer in peers.items():
            moves = [
                r["event"]
                for r in read_events(peer.event_log)
                if r["event"] in ("assigned", "revoked", "lost")
                and int(r["ts_ms"]) >= stopped_ms
                and r.get("partitions")
            ]
            assert moves == [], (name, moves)
        rows = [r for r in read_events(ours_log) if int(r["ts_ms"]) >= stopped_ms]
        back_ms = next(int(r["ts_ms"]) for r in rows if r["event"] == "assigned")
        restarted_ms = next(int(r["ts_ms"]) for r in rows if r["event"] == "started")
        print(
            f"static restart: its partitions back {back_ms - stopped_ms} ms after the stop, "
            f"{back_ms - restarted_ms} ms after the new process started"
        )
        assert [set(map(tuple, r["partitions"])) for r in rows if r["event"] == "assigned"] == [
            ours_before
        ]
        # The restart's leave was a static one (-2): the member's epoch is kept by the broker.
        assert not [r for r in rows if r["event"] == "lost"]

        # --- a second process with the instance id still held: refused, with its reason.
        twin_log = tmp_path / "twin.jsonl"
        twin = consumer_member(bootstrap, group_id, topic, "ours", twin_log)
        assert twin.process.wait(timeout=60) == EXIT_FENCED
        assert "UNRELEASED_INSTANCE_ID" in twin.stderr_path.read_text()
        assert not [
            r for r in read_events(twin_log) if r["event"] == "assigned" and r["partitions"]
        ]
        end_ms = int(time.time() * 1000)
        assert ownership_overlaps(all_holdings(member_logs(paths)), end_ms) == []
    finally:
        assert ours.stop() == EXIT_OK, ours.stderr_path.read_text()
        for peer in peers.values():
            peer.stop()
        await transport.close()


async def test_a_dynamic_member_leaves_with_epoch_minus_1_and_is_gone_at_once(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(2)
    group_id = f"{topic}-group"
    log = tmp_path / "dynamic.jsonl"
    member = consumer_member(kafka_broker.bootstrap, group_id, topic, None, log)
    transport = KafkaTransport(kafka_broker.bootstrap)
    try:
        joined = await converged(transport, group_id, 1)
        assert joined.members[0].instance_id is None
        assert member.stop() == EXIT_OK, member.stderr_path.read_text()
        # No session to wait out: the leave (-1) removed it, and the group epoch moved.
        left = await transport.describe_consumer_group(group_id)
        assert left.members == () and left.group_epoch > joined.group_epoch
        events = [r["event"] for r in read_events(log)]
        assert events[-2:] == ["revoked", "stopped"]
    finally:
        member.kill()
        await transport.close()
