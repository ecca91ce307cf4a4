"""The consumer protocol (KIP-848) as our member speaks it, without a broker: the generated
ConsumerGroupHeartbeat messages, the pure decisions (consumer_protocol_state.py), and the
member's I/O edge on a scripted transport (the order of callbacks and acknowledgements).
tests/kafka/test_member_consumer_protocol.py runs the member against the 4.4 broker."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.client import env
from coordinator.client.config import MemberConfig, RebalanceProtocolSetting
from coordinator.client.consumer_protocol_member import (
    ConsumerProtocolError,
    ConsumerProtocolMember,
)
from coordinator.client.consumer_protocol_state import (
    FENCED_MEMBER_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    HeartbeatAnswer,
    InstanceIdWait,
    Outcome,
    StepKind,
    assigned_partitions,
    close_epoch,
    decide,
    new_member_id,
    owned_by_id,
    reconcile,
)
from coordinator.client.kafka_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator.client.transport import TransportError
from coordinator.clock import ManualClock
from coordinator.errors import ErrorCode
from coordinator.messages import (
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from coordinator.protocol import TopicPartition
from staticfleet.cli import build_parser
from staticfleet.commands import member_cmd
from staticfleet.member.runtime import EXIT_USAGE
from staticfleet.member.settings import Overrides, settings_from

TOPIC_ID = uuid.UUID("7f4f0b4c-e03f-4279-b5e9-a2f7b626ae6b")


def test_the_heartbeat_request_round_trips_as_kafka_defines_it() -> None:
    assert ConsumerGroupHeartbeatRequest.API_KEY == 68
    request = ConsumerGroupHeartbeatRequest[1](
        group_id="g",
        member_id="m",
        member_epoch=0,
        instance_id="i",
        rack_id=None,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=["t"],
        subscribed_topic_regex=None,
        server_assignor="uniform",
        topic_partitions=[
            ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=TOPIC_ID, partitions=[0, 2])
        ],
    )
    encoded = request.encode()
    # Compact strings (length + 1), the epoch, a null rack (0), tagged fields (0) last.
    assert encoded.startswith(bytes.fromhex("0267026d0000000002690000007530020274"))
    decoded = ConsumerGroupHeartbeatRequest.decode(encoded, version=1)
    assert decoded.to_dict() == request.to_dict()
    leave = ConsumerGroupHeartbeatRequest[1](
        group_id="g",
        member_id="m",
        member_epoch=STATIC_LEAVE_EPOCH,
        instance_id="i",
        rack_id=None,
        rebalance_timeout_ms=-1,
        subscribed_topic_names=None,
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=None,
    )
    back = ConsumerGroupHeartbeatRequest.decode(leave.encode(), version=1)
    assert (back.member_epoch, back.topic_partitions, back.subscribed_topic_names) == (
        -2,
        None,
        None,
    )


def test_the_heartbeat_response_round_trips_with_and_without_an_assignment() -> None:
    response = ConsumerGroupHeartbeatResponse[1]
    topics = response.Assignment.TopicPartitions
    with_assignment = response(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        member_id="m",
        member_epoch=3,
        heartbeat_interval_ms=5000,
        assignment=response.Assignment(
            topic_partitions=[topics(topic_id=TOPIC_ID, partitions=[1])]
        ),
    )
    back = ConsumerGroupHeartbeatResponse.decode(with_assignment.encode(), version=1)
    assert (back.member_epoch, back.heartbeat_interval_ms) == (3, 5000)
    assert [(t.topic_id, list(t.partitions)) for t in back.assignment.topic_partitions] == [
        (TOPIC_ID, [1])
    ]
    fenced = response(
        throttle_time_ms=0,
        error_code=FENCED_MEMBER_EPOCH,
        error_message="fenced",
        member_id=None,
        member_epoch=0,
        heartbeat_interval_ms=0,
        assignment=None,
    )
    back = ConsumerGroupHeartbeatResponse.decode(fenced.encode(), version=1)
    assert (back.error_code, back.error_message, back.assignment) == (110, "fenced", None)


def answer(code: int = 0, epoch: int = 1, assignment: Any = None) -> HeartbeatAnswer:
    return HeartbeatAnswer(code, None if code == 0 else "why", "m", epoch, 50, assignment)


def test_decisions_on_each_answer() -> None:
    assert decide(answer()).outcome is Outcome.OK
    assert decide(answer(FENCED_MEMBER_EPOCH)).outcome is Outcome.REJOIN
    assert decide(answer(UNKNOWN_MEMBER_ID)).outcome is Outcome.REJOIN
    refused = decide(answer(UNRELEASED_INSTANCE_ID))
    assert refused.outcome is Outcome.FATAL and "group.instance.id" in refused.detail
    # A standby (InstanceIdWait) waits while it has time left, then gives up the same way.
    assert decide(answer(UNRELEASED_INSTANCE_ID), wait_left_ms=1).outcome is Outcome.WAIT
    gave_up = decide(answer(UNRELEASED_INSTANCE_ID), wait_left_ms=0)
    assert gave_up.outcome is Outcome.FATAL and "standby" in gave_up.detail
    assert decide(answer(FENCED_MEMBER_EPOCH), wait_left_ms=1).outcome is Outcome.REJOIN
    assert decide(answer(15)).outcome is Outcome.RETRY  # COORDINATOR_NOT_AVAILABLE


def test_close_epochs() -> None:
    assert close_epoch(static=True, leave=None) == STATIC_LEAVE_EPOCH
    assert close_epoch(static=True, leave=False) == STATIC_LEAVE_EPOCH
    assert close_epoch(static=True, leave=True) == LEAVE_EPOCH
    assert close_epoch(static=False, leave=None) == LEAVE_EPOCH
    assert close_epoch(static=False, leave=False) is None


def test_member_ids_are_kafka_uuids_kept_apart() -> None:
    ids = {new_member_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 22 and "=" not in i for i in ids)


def test_assignments_by_topic_id_and_back() -> None:
    names = {TOPIC_ID: "orders"}
    got = assigned_partitions([(TOPIC_ID, [2, 0])], names)
    assert got == frozenset({TopicPartition("orders", 0), TopicPartition("orders", 2)})
    assert assigned_partitions([(uuid.uuid4(), [0])], names) is None
    assert owned_by_id(got, {"orders": TOPIC_ID}) == [(TOPIC_ID, [0, 2])]


partition_sets = st.frozensets(
    st.builds(TopicPartition, st.sampled_from(["a", "b"]), st.integers(0, 5)), max_size=8
)


@given(partition_sets, partition_sets)
def test_reconcile_revokes_first_takes_then_acknowledges_the_target(
    owned: frozenset[TopicPartition], target: frozenset[TopicPartition]
) -> None:
    steps = reconcile(owned, target)
    if owned == target:
        assert steps == []
        return
    kinds = [s.kind for s in steps]
    assert kinds[-1] is StepKind.ACK and steps[-1].partitions == target
    assert kinds.count(StepKind.ACK) == 1
    # Revoke before take: a partition is never taken while one still to revoke is held.
    assert kinds == sorted(kinds, key=[StepKind.REVOKE, StepKind.ASSIGN, StepKind.ACK].index)
    revoked = next((s.partitions for s in steps if s.kind is StepKind.REVOKE), frozenset())
    added = next((s.partitions for s in steps if s.kind is StepKind.ASSIGN), frozenset())
    assert revoked == owned - target and added == target - owned
    assert (owned - revoked) | added == target


class ScriptedBroker:
    """Answers heartbeats from a script; records what was sent and when, with the
    listener's calls, in one sequence."""

    def __init__(self, answers: list[HeartbeatAnswer], journal: list[tuple[str, Any]]) -> None:
        self.answers = answers
        self.journal = journal
        self.done = asyncio.Event()

    async def consumer_group_heartbeat(
        self, group_id: str, fields: dict[str, Any]
    ) -> HeartbeatAnswer:
        owned = fields["topic_partitions"]
        self.journal.append(
            ("heartbeat", (fields["member_epoch"], None if owned is None else sorted(owned)))
        )
        if not self.answers:
            self.done.set()
            return answer(epoch=max(fields["member_epoch"], 0))
        return self.answers.pop(0)

    async def topic_ids(self, topics: list[str]) -> dict[str, uuid.UUID]:
        return {"orders": TOPIC_ID}

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        self.journal.append(("commit", (request.generation_id, len(request.partitions))))
        return OffsetCommitResponse(
            ErrorCode.NONE,
            [
                OffsetCommitPartitionResponse(p.topic, p.partition, ErrorCode.NONE)
                for p in request.partitions
            ],
        )

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        return OffsetFetchResponse(ErrorCode.NONE, [])


class Recorder:
    def __init__(self, journal: list[tuple[str, Any]]) -> None:
        self.journal = journal
        self.member: ConsumerProtocolMember | None = None

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        assert self.member is not None
        await self.member.commit({tp: 1 for tp in partitions})
        await asyncio.sleep(0)  # a callback that yields: the ack must still wait for it
        self.journal.append(("revoked", sorted(tp.partition for tp in partitions)))

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        await asyncio.sleep(0)
        self.journal.append(("assigned", sorted(tp.partition for tp in partitions)))

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.journal.append(("lost", sorted(tp.partition for tp in partitions)))


def run_member(
    answers: list[HeartbeatAnswer], instance_id: str | None = "i", leave: bool | None = None
) -> tuple[list[tuple[str, Any]], ConsumerProtocolMember]:
    journal: list[tuple[str, Any]] = []

    async def scenario() -> ConsumerProtocolMember:
        broker = ScriptedBroker(answers, journal)
        config = MemberConfig("g", ("orders",), group_instance_id=instance_id)
        listener = Recorder(journal)
        member = ConsumerProtocolMember(broker, config, listener, clock=ManualClock())
        listener.member = member
        await member.start()
        await asyncio.wait_for(
            asyncio.wait(
                {asyncio.ensure_future(broker.done.wait()), asyncio.ensure_future(member.run())},
                return_when=asyncio.FIRST_COMPLETED,
            ),
            5,
        )
        await member.close(leave=leave)
        return member

    return journal, asyncio.run(scenario())


def assignment(*partitions: int) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    return ((TOPIC_ID, partitions),)


def test_the_member_acknowledges_only_after_revoking_then_assigning() -> None:
    journal, member = run_member(
        [
            answer(epoch=1, assignment=assignment(0, 1, 2)),
            answer(epoch=2, assignment=assignment(2, 3)),
        ]
    )
    assert journal == [
        ("heartbeat", (0, [])),  # the join: epoch 0, nothing owned
        ("assigned", [0, 1, 2]),
        ("heartbeat", (1, [(TOPIC_ID, [0, 1, 2])])),  # the ack, once the callback returned
        ("commit", (2, 2)),  # the revoked partitions committed with the new epoch
        ("revoked", [0, 1]),
        ("assigned", [3]),
        ("heartbeat", (2, [(TOPIC_ID, [2, 3])])),  # the ack (the script ends here)
        ("commit", (2, 2)),  # close: the owned partitions committed and revoked
        ("revoked", [2, 3]),
        ("heartbeat", (STATIC_LEAVE_EPOCH, None)),  # static: kept for a restart
    ]
    assert member.error is None


def test_a_fenced_member_loses_its_partitions_and_joins_again_with_epoch_0() -> None:
    journal, _ = run_member(
        [
            answer(epoch=1, assignment=assignment(0, 1)),
            answer(FENCED_MEMBER_EPOCH),
            answer(epoch=5, assignment=assignment(1)),
        ],
        instance_id=None,
    )
    assert journal[:6] == [
        ("heartbeat", (0, [])),
        ("assigned", [0, 1]),
        ("heartbeat", (1, [(TOPIC_ID, [0, 1])])),
        ("lost", [0, 1]),  # not committed: someone else may own them
        ("heartbeat", (0, [])),
        ("assigned", [1]),
    ]
    assert journal[-1] == ("heartbeat", (LEAVE_EPOCH, None))  # a dynamic member leaves


def test_an_unreleased_instance_id_is_a_fatal_error_naming_it() -> None:
    journal, member = run_member([answer(UNRELEASED_INSTANCE_ID)])
    assert isinstance(member.error, ConsumerProtocolError)
    assert member.error.unreleased_instance_id
    assert "group.instance.id" in str(member.error)
    assert journal == [("heartbeat", (0, []))]  # nothing owned, no leave sent


async def until(condition: Any) -> None:
    """Let the member's task run until `condition()` (no wall clock: the loop's turns)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the member did not get there")


async def test_a_standby_joins_again_every_retry_while_the_id_is_held_then_takes_it() -> None:
    journal: list[tuple[str, Any]] = []
    clock = ManualClock()
    held = [answer(UNRELEASED_INSTANCE_ID)] * 3
    broker = ScriptedBroker([*held, answer(epoch=4, assignment=assignment(0, 1))], journal)
    config = MemberConfig("g", ("orders",), group_instance_id="i")
    listener = Recorder(journal)
    wait = InstanceIdWait(limit_ms=1_000, retry_ms=150)
    member = ConsumerProtocolMember(broker, config, listener, clock=clock, standby=wait)
    listener.member = member
    await member.start()
    for joins in (1, 2, 3):
        # Refused, and asleep until the retry (its timer set).
        await until(lambda n=joins: len(journal) == n and clock.pending_timers() > 0)
        await clock.advance(149)
        assert len(journal) == joins  # not before the retry interval
        await clock.advance(1)
    await asyncio.wait_for(member.wait_for_assignment(), 5)
    assert journal[:5] == [("heartbeat", (0, []))] * 4 + [("assigned", [0, 1])]
    assert member.error is None and member.generation_id == 4
    await member.close()


async def test_a_standby_whose_id_stays_held_past_its_limit_exits_as_before() -> None:
    journal: list[tuple[str, Any]] = []
    clock = ManualClock()
    broker = ScriptedBroker([answer(UNRELEASED_INSTANCE_ID)] * 5, journal)
    config = MemberConfig("g", ("orders",), group_instance_id="i")
    wait = InstanceIdWait(limit_ms=300, retry_ms=150)
    member = ConsumerProtocolMember(broker, config, Recorder(journal), clock=clock, standby=wait)
    await member.start()
    for joins in (1, 2):
        await until(lambda n=joins: len(journal) == n and clock.pending_timers() > 0)
        await clock.advance(150)
    with pytest.raises(ConsumerProtocolError) as refused:
        await asyncio.wait_for(member.run(), 5)
    assert refused.value.unreleased_instance_id and "standby" in str(refused.value)
    assert len(journal) == 3  # joined at 0, 150 and 300 ms: out of time at the third refusal
    await member.close()


def test_the_standby_wait_is_for_a_static_consumer_protocol_member() -> None:
    base = {
        env.GROUP_ID: "g",
        env.TOPICS: "orders",
        env.COORDINATOR_URL: "kafka://b:9092",
        env.REBALANCE_PROTOCOL: "consumer",
        env.INSTANCE_ID: "orders-2",
    }
    standby = settings_from(Overrides(standby_wait_ms=60_000), base)
    assert standby.standby_wait == InstanceIdWait(limit_ms=60_000, retry_ms=150)
    assert settings_from(Overrides(), {**base, env.STANDBY_WAIT_MS: "5000"}).standby_wait == (
        InstanceIdWait(limit_ms=5_000)
    )
    assert settings_from(Overrides(), base).standby_wait is None
    for wrong in ({env.INSTANCE_ID: ""}, {env.REBALANCE_PROTOCOL: "cooperative"}):
        with pytest.raises(ValueError, match="static member on the consumer protocol"):
            settings_from(Overrides(standby_wait_ms=1_000), {**base, **wrong})
    with pytest.raises(ValueError, match="must be positive"):
        settings_from(Overrides(standby_wait_ms=1_000, standby_retry_ms=0), base)
    # Two pods share the instance id: the operator names each by its client id (pod name).
    assert standby.config.client_id == "staticfleet-member-orders-2"
    named = settings_from(Overrides(), {**base, env.CLIENT_ID: "orders-standby-2"})
    assert named.config.client_id == "orders-standby-2"


class SilentBroker(ScriptedBroker):
    """Answers the join with an assignment, then nothing: every later heartbeat fails."""

    async def consumer_group_heartbeat(
        self, group_id: str, fields: dict[str, Any]
    ) -> HeartbeatAnswer:
        if self.answers:
            return await super().consumer_group_heartbeat(group_id, fields)
        self.journal.append(("unanswered", fields["member_epoch"]))
        raise TransportError("no answer")


async def test_a_member_unheard_for_a_session_loses_its_partitions_before_reading_on() -> None:
    journal: list[tuple[str, Any]] = []
    clock = ManualClock()
    broker = SilentBroker([answer(epoch=1, assignment=assignment(0, 1))], journal)
    config = MemberConfig("g", ("orders",), group_instance_id="i", session_timeout_ms=10_000)
    listener = Recorder(journal)
    member = ConsumerProtocolMember(broker, config, listener, clock=clock)
    listener.member = member
    await member.start()
    await asyncio.wait_for(member.wait_for_assignment(), 5)
    await clock.advance(10_000)  # exactly the session: still the member's
    await member.lose_partitions_if_session_expired()
    assert member.assignment and ("lost", [0, 1]) not in journal
    await clock.advance(1)
    await member.lose_partitions_if_session_expired()
    assert not member.assignment and member.generation_id == 0
    assert ("lost", [0, 1]) in journal
    await member.close()
    assert ("revoked", [0, 1]) not in journal  # lost partitions are not committed on close


def test_settings_take_the_consumer_protocol_on_kafka_only() -> None:
    base = {env.GROUP_ID: "g", env.TOPICS: "orders"}
    on_kafka = settings_from(
        Overrides(remote_assignor="range"),
        {**base, env.COORDINATOR_URL: "kafka://b:9092", env.REBALANCE_PROTOCOL: "consumer"},
    )
    assert on_kafka.config.rebalance_protocol is RebalanceProtocolSetting.CONSUMER
    assert on_kafka.remote_assignor == "range"
    with pytest.raises(ValueError, match="needs a Kafka cluster"):
        settings_from(
            Overrides(rebalance_protocol="consumer"), {**base, env.COORDINATOR_URL: "http://c:1"}
        )
    with pytest.raises(ValueError, match="is for the consumer protocol"):
        settings_from(
            Overrides(), {**base, env.COORDINATOR_URL: "kafka://b", env.REMOTE_ASSIGNOR: "range"}
        )


def test_member_run_refuses_the_consumer_protocol_on_our_coordinator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In process (no interpreter start): the flags as `member run` parses them.
    monkeypatch.setattr(member_cmd, "configure_logging", lambda *_: None)
    flags = ["--coordinator", "http://127.0.0.1:1", "--group-id", "g", "--topics", "t"]
    args = build_parser().parse_args(["member", "run", *flags, "--group-protocol", "consumer"])
    assert args.handler(args) == EXIT_USAGE
    assert "needs a Kafka cluster as the coordinator (kafka://...)" in capsys.readouterr().err
