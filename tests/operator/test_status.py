"""status: conditions named by the rollout's typed blocker, the rollout written as it is."""

from __future__ import annotations

from datetime import UTC, datetime

from coordinator import GroupState
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.blockers import BlockerCode
from staticfleet_operator.crd import ConsumerGroupStatus, RolloutPhase, RolloutStatus
from staticfleet_operator.rollout import CoordinatorView, GroupMemberView, MemberPod
from staticfleet_operator.status import observed_status

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EAGER = RebalanceProtocolSetting.EAGER
COMPATIBLE = RebalanceProtocolSetting.COMPATIBLE
COOPERATIVE = RebalanceProtocolSetting.COOPERATIVE


def _status(rollout: RolloutStatus) -> ConsumerGroupStatus:
    pods = [MemberPod(slot, f"o-{slot}", f"o-{slot}", EAGER, "t1", True) for slot in range(2)]
    members = tuple(GroupMemberView(f"o-{s}", f"m-{s}", frozenset({"range"})) for s in range(2))
    return observed_status(
        ConsumerGroupStatus(),
        generation=3,
        view=CoordinatorView(GroupState.STABLE, 5, "o-0", members),
        selected_protocol="range",
        pods=pods,
        desired_members=2,
        rollout=rollout,
        now=NOW,
    )


def _reason(status: ConsumerGroupStatus, kind: str) -> tuple[str, str | None]:
    condition = status.condition(kind)
    assert condition is not None
    return condition.status.value, condition.reason


def test_a_paused_rollout_is_degraded_for_its_blocker() -> None:
    paused = RolloutStatus(
        phase=RolloutPhase.PAUSED,
        bounces=(COMPATIBLE, COOPERATIVE),
        blocker=BlockerCode.MEMBER_NOT_REJOINED,
        message="rollout paused: o-0 has not rejoined",
    )
    status = _status(paused)
    assert _reason(status, "Degraded") == ("True", "MemberNotRejoined")
    assert _reason(status, "Progressing") == ("False", "NoRollout")
    assert status.rollout == paused  # written as the orchestrator returned it
    assert status.to_patch()["rollout"]["blocker"] == "MemberNotRejoined"


def test_a_waiting_rollout_progresses_with_its_blocker_as_reason() -> None:
    waiting = RolloutStatus(
        phase=RolloutPhase.BOUNCE1,
        bounces=(COMPATIBLE, COOPERATIVE),
        blocker=BlockerCode.POD_NOT_READY,
        message="waiting",
    )
    assert _reason(_status(waiting), "Progressing") == ("True", "PodNotReady")
    assert _reason(_status(waiting), "Degraded") == ("False", "AsExpected")
    moving = waiting.model_copy(update={"blocker": None})
    assert _reason(_status(moving), "Progressing") == ("True", "RollingBounce")
