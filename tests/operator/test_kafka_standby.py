"""The pure takeover rules of hot standby on a consumer-protocol Kafka group
(`kafka_standby.decide_takeovers`): one test per rule."""

from __future__ import annotations

from staticfleet_operator.kafka_standby import (
    Holder,
    IdHolder,
    IdPod,
    KafkaSlot,
    SlotHolder,
    StaticLeave,
    decide_takeovers,
    holder_pod,
)
from staticfleet_operator.promotion import PodHealth

RUNNING = PodHealth.RUNNING


def pod(name: str, ip: str, health: PodHealth = RUNNING, ready: bool = True) -> IdPod:
    return IdPod(name, ip, health, ready)


def slot(*pods: IdPod, holder: IdHolder | None, n: int = 0) -> KafkaSlot:
    return KafkaSlot(n, f"g-{n}", pods, holder)


ACTIVE = pod("g-0-abc", "10.0.0.1")
STANDBY = pod("g-standby-0", "10.0.0.2")
# Java and librdkafka members send their own client id: the host names the pod.
BY_HOST = IdHolder("m-1", "consumer-g-1", "/10.0.0.1")
BY_NAME = IdHolder("m-1", "g-0-abc", "/127.0.0.1")  # our member: client id = pod name


def test_the_holder_is_found_by_client_id_then_by_client_host() -> None:
    assert holder_pod(BY_NAME, [ACTIVE, STANDBY]) == (Holder.LIVE, ACTIVE)
    assert holder_pod(BY_HOST, [ACTIVE, STANDBY]) == (Holder.LIVE, ACTIVE)
    assert holder_pod(None, [ACTIVE]) == (Holder.NONE, None)
    # Loopback pods (one node, host networking): the host names neither.
    same_ip = [pod("a", "10.0.0.9"), pod("b", "10.0.0.9")]
    assert holder_pod(IdHolder("m", "x", "/10.0.0.9"), same_ip) == (Holder.UNKNOWN, None)
    assert holder_pod(IdHolder("m", "x", ""), [ACTIVE]) == (Holder.UNKNOWN, None)
    assert holder_pod(IdHolder("m", "x", "/10.0.0.7"), [STANDBY]) == (Holder.GONE, None)


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
    leaves, holders = decide_takeovers([slot(STANDBY, holder=BY_HOST)])
    assert leaves == [StaticLeave(0, "g-0", "m-1", "g-standby-0", "pod_deleted")]
    assert holders == []


def test_node_lost_too_and_failed() -> None:
    for health, rule in ((PodHealth.NODE_LOST, "node_lost_too"), (PodHealth.FAILED, "pod_failed")):
        dead = pod("g-0-abc", "10.0.0.1", health, ready=False)
        leaves, _ = decide_takeovers([slot(dead, STANDBY, holder=BY_NAME)])
        assert leaves == [StaticLeave(0, "g-0", "m-1", "g-standby-0", rule)]


def test_ready_standby_only() -> None:
    waiting_not_ready = pod("g-standby-0", "10.0.0.2", ready=False)
    assert decide_takeovers([slot(waiting_not_ready, holder=BY_HOST)]) == ([], [])
    assert decide_takeovers([slot(holder=BY_HOST)]) == ([], [])  # no standby at all


def test_unknown_holder_waits() -> None:
    same_ip = [pod("g-0-abc", "10.0.0.9", PodHealth.FAILED), pod("g-standby-0", "10.0.0.9")]
    holder = IdHolder("m-1", "consumer-g-1", "/10.0.0.9")
    assert decide_takeovers([slot(*same_ip, holder=holder)]) == ([], [])


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
    leaves, holders = decide_takeovers([second, slot(STANDBY, holder=BY_HOST)])
    assert [leave.slot for leave in leaves] == [0]
    assert holders == [SlotHolder(1, "g-1-def")]
