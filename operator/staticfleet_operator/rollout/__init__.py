"""The rollout orchestrator: pure logic that walks a fleet through rolling bounces.

`decide(observation, state, now)` returns one `Decision` (`Bounce`, `Wait`, `Pause`,
`Done`), each carrying the `RolloutStatus` (status.rollout, the one model of a rollout's
progress, defined with the CRD) to persist before acting. The ordering rules are
at the top of `orchestrator.py`; docs/rollout.md explains them. `plan(observation)` (fleet.py)
is the whole pass over a managed fleet: scale-down, leaves, creation, or `decide`.
"""

from staticfleet_operator.crd import GroupProtocol, RolloutPhase, RolloutStatus
from staticfleet_operator.rollout.decisions import Bounce, Decision, Done, Pause, Wait
from staticfleet_operator.rollout.fleet import (
    CreateMissing,
    FleetObservation,
    Leave,
    Refuse,
    Rollout,
    ScaleDown,
    Step,
    Switch,
    plan,
)
from staticfleet_operator.rollout.observation import (
    ConsumerProgress,
    CoordinatorView,
    GroupMemberView,
    MemberPod,
    Observation,
)
from staticfleet_operator.rollout.orchestrator import decide
from staticfleet_operator.rollout.plan import (
    Assignors,
    protocol_bounces,
    protocol_for_new_pod,
    rollout_bounces,
)

__all__ = [
    "Assignors",
    "Bounce",
    "ConsumerProgress",
    "CoordinatorView",
    "CreateMissing",
    "Decision",
    "Done",
    "FleetObservation",
    "GroupMemberView",
    "GroupProtocol",
    "Leave",
    "MemberPod",
    "Observation",
    "Pause",
    "Refuse",
    "Rollout",
    "RolloutPhase",
    "RolloutStatus",
    "ScaleDown",
    "Step",
    "Switch",
    "Wait",
    "decide",
    "plan",
    "protocol_bounces",
    "protocol_for_new_pod",
    "rollout_bounces",
]
