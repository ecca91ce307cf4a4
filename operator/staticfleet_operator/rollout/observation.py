"""What the orchestrator sees: the spec's wishes, the member pods, the coordinator's view.

Plain frozen data, so an adapter (Kubernetes, local processes, a test simulator) only has
to fill it in; the orchestrator never reaches out for more.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator import DescribedGroup, ErrorCode, GroupState
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.rollout.plan import DESIRED_PROTOCOLS, Assignors


@dataclass(frozen=True, slots=True)
class MemberPod:
    """One member pod, with the settings it was created with (its annotations)."""

    slot: int
    instance_id: str
    pod_name: str
    protocol: RebalanceProtocolSetting
    template_hash: str
    ready: bool
    deleting: bool = False
    # Lets an adapter replace exactly this pod: a replacement may reuse the name.
    pod_uid: str = ""
    # Phase Succeeded or Failed: its containers are done and the pod never runs again (a
    # Spark executor whose driver is gone exits; its pod stays until someone deletes it).
    finished: bool = False

    def created_with(self, protocol: RebalanceProtocolSetting, template_hash: str) -> bool:
        return self.protocol is protocol and self.template_hash == template_hash

    @property
    def live(self) -> bool:
        """Neither being deleted nor finished: the pod runs (or will) and holds its slot."""
        return not self.deleting and not self.finished

    @property
    def label(self) -> str:
        return f"{self.instance_id} (slot {self.slot}, pod {self.pod_name})"


@dataclass(frozen=True, slots=True)
class GroupMemberView:
    # None: a dynamic member. It has no slot, so the rollout can neither bounce nor vouch
    # for it; the fleet checks treat it as a stranger and wait.
    instance_id: str | None
    member_id: str
    supported_protocols: frozenset[str]


@dataclass(frozen=True, slots=True)
class CoordinatorView:
    """The parts of `describe_groups` the rollout rules read."""

    group_state: GroupState
    generation_id: int
    leader_instance_id: str | None
    members: tuple[GroupMemberView, ...] = ()

    def member(self, instance_id: str) -> GroupMemberView | None:
        return next((m for m in self.members if m.instance_id == instance_id), None)

    @property
    def instance_ids(self) -> frozenset[str | None]:
        return frozenset(m.instance_id for m in self.members)

    @classmethod
    def from_described(cls, group: DescribedGroup) -> CoordinatorView:
        """Map a describe result; an unknown or failed group reads as Dead with no members."""
        if group.error_code is not ErrorCode.NONE:
            return cls(GroupState.DEAD, group.generation_id, None)
        # The coordinator names the leader by member id; the rules speak instance ids.
        leader = next((m for m in group.members if m.member_id == group.leader), None)
        return cls(
            group_state=GroupState(group.group_state),
            generation_id=group.generation_id,
            leader_instance_id=leader.group_instance_id if leader is not None else None,
            members=tuple(
                GroupMemberView(
                    instance_id=m.group_instance_id,
                    member_id=m.member_id,
                    supported_protocols=frozenset(m.supported_protocols),
                )
                for m in group.members
            ),
        )


@dataclass(frozen=True, slots=True)
class Observation:
    desired_protocol: RebalanceProtocolSetting
    desired_template_hash: str
    assignors: Assignors
    desired_members: int
    member_ready_timeout_seconds: float
    pods: tuple[MemberPod, ...] = ()
    # None: describe failed. Nothing is decided on a guess, so that is a reason to wait.
    coordinator: CoordinatorView | None = None

    def __post_init__(self) -> None:
        if self.desired_protocol not in DESIRED_PROTOCOLS:
            raise ValueError(
                "spec.rebalance.protocol must be eager or cooperative, "
                f"not {self.desired_protocol.value!r}"
            )
        if self.desired_members < 0 or self.member_ready_timeout_seconds <= 0:
            raise ValueError("desired_members must be >= 0 and the ready timeout positive")

    @property
    def live_pods(self) -> tuple[MemberPod, ...]:
        """Pods not being deleted, by slot: the members the fleet has or is getting back."""
        return tuple(sorted((p for p in self.pods if not p.deleting), key=lambda p: p.slot))

    def live_pod(self, slot: int) -> MemberPod | None:
        return next((p for p in self.live_pods if p.slot == slot), None)

    def pod_in_slot(self, slot: int) -> MemberPod | None:
        """The slot's pod, live or still terminating."""
        return self.live_pod(slot) or next((p for p in self.pods if p.slot == slot), None)
