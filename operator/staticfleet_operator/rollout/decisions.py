"""What the orchestrator asks an adapter to do. Each carries the state to persist first.

An adapter needs three abilities for all of them: recreate a member with given env
(`Bounce`), report pod readiness, and call describe (both feed the next `Observation`).
`reason` is one sentence for logs and Kubernetes Events; `event_reason` is the Event's
CamelCase reason (for a Pause, the code of what blocks it: blockers.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.blockers import Blocker
from staticfleet_operator.crd import RolloutStatus


@dataclass(frozen=True, slots=True)
class Bounce:
    """Recreate the member in `slot` with `protocol` and the template `template_hash`.

    Replace exactly the pod named (`pod_name`, `pod_uid`): delete it, and create the
    replacement once it is gone, with the same slot and instance id. Must be idempotent:
    after an operator restart the same Bounce may be issued again for a pod that was never
    replaced; if that pod is already gone, only make sure the replacement exists.
    """

    slot: int
    instance_id: str
    pod_name: str
    pod_uid: str
    protocol: RebalanceProtocolSetting
    template_hash: str
    reason: str
    state: RolloutStatus
    event_reason: ClassVar[str] = "MemberBounced"

    @property
    def member_env(self) -> dict[str, str]:
        """The member settings this bounce changes; the rest of the env is the template's."""
        return {env.INSTANCE_ID: self.instance_id, env.REBALANCE_PROTOCOL: self.protocol.value}


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do until something observable changes (a pod, the group). `blocker`:
    what it waits for (None only while the member in flight is given time to come back)."""

    reason: str
    state: RolloutStatus
    blocker: Blocker | None = None
    event_reason: ClassVar[str] = "RolloutWaiting"


@dataclass(frozen=True, slots=True)
class Pause:
    """A wait outlasted memberReadyTimeoutSeconds. Set a Degraded condition and an Event,
    both with the blocker's code as their reason.

    `slot` names the member the rollout waits for, when it is one member.
    """

    reason: str
    state: RolloutStatus
    blocker: Blocker
    slot: int | None = None

    @property
    def event_reason(self) -> str:
        return self.blocker.code.value


@dataclass(frozen=True, slots=True)
class Done:
    """Every pod runs the desired protocol and template, and the group is verified healthy
    (or there was nothing to roll)."""

    reason: str
    state: RolloutStatus
    event_reason: ClassVar[str] = "RolloutComplete"


Decision = Bounce | Wait | Pause | Done
