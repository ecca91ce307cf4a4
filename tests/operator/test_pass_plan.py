"""`plan_pass(observation, memory)`: one pass over a ConsumerGroup as a pure function.

Each test is an observation (the object, its pods and Secrets, the coordinator's view) and
what the pass must decide: the status it writes first, its Events, its actions and what it
remembers. These were kmock tests that drove the whole operator and waited for the emulator
to show the result; here each is a table row that runs in microseconds. What only the whole
loop shows (watch events, the webhook, restarts, the read-your-writes overlay) stays in the
kmock tier.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from coordinator import DescribedGroup, DescribedGroupMember, ErrorCode
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.kafka_groups import (
    ConsumerGroupDescription,
    ConsumerGroupMember,
    MemberType,
)
from coordinator.client.kafka_settings import KafkaClientSettings
from coordinator.protocol import Subscription, encode_subscription
from staticfleet_operator.actions import (
    ClearExpectedMembers,
    CreatePod,
    CreatePodDisruptionBudget,
    CreateSecret,
    CreateTokenSecret,
    DeletePod,
    ExpectMembers,
    LeaveGroup,
    PassResult,
    PatchPodDisruptionBudget,
    PatchSecret,
    PromoteStandbys,
    RaiseTopicPartitions,
    RegisterToken,
    SettleSlots,
    UnregisterTokens,
)
from staticfleet_operator.backends import described_from_consumer
from staticfleet_operator.crd import RolloutPhase, parse_spec
from staticfleet_operator.group_memory import GroupMemory, Memories
from staticfleet_operator.group_observation import (
    UNREACHABLE,
    DisruptionBudget,
    ExpectedMembers,
    GroupObservation,
    TokenSecret,
    Unreachable,
)
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.hot_standby import ROLE_LABEL, STANDBY_ROLE, standby_pod
from staticfleet_operator.members import MemberSettings, managed_pod
from staticfleet_operator.pass_plan import plan_pass
from staticfleet_operator.rollout import CoordinatorView
from staticfleet_operator.rollout.migration import BrokerFacts, MigrationPolicy
from staticfleet_operator.rollout.observation import consumer_group_state
from staticfleet_operator.tokens import needs_group_token

REF = GroupRef("default", "orders")
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
EAGER = RebalanceProtocolSetting.EAGER
COOPERATIVE = RebalanceProtocolSetting.COOPERATIVE
TOKEN = "a-member-token-of-32-characters-x"
SETTINGS = MemberSettings(coordinator_url="http://op:9092", group_name="orders")


def spec_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "groupId": "orders",
        "topics": [{"name": "orders", "partitions": 6}],
        "replicas": 3,
        "template": {"spec": {"containers": [{"name": "member", "image": "m:1"}]}},
    }
    body.update(extra)
    return body


def kafka_spec(**extra: Any) -> dict[str, Any]:
    return spec_body(
        coordinator={"type": "kafka", "bootstrapServers": "kafka:9093", **extra},
        topics=[{"name": "orders"}],
    )


def member(slot: int, spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    """A member pod as the API server shows it: the operator's manifest, Running and Ready."""
    manifest = managed_pod(
        parse_spec(spec or spec_body()),
        SETTINGS,
        namespace="default",
        owner_uid="uid-orders",
        slot=slot,
        protocol=EAGER,
        pod_key=f"key-{slot}",
    )
    manifest["metadata"]["uid"] = f"uid-{slot}"
    manifest["status"] = status or {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return manifest


def described(*slots: int, state: str = "Stable", generation: int = 1) -> DescribedGroup:
    members = [
        DescribedGroupMember(f"m-{slot}", f"orders-{slot}", "c", "h", b"", b"", ["range"])
        for slot in slots
    ]
    return DescribedGroup(
        ErrorCode.NONE,
        "orders",
        state if slots else "Empty",
        "consumer",
        "range",
        members,
        generation,
        members[0].member_id if members else "",
    )


def token_secret(value: str = TOKEN) -> dict[str, Any]:
    return {
        "metadata": {"name": "orders-member-token", "namespace": "default"},
        "data": {"token": base64.b64encode(value.encode()).decode()},
    }


def group(
    spec: dict[str, Any] | None = None,
    *,
    pods: tuple[dict[str, Any], ...] = (),
    seen: DescribedGroup | None = None,
    status: dict[str, Any] | None = None,
    token: dict[str, Any] | str | None = "present",
    **fields: Any,
) -> GroupObservation:
    """An observation of the group `orders`: by default on the embedded coordinator, with its
    token Secret present and its topic known at the spec's partition count."""
    body_spec = spec or spec_body()
    parsed = parse_spec(body_spec)
    body = {
        "metadata": {
            "name": "orders",
            "namespace": "default",
            "uid": "uid-orders",
            "generation": 1,
        },
        "spec": body_spec,
        "status": status or {},
    }
    from staticfleet_operator.status import read_status

    secret = token_secret() if token == "present" else token
    assert not isinstance(secret, str)
    values: dict[str, Any] = {
        "ref": REF,
        "body": body,
        "status": read_status(body),
        "now": NOW,
        "coordinator_url": "http://op:9092",
        "pass_id": "p1",
        "spec": parsed,
        "pods": pods,
        "described": seen if seen is not None else described(*range(len(pods))),
        "topic_partitions": {"orders": 6},
        "coordinator_now_ms": 1_000_000,
    }
    if not parsed.coordinator.is_kafka:
        values["token"] = TokenSecret("orders-member-token", "token", False, secret)
    values.update(fields)
    return GroupObservation(**values)


def plan(observation: GroupObservation, memory: GroupMemory | None = None) -> PassResult:
    return plan_pass(observation, memory or GroupMemory(REF))


def kinds(result: PassResult) -> list[str]:
    return [type(action).__name__ for action in result.actions]


def reasons(result: PassResult) -> list[str]:
    return [event.reason for event in result.events]


def converged(observation: GroupObservation) -> GroupObservation:
    """The observation once the pass's status is written (the object carries it)."""
    result = plan(observation)
    assert result.status is not None
    body = {**observation.body, "status": result.status.to_patch()}
    return replace(observation, body=body, status=result.status)


def settled() -> GroupObservation:
    """Three Ready members, listed, group Stable, its status written: nothing to do."""
    return converged(group(pods=(member(0), member(1), member(2))))


# --- a settled fleet -----------------------------------------------------------------------


def test_a_settled_fleet_only_registers_its_token_and_writes_a_ready_status() -> None:
    result = plan(settled())
    assert result.actions == (RegisterToken("orders", TOKEN),)
    assert result.events == ()
    assert result.status is not None
    ready = {c.type: c for c in result.status.conditions}["Ready"]
    assert ready.status == "True" and ready.reason == "GroupStable"
    assert result.gauges is not None and (result.gauges.desired, result.gauges.ready) == (3, 3)
    assert result.remember.group_id == "orders"
    assert result.remember.secrets == frozenset({"orders-member-token"})
    assert not result.poll and result.wake_in is None


def test_the_plan_is_pure_the_same_inputs_give_the_same_result_and_memory_is_untouched() -> None:
    memory = GroupMemory(REF, reported={"TopicsNotFound": "x"})
    observation = group(pods=(member(0),))
    first, second = plan(observation, memory), plan(observation, memory)
    assert first == second
    assert memory.reported == {"TopicsNotFound": "x"} and memory.token_group_id is None


# --- the spec ------------------------------------------------------------------------------


def test_an_invalid_spec_is_reported_once_and_nothing_is_acted_on() -> None:
    observation = replace(group(), spec=None, problems=("spec.replicas: must be >= 0",))
    result = plan(observation)
    assert result.invalid and result.actions == ()
    assert reasons(result) == ["InvalidSpec"]
    assert result.status is not None
    degraded = {c.type: c for c in result.status.conditions}["Degraded"]
    assert degraded.reason == "InvalidSpec"
    # Once written, the same problem makes no second Event.
    written = result.status.to_patch()
    again = plan(replace(observation, body={**observation.body, "status": written}))
    assert again.events == ()


# --- member tokens (embedded coordinator) --------------------------------------------------


def test_no_token_secret_makes_one_the_operator_owns() -> None:
    result = plan(group(token=None))
    assert CreateTokenSecret("orders") in result.actions
    assert result.remember.token_group_id == "orders"


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        (None, "Secret default/creds not found"),
        ({"metadata": {"name": "creds"}, "data": {}}, "has no usable key 'token'"),
        (
            {"metadata": {"name": "creds"}, "data": {"token": base64.b64encode(b"a b").decode()}},
            "is malformed",
        ),
    ],
)
def test_a_user_token_secret_missing_or_unusable_revokes_the_token_and_says_so_once(
    secret: dict[str, Any] | None, problem: str
) -> None:
    user = spec_body(tokenSecretRef={"name": "creds", "key": "token"})
    observation = converged(group(user, pods=tuple(member(slot, user) for slot in range(3))))
    observation = replace(observation, token=TokenSecret("creds", "token", True, secret))
    memory = GroupMemory(REF, token_group_id="orders")
    result = plan(observation, memory)
    assert UnregisterTokens(("orders",)) in result.actions
    assert not any(isinstance(a, CreateTokenSecret | RegisterToken) for a in result.actions)
    [event] = result.events
    assert event.reason == "MemberTokenUnavailable" and event.warning and problem in event.message
    assert result.remember.token_group_id is None
    # Reported already: no second Event; a usable Secret again clears it.
    memory.reported.update({k: v for k, v in result.remember.reported.items() if v})
    assert plan(observation, memory).events == ()
    fixed = replace(observation, token=TokenSecret("creds", "token", True, token_secret()))
    assert plan(fixed, memory).remember.reported == {"MemberTokenUnavailable": None}


def test_a_group_token_not_needed_is_not_made_and_one_registered_before_goes() -> None:
    """Pod identity and no standby: no Secret made, no Warning; a token registered while
    the (since deleted) Secret existed is unregistered; an existing Secret is honoured."""
    unneeded = TokenSecret("orders-member-token", "token", False, None, needed=False)
    result = plan(replace(group(token=None), token=unneeded), GroupMemory(REF))
    assert not any(isinstance(a, CreateTokenSecret | UnregisterTokens) for a in result.actions)
    assert "MemberTokenUnavailable" not in reasons(result)
    assert result.remember.token_group_id is None
    before = plan(
        replace(group(token=None), token=unneeded), GroupMemory(REF, token_group_id="orders")
    )
    assert UnregisterTokens(("orders",)) in before.actions
    kept = replace(unneeded, body=token_secret())
    assert RegisterToken("orders", TOKEN) in plan(replace(group(), token=kept)).actions


@pytest.mark.parametrize(
    ("extra", "pod_identity", "needed"),
    [
        ({}, False, True),
        ({}, True, False),
        ({"standbys": 1}, True, True),
        ({"tokenSecretRef": {"name": "creds"}}, True, True),
    ],
)
def test_which_groups_need_a_group_token(
    extra: dict[str, Any], pod_identity: bool, needed: bool
) -> None:
    assert needs_group_token(parse_spec(spec_body(**extra)), pod_identity) is needed


def test_a_changed_group_id_unregisters_the_token_of_the_old_one() -> None:
    result = plan(settled(), GroupMemory(REF, token_group_id="old-orders"))
    assert result.actions[:2] == (UnregisterTokens(("old-orders",)), RegisterToken("orders", TOKEN))


# --- scale-up, scale-down ------------------------------------------------------------------


def test_a_new_group_creates_every_member_after_expecting_them() -> None:
    result = plan(group(token=token_secret(), seen=described()))
    assert kinds(result) == [
        "RegisterToken",
        "ExpectMembers",
        "CreatePod",
        "CreatePod",
        "CreatePod",
    ]
    expect = result.actions[1]
    assert expect == ExpectMembers(("orders-0", "orders-1", "orders-2"), 120_000)
    names = [a.manifest["metadata"]["name"] for a in result.actions if isinstance(a, CreatePod)]
    assert names == ["orders-0", "orders-1", "orders-2"]
    keys = {
        a.manifest["metadata"]["annotations"]["staticfleet.dev/pod-key"]
        for a in result.actions
        if isinstance(a, CreatePod)
    }
    assert len(keys) == 3  # each pod its own key, made from the pass id
    assert reasons(result) == ["ExpectingMembers"]
    assert result.status is not None
    assert result.status.missing_expected_members == ["orders-0", "orders-1", "orders-2"]
    assert result.wake_in == pytest.approx(120.05)  # the expected members' deadline


def test_expected_members_past_their_deadline_are_cleared() -> None:
    expected = ExpectedMembers(frozenset({"orders-0", "orders-1", "orders-2"}), 999_000)
    result = plan(replace(settled(), expected_members=expected))
    assert ClearExpectedMembers() in result.actions
    assert result.status is not None and result.status.missing_expected_members == []
    assert result.wake_in is None


def test_pending_expected_members_are_kept_and_wake_the_group_at_their_deadline() -> None:
    expected = ExpectedMembers(frozenset({"orders-0", "orders-1", "orders-2"}), 1_010_000)
    result = plan(
        replace(
            settled(),
            described=described(0, 1, state="PreparingRebalance"),
            expected_members=expected,
        )
    )
    assert not any(isinstance(a, ClearExpectedMembers) for a in result.actions)
    assert result.status is not None and result.status.missing_expected_members == ["orders-2"]
    assert result.wake_in == pytest.approx(10.05)


def test_scale_down_deletes_the_pods_above_replicas_then_one_batch_leave() -> None:
    # No stabilization window: the first pass of a process would hold the scale-down for
    # it (test_scaling.py).
    at_once = spec_body(scaleDown={"stabilizationWindowSeconds": 0})
    pods = tuple(member(slot, at_once) for slot in range(5))
    first = plan(group(at_once, pods=pods))
    assert [a for a in first.actions if isinstance(a, DeletePod)] == [
        DeletePod("orders-3"),
        DeletePod("orders-4"),
    ]
    # The pods are gone, the coordinator still lists their members: one LeaveGroup.
    second = plan(group(at_once, pods=pods[:3], seen=described(0, 1, 2, 3, 4)))
    assert LeaveGroup(("orders-3", "orders-4"), "scale-down") in second.actions


def test_a_held_scale_down_is_in_status_with_one_event_and_a_timer_at_its_end() -> None:
    """spec.replicas 3 under a fleet of 5 (default window, 30 s): nothing is deleted, status
    says what is held and until when, one normal Event says so, the pass asks for another
    at the window's end; the next pass (memory carried) posts no second Event, and the
    pass at the end of the window scales down."""
    pods = tuple(member(slot) for slot in range(5))
    memories, memory = Memories(), GroupMemory(REF)
    observation = group(pods=pods)
    first = plan(observation, memory)
    assert not any(isinstance(a, DeletePod) for a in first.actions)
    assert first.status is not None and first.status.scale_down_held is not None
    held = first.status.scale_down_held.to_wire()
    assert held == {
        "replicas": 3,
        "holding": 5,
        "reason": "StabilizationWindow",
        "until": "2026-11-27T12:00:30Z",
    }
    held_events = [e for e in first.events if e.reason == "ScaleDownHeld"]
    assert [e.warning for e in held_events] == [False]  # a normal Event: nothing is wrong
    assert first.wake_in == pytest.approx(30.05)
    memories.remember(memory, first.remember)
    later = replace(observation, now=NOW.replace(second=10))
    second = plan(later, memory)
    assert "ScaleDownHeld" not in reasons(second)
    assert not any(isinstance(a, DeletePod) for a in second.actions)
    memories.remember(memory, second.remember)
    due = plan(replace(observation, now=NOW.replace(second=30)), memory)
    assert [a for a in due.actions if isinstance(a, DeletePod)] == [
        DeletePod("orders-3"),
        DeletePod("orders-4"),
    ]
    assert due.status is not None and due.status.scale_down_held is None


def test_a_scale_down_waits_for_the_rebalance_in_flight() -> None:
    """With no window: a group in a join phase keeps the count the last pass scaled to."""
    at_once = spec_body(scaleDown={"stabilizationWindowSeconds": 0})
    pods = tuple(member(slot, at_once) for slot in range(5))
    memory = GroupMemory(REF, scale_target=5, recommendations=())
    rebalancing = described(0, 1, 2, 3, 4, state="PreparingRebalance")
    result = plan(group(at_once, pods=pods, seen=rebalancing), memory)
    assert not any(isinstance(a, DeletePod) for a in result.actions)
    assert result.status is not None and result.status.scale_down_held is not None
    assert result.status.scale_down_held.reason == "RebalanceInProgress"
    stable = plan(group(at_once, pods=pods), memory)
    assert [a for a in stable.actions if isinstance(a, DeletePod)] == [
        DeletePod("orders-3"),
        DeletePod("orders-4"),
    ]


def test_topic_partitions_are_raised_on_the_embedded_coordinator_never_lowered() -> None:
    raised = plan(replace(settled(), topic_partitions={"orders": 4}))
    assert RaiseTopicPartitions({"orders": 6}) in raised.actions
    more = plan(replace(settled(), topic_partitions={"orders": 8}))
    assert not any(isinstance(a, RaiseTopicPartitions) for a in more.actions)


# --- rollouts ------------------------------------------------------------------------------


def test_a_template_change_bounces_one_member_with_the_rollout_written_first() -> None:
    changed = spec_body(template={"spec": {"containers": [{"name": "member", "image": "m:2"}]}})
    result = plan(group(changed, pods=(member(0), member(1), member(2))))
    deletes = [a for a in result.actions if isinstance(a, DeletePod)]
    assert len(deletes) == 1 and deletes[0].bounce is not None
    assert result.status is not None and result.status.rollout.active
    assert result.status.rollout.phase is deletes[0].bounce
    assert len(result.events) == 1


def _pod_identity_member(slot: int, audience: str | None) -> dict[str, Any]:
    manifest = managed_pod(
        parse_spec(spec_body()),
        replace(SETTINGS, token_audience=audience),
        namespace="default",
        owner_uid="uid-orders",
        slot=slot,
        protocol=EAGER,
        pod_key=f"key-{slot}",
    )
    manifest["metadata"]["uid"] = f"uid-{slot}"
    manifest["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return manifest


@pytest.mark.parametrize(("made_with", "now"), [("coordinator", None), (None, "coordinator")])
def test_turning_pod_identity_on_or_off_recreates_the_members(
    made_with: str | None, now: str | None
) -> None:
    """A pod's token env and volumes are fixed when it is made: one left with a token file
    after pod identity is turned off would be refused for good, so the switch is a rollout."""
    pods = tuple(_pod_identity_member(slot, made_with) for slot in range(3))
    result = plan(converged(group(pods=pods, member_token_audience=now)))
    deletes = [a for a in result.actions if isinstance(a, DeletePod)]
    assert len(deletes) == 1 and deletes[0].bounce is not None
    same = tuple(_pod_identity_member(slot, now) for slot in range(3))
    unchanged = plan(converged(group(pods=same, member_token_audience=now)))
    assert not any(isinstance(a, DeletePod) for a in unchanged.actions)


def test_a_protocol_change_a_client_cannot_make_is_refused_once_and_nothing_moves() -> None:
    librdkafka = {
        **kafka_spec(clientFamily="librdkafka"),
        "rebalance": {"protocol": "cooperative"},
    }
    pods = tuple(member(slot, librdkafka) for slot in range(3))
    observation = group(librdkafka, pods=pods, topic_partitions={"orders": 6})
    result = plan(observation)
    assert reasons(result) == ["ProtocolChangeRefused"]
    assert not any(isinstance(a, DeletePod | CreatePod) for a in result.actions)
    assert result.status is not None
    degraded = {c.type: c for c in result.status.conditions}["Degraded"]
    assert degraded.reason == "ProtocolChangeRefused"
    memory = GroupMemory(REF)
    memory.reported.update({k: v for k, v in result.remember.reported.items() if v})
    assert plan(observation, memory).events == ()


def test_a_custom_assignor_s_metadata_in_the_group_refuses_its_migration() -> None:
    """The pass reads the classic group's member metadata once the broker's facts are read
    (a migration ahead), and refuses the upgrade a custom assignor's user data would lose."""
    to_consumer = {**kafka_spec(), "rebalance": {"protocol": "consumer"}}
    pods = tuple(member(slot, to_consumer) for slot in range(3))
    metadata = encode_subscription(Subscription(topics=("orders",), user_data=b"mine"))
    seen = replace(
        described(0, 1, 2),
        protocol_data="my-assignor",
        members=[
            DescribedGroupMember(f"m-{slot}", f"orders-{slot}", "c", "h", metadata, b"")
            for slot in range(3)
        ],
    )
    facts = BrokerFacts(True, MigrationPolicy.BIDIRECTIONAL, 200)
    result = plan(group(to_consumer, pods=pods, seen=seen, broker=facts))
    assert reasons(result) == ["ProtocolChangeRefused"]
    assert not any(isinstance(a, DeletePod | CreatePod) for a in result.actions)
    assert result.status is not None
    degraded = {c.type: c for c in result.status.conditions}["Degraded"]
    assert "my-assignor" in (degraded.message or "")
    # Kafka's own assignor's user data: not refused (the rollout decides: here it waits).
    kafka_own = replace(seen, protocol_data="cooperative-sticky")
    ahead = plan(group(to_consumer, pods=pods, seen=kafka_own, broker=facts))
    assert "ProtocolChangeRefused" not in reasons(ahead)
    assert ahead.status is not None
    assert {c.type: c for c in ahead.status.conditions}["Degraded"].status == "False"


# --- hot standby ---------------------------------------------------------------------------


def _standby(name: str = "orders-standby-0") -> dict[str, Any]:
    pod = standby_pod(
        parse_spec(spec_body(standbys=1)),
        SETTINGS,
        namespace="default",
        owner_uid="uid-orders",
        name=name,
        protocol=EAGER,
        pod_key=f"key-{name}",
    )
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


def test_a_missing_standby_is_created_without_a_slot() -> None:
    result = plan(group(spec_body(standbys=1), pods=(member(0), member(1), member(2))))
    [create] = [a for a in result.actions if isinstance(a, CreatePod)]
    assert create.manifest["metadata"]["name"] == "orders-standby-0"
    assert create.manifest["metadata"]["labels"][ROLE_LABEL] == STANDBY_ROLE


def test_a_ready_standby_is_promoted_into_a_lost_slot_recorded_before_it_is_made() -> None:
    pods = (member(0), member(1), _standby())  # slot 2's pod is gone, its member listed
    observation = group(
        spec_body(standbys=1),
        pods=pods,
        seen=described(0, 1, 2),
        ready_standbys=frozenset({"orders-standby-0"}),
    )
    result = plan(observation)
    [promote] = [a for a in result.actions if isinstance(a, PromoteStandbys)]
    assert kinds(result) == ["RegisterToken", "PromoteStandbys"]  # nothing else this pass
    [record] = promote.records
    assert (record.standby, record.instance_id, record.slot) == ("orders-standby-0", "orders-2", 2)
    assert result.status is not None and result.status.promotions == [record]
    assert record.started_at == NOW


# --- Kafka-coordinated groups ----------------------------------------------------------------


def test_a_kafka_cluster_unreachable_is_reported_once_and_nothing_is_acted_on() -> None:
    problem = Unreachable(UNREACHABLE, "Kafka cluster kafka:9093 unreachable: refused")
    observation = group(kafka_spec(), pods=(member(0),), described=None, unreachable=problem)
    result = plan(observation)
    assert result.actions == () and reasons(result) == [UNREACHABLE]
    assert result.poll  # a Kafka cluster tells nothing: polled
    assert result.unreachable == UNREACHABLE  # staticfleet_operator_kafka_unreachable
    assert result.status is not None
    degraded = {c.type: c for c in result.status.conditions}["Degraded"]
    assert degraded.reason == UNREACHABLE
    memory = GroupMemory(REF, reported={UNREACHABLE: problem.message})
    assert plan(observation, memory).events == ()
    # Reachable again: forgotten, so the next outage is reported again.
    back = plan(group(kafka_spec(), pods=(member(0),), topic_partitions={"orders": 6}), memory)
    assert back.remember.reported.get(UNREACHABLE, "kept") is None
    assert back.poll and back.unreachable is None


def test_a_topic_the_kafka_cluster_lacks_is_reported_and_nothing_is_raised() -> None:
    result = plan(group(kafka_spec(), pods=(), seen=described(), topic_partitions={}))
    assert "TopicsNotFound" in reasons(result)
    assert not any(isinstance(a, RaiseTopicPartitions) for a in result.actions)


def test_the_members_client_configuration_secret_is_written_then_kept_in_step() -> None:
    settings = KafkaClientSettings.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
    )
    secured = kafka_spec(
        kafka={
            "authentication": {
                "type": "scram-sha-512",
                "username": "alice",
                "passwordSecret": {"secretName": "alice", "password": "password"},
            }
        }
    )
    observation = group(secured, pods=(), seen=described(), kafka_settings=settings)
    first = plan(observation)
    [create] = [a for a in first.actions if isinstance(a, CreateSecret)]
    assert create.manifest["metadata"]["name"] == "orders-kafka-client"
    assert "alice" in first.remember.secrets
    data = dict(create.manifest["data"])
    same = plan(replace(observation, client_config={"data": data}))
    assert not any(isinstance(a, CreateSecret | PatchSecret) for a in same.actions)
    stale = plan(replace(observation, client_config={"data": {**data, "old.pem": "eA=="}}))
    [patch] = [a for a in stale.actions if isinstance(a, PatchSecret)]
    assert patch.patch["data"]["old.pem"] is None  # a key the new content lacks goes


# --- adopted mode --------------------------------------------------------------------------


def test_an_adopted_group_settles_its_slot_table_and_writes_status() -> None:
    adopted = {
        "groupId": "orders",
        "topics": [{"name": "orders", "partitions": 6}],
        "selector": {"matchLabels": {"spark-role": "executor"}},
    }
    pods = (member(0), member(1, phase="Succeeded"))
    result = plan(group(adopted, pods=pods, seen=described(0, 1)))
    settle = [a for a in result.actions if isinstance(a, SettleSlots)]
    assert len(settle) == 1 and settle[0].pods == pods
    assert result.gauges is not None and result.gauges.desired == 1  # a finished pod is none
    assert result.status is not None and result.status.rollout.phase is RolloutPhase.IDLE


def test_an_adopted_group_asked_to_migrate_is_degraded_once_and_its_pods_left_alone() -> None:
    adopted = {
        "groupId": "orders",
        "topics": [{"name": "orders"}],
        "selector": {"matchLabels": {"spark-role": "executor"}},
        "rebalance": {"protocol": "consumer"},
        "coordinator": {"type": "kafka", "bootstrapServers": "kafka:9093"},
    }
    observation = group(adopted, pods=(member(0), member(1)), seen=described(0, 1))
    result = plan(observation)
    assert result.status is not None
    degraded = {c.type: c for c in result.status.conditions}["Degraded"]
    assert degraded.status == "True" and degraded.reason == "ProtocolChangeRefused"
    assert "adopted" in (degraded.message or "")
    assert reasons(result) == ["ProtocolChangeRefused"]
    assert not any(isinstance(a, DeletePod | CreatePod | LeaveGroup) for a in result.actions)
    # Once its pods run the consumer protocol (the next Spark job), nothing is refused.
    moved = tuple(member(slot) for slot in (0, 1))
    for pod in moved:
        pod["metadata"]["annotations"]["staticfleet.dev/protocol"] = "consumer"
    later = plan(group(adopted, pods=moved, seen=described(0, 1)))
    assert later.status is not None
    assert {c.type: c for c in later.status.conditions}["Degraded"].status == "False"


# --- scenarios that were whole-loop kmock tests --------------------------------------------


def test_scale_up_after_a_scale_down_retakes_the_freed_slot_and_sends_no_leave() -> None:
    observation = group(pods=(member(0), member(1)), seen=described(0, 1))
    result = plan(observation)
    created = [a.manifest["metadata"]["name"] for a in result.actions if isinstance(a, CreatePod)]
    assert created == ["orders-2"]
    assert not any(isinstance(a, LeaveGroup | DeletePod) for a in result.actions)


def test_without_expect_members_a_scale_up_expects_nobody() -> None:
    observation = group(spec_body(scaleUp={"expectMembers": False}), seen=described())
    result = plan(observation)
    assert not any(isinstance(a, ExpectMembers) for a in result.actions)
    assert "ExpectingMembers" not in reasons(result)
    assert sum(isinstance(a, CreatePod) for a in result.actions) == 3


def test_a_scale_down_clears_expected_members_above_the_new_replicas() -> None:
    expected = ExpectedMembers(frozenset(f"orders-{slot}" for slot in range(5)), 1_100_000)
    result = plan(replace(settled(), expected_members=expected))
    assert ClearExpectedMembers() in result.actions


def test_a_member_that_does_not_come_back_pauses_the_rollout_once_and_moves_nobody_else() -> None:
    cooperative = spec_body(
        rebalance={"protocol": "cooperative"}, rollout={"memberReadyTimeoutSeconds": 10}
    )
    pods = tuple(member(slot) for slot in range(3))
    first = plan(converged(group(cooperative, pods=pods)))
    [bounce] = [a for a in first.actions if isinstance(a, DeletePod)]
    assert first.status is not None
    # Its replacement (on the bridge protocol) never gets Ready; the timeout passes.
    slot = int(bounce.name.rsplit("-", 1)[1])
    stuck = member(slot, cooperative, phase="Pending")
    stuck["metadata"]["annotations"]["staticfleet.dev/protocol"] = "compatible"
    later = group(
        cooperative,
        pods=tuple(stuck if p["metadata"]["name"] == bounce.name else p for p in pods),
        seen=described(*(s for s in range(3) if s != slot)),
        status=first.status.to_patch(),
        now=NOW.replace(minute=5),
    )
    paused = plan(later)
    assert not any(isinstance(a, DeletePod | CreatePod) for a in paused.actions)
    [event] = paused.events
    assert (event.reason, event.warning) == ("PodNotReady", True)
    assert paused.status is not None and paused.status.rollout.phase is RolloutPhase.PAUSED
    degraded = {c.type: c for c in paused.status.conditions}["Degraded"]
    assert degraded.reason == "PodNotReady"
    assert paused.gauges is not None and paused.gauges.blocker is not None
    # The next pass sees the pause written: no second Event, still nobody moved.
    again = plan(converged(later))
    assert again.events == () and not any(isinstance(a, DeletePod) for a in again.actions)


def test_a_switch_stops_everyone_then_one_leave_then_starts_all_on_the_target() -> None:
    switch = {
        **kafka_spec(clientFamily="librdkafka"),
        "rebalance": {"protocol": "cooperative", "protocolChange": "Switch"},
    }
    running = tuple(member(slot, switch) for slot in range(3))
    stop = plan(group(switch, pods=running, topic_partitions={"orders": 6}))
    assert [a for a in stop.actions if isinstance(a, DeletePod)] == [
        DeletePod(f"orders-{slot}") for slot in range(3)
    ]
    assert reasons(stop) == ["ProtocolSwitch"]
    # The pods are gone; the coordinator still lists the old members: one batch leave.
    leave = plan(group(switch, pods=(), seen=described(0, 1, 2), topic_partitions={"orders": 6}))
    assert [a for a in leave.actions if isinstance(a, LeaveGroup)] == [
        LeaveGroup(
            ("orders-0", "orders-1", "orders-2"), "switch: every member restarts on the target"
        )
    ]
    assert not any(isinstance(a, CreatePod) for a in leave.actions)
    # Nobody listed: every member starts on the target, no bridge.
    start = plan(group(switch, pods=(), seen=described(), topic_partitions={"orders": 6}))
    protocols = {
        a.manifest["metadata"]["annotations"]["staticfleet.dev/protocol"]
        for a in start.actions
        if isinstance(a, CreatePod)
    }
    assert protocols == {"cooperative"}


def test_a_promotion_recorded_before_a_restart_is_finished_as_recorded() -> None:
    pods = (member(0), member(1), _standby())
    first = plan(
        group(
            spec_body(standbys=1),
            pods=pods,
            seen=described(0, 1, 2),
            ready_standbys=frozenset({"orders-standby-0"}),
        )
    )
    assert first.status is not None
    [record] = first.status.promotions
    # A restarted operator: a later pass, the standby not (yet) heard from again.
    resumed = plan(
        group(
            spec_body(standbys=1),
            pods=pods,
            seen=described(0, 1, 2),
            status=first.status.to_patch(),
            now=NOW.replace(minute=1),
        )
    )
    [promote] = [a for a in resumed.actions if isinstance(a, PromoteStandbys)]
    assert promote.records == (record,)  # the same standby, the same slot, its start kept


def test_without_a_ready_standby_the_slot_gets_a_plain_static_replacement() -> None:
    pods = (member(0), member(1), _standby())
    result = plan(group(spec_body(standbys=1), pods=pods, seen=described(0, 1, 2)))
    assert not any(isinstance(a, PromoteStandbys) for a in result.actions)
    created = [a.manifest["metadata"]["name"] for a in result.actions if isinstance(a, CreatePod)]
    assert created == ["orders-2"]


def test_a_users_token_secret_is_registered_and_never_replaced() -> None:
    user = spec_body(tokenSecretRef={"name": "creds", "key": "member"})
    secret = {"metadata": {"name": "creds"}, "data": {"member": token_secret()["data"]["token"]}}
    observation = replace(group(user), token=TokenSecret("creds", "member", True, secret))
    result = plan(observation)
    assert RegisterToken("orders", TOKEN) in result.actions
    assert not any(isinstance(a, CreateTokenSecret) for a in result.actions)
    assert result.remember.secrets == frozenset({"creds"})


# --- scale subresource and the members' PodDisruptionBudget ---------------------------------

MEMBERS_SELECTOR = (
    "app.kubernetes.io/managed-by=staticfleet,staticfleet.dev/group=orders,staticfleet.dev/slot"
)


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """A serialized label selector (`k=v`, `k!=v`, `k`, `!k`; no set forms) against labels:
    how an HPA reads status.selector back."""
    for requirement in selector.split(","):
        if "!=" in requirement:
            key, value = requirement.split("!=")
            ok = labels.get(key) != value
        elif "=" in requirement:
            key, value = requirement.split("=")
            ok = labels.get(key) == value
        elif requirement.startswith("!"):
            ok = requirement[1:] not in labels
        else:
            ok = requirement in labels
        if not ok:
            return False
    return True


def _labels(pod: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = pod["metadata"]["labels"]
    return labels


def test_status_carries_the_scale_subresources_replicas_and_selector() -> None:
    result = plan(group(spec_body(standbys=1), pods=(member(0), member(1), member(2), _standby())))
    assert result.status is not None
    assert result.status.replicas == 3  # the standby is no member pod
    assert result.status.selector == MEMBERS_SELECTOR
    assert result.status.to_patch()["replicas"] == 3


def test_the_members_selector_matches_member_pods_and_never_a_standby() -> None:
    selector = MEMBERS_SELECTOR
    assert all(selector_matches(selector, _labels(member(slot))) for slot in range(3))
    assert not selector_matches(selector, _labels(_standby()))
    # Another group's member does not match either.
    other = member(0)
    other["metadata"]["labels"]["staticfleet.dev/group"] = "payments"
    assert not selector_matches(selector, _labels(other))


def test_status_replicas_counts_live_member_pods_only() -> None:
    leaving = member(2)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-27T11:59:00Z"
    result = plan(group(pods=(member(0), member(1), leaving), seen=described(0, 1, 2)))
    assert result.status is not None and result.status.replicas == 2


def test_the_members_disruption_budget_is_created_when_absent() -> None:
    result = plan(settled_with_budget(None))
    [create] = [a for a in result.actions if isinstance(a, CreatePodDisruptionBudget)]
    manifest = create.manifest
    assert manifest["apiVersion"] == "policy/v1" and manifest["kind"] == "PodDisruptionBudget"
    assert manifest["metadata"]["name"] == "orders-members"
    assert manifest["metadata"]["namespace"] == "default"
    [owner] = manifest["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("ConsumerGroup", "orders", "uid-orders")
    assert owner["controller"] is True
    assert manifest["spec"]["maxUnavailable"] == 1  # the default
    # The budget selects what status.selector says: the member pods, no standby.
    selector = manifest["spec"]["selector"]
    expressions = selector["matchExpressions"]
    assert {e["key"] for e in expressions} == {"staticfleet.dev/slot"}
    assert selector["matchLabels"]["staticfleet.dev/group"] == "orders"


def settled_with_budget(
    budget: dict[str, Any] | None, spec: dict[str, Any] | None = None
) -> GroupObservation:
    pods = (member(0), member(1), member(2))
    return converged(group(spec, pods=pods, disruption_budget=DisruptionBudget(budget)))


def test_the_members_disruption_budget_is_patched_when_max_unavailable_changes() -> None:
    created = plan(settled_with_budget(None))
    [create] = [a for a in created.actions if isinstance(a, CreatePodDisruptionBudget)]
    existing = dict(create.manifest)
    # As found, unchanged: nothing to do.
    unchanged = plan(settled_with_budget(existing))
    assert not [a for a in unchanged.actions if "PodDisruptionBudget" in type(a).__name__]
    # ... and remembered, so later passes do not read it while the spec wants the same.
    assert unchanged.remember.disruption_budget is not None
    assert '"maxUnavailable": 1' in unchanged.remember.disruption_budget
    # Not read (remembered as wanted): nothing planned either.
    assert not [a for a in plan(settled()).actions if "PodDisruptionBudget" in type(a).__name__]
    # The spec now says 50%: one merge patch of the budget.
    changed = plan(settled_with_budget(existing, spec_body(disruption={"maxUnavailable": "50%"})))
    [patch] = [a for a in changed.actions if isinstance(a, PatchPodDisruptionBudget)]
    assert patch.name == "orders-members"
    assert patch.patch["spec"]["maxUnavailable"] == "50%"
    assert not [a for a in changed.actions if isinstance(a, CreatePodDisruptionBudget)]


def test_an_adopted_group_gets_no_disruption_budget_and_no_selector() -> None:
    adopted = {
        "groupId": "orders",
        "topics": [{"name": "orders", "partitions": 6}],
        "selector": {"matchLabels": {"spark-role": "executor"}},
    }
    observation = group(
        adopted,
        pods=(member(0), member(1)),
        seen=described(0, 1),
        disruption_budget=DisruptionBudget(None),
    )
    result = plan(observation)
    assert not [a for a in result.actions if "PodDisruptionBudget" in type(a).__name__]
    assert result.status is not None
    assert result.status.replicas == 2 and result.status.selector is None


def test_only_a_status_that_records_intent_is_written_before_the_actions() -> None:
    """Write-ahead for a rollout step and promotions; a status that only reports (a missing
    pod created) goes after the action, so the replacement does not wait for it."""
    changed = spec_body(template={"spec": {"containers": [{"name": "member", "image": "m:2"}]}})
    assert plan(group(changed, pods=(member(0), member(1), member(2)))).write_ahead
    promoting = group(
        spec_body(standbys=1),
        pods=(member(0), member(1), _standby()),
        seen=described(0, 1, 2),
        ready_standbys=frozenset({"orders-standby-0"}),
    )
    assert plan(promoting).write_ahead
    missing = plan(replace(settled(), pods=(member(0), member(2)), described=described(0, 1, 2)))
    assert not missing.write_ahead
    assert any(isinstance(a, CreatePod) for a in missing.actions)


# --- the consumer protocol (KIP-848) --------------------------------------------------------

ORDERS = "orders"


def consumer_group(
    *slots: int,
    epoch: int = 5,
    assignment_epoch: int | None = None,
    behind: tuple[int, ...] = (),
    away: tuple[int, ...] = (),
    moving: tuple[int, ...] = (),
    classic: tuple[int, ...] = (),
    state: str = "Stable",
) -> ConsumerGroupDescription:
    """A ConsumerGroupDescribe answer: each slot a member holding partition `slot`, at the
    group epoch unless `behind` (one epoch less) or `away` (-2: a static member's restart);
    `moving` members' targets differ from what they hold; `classic` ones speak classic."""
    members = []
    for slot in slots:
        held = ((ORDERS, slot),)
        member_epoch = -2 if slot in away else epoch - 1 if slot in behind else epoch
        members.append(
            ConsumerGroupMember(
                member_id=f"m-{slot}",
                instance_id=f"orders-{slot}",
                member_epoch=member_epoch,
                client_id="c",
                client_host="h",
                subscribed_topics=(ORDERS,),
                assignment=held,
                target_assignment=((ORDERS, slot + 10),) if slot in moving else held,
                member_type=MemberType.CLASSIC if slot in classic else MemberType.CONSUMER,
            )
        )
    return ConsumerGroupDescription(
        group_id=ORDERS,
        error_code=0,
        state=state if slots else "Empty",
        group_epoch=epoch,
        assignment_epoch=epoch if assignment_epoch is None else assignment_epoch,
        assignor="uniform",
        members=tuple(members),
    )


def on_consumer_protocol(
    found: ConsumerGroupDescription, spec: dict[str, Any] | None = None, **fields: Any
) -> GroupObservation:
    """A Kafka group the cluster runs on the consumer protocol, with a pod per slot listed."""
    pods = tuple(
        member(int(str(m.instance_id).rsplit("-", 1)[1]), kafka_spec()) for m in found.members
    )
    return group(
        spec or kafka_spec(),
        pods=fields.pop("pods", pods),
        seen=described_from_consumer(found),
        consumer_group=found,
        **fields,
    )


@pytest.mark.parametrize(
    ("view", "settled"),
    [
        pytest.param(CoordinatorView.from_described(described(0, 1, 2)), True, id="classic-stable"),
        pytest.param(
            CoordinatorView.from_described(described(0, 1, state="PreparingRebalance")),
            False,
            id="classic-rebalancing",
        ),
        pytest.param(
            CoordinatorView.from_consumer_group(consumer_group(0, 1, 2)), True, id="converged"
        ),
        pytest.param(
            CoordinatorView.from_consumer_group(consumer_group(0, 1, 2, behind=(1,))),
            False,
            id="a-member-behind-the-group-epoch",
        ),
        pytest.param(
            CoordinatorView.from_consumer_group(consumer_group(0, 1, 2, moving=(2,))),
            False,
            id="assignment-not-yet-its-target",
        ),
        pytest.param(
            CoordinatorView.from_consumer_group(consumer_group(0, 1, 2, away=(0,))),
            False,
            id="a-static-member-away-epoch-minus-2",
        ),
        pytest.param(
            CoordinatorView.from_consumer_group(consumer_group(0, 1, 2, assignment_epoch=4)),
            False,
            id="target-not-computed-for-the-group-epoch",
        ),
        pytest.param(
            CoordinatorView.from_consumer_group(consumer_group(0, 1, 2, state="Reconciling")),
            True,
            id="every-member-converged-before-the-broker-says-stable",
        ),
        pytest.param(CoordinatorView.from_consumer_group(consumer_group()), False, id="empty"),
    ],
)
def test_the_gate_is_stable_for_classic_groups_and_convergence_for_consumer_groups(
    view: CoordinatorView, settled: bool
) -> None:
    assert view.settled is settled
    assert (view.unsettled_reason() is None) is settled


@pytest.mark.parametrize(
    ("state", "converged", "seen_as"),
    [
        ("Empty", True, "Empty"),
        ("Dead", True, "Dead"),
        ("Stable", True, "Stable"),
        ("Reconciling", True, "Stable"),
        ("Assigning", False, "PreparingRebalance"),
        ("Reconciling", False, "CompletingRebalance"),
        ("Stable", False, "CompletingRebalance"),  # a static member away at epoch -2
    ],
)
def test_a_consumer_groups_state_in_the_classic_vocabulary(
    state: str, converged: bool, seen_as: str
) -> None:
    assert consumer_group_state(state, converged) == seen_as


def test_a_consumer_group_is_seen_with_its_epochs_and_convergence_in_status() -> None:
    result = plan(on_consumer_protocol(consumer_group(0, 1, 2, classic=(2,))))
    status = result.status
    assert status is not None
    assert status.group_protocol == "consumer" and status.group_state == "Stable"
    assert (status.generation, status.group_epoch, status.assignment_epoch) == (5, 5, 5)
    assert status.converged is True and status.converged_members == 3
    assert status.classic_members == 1  # a migration under way
    assert status.selected_protocol == "uniform" and status.members == 3
    assert result.gauges is not None
    assert (result.gauges.converged, result.gauges.group_epoch) == (True, 5)
    ready = {c.type: c for c in status.conditions}["Ready"]
    assert (ready.status, ready.reason) == ("True", "GroupConverged")
    assert ready.message == "3 members, consumer group converged at group epoch 5"


def test_a_consumer_group_not_converged_is_not_ready_and_holds_a_rollout() -> None:
    changed = {
        **kafka_spec(),
        "template": {"spec": {"containers": [{"name": "member", "image": "m:2"}]}},
    }
    # The pods were made from kafka_spec(): `changed` is a template change.
    result = plan(on_consumer_protocol(consumer_group(0, 1, 2, behind=(1,)), changed))
    assert not any(isinstance(a, DeletePod) for a in result.actions)
    status = result.status
    assert status is not None and status.converged is False and status.converged_members == 2
    assert {c.type: c.status for c in status.conditions}["Ready"] == "False"
    assert "not converged: 2/3 members at group epoch 5" in status.rollout.message
    # Converged: the same change bounces one member.
    moved = plan(on_consumer_protocol(consumer_group(0, 1, 2), changed))
    assert len([a for a in moved.actions if isinstance(a, DeletePod)]) == 1


def test_a_consumer_group_scale_down_is_one_batch_leave_by_instance_id() -> None:
    found = consumer_group(0, 1, 2, 3, 4)
    pods = tuple(member(slot, kafka_spec()) for slot in range(3))
    result = plan(on_consumer_protocol(found, pods=pods))
    assert LeaveGroup(("orders-3", "orders-4"), "scale-down") in result.actions


def test_a_protocol_change_and_a_convergence_are_events_once() -> None:
    pods = tuple(member(slot, kafka_spec()) for slot in range(3))
    classic = converged(group(kafka_spec(), pods=pods))
    assert classic.status.group_protocol == "classic"
    moving = plan(
        replace(
            on_consumer_protocol(consumer_group(0, 1, 2, behind=(0,))),
            body=classic.body,
            status=classic.status,
        )
    )
    assert reasons(moving) == ["GroupProtocolChanged"]
    assert moving.status is not None
    after = on_consumer_protocol(consumer_group(0, 1, 2))
    body = {**after.body, "status": moving.status.to_patch()}
    done = plan(replace(after, body=body, status=moving.status))
    assert reasons(done) == ["GroupConverged"]
    assert done.events[0].message == "3 members at group epoch 5 hold their target assignment"
    assert done.status is not None
    again = plan(
        replace(after, body={**after.body, "status": done.status.to_patch()}, status=done.status)
    )
    assert reasons(again) == []


def test_new_members_get_the_operators_default_health_port_and_probes() -> None:
    """`--member-health-port` reaches the pods a pass creates (the template sets no port)."""
    container = {"name": "member", "image": "m:1", "args": ["member", "run"]}
    spec = spec_body(template={"spec": {"containers": [container]}})

    def created(**fields: Any) -> list[Mapping[str, Any]]:
        result = plan(group(spec, token=token_secret(), seen=described(), **fields))
        return [a.manifest for a in result.actions if isinstance(a, CreatePod)]

    with_port = created(member_health_port=8081)
    assert len(with_port) == 3
    for pod in with_port:
        (member_container,) = pod["spec"]["containers"]
        assert member_container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081}
    assert all("readinessProbe" not in p["spec"]["containers"][0] for p in created())
