"""The checks that gate each step of a rollout. Each returns why not yet (a typed
`Blocker`: its code groups Events, conditions and metrics by cause), or None.

They read only the observation: the pods (what each was created with, whether it is
ready) and the coordinator's view (who is in the group, what each member offered).
"""

from __future__ import annotations

from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.blockers import Blocker, BlockerCode
from staticfleet_operator.crd import GroupProtocol, RolloutStatus
from staticfleet_operator.rollout.observation import (
    CoordinatorView,
    GroupMemberView,
    MemberPod,
    Observation,
)


def member_back(observation: Observation, state: RolloutStatus) -> Blocker | None:
    """Why the member bounced last is not back yet; None once it is.

    Back means: its new pod is ready, the coordinator lists its instance id under a new
    member id (the static replacement happened) offering exactly the protocols of its new
    setting, and the group is Stable with the expected number of members.
    """
    slot, protocol = state.current_slot, state.bounce_protocol
    if slot is None or protocol is None:
        return None
    pod = observation.live_pod(slot)
    if pod is None:
        old = observation.pod_in_slot(slot)
        if old is not None:
            return Blocker(
                BlockerCode.POD_TERMINATING, f"the replaced pod {old.pod_name} is still terminating"
            )
        return Blocker(BlockerCode.POD_MISSING, f"slot {slot} has no pod yet")
    if not pod.ready:
        return Blocker(BlockerCode.POD_NOT_READY, f"pod {pod.pod_name} is not ready")
    view = observation.coordinator
    if view is None:
        return _UNAVAILABLE
    member = view.member(pod.instance_id)
    if member is None:
        return Blocker(
            BlockerCode.MEMBER_NOT_LISTED, f"{pod.instance_id} is not in the group's member list"
        )
    if state.current_member_id is not None and member.member_id == state.current_member_id:
        return Blocker(
            BlockerCode.MEMBER_NOT_REJOINED,
            f"{pod.instance_id} has not rejoined: the coordinator still lists the replaced "
            f"member id {member.member_id}",
        )
    expected = observation.assignors.offered_by(protocol)
    if member.supported_protocols != expected:
        return Blocker(
            BlockerCode.OFFERS_MISMATCH,
            f"{pod.instance_id} rejoined offering {_names(member.supported_protocols)}, "
            f"but a {protocol.value} member offers {_names(expected)}",
        )
    return group_settled(observation)


def group_settled(observation: Observation) -> Blocker | None:
    """Why the group is not settled (`CoordinatorView.settled`: Stable, or converged for a
    consumer-protocol group) with the expected member count; None if it is."""
    view = observation.coordinator
    if view is None:
        return _UNAVAILABLE
    unsettled = view.unsettled_reason()
    if unsettled is not None:
        # One code for both protocols: not Stable (classic) or not converged (consumer).
        return Blocker(BlockerCode.GROUP_NOT_STABLE, unsettled)
    if len(view.members) != observation.desired_members:
        return Blocker(
            BlockerCode.MEMBER_COUNT_MISMATCH,
            f"the group has {len(view.members)} members, {observation.desired_members} desired",
        )
    return None


def fleet_ready(observation: Observation, protocol: RebalanceProtocolSetting) -> Blocker | None:
    """Why no member may be bounced to `protocol` now; None when one may.

    The whole fleet must be healthy, each member must be seen offering what its pod was
    created with (so the coordinator's view is current, not a pre-restart leftover), and
    every member must share an assignor with a `protocol` member. For `cooperative` that is
    KIP-429's condition for the second bounce: every member offers the cooperative assignor.
    """
    live = observation.live_pods
    if len(live) != observation.desired_members:
        return Blocker(
            BlockerCode.FLEET_INCOMPLETE,
            f"{len(live)} member pods are live, {observation.desired_members} desired",
        )
    not_ready = [pod.pod_name for pod in live if not pod.ready]
    if not_ready:
        return Blocker(BlockerCode.POD_NOT_READY, f"pods not ready: {', '.join(not_ready)}")
    unsettled = group_settled(observation)
    if unsettled is not None:
        return unsettled
    view = observation.coordinator
    assert view is not None  # group_settled returned None
    mismatch = _membership_mismatch(live, view)
    if mismatch is not None:
        return mismatch
    for pod in live:
        lag = _offer_lag(observation, pod, view.member(pod.instance_id))
        if lag is not None:
            return lag
    lacking = _lacking_assignor(observation, view, protocol)
    if lacking:
        needed = observation.assignors.offered_by(protocol)
        verb = "does" if len(lacking) == 1 else "do"
        return Blocker(
            BlockerCode.NO_SHARED_ASSIGNOR,
            f"{', '.join(lacking)} {verb} not offer {_names(needed)}, "
            f"which a {protocol.value} member offers",
        )
    return None


def stuck_member(
    observation: Observation,
    protocol: RebalanceProtocolSetting,
    remaining: list[MemberPod],
) -> MemberPod | None:
    """The one member that is down and still needs this bounce, if everyone else is fine.

    Down means its pod is not ready. Waiting for such a member could never end (say, the
    broken pod of a template change that was then reverted), and replacing it takes
    nothing from a member that serves. Only a template repair qualifies: its pod already
    runs `protocol`, so no protocol step skips the verification of rule 2. Everything
    else must hold as before a normal bounce: the group Stable, no strangers in it, every
    other member serving with its pod's settings, every listed member sharing an assignor
    with `protocol`.
    """
    view = observation.coordinator
    live = observation.live_pods
    if view is None or not view.settled:
        return None
    if len(live) != observation.desired_members:
        return None
    down = [pod for pod in live if not _serving(observation, pod, view)]
    if len(down) != 1 or down[0] not in remaining or down[0].ready:
        return None
    if down[0].protocol is not protocol:
        return None
    if not view.instance_ids <= {pod.instance_id for pod in live}:
        return None
    if _lacking_assignor(observation, view, protocol):
        return None
    return down[0]


def _lacking_assignor(
    observation: Observation, view: CoordinatorView, protocol: RebalanceProtocolSetting
) -> list[str]:
    """The members that share no assignor with a `protocol` member. None matter for a
    consumer-protocol member (the broker assigns), nor, in a consumer group, do its
    consumer-protocol members (no assignor offered): a classic member joining a consumer
    group needs one in common with the group's classic members only."""
    needed = observation.assignors.offered_by(protocol)
    if not needed:
        return []
    consumer_group = view.protocol is GroupProtocol.CONSUMER
    return sorted(
        str(m.instance_id)
        for m in view.members
        if not m.supported_protocols & needed and not (consumer_group and not m.supported_protocols)
    )


def _serving(observation: Observation, pod: MemberPod, view: CoordinatorView) -> bool:
    member = view.member(pod.instance_id)
    return pod.ready and member is not None and _offer_lag(observation, pod, member) is None


def _membership_mismatch(live: tuple[MemberPod, ...], view: CoordinatorView) -> Blocker | None:
    pod_ids = {pod.instance_id for pod in live}
    absent = sorted(pod_ids - view.instance_ids)
    if absent:
        return Blocker(
            BlockerCode.MEMBER_NOT_LISTED, f"not in the group's member list: {', '.join(absent)}"
        )
    strangers = sorted(str(i) for i in view.instance_ids - pod_ids)
    if strangers:
        # A dynamic member (None) or a leftover static one: the rollout cannot vouch for it.
        return Blocker(
            BlockerCode.UNKNOWN_MEMBERS,
            f"the group lists members with no pod in the fleet: {', '.join(strangers)}",
        )
    return None


def _offer_lag(
    observation: Observation, pod: MemberPod, member: GroupMemberView | None
) -> Blocker | None:
    expected = observation.assignors.offered_by(pod.protocol)
    if member is None or member.supported_protocols == expected:
        return None
    return Blocker(
        BlockerCode.OFFERS_MISMATCH,
        f"{pod.instance_id} offers {_names(member.supported_protocols)} but its pod was "
        f"created {pod.protocol.value} ({_names(expected)}): it has not rejoined since",
    )


_UNAVAILABLE = Blocker(
    BlockerCode.COORDINATOR_VIEW_UNAVAILABLE, "the coordinator's view of the group is unavailable"
)


def _names(names: frozenset[str]) -> str:
    return "[" + ", ".join(sorted(names)) + "]"
