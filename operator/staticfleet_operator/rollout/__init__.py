"""The rollout orchestrator: pure logic that walks a fleet through rolling bounces.

`decide(observation, state, now)` returns one `Decision` (`Bounce`, `Wait`, `Pause`,
`Done`), each carrying the `RolloutState` to persist before acting. The ordering rules are
at the top of `orchestrator.py`; docs/rollout.md explains them.
"""

from staticfleet_operator.rollout.decisions import Bounce, Decision, Done, Pause, Wait
from staticfleet_operator.rollout.observation import (
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
from staticfleet_operator.rollout.state import RolloutPhase, RolloutState

__all__ = [
    "Assignors",
    "Bounce",
    "CoordinatorView",
    "Decision",
    "Done",
    "GroupMemberView",
    "MemberPod",
    "Observation",
    "Pause",
    "RolloutPhase",
    "RolloutState",
    "Wait",
    "decide",
    "protocol_bounces",
    "protocol_for_new_pod",
    "rollout_bounces",
]
