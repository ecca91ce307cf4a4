"""The pure takeover rules of hot standby on a consumer-protocol Kafka group
(`kafka_standby.decide_takeovers`): one test per rule."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from coordinator import ErrorCode
from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.kafka_groups import ConsumerGroupDescription, ConsumerGroupMember
from coordinator.messages import DescribedGroup, DescribedGroupMember
from staticfleet_operator.actions import CreatePod, DeletePod
from staticfleet_operator.crd import ConsumerGroupStatus, parse_spec
from staticfleet_operator.hot_standby import (
    ROLE_LABEL,
    STANDBY_ROLE,
    STANDBY_SLOT_ANNOTATION,
    standby_pods,
)
from staticfleet_operator.kafka_clients import STANDBY_WAIT_MS, kafka_member_env
from staticfleet_operator.kafka_standby import (
    Holder,
    IdHolder,
    IdPod,
    KafkaSlot,
    SlotHolder,
    StaticLeave,
    decide_takeovers,
    holder_pod,
    kafka_slots,
    kafka_standbys_enabled,
    keep_kafka_standbys,
    plan_kafka_takeovers,
)
from staticfleet_operator.members import (
    SLOT_ANNOTATION,
    SLOT_LABEL,
    TEMPLATE_HASH_ANNOTATION,
    MemberSettings,
)
from staticfleet_operator.promotion import PodHealth

RUNNING = PodHealth.RUNNING
CONSUMER = RebalanceProtocolSetting.CONSUMER


def pod(name: str, ip: str, health: PodHealth = RUNNING, ready: bool = True) -> IdPod:
    return IdPod(name, ip, health, ready)


def slot(*pods: IdPod, holder: IdHolder | None, n: int = 0) -> KafkaSlot:
    return KafkaSlot(n, f"g-{n}", pods, holder, frozenset({f"g-{n}-abc", f"g-standby-{n}"}))


ACTIVE = pod("g-0-abc", "10.0.0.1")
STANDBY = pod("g-standby-0", "10.0.0.2")
# Java and librdkafka members send their own client id: the host names the pod.
BY_HOST = IdHolder("m-1", "consumer-g-1", "/10.0.0.1")
GONE = IdHolder("m-1", "g-0-abc", "/10.0.0.1")  # the slot's pod's name, no such pod now
BY_NAME = IdHolder("m-1", "g-0-abc", "/127.0.0.1")  # our member: client id = pod name


def test_the_holder_is_found_by_client_id_then_by_client_host() -> None:
    assert holder_pod(BY_NAME, [ACTIVE, STANDBY]) == (Holder.LIVE, ACTIVE)
    assert holder_pod(BY_HOST, [ACTIVE, STANDBY]) == (Holder.LIVE, ACTIVE)
    assert holder_pod(None, [ACTIVE]) == (Holder.NONE, None)
    # Loopback pods (one node, host networking): the host names neither.
    same_ip = [pod("a", "10.0.0.9"), pod("b", "10.0.0.9")]
    assert holder_pod(IdHolder("m", "x", "/10.0.0.9"), same_ip) == (Holder.UNKNOWN, None)
    assert holder_pod(IdHolder("m", "x", ""), [ACTIVE]) == (Holder.UNKNOWN, None)
    # Gone only when its client id names one of the slot's pods, and that pod is not there.
    names = frozenset({"g-0-abc"})
    assert holder_pod(GONE, [STANDBY], names) == (Holder.GONE, None)
    # A host that matches no pod (SNAT, host networking, no pod IP yet) proves nothing.
    assert holder_pod(IdHolder("m", "x", "/10.0.0.7"), [STANDBY], names) == (Holder.UNKNOWN, None)
    assert holder_pod(IdHolder("m", "staticfleet", "/127.0.0.1"), [pod("a", "")]) == (
        Holder.UNKNOWN,
        None,
    )


def test_holder_is_the_slots_pod() -> None:
    took_over = IdHolder("m-2", "g-standby-0", "/10.0.0.2")
    leaves, holders = decide_takeovers([slot(ACTIVE, STANDBY, holder=took_over)])
    assert leaves == [] and holders == [SlotHolder(0, "g-standby-0")]


def test_running_is_never_taken() -> None:
    terminating = pod("g-0-abc", "10.0.0.1", PodHealth.TERMINATING)
    for active in (ACTIVE, terminating):
        leaves, holders = decide_takeovers([slot(active, STANDBY, holder=BY_HOST)])
        assert leaves == [] and holders == [SlotHolder(0, "g-0-abc")]


def test_a_deleted_holder_is_left_by_its_member_id_for_the_standby() -> None:
    leaves, holders = decide_takeovers([slot(STANDBY, holder=GONE)])
    assert leaves == [StaticLeave(0, "g-0", "m-1", "g-standby-0", "pod_deleted")]
    assert holders == []


def test_node_lost_too_and_failed() -> None:
    for health, rule in ((PodHealth.NODE_LOST, "node_lost_too"), (PodHealth.FAILED, "pod_failed")):
        dead = pod("g-0-abc", "10.0.0.1", health, ready=False)
        leaves, _ = decide_takeovers([slot(dead, STANDBY, holder=BY_NAME)])
        assert leaves == [StaticLeave(0, "g-0", "m-1", "g-standby-0", rule)]


def test_ready_standby_only() -> None:
    waiting_not_ready = pod("g-standby-0", "10.0.0.2", ready=False)
    assert decide_takeovers([slot(waiting_not_ready, holder=GONE)]) == ([], [])
    assert decide_takeovers([slot(holder=GONE)]) == ([], [])  # no standby at all


def test_unknown_holder_waits() -> None:
    same_ip = [pod("g-0-abc", "10.0.0.9", PodHealth.FAILED), pod("g-standby-0", "10.0.0.9")]
    holder = IdHolder("m-1", "consumer-g-1", "/10.0.0.9")
    assert decide_takeovers([slot(*same_ip, holder=holder)]) == ([], [])


def test_left_once() -> None:
    """The pass after the leave, before the standby's retry: the holder is listed at epoch
    -2; no second leave (and no second Event)."""
    left = IdHolder("m-1", "g-0-abc", "/10.0.0.1", left=True)
    assert decide_takeovers([slot(STANDBY, holder=left)]) == ([], [])


def test_no_holder_needs_no_takeover() -> None:
    assert decide_takeovers([slot(STANDBY, holder=None)]) == ([], [])


def test_a_repeated_decision_after_the_takeover_sends_nothing() -> None:
    """Write-ahead resumed after the standby took the id: the standby is found holding it,
    so no leave is sent for its member id."""
    after = IdHolder("m-2", "g-standby-0", "/10.0.0.2")
    leaves, holders = decide_takeovers([slot(STANDBY, holder=after)])
    assert leaves == [] and holders == [SlotHolder(0, "g-standby-0")]


def test_slots_are_decided_each_on_its_own() -> None:
    other = IdPod("g-1-def", "10.0.0.3", RUNNING, True)
    second = slot(
        other, pod("g-standby-1", "10.0.0.4"), holder=IdHolder("m-3", "", "/10.0.0.3"), n=1
    )
    leaves, holders = decide_takeovers([second, slot(STANDBY, holder=GONE)])
    assert [leave.slot for leave in leaves] == [0]
    assert holders == [SlotHolder(1, "g-1-def")]


# --- the pods and the plan --------------------------------------------------------------

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = MemberSettings(coordinator_url="kafka://k:9092", group_name="ks")


def kafka_group(family: str = "staticfleet", standbys: int = 2, protocol: str = "consumer") -> Any:
    return parse_spec(
        {
            "groupId": "g",
            "topics": [{"name": "t"}],
            "replicas": 3,
            "standbys": standbys,
            "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}},
            "rebalance": {"protocol": protocol},
            "coordinator": {"type": "kafka", "bootstrapServers": "k:9092", "clientFamily": family},
        }
    )


def env_of(manifest: Mapping[str, Any]) -> dict[str, Any]:
    entries = manifest["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in entries}


def test_only_our_member_on_the_consumer_protocol_gets_standbys() -> None:
    assert kafka_standbys_enabled(kafka_group(), CONSUMER)
    assert not kafka_standbys_enabled(kafka_group("java"), CONSUMER)  # a Java pod exits
    assert not kafka_standbys_enabled(kafka_group(), RebalanceProtocolSetting.COOPERATIVE)
    assert not kafka_standbys_enabled(kafka_group(standbys=0), CONSUMER)


def test_a_slot_s_standby_waits_on_its_instance_id_named_by_its_pod() -> None:
    spec = kafka_group()
    actions = keep_kafka_standbys(
        spec,
        SETTINGS,
        [],
        3,
        enabled=True,
        rollout_active=False,
        namespace="d",
        owner_uid="u",
        pass_id="p",
    )
    made = [dict(a.manifest) for a in actions if isinstance(a, CreatePod)]
    assert [m["metadata"]["name"] for m in made] == ["ks-standby-0", "ks-standby-1"]
    values = env_of(made[1])
    assert values[env.INSTANCE_ID] == spec.instance_id(1)
    assert values[env.STANDBY_WAIT_MS] == str(STANDBY_WAIT_MS)
    assert values[env.CLIENT_ID] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert made[1]["metadata"]["annotations"][STANDBY_SLOT_ANNOTATION] == "1"
    assert SLOT_LABEL not in made[1]["metadata"]["labels"]  # no slot rule counts it
    # Every slot pod waits too: a refused replacement does not exit 3.
    slot_env = {e["name"]: e for e in kafka_member_env(spec, spec.instance_id(0), CONSUMER)}
    assert env.STANDBY_WAIT_MS in slot_env and env.CLIENT_ID in slot_env
    # The embedded coordinator's standby rules never see these pods.
    assert standby_pods(made) == []


def test_standbys_are_kept_per_slot_and_removed_with_their_slot_or_template() -> None:
    spec = kafka_group()
    [zero, one] = [
        dict(a.manifest)
        for a in keep_kafka_standbys(
            spec,
            SETTINGS,
            [],
            3,
            enabled=True,
            rollout_active=False,
            namespace="d",
            owner_uid="u",
            pass_id="p",
        )
        if isinstance(a, CreatePod)
    ]

    def keep(pods: list[dict[str, Any]], replicas: int = 3, **kw: Any) -> list[Any]:
        options = {"enabled": True, "rollout_active": False, **kw}
        return keep_kafka_standbys(
            spec, SETTINGS, pods, replicas, namespace="d", owner_uid="u", pass_id="q", **options
        )

    assert keep([zero, one]) == []
    assert keep([zero, one], replicas=1) == [DeletePod("ks-standby-1")]
    assert keep([zero, one], enabled=False) == [
        DeletePod("ks-standby-0"),
        DeletePod("ks-standby-1"),
    ]
    old = copy.deepcopy(zero)
    old["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] = "old"
    assert keep([old, one]) == [DeletePod("ks-standby-0")]  # it hands the id back if it holds it
    assert keep([old, one], rollout_active=True) == []  # not in the middle of a rollout


def running(name: str, ip: str, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": annotations, "labels": {}},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_the_slots_are_read_from_the_pods_and_consumer_group_describe() -> None:
    spec = kafka_group(standbys=1)
    standby = running("ks-standby-0", "10.0.0.2", **{STANDBY_SLOT_ANNOTATION: "0"})
    standby["metadata"]["labels"] = {ROLE_LABEL: STANDBY_ROLE}
    active = running("ks-0", "10.0.0.1", **{SLOT_ANNOTATION: "0"})
    described = DescribedGroup(
        ErrorCode.NONE,
        "g",
        "Stable",
        "consumer",
        "uniform",
        [DescribedGroupMember("m-1", spec.instance_id(0), "ks-0", "/10.0.0.1", b"", b"")],
    )
    [zero, one] = kafka_slots(spec, "ks", [active, standby], described, 2)
    assert zero.holder == IdHolder("m-1", "ks-0", "/10.0.0.1")
    assert [p.name for p in zero.pods] == ["ks-0", "ks-standby-0"]
    assert zero.names == {"ks-0", "ks-standby-0"}
    # ConsumerGroupDescribe's member epoch -2: the holder has left (statically).
    member = ConsumerGroupMember(
        "m-1", spec.instance_id(0), -2, "ks-0", "/10.0.0.1", ("t",), (), ()
    )
    consumer = ConsumerGroupDescription("g", 0, members=(member,))
    [after] = kafka_slots(spec, "ks", [active, standby], described, 1, consumer)
    assert after.holder is not None and after.holder.left
    assert one == KafkaSlot(1, spec.instance_id(1), (), None, frozenset({"ks-1", "ks-standby-1"}))


def test_a_takeover_is_recorded_first_then_completed_not_replayed() -> None:
    dead = [slot(STANDBY, holder=GONE)]
    planned = plan_kafka_takeovers(dead, ConsumerGroupStatus(), rollout_active=False, now=NOW)
    assert planned is not None
    status, action = planned
    assert [(p.standby, p.slot, p.rule, p.started_at) for p in status.promotions] == [
        ("g-standby-0", 0, "pod_deleted", NOW)
    ]
    assert action.member_ids == ("m-1",)
    # An operator restarted after the leave: the standby holds the id, the record is only
    # completed (no leave names the standby's member id).
    after = [slot(STANDBY, holder=IdHolder("m-2", "g-standby-0", "/10.0.0.2"))]
    later = NOW + timedelta(seconds=1)
    resumed = plan_kafka_takeovers(after, status, rollout_active=False, now=later)
    assert resumed is not None and resumed[1].member_ids == (None,)
    assert resumed[1].records == tuple(status.promotions)
    # Before the leave: sent again, for the same member, keeping when it started.
    again = plan_kafka_takeovers(dead, status, rollout_active=False, now=later)
    assert again is not None and again[1].member_ids == ("m-1",)
    assert again[0].promotions[0].started_at == NOW
    assert plan_kafka_takeovers(after, ConsumerGroupStatus(), rollout_active=False, now=NOW) is None
    assert plan_kafka_takeovers(dead, ConsumerGroupStatus(), rollout_active=True, now=NOW) is None
