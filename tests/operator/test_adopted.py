"""adopted.py: the slot table and protocol an admitted pod gets, as the webhook asks for them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from coordinator import GroupState
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator import adopted
from staticfleet_operator.crd import RolloutStatus, parse_spec
from staticfleet_operator.group_memory import GroupMemory
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.members import SLOT_LABEL, identity_annotations
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.rollout import CoordinatorView

EAGER = RebalanceProtocolSetting.EAGER
REF = GroupRef("default", "spark")
NOW = datetime(2026, 11, 27, tzinfo=UTC)


def _spec(family: str) -> Any:
    return parse_spec(
        {
            "groupId": "spark-job",
            "topics": [{"name": "events"}],
            "selector": {"matchLabels": {"spark-role": "executor"}},
            "rebalance": {"protocol": "cooperative"},
            "coordinator": {
                "type": "kafka",
                "bootstrapServers": "kafka:9092",
                "clientFamily": family,
            },
        }
    )


def _executor(slot: int) -> dict[str, Any]:
    annotations = identity_annotations(slot, f"spark-job-{slot}", EAGER, "h", f"key-{slot}")
    return {
        "metadata": {
            "name": f"exec-{slot}",
            "labels": {GROUP_LABEL: "spark", SLOT_LABEL: str(slot)},
            "annotations": annotations,
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _memory() -> GroupMemory:
    # admit touches only the group's memory (its slot table): no API, no coordinator.
    return GroupMemory(REF)


async def test_an_admitted_pod_gets_the_lowest_free_slot_and_the_fleet_s_protocol() -> None:
    memory = _memory()
    siblings = [_executor(0), _executor(2)]
    view = CoordinatorView(GroupState.STABLE, 1, None)
    admission, fresh = await adopted.admit(
        memory, _spec("java"), siblings, view, "key-new", RolloutStatus(), NOW
    )
    assert admission.slot == 1 and fresh
    assert memory.admitted == {"key-new": NOW}  # its slot is kept until the pod is listed
    # A fleet of eager Java members moving to cooperative: the new one bridges (compatible).
    assert admission.protocol is RebalanceProtocolSetting.COMPATIBLE


async def test_a_client_that_cannot_mix_assignors_is_never_stamped_compatible() -> None:
    """The webhook chose with `protocol_for_new_pod` alone before, and stamped a librdkafka
    executor `compatible`, which it cannot run; now it uses the managed pods' rule."""
    view = CoordinatorView(GroupState.STABLE, 1, None)
    admission, _ = await adopted.admit(
        _memory(), _spec("librdkafka"), [_executor(0)], view, "key-new", RolloutStatus(), NOW
    )
    assert admission.protocol is EAGER  # the two-bounce is refused: the fleet keeps eager
