"""Consumer-protocol (KIP-848) groups on the real Kafka 4.4 broker, as the operator reads them.

A Java fleet (kafka-clients 4.4, `group.protocol=consumer`, static instance ids) and a
librdkafka fleet (the librdkafka pod program, confluent-kafka, the same) are read through
the operator's `KafkaBackend`: seen with their epochs and converged; one batch LeaveGroup by
instance id after a member's pod is gone (a scale-down); a static member's restart, within
the session and past it. What the broker does is measured and asserted here, and written
down in docs/kafka.md, "The consumer protocol".
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from coordinator.client.kafka_groups import ConsumerGroupDescription, GroupType, MemberType
from staticfleet.kafka.broker import KafkaBroker
from staticfleet.kafka.java_peer import JavaPeer
from staticfleet.member.events import read_events
from staticfleet_operator.backends import CoordinatorUnreachable, KafkaBackend, leave_errors
from staticfleet_operator.rollout import CoordinatorView, GroupProtocol
from staticfleet_operator.rollout.migration import classic_metadata, metadata_refusal

from .helpers import MemberProcess

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PARTITIONS = 6
# The broker's default group.consumer.heartbeat.interval.ms is 5 s: a member learns a new
# target at its next heartbeat, so convergence takes up to that long.
# A bound on waiting, not an assertion of speed: Java members starting on a busy machine
# (the suite's parallel workers) take tens of seconds to reconcile; a wait returns at once.
CONVERGE_S = 90.0


async def wait_converged(
    backend: KafkaBackend,
    group_id: str,
    members: int,
    limit_s: float = CONVERGE_S,
    until: Callable[[ConsumerGroupDescription], bool] = lambda _: True,
) -> tuple[ConsumerGroupDescription, set[int]]:
    """The group once converged with `members` members; and every group epoch seen. (A
    fresh broker answers COORDINATOR_NOT_AVAILABLE until its offsets topic is loaded.)"""
    deadline = time.monotonic() + limit_s
    epochs: set[int] = set()
    last: ConsumerGroupDescription | None = None
    while time.monotonic() < deadline:
        try:
            _, found = await backend.describe_typed(group_id)
        except CoordinatorUnreachable:
            found = None
        if found is not None:
            last = found
            epochs.add(found.group_epoch)
            if found.converged and len(found.members) == members and until(found):
                return found, epochs
        await asyncio.sleep(0.1)
    raise AssertionError(f"{group_id} not converged with {members} members in {limit_s}s: {last}")


def owned(found: ConsumerGroupDescription) -> dict[str | None, tuple[tuple[str, int], ...]]:
    return {m.instance_id: m.assignment for m in found.members}


def moves_after(log: Path, since_ms: int) -> list[str]:
    """The assignment changes a member's event log shows after `since_ms`."""
    return [
        str(row["event"])
        for row in read_events(log)
        if row["event"] in ("assigned", "revoked", "lost") and int(row["ts_ms"]) >= since_ms
    ]


def rejoined_on_consumer(instance: str, group: ConsumerGroupDescription) -> bool:
    """The instance id is held by a consumer-protocol member (a restarted process is in: the
    classic member it replaces stays listed until then, a static close not leaving)."""
    return any(
        m.instance_id == instance and m.member_type is MemberType.CONSUMER for m in group.members
    )


def logged_holding(log: Path) -> set[tuple[str, int]]:
    """What a Java member's event log says it holds (on the consumer protocol its callbacks
    name only the partitions added or taken away)."""
    held: set[tuple[str, int]] = set()
    for row in read_events(log):
        parts = {(str(t), int(p)) for t, p in row.get("partitions", [])}
        if row["event"] == "assigned":
            held |= parts
        elif row["event"] in ("revoked", "lost"):
            held -= parts
    return held


async def wait_logged(logs: dict[str, Path], found: ConsumerGroupDescription) -> None:
    """Until every member's callbacks have caught up with what the broker says it holds (the
    broker can see a member's acknowledgement before its log line is written)."""
    deadline = time.monotonic() + 10
    for member in found.members:
        log = logs[str(member.instance_id)]
        while logged_holding(log) != set(member.assignment):
            assert time.monotonic() < deadline, (member, logged_holding(log))
            await asyncio.sleep(0.05)


async def restart_in_place(
    backend: KafkaBackend,
    found: ConsumerGroupDescription,
    restarted: str,
    *,
    stop: Callable[[str], object],
    start: Callable[[str], None],
    logs: dict[str, Path],
) -> ConsumerGroupDescription:
    """A static restart: the member closes (a static member's close leaves it in the group at
    epoch -2 keeping its partitions); back within the session it gets them again, with no
    group epoch bump and no callback in any other member's log. The group, back."""
    group_id = found.group_id
    before = owned(found)
    since_ms = int(time.time() * 1000)
    stop(restarted)
    _, away = await backend.describe_typed(group_id)
    assert away is not None
    [absent] = [m for m in away.members if m.instance_id == restarted]
    assert absent.member_epoch == -2 and absent.assignment == before[restarted], away
    assert not away.converged and away.group_epoch == found.group_epoch, (found, away)
    assert not CoordinatorView.from_consumer_group(away).settled  # the gate waits
    started = time.monotonic()
    start(restarted)
    back, epochs = await wait_converged(backend, group_id, len(found.members))
    rejoin_s = time.monotonic() - started
    assert owned(back) == before, (found, back)  # 0 partitions moved
    assert epochs == {found.group_epoch}, (found, back, epochs)  # no reassignment at all
    for other, log in logs.items():
        if other != restarted:
            assert moves_after(log, since_ms) == [], other
    print(f"static restart: rejoined with its partitions in {rejoin_s:.2f}s, epoch unchanged")
    return back


async def scale_down_by_one_leave(
    backend: KafkaBackend,
    found: ConsumerGroupDescription,
    retired: str,
    *,
    stop: Callable[[str], object],
) -> ConsumerGroupDescription:
    """A scale-down: the member's pod is gone (its static close leaves it at epoch -2), then
    one batch LeaveGroup by instance id: one group epoch bump, the survivors keep what they
    held and take the rest. The group after it."""
    stop(retired)
    started = time.monotonic()
    answer = await backend.leave(found.group_id, [retired])
    leave_ms = (time.monotonic() - started) * 1000
    assert leave_errors(answer) == []
    after, epochs = await wait_converged(backend, found.group_id, len(found.members) - 1)
    converged_s = time.monotonic() - started
    assert retired not in {m.instance_id for m in after.members}
    assert after.group_epoch == found.group_epoch + 1
    assert epochs <= {found.group_epoch, found.group_epoch + 1}
    kept = owned(found)
    for member in after.members:
        assert set(kept[member.instance_id]) <= set(member.assignment)
    every = {tp for m in found.members for tp in m.assignment}
    assert {tp for m in after.members for tp in m.assignment} == every
    print(
        f"scale-down: LeaveGroup answered in {leave_ms:.1f} ms, converged with "
        f"{len(after.members)} members {converged_s:.2f}s later, 1 group epoch bump"
    )
    return after


def consumer_peer(
    bootstrap: str, group_id: str, topic: str, instance: str, logs: Path, run: str = ""
) -> JavaPeer:
    """A static Java consumer (kafka-clients 4.4) on the consumer protocol, its event log at
    `logs/<instance><run>.jsonl` (not started)."""
    return JavaPeer(
        bootstrap,
        group_id,
        [topic],
        logs / f"{instance}{run}.jsonl",
        instance_id=instance,
        group_protocol="consumer",
    )


@pytest.fixture
def java_fleet(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> Iterator[tuple[str, str, dict[str, JavaPeer]]]:
    topic = kafka_topic(PARTITIONS)
    group_id = f"{topic}-group"
    peers = {
        f"{group_id}-{slot}": consumer_peer(
            kafka_broker.bootstrap, group_id, topic, f"{group_id}-{slot}", tmp_path
        )
        for slot in range(3)
    }
    for peer in peers.values():
        peer.start()
    try:
        yield topic, group_id, peers
    finally:
        for peer in peers.values():
            peer.stop()


async def test_a_java_consumer_protocol_fleet_is_seen_restarted_and_scaled_down(
    kafka_broker: KafkaBroker, java_fleet: tuple[str, str, dict[str, JavaPeer]], tmp_path: Path
) -> None:
    topic, group_id, peers = java_fleet
    instances = sorted(peers)
    backend = KafkaBackend(kafka_broker.bootstrap)
    try:
        # --- seen: the type, the epochs, every member converged.
        found, _ = await wait_converged(backend, group_id, 3)
        listed = await backend.transport.list_groups([GroupType.CONSUMER])
        assert any(g.group_id == group_id and g.group_type is GroupType.CONSUMER for g in listed)
        assert [m.instance_id for m in found.members] == instances
        assert found.assignor == "uniform"  # the broker's default group.consumer.assignors
        assert found.group_epoch == found.assignment_epoch >= 1
        assert all(m.member_epoch == found.group_epoch for m in found.members)
        assert {m.member_type for m in found.members} == {MemberType.CONSUMER}
        assert not found.migrating
        every = {(topic, p) for p in range(PARTITIONS)}
        assert {tp for m in found.members for tp in m.assignment} == every
        described, _ = await backend.describe_typed(group_id)
        assert (described.group_state, described.generation_id) == ("Stable", found.group_epoch)
        view = CoordinatorView.from_consumer_group(found)
        assert view.protocol is GroupProtocol.CONSUMER and view.settled
        assert view.instance_ids == frozenset(instances)

        # --- a static restart, then a scale-down by one batch LeaveGroup.
        await wait_logged({i: peers[i].event_log for i in instances}, found)

        def restart(instance: str) -> None:
            peers[instance] = consumer_peer(
                kafka_broker.bootstrap, group_id, topic, instance, tmp_path, "-again"
            )
            peers[instance].start()

        back = await restart_in_place(
            backend,
            found,
            instances[1],
            stop=lambda instance: peers[instance].stop(),
            start=restart,
            logs={i: peers[i].event_log for i in instances},
        )
        await scale_down_by_one_leave(
            backend, back, instances[2], stop=lambda instance: peers[instance].stop()
        )
        # An instance id the group does not hold is refused per member, not for the batch.
        unknown = await backend.leave(group_id, [f"{group_id}-9"])
        assert leave_errors(unknown) == [f"{group_id}-9: UNKNOWN_MEMBER_ID"]
    finally:
        await backend.close()


def rdkafka_pod(bootstrap: str, group_id: str, topic: str, slot: int, log: Path) -> MemberProcess:
    """`python -m staticfleet.kafka.rdkafka_pod` (the librdkafka pod program) configured by
    the env the operator injects, with KAFKA_GROUP_PROTOCOL=consumer."""
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_GROUP_ID": group_id,
        "KAFKA_GROUP_INSTANCE_ID": f"{group_id}-{slot}",
        "KAFKA_TOPICS": topic,
        "KAFKA_PARTITION_ASSIGNMENT_STRATEGY": "range",  # ignored on the consumer protocol
        "KAFKA_GROUP_PROTOCOL": "consumer",
    }
    command = [sys.executable, "-m", "staticfleet.kafka.rdkafka_pod"]
    return MemberProcess(command, env, log, stdout=True)


async def test_a_librdkafka_consumer_protocol_fleet_is_seen_restarted_and_scaled_down(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(PARTITIONS)
    group_id = f"{topic}-group"
    backend = KafkaBackend(kafka_broker.bootstrap)
    instances = [f"{group_id}-{slot}" for slot in range(3)]
    logs = {instance: tmp_path / f"rd-{instance}.jsonl" for instance in instances}
    pods = {
        instance: rdkafka_pod(kafka_broker.bootstrap, group_id, topic, slot, logs[instance])
        for slot, instance in enumerate(instances)
    }

    def stop(instance: str) -> None:
        assert pods[instance].stop() == 0, pods[instance].stderr_path.read_text()

    def start(instance: str) -> None:
        slot = instances.index(instance)
        pods[instance] = rdkafka_pod(kafka_broker.bootstrap, group_id, topic, slot, logs[instance])

    try:
        found, _ = await wait_converged(backend, group_id, 3)
        assert [m.instance_id for m in found.members] == instances
        assert {m.member_type for m in found.members} == {MemberType.CONSUMER}
        assert all(m.member_epoch == found.group_epoch for m in found.members)
        assert sorted(tp for m in found.members for tp in m.assignment) == [
            (topic, p) for p in range(PARTITIONS)
        ]
        assert CoordinatorView.from_consumer_group(found).settled
        await wait_logged(logs, found)
        back = await restart_in_place(
            backend, found, instances[1], stop=stop, start=start, logs=logs
        )
        await scale_down_by_one_leave(backend, back, instances[2], stop=stop)
    finally:
        for instance, pod in pods.items():
            if pod.process.poll() is None:
                stop(instance)
        await backend.close()


# A broker of the test's own with a short consumer-group session (the defaults, 45 s, and a
# 45-s minimum, would make this test a minute long).
SHORT_SESSION = {
    "group.consumer.min.session.timeout.ms": "3000",
    "group.consumer.session.timeout.ms": "4000",
    # The broker requires the heartbeat interval below the session timeout.
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "1000",
}


async def test_a_static_restart_that_outlasts_the_session_is_a_removal_and_a_reassignment(
    tmp_path: Path,
) -> None:
    broker = KafkaBroker(tmp_path / "broker", settings=SHORT_SESSION)
    broker.start()
    peers: dict[str, JavaPeer] = {}
    backend = KafkaBackend(broker.bootstrap)
    try:
        broker.wait_ready(timeout=120)
        topic, group_id = "orders", "orders-group"
        broker.create_topic(topic, PARTITIONS)
        for slot in range(3):
            instance = f"{group_id}-{slot}"
            peers[instance] = consumer_peer(broker.bootstrap, group_id, topic, instance, tmp_path)
            peers[instance].start()
        found, _ = await wait_converged(backend, group_id, 3, limit_s=60)
        restarted = f"{group_id}-1"
        before = owned(found)
        peers[restarted].stop()
        stopped = time.monotonic()
        # Away past the session: the broker removes the member and reassigns its partitions.
        gone, epochs = await wait_converged(backend, group_id, 2, limit_s=30)
        removed_s = time.monotonic() - stopped
        assert restarted not in owned(gone)
        assert gone.group_epoch == found.group_epoch + 1, (found, gone, epochs)
        assert {tp for m in gone.members for tp in m.assignment} == {
            (topic, p) for p in range(PARTITIONS)
        }
        peers[restarted] = consumer_peer(
            broker.bootstrap, group_id, topic, restarted, tmp_path, "-again"
        )
        peers[restarted].start()
        back, _ = await wait_converged(backend, group_id, 3, limit_s=60)
        # Back as a new member: another epoch bump; its partitions went to the others for
        # the time it was gone (the survivors covered all six above) and are assigned again.
        assert back.group_epoch == gone.group_epoch + 1
        moved = sum(
            1
            for m in back.members
            for tp in m.assignment
            if tp not in before.get(m.instance_id, ())
        )
        print(
            f"restart past a 4-s session: removed {removed_s:.1f}s after the stop, epochs "
            f"{found.group_epoch} -> {gone.group_epoch} -> {back.group_epoch}, "
            f"{moved} partition(s) on another member than before at the end"
        )
    finally:
        for peer in peers.values():
            peer.stop()
        await backend.close()
        broker.stop()


async def test_a_classic_java_group_converts_when_a_member_joins_on_the_consumer_protocol(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    """KIP-848's online upgrade, as the operator sees it: a classic group becomes a consumer
    group when one member rejoins with group.protocol=consumer, its classic members listed
    in it (`migrating`) until they too are restarted on the new protocol."""
    topic = kafka_topic(PARTITIONS)
    group_id = f"{topic}-group"
    instances = [f"{group_id}-{slot}" for slot in range(3)]

    def peer(instance: str, protocol: str, run: int) -> JavaPeer:
        return JavaPeer(
            kafka_broker.bootstrap,
            group_id,
            [topic],
            tmp_path / f"{instance}-{run}.jsonl",
            instance_id=instance,
            group_protocol=protocol,
            strategies=("cooperative-sticky",),
        )

    peers = {instance: peer(instance, "classic", 0) for instance in instances}
    backend = KafkaBackend(kafka_broker.bootstrap)
    try:
        for each in peers.values():
            each.start()
        deadline = time.monotonic() + CONVERGE_S
        while True:
            try:
                classic, none = await backend.describe_typed(group_id)
            except CoordinatorUnreachable:
                classic, none = None, None
            if (
                classic is not None
                and classic.group_state == "Stable"
                and len(classic.members) == 3
            ):
                break
            assert time.monotonic() < deadline, classic
            await asyncio.sleep(0.2)
        assert none is None  # a classic group: DescribeGroups answered
        # What the migration's pre-check reads of it: Java's cooperative-sticky embeds a
        # generation in each subscription's user data, which the conversion drops and the
        # broker's sticky assignors make up for, so it is no refusal.
        metadata = classic_metadata(classic)
        assert metadata is not None and metadata.assignor == "cooperative-sticky", classic
        assert len(metadata.with_user_data) == 3 and not metadata.unreadable
        assert metadata_refusal(metadata) is None

        timeline: list[str] = []
        epochs: list[int] = []
        for run, instance in enumerate(instances, start=1):
            peers[instance].stop()
            peers[instance] = peer(instance, "consumer", run)
            peers[instance].start()
            started = time.monotonic()
            found, _ = await wait_converged(
                backend,
                group_id,
                3,
                limit_s=60,
                until=partial(rejoined_on_consumer, instance),
            )
            took = time.monotonic() - started
            epochs.append(found.group_epoch)
            classic_left = sum(1 for m in found.members if m.member_type is MemberType.CLASSIC)
            assert classic_left == 3 - run, found
            assert found.migrating is (run < 3)
            view = CoordinatorView.from_consumer_group(found)
            assert view.protocol is GroupProtocol.CONSUMER and view.settled
            assert view.consumer is not None and view.consumer.classic_members == 3 - run
            timeline.append(
                f"{run} on consumer: epoch {found.group_epoch}, {classic_left} classic, "
                f"converged {took:.1f}s after the start"
            )
        # Measured: each static member replaced in place, the group epoch never bumped.
        assert len(set(epochs)) == 1, timeline
        listed = await backend.transport.list_groups([GroupType.CONSUMER])
        assert group_id in {g.group_id for g in listed}
        print("migration: " + "; ".join(timeline))
    finally:
        for each in peers.values():
            each.stop()
        await backend.close()
