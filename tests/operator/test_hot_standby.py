"""Hot standby pods and slot health as data (pure parts of `hot_standby`)."""

from __future__ import annotations

from typing import Any

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import parse_spec
from staticfleet_operator.hot_standby import (
    active_slots,
    pod_health,
    promoted_patch,
    standby_pod,
    standby_pod_name,
    standby_pods,
)
from staticfleet_operator.members import MemberSettings, member_pod
from staticfleet_operator.promotion import PodHealth
from tests.operator.kube_harness import managed_spec

SPEC = parse_spec(managed_spec(replicas=3, standbys=1))
SETTINGS = MemberSettings(coordinator_url="http://c:9092", group_name="orders")


def _standby(name: str = "orders-standby-0") -> dict[str, Any]:
    return standby_pod(
        SPEC,
        SETTINGS,
        namespace="default",
        owner_uid="uid",
        name=name,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key=f"key-{name}",
    )


def _slot_pod(slot: int, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": f"orders-{slot}", "annotations": {"staticfleet.dev/slot": str(slot)}},
        "status": status or {"phase": "Running"},
    }


def test_a_standby_pod_has_a_standby_id_no_instance_id_and_no_slot() -> None:
    pod = _standby()
    entries = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert entries[env.STANDBY_ID] == "orders-standby-0"
    assert env.INSTANCE_ID not in entries
    assert member_pod(pod) is None, "no slot: every slot rule ignores a standby"
    assert [p.name for p in standby_pods([pod])] == ["orders-standby-0"]


def test_a_relabeled_standby_is_the_slots_pod_and_no_standby_any_more() -> None:
    pod = _standby()
    patch = promoted_patch(1, "orders-1")
    pod["metadata"]["labels"].update(patch["metadata"]["labels"])
    pod["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    member = member_pod(pod)
    assert member is not None and member.slot == 1 and member.instance_id == "orders-1"
    assert standby_pods([pod]) == []


def test_standby_names_skip_the_ones_taken() -> None:
    assert standby_pod_name("orders", set()) == "orders-standby-0"
    assert standby_pod_name("orders", {"orders-standby-0", "orders-1"}) == "orders-standby-1"


def test_pod_health() -> None:
    assert pod_health(None) is PodHealth.DELETED
    assert pod_health({"metadata": {"deletionTimestamp": "x"}}) is PodHealth.TERMINATING
    lost = {"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Unknown"}}
    assert pod_health(lost) is PodHealth.NODE_LOST
    assert pod_health({"status": {"phase": "Failed"}}) is PodHealth.FAILED
    assert pod_health({"status": {"phase": "Running", "reason": "NodeLost"}}) is (
        PodHealth.NODE_LOST
    )
    assert pod_health({"status": {"phase": "Pending"}}) is PodHealth.RUNNING


def test_active_slots_a_running_replacement_wins_over_a_terminating_pod() -> None:
    terminating = _slot_pod(1)
    terminating["metadata"]["deletionTimestamp"] = "now"
    pods = [_slot_pod(0), terminating, _slot_pod(1), _slot_pod(5)]
    slots = active_slots(SPEC, pods, 3, {"orders-0", "orders-1"})
    assert [(s.slot, s.health, s.listed) for s in slots] == [
        (0, PodHealth.RUNNING, True),
        (1, PodHealth.RUNNING, True),
        (2, PodHealth.DELETED, False),
    ]
    slots = active_slots(SPEC, [_slot_pod(0), terminating], 2, {"orders-0", "orders-1"})
    assert slots[1].health is PodHealth.TERMINATING
