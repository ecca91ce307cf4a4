"""adopted.py: the slot table and protocol an admitted pod gets, as the webhook asks for them."""

from __future__ import annotations

from typing import Any, cast

from coordinator import GroupCoordinator, GroupState
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator import adopted
from staticfleet_operator.crd import RolloutStatus, parse_spec
from staticfleet_operator.members import SLOT_LABEL, identity_annotations
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.reconcile import Operator
from staticfleet_operator.rollout import CoordinatorView

EAGER = RebalanceProtocolSetting.EAGER
KEY = "default/spark"


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


def _operator() -> Operator:
    # admit touches only the slot table, the clock and the metrics: no API, no coordinator.
    return Operator(cast(GroupCoordinator, None), cast(Any, None), coordinator_url="")


async def test_an_admitted_pod_gets_the_lowest_free_slot_and_the_fleet_s_protocol() -> None:
    op = _operator()
    siblings = [_executor(0), _executor(2)]
    view = CoordinatorView(GroupState.STABLE, 1, None)
    admission = await adopted.admit(
        op, KEY, _spec("java"), siblings, view, "key-new", RolloutStatus()
    )
    assert admission.slot == 1
    # A fleet of eager Java members moving to cooperative: the new one bridges (compatible).
    assert admission.protocol is RebalanceProtocolSetting.COMPATIBLE


async def test_a_client_that_cannot_mix_assignors_is_never_stamped_compatible() -> None:
    """The webhook chose with `protocol_for_new_pod` alone before, and stamped a librdkafka
    executor `compatible`, which it cannot run; now it uses the managed pods' rule."""
    op = _operator()
    view = CoordinatorView(GroupState.STABLE, 1, None)
    admission = await adopted.admit(
        op, KEY, _spec("librdkafka"), [_executor(0)], view, "key-new", RolloutStatus()
    )
    assert admission.protocol is EAGER  # the two-bounce is refused: the fleet keeps eager
