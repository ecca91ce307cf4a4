"""A fleet's migration to Kafka's consumer protocol (KIP-848) and back: the plan, the
rollout's steps gated on convergence, the pre-checks, and the members' env. Pure; a
simulated broker that converts the group as Kafka 4.x does (consumer at the first
consumer-protocol member, classic again when the last one leaves)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import ErrorCode, GroupState
from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.messages import DescribedGroup, DescribedGroupMember
from coordinator.protocol import Subscription, encode_subscription
from staticfleet_operator.backends import widen_offers
from staticfleet_operator.blockers import BlockerCode
from staticfleet_operator.crd import (
    ClientFamily,
    GroupProtocol,
    RolloutPhase,
    RolloutStatus,
    bounce_phase,
    parse_spec,
    validate_spec,
)
from staticfleet_operator.kafka_clients import kafka_member_env
from staticfleet_operator.rollout import (
    Assignors,
    Bounce,
    ConsumerProgress,
    CoordinatorView,
    CreateMissing,
    Decision,
    Done,
    FleetObservation,
    GroupMemberView,
    MemberPod,
    Observation,
    Pause,
    Refuse,
    Rollout,
    Wait,
    decide,
    plan,
    protocol_bounces,
)
from staticfleet_operator.rollout.migration import (
    BrokerFacts,
    ClassicMetadata,
    Direction,
    MigrationPolicy,
    adopted_refusal,
    broker_facts,
    broker_refusal,
    classic_metadata,
    metadata_refusal,
    migration_refusal,
    pending,
)

EAGER = RebalanceProtocolSetting.EAGER
COMPATIBLE = RebalanceProtocolSetting.COMPATIBLE
COOPERATIVE = RebalanceProtocolSetting.COOPERATIVE
CONSUMER = RebalanceProtocolSetting.CONSUMER
ASSIGNORS = Assignors(eager="range", cooperative="cooperative-sticky")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUT = 60.0
FACTS = BrokerFacts(True, MigrationPolicy.BIDIRECTIONAL, 200)


def test_to_and_from_the_consumer_protocol_is_one_bounce() -> None:
    assert protocol_bounces([EAGER, EAGER], CONSUMER) == (CONSUMER,)
    assert protocol_bounces([COOPERATIVE, CONSUMER], CONSUMER) == (CONSUMER,)
    assert protocol_bounces([CONSUMER], CONSUMER) == ()
    assert protocol_bounces([CONSUMER, CONSUMER], COOPERATIVE) == (COOPERATIVE,)
    assert protocol_bounces([CONSUMER], EAGER) == (EAGER,)
    # Classic members joining a consumer group share an assignor among themselves.
    assert protocol_bounces([EAGER, CONSUMER], COOPERATIVE) == (COMPATIBLE, COOPERATIVE)
    assert bounce_phase((CONSUMER,), 0, EAGER) is RolloutPhase.CONSUMER_MIGRATION
    assert bounce_phase((COOPERATIVE,), 0, CONSUMER) is RolloutPhase.CONSUMER_MIGRATION
    assert bounce_phase((CONSUMER,), 0, CONSUMER) is RolloutPhase.STATIC_BOUNCE
    assert bounce_phase((COOPERATIVE,), 0, EAGER) is RolloutPhase.BOUNCE2


@dataclass
class Broker:
    """A static fleet on a Kafka 4.x broker: a pod's member rejoins at once (unless told
    otherwise) and the group is converged unless `converged` says not."""

    size: int
    protocol: RebalanceProtocolSetting
    pods: dict[int, MemberPod] = field(default_factory=dict)
    members: dict[int, tuple[str, bool]] = field(default_factory=dict)  # member id, consumer
    converged: bool = True
    uids: int = 0

    def __post_init__(self) -> None:
        for slot in range(self.size):
            self.recreate(slot, self.protocol)

    def recreate(self, slot: int, protocol: RebalanceProtocolSetting, back: bool = True) -> None:
        self.uids += 1
        self.pods[slot] = MemberPod(
            slot, f"g-{slot}", f"g-{slot}-{self.uids}", protocol, "t1", back, pod_uid=str(self.uids)
        )
        if back:
            self.members[slot] = (f"m-{self.uids}", protocol is CONSUMER)

    @property
    def consumer_group(self) -> bool:
        return any(consumer for _, consumer in self.members.values())

    def view(self) -> CoordinatorView:
        pods = tuple(self.pods[s] for s in sorted(self.pods))
        if not self.consumer_group:
            members = tuple(
                GroupMemberView(f"g-{s}", m, ASSIGNORS.offered_by(self.pods[s].protocol))
                for s, (m, _) in sorted(self.members.items())
            )
            return CoordinatorView(GroupState.STABLE, 5, None, members)
        classic = sum(1 for _, consumer in self.members.values() if not consumer)
        progress = ConsumerProgress(
            state="Stable" if self.converged else "Reconciling",
            group_epoch=9,
            assignment_epoch=9,
            assignor="uniform",
            converged=self.converged,
            converged_members=len(self.members) if self.converged else 0,
            classic_members=classic,
        )
        view = CoordinatorView(
            GroupState.STABLE if self.converged else GroupState.COMPLETING_REBALANCE,
            9,
            None,
            tuple(
                GroupMemberView(f"g-{s}", m, frozenset())
                for s, (m, _) in sorted(self.members.items())
            ),
            protocol=GroupProtocol.CONSUMER,
            consumer=progress,
        )
        return widen_offers(view, pods, ASSIGNORS)  # as the Kafka backend's pass does

    def observe(self, desired: RebalanceProtocolSetting) -> Observation:
        return Observation(
            desired_protocol=desired,
            desired_template_hash="t1",
            assignors=ASSIGNORS,
            desired_members=self.size,
            member_ready_timeout_seconds=TIMEOUT,
            pods=tuple(self.pods[s] for s in sorted(self.pods)),
            coordinator=self.view(),
        )


def migrate(broker: Broker, desired: RebalanceProtocolSetting) -> tuple[list[Decision], Done]:
    """Run the rollout to its end; each bounced member first comes back unconverged (the
    rollout must wait), then the group converges."""
    state, now, decisions = RolloutStatus(), T0, []
    for _ in range(100):
        decision = decide(broker.observe(desired), state, now)
        decisions.append(decision)
        state, now = decision.state, now + timedelta(seconds=1)
        if isinstance(decision, Done):
            return decisions, decision
        if isinstance(decision, Bounce):
            broker.recreate(decision.slot, decision.protocol)
            broker.converged = not broker.consumer_group  # a classic group is Stable here
            waiting = decide(broker.observe(desired), state, now)
            decisions.append(waiting)
            if broker.consumer_group:
                assert isinstance(waiting, Wait), waiting
                assert waiting.blocker is not None
                assert waiting.blocker.code is BlockerCode.GROUP_NOT_STABLE
                assert "not converged" in waiting.reason
            state = waiting.state
            broker.converged = True
    raise AssertionError("the rollout did not finish")


def test_classic_fleet_migrates_pod_by_pod_waiting_for_convergence_and_back() -> None:
    broker = Broker(3, EAGER)
    decisions, done = migrate(broker, CONSUMER)
    bounces = [d for d in decisions if isinstance(d, Bounce)]
    assert [(b.slot, b.protocol) for b in bounces] == [(0, CONSUMER), (1, CONSUMER), (2, CONSUMER)]
    assert all(b.state.phase is RolloutPhase.CONSUMER_MIGRATION for b in bounces)
    assert bounces[0].member_env[env.REBALANCE_PROTOCOL] == "consumer"
    assert done.state.phase is RolloutPhase.COMPLETED
    assert done.state.to_protocol is not None and done.state.to_protocol.value == "consumer"
    assert broker.consumer_group and all(c for _, c in broker.members.values())

    back, done = migrate(broker, COOPERATIVE)
    bounces = [d for d in back if isinstance(d, Bounce)]
    assert [(b.slot, b.protocol) for b in bounces] == [
        (0, COOPERATIVE),
        (1, COOPERATIVE),
        (2, COOPERATIVE),
    ]
    assert all(b.state.phase is RolloutPhase.CONSUMER_MIGRATION for b in bounces)
    assert done.state.phase is RolloutPhase.COMPLETED and not broker.consumer_group


def test_a_migration_step_that_never_converges_pauses() -> None:
    broker = Broker(2, COOPERATIVE)
    first = decide(broker.observe(CONSUMER), RolloutStatus(), T0)
    assert isinstance(first, Bounce) and first.protocol is CONSUMER
    broker.recreate(first.slot, CONSUMER)
    broker.converged = False
    later = T0 + timedelta(seconds=TIMEOUT + 1)
    paused = decide(broker.observe(CONSUMER), first.state, later)
    assert isinstance(paused, Pause) and paused.blocker.code is BlockerCode.GROUP_NOT_STABLE
    assert paused.state.phase is RolloutPhase.PAUSED
    broker.converged = True
    resumed = decide(broker.observe(CONSUMER), paused.state, later)
    assert isinstance(resumed, Bounce) and resumed.slot == 1


def test_a_member_not_back_on_the_consumer_protocol_holds_the_next_step() -> None:
    broker = Broker(2, EAGER)
    first = decide(broker.observe(CONSUMER), RolloutStatus(), T0)
    assert isinstance(first, Bounce)
    broker.recreate(first.slot, CONSUMER, back=False)  # pod not ready, old member listed
    waiting = decide(broker.observe(CONSUMER), first.state, T0 + timedelta(seconds=1))
    assert isinstance(waiting, Wait) and waiting.blocker is not None
    assert waiting.blocker.code is BlockerCode.POD_NOT_READY


# --------------------------------------------------------------------------- pre-checks


def kafka_spec(family: str = "java", protocol: str = "consumer", **rebalance: Any) -> Any:
    return parse_spec(
        {
            "groupId": "g",
            "topics": [{"name": "t"}],
            "replicas": 3,
            "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}},
            "rebalance": {"protocol": protocol, **rebalance},
            "coordinator": {"type": "kafka", "bootstrapServers": "k:9092", "clientFamily": family},
        }
    )


def test_kafka_python_is_refused_with_the_way_out_and_no_pod_is_touched() -> None:
    spec = kafka_spec("kafka-python")
    pods = tuple(Broker(3, EAGER).pods.values())
    refusal = migration_refusal(spec, (p.protocol for p in pods), FACTS)
    assert refusal is not None and "kafka-python" in refusal and "KIP-848" in refusal
    step = plan(
        FleetObservation(spec, "t1", pods, Broker(3, EAGER).view(), True, RolloutStatus(), T0)
    )
    assert isinstance(step, Refuse) and step.reason == refusal
    # The same fleet's classic rollouts are untouched by the check.
    assert migration_refusal(kafka_spec("kafka-python", "cooperative"), [EAGER], FACTS) is None


@pytest.mark.parametrize("family", ["java", "librdkafka", "staticfleet"])
def test_families_that_speak_the_consumer_protocol_go_ahead(family: str) -> None:
    spec = kafka_spec(family)
    pods = tuple(Broker(3, EAGER).pods.values())
    step = plan(
        FleetObservation(spec, "t1", pods, Broker(3, EAGER).view(), True, RolloutStatus(), T0)
    )
    assert isinstance(step, Rollout) and isinstance(step.decision, Bounce)
    assert step.decision.protocol is CONSUMER


def test_our_own_assignor_is_refused_its_metadata_means_nothing_to_the_broker() -> None:
    spec = kafka_spec(cooperativeAssignor="static-sticky")
    refusal = migration_refusal(spec, [COOPERATIVE], FACTS)
    assert refusal is not None and "static-sticky" in refusal


def classic_group(
    assignor: str, user_data: bytes | None, protocol_type: str = "consumer"
) -> DescribedGroup:
    """A Stable classic group of three static members as DescribeGroups answers it."""
    metadata = encode_subscription(Subscription(topics=("t",), user_data=user_data))
    members = [DescribedGroupMember(f"m-{i}", f"g-{i}", "c", "h", metadata, b"") for i in range(3)]
    return DescribedGroup(ErrorCode.NONE, "g", "Stable", protocol_type, assignor, members)


def test_a_custom_assignor_s_user_data_is_refused_kafka_s_own_goes_ahead() -> None:
    custom = classic_metadata(classic_group("my-assignor", b"\x00\x01"))
    assert custom == ClassicMetadata("my-assignor", ("g-0", "g-1", "g-2"))
    refusal = metadata_refusal(custom)
    assert refusal is not None and "my-assignor" in refusal and "3 member subscriptions" in refusal
    # Kafka's sticky assignors embed owned partitions or a generation: the broker keeps those.
    sticky = classic_metadata(classic_group("cooperative-sticky", b"\x00\x00\x00\x05"))
    assert sticky is not None and sticky.with_user_data and metadata_refusal(sticky) is None
    # A custom assignor that embeds nothing loses nothing.
    empty = classic_metadata(classic_group("my-assignor", None))
    assert empty is not None and metadata_refusal(empty) is None
    # The whole pre-check: refused before any pod is touched, classic rollouts untouched.
    pods = tuple(Broker(3, EAGER).pods.values())
    observation = FleetObservation(
        kafka_spec(), "t1", pods, Broker(3, EAGER).view(), True, RolloutStatus(), T0
    )
    step = plan(replace(observation, broker=FACTS, classic_metadata=custom))
    assert isinstance(step, Refuse) and step.reason == refusal
    assert migration_refusal(kafka_spec(protocol="cooperative"), [EAGER], FACTS, custom) is None


def test_metadata_the_broker_cannot_parse_is_refused_and_unread_metadata_is_not_judged() -> None:
    garbled = replace(
        classic_group("range", None),
        members=[DescribedGroupMember("m-0", "g-0", "c", "h", b"\x00", b"")],
    )
    facts = classic_metadata(garbled)
    assert facts == ClassicMetadata("range", (), ("g-0",))
    assert "GROUP_ID_NOT_FOUND" in (metadata_refusal(facts) or "")
    # Between generations (no protocol chosen), empty metadata, another protocol type (not
    # convertible anyway, and not the consumer's format): nothing to judge.
    assert classic_metadata(replace(classic_group("x", b"u"), protocol_data="")) is None
    assert classic_metadata(classic_group("x", b"u", protocol_type="connect")) is None
    assert classic_metadata(None) is None
    blank = replace(
        classic_group("x", None), members=[DescribedGroupMember("m", None, "c", "h", b"", b"")]
    )
    assert classic_metadata(blank) == ClassicMetadata("x")


def adopted_spec(protocol: str) -> Any:
    return parse_spec(
        {
            "groupId": "g",
            "topics": [{"name": "t"}],
            "selector": {"matchLabels": {"spark-role": "executor"}},
            "rebalance": {"protocol": protocol},
            "coordinator": {"type": "kafka", "bootstrapServers": "k:9092"},
        }
    )


def test_an_adopted_group_is_never_migrated_its_pods_are_someone_else_s() -> None:
    refusal = adopted_refusal(adopted_spec("consumer"), [EAGER, EAGER])
    assert refusal is not None and "adopted" in refusal and "upgrade" in refusal
    assert "downgrade" in (adopted_refusal(adopted_spec("cooperative"), [CONSUMER]) or "")
    # Nothing to migrate: a fleet already there, or no pod yet (a new job starts on it).
    assert adopted_refusal(adopted_spec("consumer"), [CONSUMER]) is None
    assert adopted_refusal(adopted_spec("consumer"), []) is None
    # A managed group's migration is the rollout's, not refused here.
    assert adopted_refusal(kafka_spec(), [EAGER]) is None


def test_the_broker_must_offer_the_protocol_allow_the_direction_and_the_size() -> None:
    none = BrokerFacts(False, MigrationPolicy.BIDIRECTIONAL, 200)
    assert "ConsumerGroupHeartbeat" in (broker_refusal(none, Direction.UPGRADE, 3) or "")
    for policy in (MigrationPolicy.DISABLED, MigrationPolicy.DOWNGRADE):
        refusal = broker_refusal(BrokerFacts(True, policy, 200), Direction.UPGRADE, 3)
        assert refusal is not None and policy.value in refusal
    assert (
        broker_refusal(BrokerFacts(True, MigrationPolicy.UPGRADE, 200), Direction.UPGRADE, 3)
        is None
    )
    small = BrokerFacts(True, MigrationPolicy.BIDIRECTIONAL, 2)
    assert "group.consumer.max.size (2)" in (broker_refusal(small, Direction.UPGRADE, 3) or "")
    # Back to classic: the policy must allow a downgrade; the size does not matter.
    upgrade_only = BrokerFacts(True, MigrationPolicy.UPGRADE, 2)
    spec = kafka_spec(protocol="cooperative")
    assert "downgrade" in (migration_refusal(spec, [CONSUMER] * 3, upgrade_only) or "")
    assert migration_refusal(spec, [CONSUMER] * 3, FACTS) is None
    assert migration_refusal(kafka_spec(), [CONSUMER] * 3, none) is None  # nothing to migrate


def test_the_embedded_coordinator_refuses_the_consumer_protocol_at_validation() -> None:
    problems = validate_spec(
        {
            "groupId": "g",
            "topics": [{"name": "t", "partitions": 3}],
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}},
            "rebalance": {"protocol": "consumer"},
        }
    )
    assert any("needs coordinator type kafka" in p for p in problems), problems


# --------------------------------------------------------------------------- member env


def values(entries: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in entries if "value" in e}


def test_stock_clients_get_the_group_protocol_and_remote_assignor_not_a_strategy() -> None:
    java = values(kafka_member_env(kafka_spec("java"), "g-0", CONSUMER))
    assert java["KAFKA_GROUP_PROTOCOL"] == "consumer"
    assert java["KAFKA_GROUP_REMOTE_ASSIGNOR"] == "range"  # range -> range
    assert "KAFKA_PARTITION_ASSIGNMENT_STRATEGY" not in java
    rdkafka = values(
        kafka_member_env(kafka_spec("librdkafka", eagerAssignor="sticky"), "g-0", CONSUMER)
    )
    assert rdkafka["KAFKA_GROUP_REMOTE_ASSIGNOR"] == "uniform"  # the others -> uniform
    chosen = kafka_spec("java", eagerAssignor="range", remoteAssignor="uniform")
    assert values(kafka_member_env(chosen, "g-0", CONSUMER))["KAFKA_GROUP_REMOTE_ASSIGNOR"] == (
        "uniform"
    )  # a cooperative-sticky fleet says so
    classic = values(kafka_member_env(kafka_spec("java"), "g-0", EAGER))
    assert "KAFKA_GROUP_PROTOCOL" not in classic  # a classic pod's env is as it was
    assert classic["KAFKA_PARTITION_ASSIGNMENT_STRATEGY"].endswith("RangeAssignor")


def test_our_member_is_told_through_its_rebalance_protocol_env() -> None:
    ours = values(kafka_member_env(kafka_spec("staticfleet"), "g-0", CONSUMER))
    assert ours[env.REBALANCE_PROTOCOL] == "consumer"
    assert ours[env.COORDINATOR_URL] == "kafka://k:9092"
    assert ours[env.REMOTE_ASSIGNOR] == "range"
    classic = values(kafka_member_env(kafka_spec("staticfleet"), "g-0", COOPERATIVE))
    assert env.REMOTE_ASSIGNOR not in classic
    assert ClientFamily("staticfleet") is ClientFamily.STATICFLEET


def test_broker_facts_from_the_answers_and_when_they_are_read() -> None:
    configs = {"group.consumer.migration.policy": "BIDIRECTIONAL", "group.consumer.max.size": "9"}
    assert broker_facts(True, configs) == BrokerFacts(True, MigrationPolicy.BIDIRECTIONAL, 9)
    # A broker that knows neither config (before 3.7) has no consumer protocol to migrate to.
    assert broker_facts(False, {}) == BrokerFacts(False, MigrationPolicy.DISABLED, 0)
    assert pending(kafka_spec(), [EAGER, CONSUMER]) and not pending(kafka_spec(), [CONSUMER])
    assert pending(kafka_spec(protocol="eager"), [CONSUMER])
    assert not pending(kafka_spec(protocol="cooperative"), [EAGER])  # a two-bounce
    assert not pending(kafka_spec("kafka-python"), [EAGER])  # refused without asking


def test_a_refusing_broker_is_a_refusal_of_the_pass() -> None:
    spec = kafka_spec()
    pods = tuple(Broker(3, EAGER).pods.values())
    disabled = BrokerFacts(True, MigrationPolicy.DISABLED, 200)
    observation = FleetObservation(
        spec, "t1", pods, Broker(3, EAGER).view(), True, RolloutStatus(), T0, broker=disabled
    )
    step = plan(observation)
    assert isinstance(step, Refuse) and "group.consumer.migration.policy is disabled" in step.reason


def test_unreadable_broker_configs_refuse_with_the_acl_to_grant() -> None:
    facts = broker_facts(True, {}, "error 31")
    refusal = broker_refusal(facts, Direction.UPGRADE, 3)
    assert refusal is not None and "DESCRIBE_CONFIGS on the Cluster" in refusal


def test_a_pod_replaced_in_a_refused_fleet_keeps_the_fleets_protocol() -> None:
    broker = Broker(3, EAGER)
    del broker.pods[2], broker.members[2]
    step = plan(
        FleetObservation(
            kafka_spec("kafka-python"),
            "t1",
            tuple(broker.pods.values()),
            broker.view(),
            True,
            RolloutStatus(),
            T0,
        )
    )
    assert isinstance(step, CreateMissing) and step.slots == (2,) and step.protocol is EAGER
    allowed = plan(
        FleetObservation(
            kafka_spec("java"),
            "t1",
            tuple(broker.pods.values()),
            broker.view(),
            True,
            RolloutStatus(),
            T0,
        )
    )
    assert isinstance(allowed, CreateMissing) and allowed.protocol is CONSUMER  # the bounce's


@settings(max_examples=60, deadline=None)
@given(
    start=st.lists(
        st.sampled_from([EAGER, COMPATIBLE, COOPERATIVE, CONSUMER]), min_size=1, max_size=5
    ),
    target=st.sampled_from([EAGER, COOPERATIVE, CONSUMER]),
)
def test_any_fleet_reaches_any_target_one_member_at_a_time(
    start: list[RebalanceProtocolSetting], target: RebalanceProtocolSetting
) -> None:
    """From any mix of pods (a half-done two-bounce or migration included) to any target:
    the rollout ends Done with every pod on the target, bouncing one member at a time, each
    member at most once per planned bounce."""
    broker = Broker(len(start), EAGER)
    for slot, protocol in enumerate(start):
        broker.recreate(slot, protocol)
    state, now = RolloutStatus(), T0
    bounced: list[tuple[int, RebalanceProtocolSetting]] = []
    for _ in range(60):
        decision = decide(broker.observe(target), state, now)
        state, now = decision.state, now + timedelta(seconds=1)
        if isinstance(decision, Done):
            break
        assert isinstance(decision, Bounce), decision.reason
        assert (decision.slot, decision.protocol) not in bounced
        bounced.append((decision.slot, decision.protocol))
        broker.recreate(decision.slot, decision.protocol)
    else:
        raise AssertionError("no end")
    assert {pod.protocol for pod in broker.pods.values()} == {target}
    assert len(bounced) <= 2 * len(start)
