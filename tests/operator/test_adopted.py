"""adopted.py: the slot table and protocol an admitted pod gets, as the webhook asks for them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from coordinator import GroupState
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator import adopted
from staticfleet_operator.crd import RolloutStatus, parse_spec
from staticfleet_operator.group_memory import GroupMemory
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.members import SLOT_LABEL, identity_annotations, member_pod
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.rollout import CoordinatorView, GroupMemberView

EAGER = RebalanceProtocolSetting.EAGER
REF = GroupRef("default", "spark")
NOW = datetime(2026, 11, 27, tzinfo=UTC)


def _spec(family: str, protocol: str = "cooperative") -> Any:
    return parse_spec(
        {
            "groupId": "spark-job",
            "topics": [{"name": "events"}],
            "selector": {"matchLabels": {"spark-role": "executor"}},
            "rebalance": {"protocol": protocol},
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


# --- the pass's side: settle_slots (was the kmock tier's grace-period and driver-lost tests) --

GRACE = 10


def _grace_spec() -> Any:
    return parse_spec(
        {
            "groupId": "spark-job",
            "topics": [{"name": "events", "partitions": 6}],
            "selector": {"matchLabels": {"spark-role": "executor"}},
            "replacementGracePeriodSeconds": GRACE,
        }
    )


def _listed(*slots: int) -> CoordinatorView:
    members = tuple(
        GroupMemberView(f"spark-job-{slot}", f"m-{slot}", frozenset()) for slot in slots
    )
    return CoordinatorView(GroupState.STABLE, 1, None, members)


class Leaves:
    """The batch LeaveGroups `settle_slots` sends, one list of instance ids per request."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    async def __call__(self, instance_ids: list[str]) -> None:
        self.sent.append(list(instance_ids))


async def _settle(
    memory: GroupMemory, pods: list[dict[str, Any]], view: CoordinatorView, at: datetime
) -> tuple[Leaves, list[str], int]:
    leaves = Leaves()
    left, in_use = await adopted.settle_slots(memory, _grace_spec(), pods, view, at, leaves)
    return leaves, left, in_use


async def test_executors_gone_past_the_grace_period_leave_in_one_batch_and_free_the_slots() -> None:
    memory = _memory()
    fleet = [_executor(slot) for slot in range(3)]
    await _settle(memory, fleet, _listed(0, 1, 2), NOW)
    # The driver releases two executors; the coordinator still lists their members.
    leaves, left, in_use = await _settle(memory, fleet[:1], _listed(0, 1, 2), NOW)
    assert (leaves.sent, in_use, memory.timed) == ([], 3, True)  # vacant: a clock runs
    # Within the grace period: nobody leaves.
    leaves, _, _ = await _settle(memory, fleet[:1], _listed(0, 1, 2), NOW + timedelta(seconds=5))
    assert leaves.sent == []
    # Past it: one batch LeaveGroup for both, and their slots are free again.
    later = NOW + timedelta(seconds=GRACE + 1)
    leaves, left, in_use = await _settle(memory, fleet[:1], _listed(0, 1, 2), later)
    assert leaves.sent == [["spark-job-1", "spark-job-2"]] and left == leaves.sent[0]
    assert (in_use, memory.timed) == (1, False)
    admission, _ = await adopted.admit(
        memory, _grace_spec(), fleet[:1], _listed(0), "key-new", RolloutStatus(), later
    )
    assert admission.slot == 1  # the freed ids are handed out again, lowest first


async def test_a_replacement_within_the_grace_period_takes_the_slot_and_nobody_leaves() -> None:
    memory = _memory()
    fleet = [_executor(slot) for slot in range(3)]
    await _settle(memory, fleet, _listed(0, 1, 2), NOW)
    await _settle(memory, [fleet[0], fleet[2]], _listed(0, 1, 2), NOW + timedelta(seconds=1))
    admission, fresh = await adopted.admit(
        memory,
        _grace_spec(),
        [fleet[0], fleet[2]],
        _listed(0, 1, 2),
        "key-replacement",
        RolloutStatus(),
        NOW + timedelta(seconds=3),
    )
    assert (admission.slot, fresh) == (1, True)
    replacement = _executor(1)
    replacement["metadata"]["annotations"]["staticfleet.dev/pod-key"] = "key-replacement"
    for seconds in (4, GRACE + 1, 3 * GRACE):
        leaves, _, in_use = await _settle(
            memory,
            [fleet[0], replacement, fleet[2]],
            _listed(0, 1, 2),
            NOW + timedelta(seconds=seconds),
        )
        assert leaves.sent == [] and in_use == 3


async def test_after_a_restart_a_finished_pods_slot_goes_to_a_new_executor() -> None:
    """The table is read back from the pods' annotations: a Failed executor's (Spark 3's
    exit) must not claim its slot back."""
    failed = _executor(0)
    failed["status"] = {"phase": "Failed"}
    siblings = [failed, _executor(1)]
    restarted = _memory()  # a new process: nothing remembered
    admission, _ = await adopted.admit(
        restarted, _grace_spec(), siblings, _listed(0, 1), "key-new", RolloutStatus(), NOW
    )
    assert admission.slot == 0


def test_a_pod_in_a_terminal_phase_is_finished_and_no_longer_live() -> None:
    pod = _executor(0)
    for phase, finished in (("Running", False), ("Failed", True), ("Succeeded", True)):
        member = member_pod({**pod, "status": {"phase": phase}})
        assert member is not None
        assert (member.finished, member.live) == (finished, not finished), phase


async def test_an_executor_admitted_while_migrating_is_refused_keeps_the_fleet_s_protocol() -> None:
    """`protocol: consumer` on an adopted group is refused (the operator cannot bounce
    executors): a new executor joins on its peers' classic protocol, not on the spec's."""
    spec = _spec("java", "consumer")
    view = CoordinatorView(GroupState.STABLE, 1, None)
    admission, _ = await adopted.admit(
        _memory(), spec, [_executor(0), _executor(1)], view, "key-new", RolloutStatus(), NOW
    )
    assert admission.protocol is EAGER
    # A new job (no executor running yet) starts on the consumer protocol.
    first, _ = await adopted.admit(_memory(), spec, [], view, "key-new", RolloutStatus(), NOW)
    assert first.protocol is RebalanceProtocolSetting.CONSUMER
