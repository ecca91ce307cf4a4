"""Hot standby on a consumer-protocol (KIP-848) group of the 4.4 broker, measured.

Three of our members (`--group-protocol consumer`, static instance ids) share six partitions;
one is killed (SIGKILL: no leave, its partitions stay assigned to it). Then either
(a) nothing is done: the broker fences it when its session ends and gives its partitions to the
others (the group's own session set to 15 s, `consumer.session.timeout.ms`, where Kafka's
default is 45 s: the wait is the session either way);
or (b) the operator's takeover: one LeaveGroup by its instance id (the Kafka backend's batch leave),
then a standby process joins under that instance id at once. Each prints its figures;
docs/kafka.md, "The consumer protocol", "Hot standby", quotes them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from coordinator.client.kafka_transport import KafkaTransport
from staticfleet.kafka.broker import KafkaBroker
from staticfleet.member.events import read_events
from staticfleet_operator.backends import KafkaBackend, leave_errors

from .helpers import MemberProcess, member_command, member_logs, owned_now, set_group_session
from .test_member_consumer_protocol import consumer_member, converged, logs_show

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 6
# (a)'s group session: three of the broker's 5 s heartbeats, a third of Kafka's 45 s default.
SESSION_A_MS = 15_000
NAMES = ("a", "b", "c")
Partition = tuple[str, int]


def back_at_ms(paths: Iterable[Path], partitions: set[Partition], since_ms: int) -> int:
    """When the last of `partitions` was assigned again (to anyone) after `since_ms`."""
    first: dict[Partition, int] = {}
    for path in paths:
        for row in read_events(path):
            if row["event"] == "assigned" and int(row["ts_ms"]) >= since_ms:
                for topic, partition in row.get("partitions") or []:
                    tp = (str(topic), int(partition))
                    if tp in partitions:
                        first[tp] = min(first.get(tp, 2**62), int(row["ts_ms"]))
    assert set(first) == partitions, (first, partitions)
    return max(first.values())


def moves_since(path: Path, since_ms: int) -> list[tuple[str, list[list[object]]]]:
    return [
        (str(r["event"]), r["partitions"])
        for r in read_events(path)
        if r["event"] in ("assigned", "revoked", "lost")
        and int(r["ts_ms"]) >= since_ms
        and r.get("partitions")
    ]


async def three_members(
    bootstrap: str, topic: str, tmp_path: Path, transport: KafkaTransport
) -> tuple[dict[str, MemberProcess], dict[str, Path], dict[str, set[Partition]]]:
    group_id = f"{topic}-group"
    logs = {name: tmp_path / f"{name}.jsonl" for name in NAMES}
    members = {n: consumer_member(bootstrap, group_id, topic, n, logs[n]) for n in NAMES}
    found = await converged(transport, group_id, len(NAMES))
    held = {str(m.instance_id): set(m.assignment) for m in found.members}
    assert all(held.values()), held
    await logs_show(lambda: owned_now(member_logs(logs.items())), held)
    return members, logs, held


async def test_a_killed_member_s_partitions_wait_for_the_session_timeout(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(PARTITIONS)
    group_id = f"{topic}-group"
    transport = KafkaTransport(kafka_broker.bootstrap)
    await asyncio.to_thread(set_group_session, kafka_broker.bootstrap, group_id, SESSION_A_MS)
    members, logs, held = await three_members(kafka_broker.bootstrap, topic, tmp_path, transport)
    try:
        killed_ms = int(time.time() * 1000)
        members["c"].kill()
        two = await converged(transport, group_id, 2, limit_s=90)
        now = {str(m.instance_id): set(m.assignment) for m in two.members}
        assert set(now) == {"a", "b"} and set().union(*now.values()) == set().union(*held.values())
        # c's own log still shows what it held when killed: only a's and b's say what moved.
        alive = [(n, logs[n]) for n in ("a", "b")]
        await logs_show(lambda: owned_now(member_logs(alive)), now)
        back_ms = back_at_ms([logs["a"], logs["b"]], held["c"], killed_ms)
        print(f"(a) nothing done: c's partitions back {back_ms - killed_ms} ms after kill -9")
        # The session is the wait: not before it (less a heartbeat of slack), and the
        # group's own, not the broker's default (45 s).
        assert SESSION_A_MS - 5_000 <= back_ms - killed_ms < 40_000
    finally:
        for member in members.values():
            member.kill()
        await transport.close()


async def test_leave_by_instance_id_then_a_standby_under_it_takes_over(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(PARTITIONS)
    group_id = f"{topic}-group"
    transport = KafkaTransport(kafka_broker.bootstrap)
    backend = KafkaBackend(kafka_broker.bootstrap)
    members, logs, held = await three_members(kafka_broker.bootstrap, topic, tmp_path, transport)
    standby_log = tmp_path / "standby.jsonl"
    try:
        killed_ms = int(time.time() * 1000)
        members["c"].kill()
        started = time.perf_counter()
        answer = await backend.leave(group_id, ["c"])
        leave_ms = (time.perf_counter() - started) * 1000
        assert leave_errors(answer) == []
        after_leave = await transport.describe_consumer_group(group_id)
        targets = {str(m.instance_id): set(m.target_assignment) for m in after_leave.members}
        standby_started_ms = int(time.time() * 1000)
        members["standby"] = consumer_member(
            kafka_broker.bootstrap, group_id, topic, "c", standby_log
        )
        final = await converged(transport, group_id, 3, limit_s=90)
        now = {str(m.instance_id): set(m.assignment) for m in final.members}
        paths = {**{n: logs[n] for n in ("a", "b")}, "c": standby_log}
        await logs_show(lambda: owned_now(member_logs(paths.items())), now)
        settled_ms = int(time.time() * 1000)
        back_ms = back_at_ms(paths.values(), held["c"], killed_ms)
        standby_rows = read_events(standby_log)
        standby_first = next(
            int(r["ts_ms"]) for r in standby_rows if r["event"] == "assigned" and r["partitions"]
        )
        moved = {n: moves_since(logs[n], killed_ms) for n in ("a", "b")}
        print(
            f"(b) leave by instance id: round trip {leave_ms:.0f} ms; targets right after it "
            f"{ {n: sorted(p) for n, p in targets.items()} }"
        )
        print(
            f"(b) c's partitions consumed again {back_ms - killed_ms} ms after kill -9; "
            f"the standby's first partitions {standby_first - standby_started_ms} ms after it "
            f"started; all converged and logged {settled_ms - killed_ms} ms after kill -9"
        )
        print(f"(b) before {held}; after {now}; other members' moves {moved}")
        # The takeover ends well inside the default session (45 s) its group keeps.
        assert back_ms - killed_ms < 30_000
        assert now["c"] and set().union(*now.values()) == set().union(*held.values())
    finally:
        for member in members.values():
            member.kill()
        await backend.close()
        await transport.close()


ROUNDS = 5
HELD_LOG = "standby: the instance id is held"


def waiting_standby(bootstrap: str, group_id: str, topic: str, log: Path) -> MemberProcess:
    """Our member as a standby for `c` (`--standby-wait-ms`): started beside the active `c`,
    it is refused (UNRELEASED_INSTANCE_ID) and joins again every 150 ms (the default)."""
    command = member_command(
        bootstrap, group_id, topic, "c", log, "--group-protocol", "consumer",
        "--standby-wait-ms", "180000",
    )  # fmt: skip
    return MemberProcess(command, {}, log, stdout=False)


def owned_in(paths: dict[str, Path]) -> Callable[[], dict[str, set[Partition]]]:
    """What the event logs at `paths` (instance id -> path) say is owned now."""
    return lambda: owned_now(member_logs(paths.items()))


async def refused_once(standby: MemberProcess, limit_s: float = 60.0) -> None:
    """Until the standby's one log line says it waits (it is up and its join was refused)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert standby.process.poll() is None, standby.stderr_path.read_text()
        if HELD_LOG in standby.stderr_path.read_text():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the standby did not start waiting: {standby.stderr_path.read_text()}")


@pytest.mark.parametrize("removal", ["leave", "static_leave"])
async def test_a_waiting_standby_takes_over_within_a_retry_of_the_removal(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path, removal: str
) -> None:
    """A standby already running and waiting (`--standby-wait-ms`); the active `c` killed,
    then removed: (c) `leave`, one LeaveGroup by its instance id (the group epoch bumps, the
    orphans go to whoever heartbeats first); (e) `static_leave`, a ConsumerGroupHeartbeat
    with epoch -2 for its member id (the broker keeps the id and partitions for a static
    rejoin). The standby joins at its next retry. ROUNDS takeovers in one group, each
    standby becoming the `c` the next round kills."""
    topic = kafka_topic(PARTITIONS)
    group_id = f"{topic}-group"
    transport = KafkaTransport(kafka_broker.bootstrap)
    backend = KafkaBackend(kafka_broker.bootstrap)
    members, logs, held = await three_members(kafka_broker.bootstrap, topic, tmp_path, transport)
    processes = list(members.values())
    in_place = 0
    epochs: list[int] = []
    try:
        for round_ in range(ROUNDS):
            standby_log = tmp_path / f"standby-{round_}.jsonl"
            standby = waiting_standby(kafka_broker.bootstrap, group_id, topic, standby_log)
            processes.append(standby)
            await refused_once(standby)
            assert not any(r["event"] == "assigned" for r in read_events(standby_log))
            before = await transport.describe_consumer_group(group_id)
            member_id = next(m.member_id for m in before.members if m.instance_id == "c")
            killed_ms = int(time.time() * 1000)
            members["c"].kill()
            started = time.perf_counter()
            if removal == "leave":
                assert leave_errors(await backend.leave(group_id, ["c"])) == []
            else:
                assert await backend.static_leave(group_id, member_id, "c") == 0
            leave_ms = (time.perf_counter() - started) * 1000
            final = await converged(transport, group_id, 3, limit_s=90)
            epochs.append(final.group_epoch - before.group_epoch)
            now = {str(m.instance_id): set(m.assignment) for m in final.members}
            paths = {"a": logs["a"], "b": logs["b"], "c": standby_log}
            await logs_show(owned_in(paths), now)
            settled_ms = int(time.time() * 1000)
            back_ms = back_at_ms(paths.values(), held["c"], killed_ms)
            first = next(
                int(r["ts_ms"])
                for r in read_events(standby_log)
                if r["event"] == "assigned" and r["partitions"]
            )
            moved = {n: moves_since(logs[n], killed_ms) for n in ("a", "b")}
            stayed = now == held and not any(moved.values())
            in_place += stayed
            print(
                f"({removal}) round {round_ + 1}: removal {leave_ms:.0f} ms; the standby's first "
                f"partitions {first - killed_ms} ms after kill -9; c's partitions consumed "
                f"again {back_ms - killed_ms} ms after it; converged and logged "
                f"{settled_ms - killed_ms} ms after it; group epoch +{epochs[-1]}; "
                f"in place: {stayed}"
                + ("" if stayed else f"; before {held}, after {now}, moves {moved}")
            )
            # Far inside the default session (45 s) its group keeps, and the standby holds
            # partitions; every partition owned once.
            assert back_ms - killed_ms < 30_000
            assert now["c"] and set().union(*now.values()) == set().union(*held.values())
            members["c"], logs["c"], held = standby, standby_log, now
        print(f"({removal}) partitions kept in place in {in_place} of {ROUNDS} takeovers")
        if removal == "static_leave":
            # A static replacement each time: no epoch bump, so no survivor is told anything.
            assert epochs == [0] * ROUNDS and in_place == ROUNDS
    finally:
        for process in processes:
            process.kill()
        await backend.close()
        await transport.close()


async def test_a_waiting_standby_takes_a_gracefully_stopped_member_s_id_with_no_leave(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    """(d) The active `c` stopped with SIGTERM: it revokes, commits and sends epoch -2, so
    the broker keeps its id and partitions for a static restart; a waiting standby's next
    join is that restart (no LeaveGroup needed). What an operator wiring this in must know:
    a standby beside a slot's pod takes the id at any graceful stop of that pod."""
    topic = kafka_topic(PARTITIONS)
    group_id = f"{topic}-group"
    transport = KafkaTransport(kafka_broker.bootstrap)
    members, logs, held = await three_members(kafka_broker.bootstrap, topic, tmp_path, transport)
    standby_log = tmp_path / "standby.jsonl"
    standby = waiting_standby(kafka_broker.bootstrap, group_id, topic, standby_log)
    try:
        await refused_once(standby)
        epoch = (await transport.describe_consumer_group(group_id)).group_epoch
        stopped_ms = int(time.time() * 1000)
        assert members["c"].stop() == 0
        revoked = max(int(r["ts_ms"]) for r in read_events(logs["c"]) if r["event"] == "revoked")
        final = await converged(transport, group_id, 3, limit_s=90)
        now = {str(m.instance_id): set(m.assignment) for m in final.members}
        paths = {"a": logs["a"], "b": logs["b"], "c": standby_log}
        await logs_show(owned_in(paths), now)
        first = next(
            int(r["ts_ms"])
            for r in read_events(standby_log)
            if r["event"] == "assigned" and r["partitions"]
        )
        moved = {n: moves_since(logs[n], stopped_ms) for n in ("a", "b")}
        print(
            f"(d) SIGTERM: c revoked {revoked - stopped_ms} ms after it; the standby's first "
            f"partitions {first - revoked} ms after the revocation; group epoch "
            f"{epoch} -> {final.group_epoch}; moves {moved}"
        )
        # A static replacement: the same partitions, the group epoch unchanged, nobody moved.
        assert now == held and final.group_epoch == epoch and not any(moved.values())
    finally:
        for process in (*members.values(), standby):
            process.kill()
        await transport.close()
