"""Plan: one pass over a ConsumerGroup, decided from what was observed. Pure.

`plan_pass(observation, memory)` composes the rules the operator has, each a pure function
of its own module, and returns a `PassResult`: the status to write (first: write-ahead), the
Events, the actions and what to remember. It reads no clock, draws no random number and
does no I/O; the actuator (actuator.py) carries the result out.

The order of a pass:
 1. an invalid spec: status and one Event, nothing else;
 2. the member token (embedded coordinator) or the members' Kafka client configuration;
 3. the Kafka cluster unreachable or refusing: status and one Event, nothing else;
 4. topic metadata: raised on the embedded coordinator; topics a Kafka cluster lacks, reported;
 5. adopted mode: the slot table kept true to the pods (adopted.py);
 6. managed mode: the count to scale to (scaling.py: a scale-down waits out its
    stabilization window and any rebalance in flight), standby promotions (hot_standby.py)
    if any, else the standbys kept, stale expected members cleared, and the fleet's one
    step (rollout/fleet.py):
    scale down, batch LeaveGroup, Switch, create missing members, refuse, or a rollout step;
    the members' PodDisruptionBudget first (created or patched when it was read and is not
    as wanted); the status carries the scale subresource's replicas and selector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from coordinator import ErrorCode, GroupState
from coordinator.server.auth import is_well_formed
from staticfleet_operator.actions import (
    Action,
    ClearExpectedMembers,
    CreatePod,
    CreatePodDisruptionBudget,
    CreateSecret,
    CreateTokenSecret,
    DeletePod,
    Event,
    ExpectMembers,
    Gauges,
    LeaveGroup,
    PassResult,
    PatchPodDisruptionBudget,
    PatchSecret,
    PromoteStandbys,
    RaiseTopicPartitions,
    RegisterToken,
    SettleSlots,
    UnregisterTokens,
)
from staticfleet_operator.backends import topics_to_raise, widen_offers
from staticfleet_operator.crd import (
    ConsumerGroupSpec,
    ConsumerGroupStatus,
    Mode,
    RolloutStatus,
    ScaleDownHeldStatus,
)
from staticfleet_operator.expected_members import (
    expected_on_create,
    seconds_until_expiry,
    should_clear,
)
from staticfleet_operator.group_memory import GroupMemory, MemoryUpdate
from staticfleet_operator.group_observation import (
    UNREACHABLE,
    GroupObservation,
    secrets_read,
)
from staticfleet_operator.hot_standby import keep_standbys, plan_promotions, standbys_enabled
from staticfleet_operator.kafka_clients import (
    client_config_files,
    client_config_secret,
    client_config_secret_name,
)
from staticfleet_operator.kafka_standby import (
    kafka_slots,
    kafka_standbys_enabled,
    keep_kafka_standbys,
    plan_kafka_takeovers,
)
from staticfleet_operator.lag import group_lag, seconds_until_lag_due
from staticfleet_operator.members import (
    MemberSettings,
    budget_key,
    format_selector,
    managed_pod,
    member_selector,
    members_budget_spec,
    members_of,
    template_hash,
)
from staticfleet_operator.owned import (
    members_disruption_budget,
    members_disruption_budget_name,
    secret_data,
)
from staticfleet_operator.rollout import Bounce, CoordinatorView, Done, MemberPod, Pause
from staticfleet_operator.rollout.fleet import (
    CreateMissing,
    FleetObservation,
    Leave,
    Refuse,
    Rollout,
    ScaleDown,
    Switch,
    assignors,
    desired_protocol,
    new_pod_protocol,
    plan,
)
from staticfleet_operator.rollout.migration import adopted_refusal, classic_metadata
from staticfleet_operator.scaling import ScaleTarget, hold_message, scale_target, seconds_until
from staticfleet_operator.status import invalid_spec_status, observed_status, status_differs
from staticfleet_operator.tokens import secret_value

TOKEN_UNAVAILABLE = "MemberTokenUnavailable"
TOPICS_NOT_FOUND = "TopicsNotFound"
PROTOCOL_CHANGE_REFUSED = "ProtocolChangeRefused"
GROUP_PROTOCOL_CHANGED = "GroupProtocolChanged"
GROUP_CONVERGED = "GroupConverged"
SCALE_DOWN_HELD = "ScaleDownHeld"

# Describe of a group nobody has joined yet answers GROUP_ID_NOT_FOUND: that is an observed
# empty group (the view reads Dead with no members), not a failed describe.
_DESCRIBABLE = frozenset({ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND})


@dataclass
class _Pass:
    """What the rules have added so far (a builder local to one `plan_pass` call)."""

    observation: GroupObservation
    memory: GroupMemory
    events: list[Event] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    reported: dict[str, str | None] = field(default_factory=dict)
    token_group_id: str | None = None
    budget_found: str | None = None
    scale: ScaleTarget | None = None

    def report_once(self, reason: str, message: str, *, warning: bool = True) -> None:
        """An Event (a Warning: a problem), once until its message changes or it clears (one
        slot per reason, so two standing problems do not take turns)."""
        if self.memory.reported.get(reason) != message and self.reported.get(reason) != message:
            self.events.append(Event(reason, message, warning=warning))
        self.reported[reason] = message

    def cleared(self, reason: str) -> None:
        if reason in self.memory.reported:
            self.reported[reason] = None

    def result(
        self,
        summary: str,
        status: ConsumerGroupStatus | None,
        gauges: Gauges | None = None,
        *,
        wake_in: float | None = None,
        write_ahead: bool = False,
    ) -> PassResult:
        spec = self.observation.spec
        ref = self.observation.ref
        return PassResult(
            summary=summary,
            status=status,
            events=tuple(self.events),
            actions=tuple(self.actions),
            gauges=gauges,
            wake_in=wake_in,
            write_ahead=write_ahead,
            poll=spec is not None and spec.coordinator.is_kafka,
            remember=MemoryUpdate(
                group_id=spec.group_id if spec is not None else None,
                token_group_id=self.token_group_id,
                reported=self.reported,
                secrets=secrets_read(spec, ref.name) if spec is not None else frozenset(),
                disruption_budget=self.budget_found,
                lag_read=self.observation.now
                if self.observation.lag is not None or self.observation.lag_tried
                else None,
                scale=self.scale,
            ),
        )


def plan_pass(observation: GroupObservation, memory: GroupMemory) -> PassResult:
    """The pass over one group (the order is in the module docstring)."""
    step = _Pass(observation, memory, token_group_id=memory.token_group_id)
    previous = observation.status
    if observation.problems:
        status = invalid_spec_status(
            previous, observation.generation, observation.problems, observation.now
        )
        if status_differs(observation.body, status):
            step.events.append(Event("InvalidSpec", "; ".join(observation.problems), True))
        return replace(step.result("invalid spec", status), invalid=True)
    spec = observation.spec
    assert spec is not None  # a valid spec is parsed
    _member_token(step, spec)
    if observation.unreachable is not None:
        return _unreachable(step, spec)
    for reason in list(memory.reported):
        # The coordinator answered: a later outage or refusal is reported again (the
        # access reasons are all Kafka*: KafkaAuthenticationFailed, ...).
        if reason == UNREACHABLE or reason.startswith("Kafka"):
            step.cleared(reason)
    _client_config(step, spec)
    _topics(step, spec)
    if spec.mode is Mode.ADOPTED:
        return _adopted(step, spec)
    return _managed(step, spec)


def plan_member_token(observation: GroupObservation, memory: GroupMemory) -> PassResult:
    """Only the member token's part of a pass (the admission webhook's: an admitted pod's
    env references the token Secret, which must exist)."""
    step = _Pass(observation, memory, token_group_id=memory.token_group_id)
    if observation.spec is not None:
        _member_token(step, observation.spec)
    return step.result("member token", None)


# --- the group's credentials ---------------------------------------------------------------


def _member_token(step: _Pass, spec: ConsumerGroupSpec) -> None:
    """The embedded server knows the group's member token (from its Secret; the operator
    makes the Secret when the spec names none). A missing or unusable Secret unregisters
    the group's token (a deleted user Secret revokes it) and is reported once."""
    token = step.observation.token
    if token is None:
        return
    registered = step.memory.token_group_id
    if registered is not None and registered != spec.group_id:
        step.actions.append(UnregisterTokens((registered,)))  # the groupId changed
    where = f"Secret {step.observation.ref.namespace}/{token.name}"
    if token.body is None and not token.needed:
        # Pod identity: no group token to make; one registered before (its Secret since
        # deleted to finish the switch) goes.
        if registered == spec.group_id:  # a changed groupId's is unregistered above
            step.actions.append(UnregisterTokens((registered,)))
        step.token_group_id = None
        step.cleared(TOKEN_UNAVAILABLE)
        return
    if token.body is None and not token.user_managed:
        step.actions.append(CreateTokenSecret(spec.group_id))
        step.token_group_id = spec.group_id
        step.cleared(TOKEN_UNAVAILABLE)
        return
    value = secret_value(token.body, token.key) if token.body is not None else None
    if value is not None and is_well_formed(value):
        step.actions.append(RegisterToken(spec.group_id, value))
        step.token_group_id = spec.group_id
        step.cleared(TOKEN_UNAVAILABLE)
        return
    if token.body is None:
        problem = f"{where} not found"
    elif value is None:
        problem = f"{where} has no usable key {token.key!r}"
    else:
        problem = f"{where}: the token in key {token.key!r} is malformed"
    step.actions.append(UnregisterTokens(tuple(sorted({spec.group_id, registered or ""} - {""}))))
    step.token_group_id = None
    step.report_once(TOKEN_UNAVAILABLE, f"member token unavailable: {problem}")


def _client_config(step: _Pass, spec: ConsumerGroupSpec) -> None:
    """The members' Kafka client configuration Secret (kafka_clients.py): the settings the
    operator connects with, in the members' dialect, written when its content differs.
    Pods are not restarted for a change (docs/operator.md, "Secured clusters": rotation)."""
    settings = step.observation.kafka_settings
    if settings is None:
        return
    ref = step.observation.ref
    files = client_config_files(spec.coordinator.client_family, settings)
    data = secret_data(files)
    current = step.observation.client_config
    if current is None:
        manifest = client_config_secret(ref.namespace, ref.name, step.observation.uid, files)
        step.actions.append(CreateSecret(manifest))
        return
    have = current.get("data") or {}
    if have != data:
        # A merge patch: keys the new content lacks (a certificate no longer used) go.
        patch = {"data": {**{key: None for key in have if key not in data}, **data}}
        step.actions.append(PatchSecret(client_config_secret_name(ref.name), patch))


def _topics(step: _Pass, spec: ConsumerGroupSpec) -> None:
    """Partition counts: the spec's go to the embedded coordinator (raised, never lowered);
    a topic the Kafka cluster lacks is reported (members wait for it)."""
    known = step.observation.topic_partitions
    wanted = {topic.name: topic.partitions for topic in spec.topics}
    if not spec.coordinator.is_kafka:
        counts = {topic: count for topic, count in wanted.items() if count is not None}
        raised = topics_to_raise(known, counts)
        if raised:
            # Each change rebalances the groups consuming the topic (docs/coordinator.md).
            step.actions.append(RaiseTopicPartitions(raised))
        return
    absent = sorted(set(wanted) - set(known))
    if absent:
        step.report_once(TOPICS_NOT_FOUND, f"topics not on the Kafka cluster: {', '.join(absent)}")


def _unreachable(step: _Pass, spec: ConsumerGroupSpec) -> PassResult:
    """The group's Kafka cluster did not answer, or refused the operator: say so in status
    and an Event (once per problem), and do nothing else: no pod is created, deleted or
    bounced on a guess. The next pass comes at the usual poll interval."""
    observation = step.observation
    problem = observation.unreachable
    assert problem is not None
    pods = members_of(observation.pods)
    status = observed_status(
        observation.status,
        generation=observation.generation,
        view=None,
        selected_protocol=None,
        pods=pods,
        desired_members=spec.replicas if spec.replicas is not None else len(pods),
        rollout=observation.status.rollout,
        now=observation.now,
        degraded_reason=problem.reason,
        degraded_message=problem.message,
    )
    step.report_once(problem.reason, problem.message)
    unreachable = problem.reason == UNREACHABLE
    summary = "coordinator unreachable" if unreachable else f"refused: {problem.reason}"
    return replace(step.result(summary, status), unreachable=problem.reason)


# --- adopted mode ----------------------------------------------------------------------------


def _adopted(step: _Pass, spec: ConsumerGroupSpec) -> PassResult:
    """Adopted pods are made by someone else; the webhook stamps their identity. Here the
    slot table is kept true to the pods (the actuator settles it under its lock: the webhook
    shares it), then status."""
    observation = step.observation
    # A finished pod (Succeeded/Failed: a Spark executor whose driver went away) never runs
    # again, so it is no member pod: its slot goes vacant as a deleted pod's does, for a
    # replacement to take or to retire after the grace period.
    members = [member for member in members_of(observation.pods) if not member.finished]
    view = group_view(observation, spec, members)
    step.actions.append(SettleSlots(observation.pods, view))
    live = [m for m in members if not m.deleting]
    rollout = observation.status.rollout
    refused = adopted_refusal(spec, (m.protocol for m in live))
    if refused is None:
        step.cleared(PROTOCOL_CHANGE_REFUSED)
    else:
        step.report_once(PROTOCOL_CHANGE_REFUSED, refused)
    status = observed_status(
        observation.status,
        generation=observation.generation,
        view=view,
        selected_protocol=_selected(observation),
        pods=members,
        desired_members=len(live),
        rollout=rollout,
        now=observation.now,
        degraded_reason=None if refused is None else PROTOCOL_CHANGE_REFUSED,
        degraded_message=refused or "",
    )
    _protocol_events(step, observation.status, status)
    # The scale subresource's count, from the pods as for a managed group; no selector:
    # an adopted group cannot be scaled (RULE_ONE_MODE), so nothing reads one.
    status.replicas = len(live)
    status.selector = None
    # `slots` is filled in by the actuator: the settled table knows it.
    gauges = Gauges(
        desired=len(live),
        ready=sum(1 for m in live if m.ready),
        slots=0,
        phase=rollout.phase,
        blocker=rollout.blocker,
        converged=status.converged,
        group_epoch=status.group_epoch,
    )
    gauges = _lag(observation, status, gauges)
    return step.result("adopted", status, gauges)


# --- managed mode ----------------------------------------------------------------------------


def _managed(step: _Pass, spec: ConsumerGroupSpec) -> PassResult:
    observation = step.observation
    ref = observation.ref
    members = members_of(observation.pods)
    view = group_view(observation, spec, members)
    describable = (
        observation.described is not None and observation.described.error_code in _DESCRIBABLE
    )
    target = _scale_target(step, spec, members, view, describable)
    replicas = target.replicas
    state = observation.status.rollout
    settings = MemberSettings(
        coordinator_url=observation.coordinator_url,
        group_name=ref.name,
        token_audience=observation.member_token_audience,
        member_health_port=observation.member_health_port,
    )
    promotions = plan_promotions(
        spec,
        observation.status,
        observation.pods,
        {i for i in view.instance_ids if i},
        observation.ready_standbys,
        rollout_active=state.active,
        now=observation.now,
    )
    if promotions is not None:
        step.actions.append(PromoteStandbys(tuple(promotions.promotions)))
        gauges = _gauges(observation, spec, members, state, missing_expected=0)
        return step.result("promotions", promotions, gauges, write_ahead=True)
    protocol = new_pod_protocol(spec, state, members)
    kafka_standbys = kafka_standbys_enabled(spec, protocol)
    if kafka_standbys and describable:
        takeovers = plan_kafka_takeovers(
            kafka_slots(
                spec,
                ref.name,
                observation.pods,
                observation.described,
                replicas,
                observation.consumer_group,
            ),
            observation.status,
            rollout_active=state.active,
            now=observation.now,
        )
        if takeovers is not None:
            status, leaves = takeovers
            step.actions.append(leaves)
            gauges = _gauges(observation, spec, members, state, missing_expected=0)
            return step.result("promotions", status, gauges, write_ahead=True)
    # The budget before the pods it covers (and before a bounce: it counts the bounced one).
    _disruption_budget(step, spec)
    step.actions.extend(
        keep_standbys(
            spec,
            settings,
            observation.pods,
            protocol,
            namespace=ref.namespace,
            owner_uid=observation.uid,
            pass_id=observation.pass_id,
        )
    )
    if spec.coordinator.is_kafka:
        step.actions.extend(
            keep_kafka_standbys(
                spec,
                settings,
                observation.pods,
                replicas,
                enabled=kafka_standbys,
                rollout_active=state.active,
                namespace=ref.namespace,
                owner_uid=observation.uid,
                pass_id=observation.pass_id,
            )
        )
    # Against the count the window allows: a scale-down held only for the rebalance in flight
    # still clears expected members above it (ending a join phase held for them).
    expected = _expected_after_clearing(step, spec, view, target.stabilized)
    fleet_step = plan(
        FleetObservation(
            spec=spec,
            template_hash=template_hash(spec, settings.token_audience),
            pods=tuple(members),
            view=view,
            describable=describable,
            rollout=state,
            now=observation.now,
            broker=observation.broker,
            # Read only when the broker's facts were (a migration ahead, the spec's checks
            # passed), and of a classic group: a consumer group carries no such metadata.
            classic_metadata=(
                classic_metadata(observation.described)
                if observation.broker is not None and observation.consumer_group is None
                else None
            ),
            replicas=replicas,
        )
    )
    if not isinstance(fleet_step, Refuse):
        step.cleared(PROTOCOL_CHANGE_REFUSED)
    refused: str | None = None
    match fleet_step:
        case Rollout(decision):
            state = decision.state
            summary = type(decision).__name__.lower()
            if isinstance(decision, Bounce):
                step.events.append(Event(decision.event_reason, decision.reason))
                step.actions.append(DeletePod(decision.pod_name, bounce=decision.state.phase))
                summary = f"bounce slot {decision.slot} to {decision.protocol.value}"
            elif isinstance(decision, Pause | Done) and decision.state != RolloutStatus():
                was = observation.status.rollout
                if was.phase is not decision.state.phase or was.message != decision.state.message:
                    step.events.append(
                        Event(decision.event_reason, decision.reason, isinstance(decision, Pause))
                    )
        case ScaleDown(excess):
            step.actions.extend(DeletePod(pod.pod_name) for pod in excess if not pod.deleting)
            summary = f"scale-down: deleted {', '.join(p.pod_name for p in excess)}"
        case Leave(instance_ids, why):
            step.actions.append(LeaveGroup(tuple(instance_ids), why))
            joined = ", ".join(instance_ids)
            summary = f"left: {joined}" if why == "scale-down" else f"switch: left {joined}"
        case Switch(running, terminating):
            summary = _switch(step, spec, running, terminating)
        case CreateMissing(missing, protocol):
            expected = _expect_members(step, spec, view, replicas, missing, expected)
            for slot in missing:
                manifest = managed_pod(
                    spec,
                    settings,
                    namespace=ref.namespace,
                    owner_uid=observation.uid,
                    slot=slot,
                    protocol=protocol,
                    pod_key=f"{observation.pass_id}-{slot}",
                )
                step.actions.append(CreatePod(manifest))
            summary = f"created slots {list(missing)} with {protocol.value}"
        case Refuse(refusal):
            step.report_once(PROTOCOL_CHANGE_REFUSED, refusal)
            refused = refusal
            summary = "refused: " + refusal
    status = observed_status(
        observation.status,
        generation=observation.generation,
        view=view,
        selected_protocol=_selected(observation),
        pods=members,
        desired_members=replicas,
        rollout=state,
        now=observation.now,
        degraded_reason=None if refused is None else PROTOCOL_CHANGE_REFUSED,
        degraded_message=refused or "",
    )
    _protocol_events(step, observation.status, status)
    _scale_status(status, ref.name, members)
    missing_expected = _missing_expected(spec, expected, view)
    status.missing_expected_members = missing_expected
    status.standbys_ready = _standbys_ready(observation, spec)
    status.scale_down_held = _held_status(target)
    # Pending expected members want one pass, at their deadline (to clear them), and a
    # scale-down held by its window one at the window's end: timers, not a pass every interval.
    wakes = [seconds_until(target.hold, observation.now)]
    if expected is not None:
        wakes.append(seconds_until_expiry(expected.deadline_ms, observation.coordinator_now_ms))
    if spec.source is not None:
        # Nothing tells an embedded group's operator that its source's logs grew (a Kafka
        # group is polled instead): a timer for the next lag read, so a burst reaches status
        # and the lag route KEDA polls within the interval, not at the resync (60 s).
        read_now = observation.lag is not None or observation.lag_tried
        last_read = (
            observation.now
            if read_now
            else step.memory.lag_read or observation.status.lag_time  # the observer's
        )
        wakes.append(seconds_until_lag_due(last_read, observation.now))
    wake_in = min((w for w in wakes if w is not None), default=None)
    gauges = replace(
        _gauges(observation, spec, members, state, missing_expected=len(missing_expected)),
        converged=status.converged,
        group_epoch=status.group_epoch,
    )
    gauges = _lag(observation, status, gauges)
    # A rollout step's state is recorded before it is carried out.
    rolling = isinstance(fleet_step, Rollout)
    return step.result(summary, status, gauges, wake_in=wake_in, write_ahead=rolling)


def _scale_target(
    step: _Pass,
    spec: ConsumerGroupSpec,
    members: Sequence[MemberPod],
    view: CoordinatorView,
    describable: bool,
) -> ScaleTarget:
    """The count this pass scales to (scaling.py); a held scale-down's Event, once per
    episode (until the count asked for has been steady for a window)."""
    observation, memory = step.observation, step.memory
    live = [m.slot for m in members if not m.deleting and not m.finished]
    # No rebalance in progress: a group with no members (Empty, or never joined) has none.
    settled = describable and (view.settled or not view.members)
    target = scale_target(
        spec.replicas or 0,
        previous=memory.scale_target,
        fleet=max(live) + 1 if live else 0,
        settled=settled,
        recommendations=memory.recommendations,
        now=observation.now,
        window_seconds=spec.scale_down.stabilization_window_seconds,
        held_since=memory.held_since,
        # As long as a bounced member is given to rejoin and the group to become Stable.
        max_hold_seconds=spec.rollout.member_ready_timeout_seconds,
    )
    step.scale = target
    if target.hold is not None:
        step.report_once(SCALE_DOWN_HELD, hold_message(target.hold), warning=False)
    elif target.steady:
        step.cleared(SCALE_DOWN_HELD)
    return target


def _held_status(target: ScaleTarget) -> ScaleDownHeldStatus | None:
    hold = target.hold
    if hold is None:
        return None
    until = hold.until.replace(microsecond=0) if hold.until is not None else None
    return ScaleDownHeldStatus(
        replicas=hold.replicas, holding=hold.holding, reason=hold.reason.value, until=until
    )


def _protocol_events(
    step: _Pass, previous: ConsumerGroupStatus, status: ConsumerGroupStatus
) -> None:
    """Events for what the Kafka cluster changed: the group's protocol (a member joined with
    the other one: KIP-848's conversion), and a consumer group converging after a change."""
    if previous.group_protocol is not None and status.group_protocol not in (
        None,
        previous.group_protocol,
    ):
        step.events.append(
            Event(
                GROUP_PROTOCOL_CHANGED,
                f"the group runs the {status.group_protocol} protocol now "
                f"(it ran {previous.group_protocol})",
            )
        )
    if previous.converged is False and status.converged is True:
        step.events.append(
            Event(
                GROUP_CONVERGED,
                f"{status.members} members at group epoch {status.group_epoch} hold their "
                "target assignment",
            )
        )


def _scale_status(
    status: ConsumerGroupStatus, group_name: str, members: Sequence[MemberPod]
) -> None:
    """What the scale subresource reports: live member pods (as a Deployment's
    status.replicas: not terminating, not finished; standbys are no member pods) and the
    serialized selector they match (an HPA's)."""
    status.replicas = sum(1 for m in members if not m.deleting and not m.finished)
    status.selector = format_selector(member_selector(group_name))


def _disruption_budget(step: _Pass, spec: ConsumerGroupSpec) -> None:
    """The member pods' PodDisruptionBudget: created when absent, patched when its
    maxUnavailable or selector differ from the spec's (standbys hold nothing: not in it)."""
    observation = step.observation
    if observation.disruption_budget is None:
        return  # not read
    ref = observation.ref
    wanted = members_budget_spec(ref.name, spec.disruption.max_unavailable)
    current = observation.disruption_budget.body
    if current is None:
        manifest = members_disruption_budget(ref.namespace, ref.name, observation.uid, wanted)
        step.actions.append(CreatePodDisruptionBudget(manifest))
        return
    have = current.get("spec") or {}
    if any(have.get(key) != value for key, value in wanted.items()) or "minAvailable" in have:
        # A merge patch: minAvailable set by hand goes (a budget has one or the other).
        patch = {"spec": {**wanted, "minAvailable": None}}
        step.actions.append(
            PatchPodDisruptionBudget(members_disruption_budget_name(ref.name), patch)
        )
        return
    step.budget_found = budget_key(wanted)  # as wanted: not read again while it stays so


def _switch(
    step: _Pass, spec: ConsumerGroupSpec, running: Sequence[MemberPod], terminating: bool
) -> str:
    """One step of a Switch: stop every member on the old protocol; once all are gone, one
    batch LeaveGroup for every instance id the coordinator still lists (one rebalance, at
    once, not after the session timeout); the next passes create them all on the target."""
    if running:
        step.actions.extend(DeletePod(pod.pod_name) for pod in running)
        message = (
            f"switch to {desired_protocol(spec).value}: stopping {len(running)} member(s), "
            "then one batch LeaveGroup and a restart of all"
        )
        step.events.append(Event("ProtocolSwitch", message))
        return "switch: stopped " + ", ".join(p.pod_name for p in running)
    if terminating:
        return "switch: waiting for members to stop"
    return "switch: stopped"


@dataclass(frozen=True, slots=True)
class _Expected:
    """The coordinator's expected members as they stand after this pass's actions."""

    instance_ids: frozenset[str]
    deadline_ms: int


def _expected_after_clearing(
    step: _Pass, spec: ConsumerGroupSpec, view: CoordinatorView, replicas: int
) -> _Expected | None:
    """Clear expected members that no longer describe the fleet, are fulfilled or expired
    (expected_members.should_clear); what remains of them."""
    pending = step.observation.expected_members
    if spec.coordinator.is_kafka or pending is None:
        return None
    stable = view.group_state is GroupState.STABLE
    expired = seconds_until_expiry(pending.deadline_ms, step.observation.coordinator_now_ms) is None
    prefix = spec.instance_id_prefix
    if should_clear(pending.instance_ids, prefix, replicas, view.instance_ids, stable, expired):
        step.actions.append(ClearExpectedMembers())
        return None
    return _Expected(pending.instance_ids, pending.deadline_ms)


def _expect_members(
    step: _Pass,
    spec: ConsumerGroupSpec,
    view: CoordinatorView,
    replicas: int,
    creating: Sequence[int],
    current: _Expected | None,
) -> _Expected | None:
    """Before the pods exist: tell the embedded coordinator whom to expect, so the group
    rebalances once for all of them (Kafka's coordinator has no such API)."""
    if spec.coordinator.is_kafka or not spec.scale_up.expect_members:
        return current
    expected = expected_on_create(spec.instance_id_prefix, replicas, creating, view.instance_ids)
    if expected is None:
        return current
    timeout_s = spec.scale_up.expected_members_timeout_seconds
    step.actions.append(ExpectMembers(tuple(expected), timeout_s * 1000))
    message = (
        f"expecting {len(expected)} member(s) for up to {timeout_s}s: "
        "one rebalance for the scale-up"
    )
    step.events.append(Event("ExpectingMembers", message))
    deadline_ms = step.observation.coordinator_now_ms + timeout_s * 1000
    return _Expected(frozenset(expected), deadline_ms)


def _missing_expected(
    spec: ConsumerGroupSpec, expected: _Expected | None, view: CoordinatorView
) -> list[str]:
    """The expected members' instance ids the coordinator does not list yet (status)."""
    if spec.coordinator.is_kafka or expected is None:
        return []
    return sorted(expected.instance_ids - view.instance_ids)


def _lag(observation: GroupObservation, status: ConsumerGroupStatus, gauges: Gauges) -> Gauges:
    """Lag read this pass goes into status and the gauges; a pass that did not read it
    leaves status' last figure, which the total gauge keeps showing. lagTime is when the
    figure was read as it stands: an unchanged reading leaves status alone (a status write
    per Kafka group every 15 s for a new timestamp only, otherwise)."""
    if observation.lag is not None:
        lag = group_lag(observation.lag)
        changed = (status.lag, status.lag_partitions_without_commit) != (
            lag.total,
            lag.without_commit,
        )
        if changed or status.lag_time is None:
            status.lag = lag.total
            status.lag_partitions_without_commit = lag.without_commit
            status.lag_time = observation.now.replace(microsecond=0)
        return replace(gauges, lag=lag.total, lag_partitions=lag.partitions)
    return replace(gauges, lag=status.lag)


def _standbys_ready(observation: GroupObservation, spec: ConsumerGroupSpec) -> int | None:
    if not standbys_enabled(spec):
        return None
    return len(observation.ready_standbys)


def _gauges(
    observation: GroupObservation,
    spec: ConsumerGroupSpec,
    members: Sequence[MemberPod],
    state: RolloutStatus,
    *,
    missing_expected: int,
) -> Gauges:
    return Gauges(
        desired=spec.replicas or 0,
        ready=sum(1 for m in members if m.ready and not m.deleting),
        slots=len({m.slot for m in members}),
        phase=state.phase,
        blocker=state.blocker,
        missing_expected=missing_expected,
        standbys=_standbys_ready(observation, spec) or 0,
    )


# --- the coordinator's view ----------------------------------------------------------------


def group_view(
    observation: GroupObservation, spec: ConsumerGroupSpec, pods: Sequence[MemberPod]
) -> CoordinatorView:
    """The rules' view of a describe; for a Kafka group, each member's offers widened from
    its pod (Kafka's describe lists only the selected protocol)."""
    assert observation.described is not None  # observed, unless unreachable
    view = (
        CoordinatorView.from_consumer_group(observation.consumer_group)
        if observation.consumer_group is not None
        else CoordinatorView.from_described(observation.described)
    )
    if not spec.coordinator.is_kafka:
        return view
    return widen_offers(view, pods, assignors(spec))


def _selected(observation: GroupObservation) -> str | None:
    return observation.described.protocol_data if observation.described is not None else None


__all__ = ["group_view", "plan_member_token", "plan_pass"]
