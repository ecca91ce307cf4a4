"""The rollout orchestrator: which member to bounce next, and when. Pure; no I/O, no clock.

Ordering rules (every decision below follows from these; docs/rollout.md explains why):

 1. One member at a time. The next member is bounced only once the previous one is back:
    its new pod ready, its instance id listed by the coordinator under a new member id,
    offering exactly the protocols of its new setting, and the group Stable with the
    expected member count.
 2. Before every bounce the fleet is healthy: the expected number of live pods, all ready;
    the group Stable with exactly those instance ids; each member seen offering what its
    pod was created with; and every member sharing an assignor with the bounce's protocol.
    For `cooperative` that means every member offers the cooperative assignor: KIP-429's
    condition for starting the second bounce, checked again before each of its steps.
 3. The leader last. Within a bounce members go in slot order, except the coordinator's
    current leader, who goes when it is the only one left (a new leader is re-ordered).
 4. eager -> cooperative is two bounces: `compatible`, then `cooperative`. cooperative ->
    eager walks back: `compatible`, then `eager`. A template change alone is one bounce
    with the protocol unchanged. Every bounce recreates from the desired template.
 5. A bounce hands over to the next only when every live pod carries its settings and the
    fleet passes rule 2 for the next bounce's protocol.
 6. Never skip, never repeat. The members still to bounce are read from the pods' recorded
    protocol and template hash, so each is bounced once per bounce across operator
    restarts (even with the persisted state lost), and a pod that was replaced outside the
    rollout with the bounce's settings needs no bounce.
 7. Every wait is bounded by memberReadyTimeoutSeconds, counted from the bounce or from the
    last progress. Past it the rollout pauses. Nothing proceeds on a guess: it resumes by
    itself once the blocker clears.
 8. When the spec (protocol or template) changes mid-rollout, or the pods stop matching
    the plan, the member in flight is finished first (or has timed out), then the rollout
    is re-planned from the pods as observed.
 9. A single member that is down (its pod not ready) and needs the current bounce only
    for its template is bounced ahead of the order when everyone else is healthy: waiting
    for it could never end (say, the broken pod of a reverted template change), and
    replacing it takes nothing from a member that serves (Strimzi's KafkaRoller restarts
    unready pods first for the same reason). A protocol step is never taken this way.

Contract with the caller: persist `decision.state` before acting on the decision, and
build the next observation only after the action completed (read your writes).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.blockers import Blocker, BlockerCode
from staticfleet_operator.crd import FleetProtocol, RolloutPhase, RolloutStatus
from staticfleet_operator.rollout.checks import fleet_ready, member_back, stuck_member
from staticfleet_operator.rollout.decisions import Bounce, Decision, Done, Pause, Wait
from staticfleet_operator.rollout.observation import MemberPod, Observation
from staticfleet_operator.rollout.plan import rollout_bounces, uniform_protocol


def decide(observation: Observation, state: RolloutStatus, now: datetime) -> Decision:
    """The next step of the fleet's rollout, with the state to persist before taking it."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if not state.active:
        return _begin(observation, state, now, note="")
    drift = _plan_drift(observation, state)
    if drift is None:
        return _advance(observation, state, now, note="")
    in_flight = _in_flight(observation, state)
    if in_flight is not None and not _timed_out(observation, state.current_slot_bounced_at, now):
        return _wait(state, f"{drift}; finishing {in_flight} before re-planning", in_flight)
    return _begin(observation, state, now, note=f"re-planned: {drift}")


def _begin(observation: Observation, previous: RolloutStatus, now: datetime, note: str) -> Decision:
    """Plan from the pods as they are (a new rollout, a re-plan, or a lost state)."""
    live = observation.live_pods
    terminating = len(observation.pods) - len(live)
    if len(live) != observation.desired_members or terminating:
        # A pod in transit has settings nobody knows yet (its replacement's): a plan made
        # now could call the fleet done, or plan a bounce too few. No timeout here: no
        # rollout is under way that could be stuck.
        reason = _join(
            note,
            f"waiting for the fleet before planning: {len(live)} of "
            f"{observation.desired_members} member pods live, {terminating} terminating",
        )
        blocker = Blocker(BlockerCode.FLEET_IN_TRANSIT, reason)
        return Wait(reason, _replace(previous, message=reason, blocker=blocker.code), blocker)
    desired, template_hash = observation.desired_protocol, observation.desired_template_hash
    bounces = rollout_bounces(((p.protocol, p.template_hash) for p in live), desired, template_hash)
    if not bounces:
        reason = _join(note, f"every member runs {desired.value} with template {template_hash}")
        unchanged = _ends_at(previous, desired) and previous.template_hash == template_hash
        if not previous.active and unchanged:
            # Keep the last rollout's record as it is (a wait for the fleet is over).
            return Done(reason, _replace(previous, blocker=None))
        settled = RolloutStatus(
            phase=RolloutPhase.COMPLETED if previous.active else RolloutPhase.IDLE,
            to_protocol=FleetProtocol(desired.value),
            template_hash=template_hash,
            completed_at=now if previous.active else None,
            message=reason,
        )
        return Done(reason, settled)
    state = RolloutStatus(
        from_protocol=uniform_protocol(p.protocol for p in live),
        to_protocol=FleetProtocol(desired.value),
        template_hash=template_hash,
        bounces=bounces,
        started_at=now,
        waiting_since=now,
    ).rolling()
    plan = " then ".join(protocol.value for protocol in bounces)
    return _advance(observation, state, now, _join(note, f"rollout planned: {plan}"))


def _advance(observation: Observation, state: RolloutStatus, now: datetime, note: str) -> Decision:
    unverifiable = _unverifiable(observation, state)
    if unverifiable is not None:
        return _pause(state, unverifiable, _join(note, unverifiable.message))
    if state.current_slot is not None:
        outcome = _follow_member_in_flight(observation, state, now, note)
        if not isinstance(outcome, tuple):
            return outcome
        state, note = outcome
    while True:
        protocol, template_hash = state.bounce_protocol, state.template_hash
        assert protocol is not None and template_hash is not None
        live = observation.live_pods
        remaining = [pod for pod in live if not pod.created_with(protocol, template_hash)]
        remaining.sort(key=_bounce_order(observation))
        state = _replace(state, pending_slots=tuple(pod.slot for pod in remaining))
        if remaining:
            return _bounce_next(observation, state, remaining, now, note)
        if state.bounce_index + 1 == len(state.bounces):
            return _finish(observation, state, now, note)
        next_protocol = state.bounces[state.bounce_index + 1]
        blocker = fleet_ready(observation, next_protocol)
        if blocker is not None:
            waiting = (
                f"{state.bounce_label} has reached every member; bounce "
                f"{state.bounce_index + 2} ({next_protocol.value}) waits: {blocker}"
            )
            since = state.waiting_since
            return _hold(observation, state, now, since, blocker, _join(note, waiting))
        note = _join(note, f"{state.bounce_label} verified on every member")
        state = _replace(
            state, bounce_index=state.bounce_index + 1, bounced_slots=(), waiting_since=now
        )


def _follow_member_in_flight(
    observation: Observation, state: RolloutStatus, now: datetime, note: str
) -> tuple[RolloutStatus, str] | Decision:
    """Wait for the member bounced last; once it is back, the state without it and a note."""
    slot, protocol = state.current_slot, state.bounce_protocol
    assert slot is not None and protocol is not None and state.template_hash is not None
    pod = observation.live_pod(slot)
    if pod is not None and not pod.created_with(protocol, state.template_hash):
        if state.current_pod_uid and pod.pod_uid and pod.pod_uid != state.current_pod_uid:
            # Replaced outside the rollout (deleted and recreated from a newer spec, say):
            # the bounce is over, and the slot is judged by its pod like any other.
            why = f"{pod.label} was replaced outside the rollout as {_settings(pod)}"
            return _without_member_in_flight(state), _join(note, why)
        # The state was persisted but the pod never replaced (the operator stopped in
        # between): that bounce did not happen, so choose again under the usual rules.
        cleared = _replace(
            _without_member_in_flight(state),
            bounced_slots=tuple(s for s in state.bounced_slots if s != slot),
        )
        return cleared, _join(note, f"the recorded bounce of {pod.label} never reached it")
    blocker = member_back(observation, state)
    if blocker is not None:
        known = observation.pod_in_slot(slot)
        instance_id = known.instance_id if known is not None else f"slot {slot}"
        waiting = f"{state.bounce_label}: waiting for {instance_id} to come back: {blocker}"
        since = state.current_slot_bounced_at
        return _hold(observation, state, now, since, blocker, _join(note, waiting), slot)
    assert pod is not None  # member_back found it
    back = _replace(_without_member_in_flight(state), waiting_since=now)
    return back, _join(note, f"{pod.instance_id} is back")


def _without_member_in_flight(state: RolloutStatus) -> RolloutStatus:
    return _replace(
        state,
        current_slot=None,
        current_pod=None,
        current_member_id=None,
        current_pod_uid=None,
        current_slot_bounced_at=None,
    )


def _bounce_next(
    observation: Observation,
    state: RolloutStatus,
    remaining: list[MemberPod],
    now: datetime,
    note: str,
) -> Decision:
    protocol = state.bounce_protocol
    assert protocol is not None
    blocker = fleet_ready(observation, protocol)
    if blocker is not None:
        stuck = stuck_member(observation, protocol, remaining)
        if stuck is None:
            waiting = f"{state.bounce_label}: next member waits: {blocker}"
            since = state.waiting_since
            return _hold(observation, state, now, since, blocker, _join(note, waiting))
        why = f"out of order: it is down ({blocker}) and everyone else is healthy"
        return _bounce(observation, state, stuck, now, why, note)
    target = remaining[0]  # sorted by _bounce_order
    leader = observation.coordinator.leader_instance_id if observation.coordinator else None
    left = len(remaining) - 1
    if target.instance_id == leader:
        why = "the group leader, bounced last"
    else:
        why = f"{left} member{'' if left == 1 else 's'} after it"
    return _bounce(observation, state, target, now, why, note)


def _bounce_order(observation: Observation) -> Callable[[MemberPod], tuple[bool, int]]:
    """Slot order, the leader last: bouncing the leader moves the group's assignment work
    (and forces a new leader election), so it happens once, when everyone else is done."""
    leader = observation.coordinator.leader_instance_id if observation.coordinator else None
    return lambda pod: (pod.instance_id == leader, pod.slot)


def _bounce(
    observation: Observation,
    state: RolloutStatus,
    pod: MemberPod,
    now: datetime,
    why: str,
    note: str,
) -> Bounce:
    protocol, template_hash = state.bounce_protocol, state.template_hash
    assert protocol is not None and template_hash is not None
    member = observation.coordinator.member(pod.instance_id) if observation.coordinator else None
    again = pod.slot in state.bounced_slots
    if again:
        # Only reachable when something outside the rollout put old settings back.
        why = _join(
            why,
            f"it was bounced earlier in this bounce, but its pod now carries {_settings(pod)}",
        )
    reason = (
        f"{state.bounce_label}: bouncing {pod.label} from {pod.protocol.value} to "
        f"{protocol.value}, {why}" + (f" ({note})" if note else "")
    )
    bounced = state.bounced_slots if again else (*state.bounced_slots, pod.slot)
    new_state = _replace(
        state,
        bounced_slots=bounced,
        current_slot=pod.slot,
        current_pod=pod.pod_name,
        current_member_id=member.member_id if member is not None else None,
        current_pod_uid=pod.pod_uid or None,
        current_slot_bounced_at=now,
        waiting_since=now,
        message=reason,
        blocker=None,
    ).rolling()
    return Bounce(
        slot=pod.slot,
        instance_id=pod.instance_id,
        pod_name=pod.pod_name,
        pod_uid=pod.pod_uid,
        protocol=protocol,
        template_hash=template_hash,
        reason=reason,
        state=new_state,
    )


def _finish(observation: Observation, state: RolloutStatus, now: datetime, note: str) -> Decision:
    protocol = state.bounce_protocol
    assert protocol is not None
    blocker = fleet_ready(observation, protocol)
    if blocker is not None:
        waiting = f"every member carries {protocol.value}; not done while {blocker}"
        since = state.waiting_since
        return _hold(observation, state, now, since, blocker, _join(note, waiting))
    started = state.from_protocol.value if state.from_protocol else "a mixed fleet"
    reason = _join(
        note,
        f"rollout complete: {started} -> {protocol.value} with template {state.template_hash} "
        f"in {len(state.bounces)} bounce(s), group Stable with "
        f"{observation.desired_members} members",
    )
    record = _replace(
        _without_member_in_flight(state),
        phase=RolloutPhase.COMPLETED,
        pending_slots=(),
        waiting_since=None,
        completed_at=now,
        message=reason,
        blocker=None,
    )
    return Done(reason, record)


def _plan_drift(observation: Observation, state: RolloutStatus) -> str | None:
    """Why the persisted plan no longer fits the spec or the pods; None while it does."""
    desired, template_hash = observation.desired_protocol, observation.desired_template_hash
    if not _ends_at(state, desired) or state.template_hash != template_hash:
        return f"the spec now asks for {desired.value} with template {template_hash}"
    live = observation.live_pods
    needed = rollout_bounces(((p.protocol, p.template_hash) for p in live), desired, template_hash)
    planned = state.bounces[state.bounce_index :]
    if needed and planned[len(planned) - len(needed) :] != needed:
        return (
            f"the pods now need {' then '.join(p.value for p in needed)}, "
            f"which the plan ({state.bounce_label}) does not cover"
        )
    return None


def _in_flight(observation: Observation, state: RolloutStatus) -> Blocker | None:
    """The member in flight, if it has not come back yet."""
    slot, protocol, template_hash = state.current_slot, state.bounce_protocol, state.template_hash
    if slot is None or protocol is None or template_hash is None:
        return None
    pod = observation.live_pod(slot)
    if pod is not None and not pod.created_with(protocol, template_hash):
        return None  # the recorded bounce never reached the pod: nothing is in flight
    blocker = member_back(observation, state)
    return None if blocker is None else Blocker(blocker.code, f"slot {slot} ({blocker})")


def _unverifiable(observation: Observation, state: RolloutStatus) -> Blocker | None:
    protocols = {pod.protocol for pod in observation.live_pods} | set(state.bounces)
    # A consumer-protocol member is told apart by the group, not by its assignor.
    protocols.discard(RebalanceProtocolSetting.CONSUMER)
    if len(protocols) < 2 or observation.assignors.distinguishable:
        return None
    return Blocker(
        BlockerCode.ASSIGNORS_INDISTINGUISHABLE,
        f"the eager and cooperative assignors are both {observation.assignors.eager!r}, so the "
        "coordinator cannot show which protocol a member runs; name two different assignors "
        "in spec.rebalance to change protocols",
    )


def _hold(
    observation: Observation,
    state: RolloutStatus,
    now: datetime,
    since: datetime | None,
    blocker: Blocker,
    reason: str,
    slot: int | None = None,
) -> Wait | Pause:
    if _timed_out(observation, since, now):
        return _pause(state, blocker, reason, slot, observation.member_ready_timeout_seconds)
    return _wait(state, reason, blocker)


def _wait(state: RolloutStatus, reason: str, blocker: Blocker | None) -> Wait:
    code = blocker.code if blocker is not None else None
    return Wait(reason, _replace(state, message=reason, blocker=code).rolling(), blocker)


def _pause(
    state: RolloutStatus,
    blocker: Blocker,
    reason: str,
    slot: int | None = None,
    timeout: float | None = None,
) -> Pause:
    over = f" for over memberReadyTimeoutSeconds ({timeout:g}s)" if timeout is not None else ""
    message = f"rollout paused{over}: {reason}. Nothing is skipped; it resumes once this clears"
    paused = _replace(state, phase=RolloutPhase.PAUSED, message=message, blocker=blocker.code)
    return Pause(message, paused, blocker, slot)


def _replace(state: RolloutStatus, **changes: object) -> RolloutStatus:
    return state.model_copy(update=changes)


def _ends_at(state: RolloutStatus, desired: RebalanceProtocolSetting) -> bool:
    """Whether the rollout recorded in `state` ends at `desired` (the spec's wish, which a
    member's setting names with the same value)."""
    return state.to_protocol is not None and state.to_protocol.value == desired.value


def _timed_out(observation: Observation, since: datetime | None, now: datetime) -> bool:
    if since is None:
        return False
    return (now - since).total_seconds() > observation.member_ready_timeout_seconds


def _settings(pod: MemberPod) -> str:
    return f"{pod.protocol.value}/{pod.template_hash}"


def _join(*parts: str) -> str:
    return "; ".join(part for part in parts if part)
