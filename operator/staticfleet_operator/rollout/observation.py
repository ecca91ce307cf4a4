"""What the orchestrator sees: the spec's wishes, the member pods, the coordinator's view.

Plain frozen data, so an adapter (Kubernetes, local processes, a test simulator) only has
to fill it in; the orchestrator never reaches out for more.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator import DescribedGroup, ErrorCode, GroupState
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.kafka_groups import ConsumerGroupDescription, MemberType
from staticfleet_operator.crd import GroupProtocol
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
class ConsumerProgress:
    """A consumer-protocol group's epochs and convergence (ConsumerGroupDescribe)."""

    state: str  # the broker's: Empty, Assigning, Reconciling, Stable, Dead
    group_epoch: int
    assignment_epoch: int
    assignor: str
    converged: bool
    converged_members: int
    classic_members: int  # > 0: a migration under way (classic members in the group)

    @property
    def migrating(self) -> bool:
        return self.classic_members > 0


@dataclass(frozen=True, slots=True)
class CoordinatorView:
    """The parts of `describe_groups` the rollout rules read."""

    group_state: GroupState
    generation_id: int
    leader_instance_id: str | None
    members: tuple[GroupMemberView, ...] = ()
    protocol: GroupProtocol = GroupProtocol.CLASSIC
    consumer: ConsumerProgress | None = None  # a consumer-protocol group's progress

    @property
    def settled(self) -> bool:
        """The gate of rollouts, replacements and scale-downs, protocol-neutral: a classic
        group is Stable; a consumer group has converged (every member at the group epoch
        holding its target assignment: docs/kafka.md, "The consumer protocol")."""
        if self.consumer is not None:
            return self.consumer.converged and self.group_state is GroupState.STABLE
        return self.group_state is GroupState.STABLE

    def unsettled_reason(self) -> str | None:
        """Why the group is not settled, in words; None when it is."""
        if self.settled:
            return None
        progress = self.consumer
        if progress is None:
            return f"the group is {self.group_state.value}, not Stable"
        return (
            f"the consumer group is {progress.state}, not converged: "
            f"{progress.converged_members}/{len(self.members)} members at group epoch "
            f"{progress.group_epoch} with their target assignment "
            f"(assignment epoch {progress.assignment_epoch})"
        )

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

    @classmethod
    def from_consumer_group(cls, group: ConsumerGroupDescription) -> CoordinatorView:
        """Map a ConsumerGroupDescribe answer. The state the rules read is Stable only when
        the group has converged (the broker's Stable may list a member away on a static
        restart, epoch -2); the broker's own state is in `consumer.state`. Members offer
        no classic assignor (the broker assigns): their offers are left empty, which
        `backends.widen_offers` fills from each pod."""
        if group.error_code != 0:
            return cls(GroupState.DEAD, NO_EPOCH, None, protocol=GroupProtocol.CONSUMER)
        progress = ConsumerProgress(
            state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor=group.assignor,
            converged=group.converged,
            converged_members=group.converged_members,
            classic_members=sum(1 for m in group.members if m.member_type is MemberType.CLASSIC),
        )
        return cls(
            group_state=consumer_group_state(group.state, group.converged),
            generation_id=group.group_epoch,
            leader_instance_id=None,  # no leader: the broker assigns
            members=tuple(
                GroupMemberView(m.instance_id, m.member_id, frozenset()) for m in group.members
            ),
            protocol=GroupProtocol.CONSUMER,
            consumer=progress,
        )


NO_EPOCH = -1


def consumer_group_state(state: str, converged: bool) -> GroupState:
    """A consumer group's state in the classic vocabulary the rules read: Empty and Dead
    as they are; converged is Stable; Assigning (no target for the group epoch yet) is a
    rebalance being prepared; anything else (Reconciling, or the broker's Stable with a
    static member away at epoch -2) is one completing."""
    if state == "Empty":
        return GroupState.EMPTY
    if state == "Dead":
        return GroupState.DEAD
    if converged:
        return GroupState.STABLE
    if state == "Assigning":
        return GroupState.PREPARING_REBALANCE
    return GroupState.COMPLETING_REBALANCE


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
                "spec.rebalance.protocol must be eager or cooperative (or consumer), "
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
