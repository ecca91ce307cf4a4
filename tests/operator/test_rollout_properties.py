"""Property tests: the orchestrator against a simulated fleet that misbehaves.

The simulator plays the adapter and the coordinator. Applying a Bounce deletes that
member's pod and creates the replacement once the old one is gone; the new member rejoins
after a random delay (or never, when the scenario dooms it), then its pod turns ready (a
member's readiness probe reports ready once it has joined). The coordinator keeps a
static member listed while its pod is down, until its session times out; protocol changes
and expiries cause rebalances of random length, which may elect another leader. The
operator may restart after any step: its state goes through JSON, is lost outright, or
the operator dies between persisting a Bounce and carrying it out. Pods get deleted by
someone else and come back with what the webhook injects (`protocol_for_new_pod`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator import GroupState
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.rollout import (
    Assignors,
    Bounce,
    CoordinatorView,
    Decision,
    Done,
    GroupMemberView,
    MemberPod,
    Observation,
    Pause,
    RolloutStatus,
    decide,
    protocol_for_new_pod,
    rollout_bounces,
)

EAGER = RebalanceProtocolSetting.EAGER
COMPATIBLE = RebalanceProtocolSetting.COMPATIBLE
COOPERATIVE = RebalanceProtocolSetting.COOPERATIVE
ASSIGNORS = Assignors(eager="range", cooperative="cooperative-sticky")
TIMEOUT = 60.0
SESSION_TIMEOUT = timedelta(seconds=45)
T0 = datetime(2025, 1, 1, tzinfo=UTC)
MAX_STEPS = 3_000

DIRECTIONS = {
    "upgrade": (EAGER, COOPERATIVE, "t1"),
    "downgrade": (COOPERATIVE, EAGER, "t1"),
    "template": (COOPERATIVE, COOPERATIVE, "t2"),
    "eager-template": (EAGER, EAGER, "t2"),
}


@dataclass(frozen=True)
class Scenario:
    size: int
    direction: str
    seed: int
    external_deletions: int
    restart_chance: float
    lose_state_chance: float
    crash_chance: float
    # The ordinal of the applied bounce whose member never comes back (None: all do).
    doomed_bounce: int | None
    # How many times the spec's protocol/template may change while the rollout runs.
    spec_changes: int = 0

    @property
    def start(self) -> RebalanceProtocolSetting:
        return DIRECTIONS[self.direction][0]

    @property
    def desired(self) -> RebalanceProtocolSetting:
        return DIRECTIONS[self.direction][1]

    @property
    def template(self) -> str:
        return DIRECTIONS[self.direction][2]

    @property
    def planned_bounces(self) -> int:
        return len(rollout_bounces([(self.start, "t1")], self.desired, self.template))


@st.composite
def scenarios(draw: st.DrawFn, doomed: bool, spec_changes: bool = False) -> Scenario:
    size = draw(st.integers(1, 5))
    direction = draw(st.sampled_from(sorted(DIRECTIONS)))
    planned = len(rollout_bounces([(DIRECTIONS[direction][0], "t1")], *DIRECTIONS[direction][1:]))
    return Scenario(
        size=size,
        direction=direction,
        seed=draw(st.integers(0, 2**32 - 1)),
        external_deletions=draw(st.integers(0, 3)),
        restart_chance=draw(st.sampled_from([0.0, 0.1, 0.5])),
        lose_state_chance=draw(st.sampled_from([0.0, 0.05, 0.3])),
        crash_chance=draw(st.sampled_from([0.0, 0.2])),
        doomed_bounce=draw(st.integers(0, size * planned - 1)) if doomed else None,
        spec_changes=draw(st.integers(1, 4)) if spec_changes else 0,
    )


@dataclass
class SimPod:
    slot: int
    uid: str
    protocol: RebalanceProtocolSetting
    template: str
    rejoin_at: datetime | None  # None: never comes back
    ready_delay: timedelta
    by_bounce: bool
    deleting_until: datetime | None = None

    def ready(self, now: datetime) -> bool:
        return self.rejoin_at is not None and now >= self.rejoin_at + self.ready_delay


@dataclass
class Replacement:
    protocol: RebalanceProtocolSetting | None  # None: what the webhook injects at creation
    template: str
    by_bounce: bool
    doomed: bool


@dataclass
class FleetSim:
    rnd: random.Random
    scenario: Scenario
    desired: RebalanceProtocolSetting = EAGER
    template: str = "t1"
    now: datetime = T0
    pods: dict[int, SimPod] = field(default_factory=dict)
    replacements: dict[int, Replacement] = field(default_factory=dict)
    members: dict[int, GroupMemberView] = field(default_factory=dict)
    member_uid: dict[int, str] = field(default_factory=dict)  # pod incarnation per member
    down_since: dict[int, datetime] = field(default_factory=dict)
    rebalance_until: datetime | None = None
    leader_slot: int = 0
    uids: int = 0
    doomed_configs: set[tuple[int, RebalanceProtocolSetting, str]] = field(default_factory=set)
    # Read by the webhook stand-in: what the operator last persisted.
    operator_state: RolloutStatus = field(default_factory=RolloutStatus)

    def __post_init__(self) -> None:
        self.desired, self.template = self.scenario.desired, self.scenario.template
        for slot in range(self.scenario.size):
            pod = self._new_pod(slot, self.scenario.start, "t1", by_bounce=False, doomed=False)
            pod.rejoin_at = self.now
            pod.ready_delay = timedelta(0)
            self.pods[slot] = pod
            self._rejoin(pod)
        self.rebalance_until = None

    # --- what the operator sees ---------------------------------------------------------------

    def observe(self) -> Observation:
        pods = tuple(
            MemberPod(
                slot=pod.slot,
                instance_id=f"fleet-{pod.slot}",
                pod_name=f"fleet-{pod.slot}-{pod.uid}",
                protocol=pod.protocol,
                template_hash=pod.template,
                ready=pod.ready(self.now) and pod.deleting_until is None,
                deleting=pod.deleting_until is not None,
                pod_uid=pod.uid,
            )
            for pod in sorted(self.pods.values(), key=lambda p: p.slot)
        )
        view = CoordinatorView(
            group_state=self.group_state,
            generation_id=1,
            leader_instance_id=f"fleet-{self.leader_slot}" if self.members else None,
            members=tuple(self.members[slot] for slot in sorted(self.members)),
        )
        return Observation(
            desired_protocol=self.desired,
            desired_template_hash=self.template,
            assignors=ASSIGNORS,
            desired_members=self.scenario.size,
            member_ready_timeout_seconds=TIMEOUT,
            pods=pods,
            coordinator=view,
        )

    @property
    def group_state(self) -> GroupState:
        if self.rebalance_until is not None:
            return GroupState.PREPARING_REBALANCE
        return GroupState.STABLE if self.members else GroupState.EMPTY

    # --- what the adapter and the outside world do ------------------------------------------

    def bounce(self, decision: Bounce, doomed: bool) -> None:
        pod = self.pods.get(decision.slot)
        assert pod is not None and pod.uid == decision.pod_uid, "bounce names a pod that is gone"
        assert pod.deleting_until is None, "bounce of a pod already being deleted"
        self._delete(pod)
        self.replacements[decision.slot] = Replacement(
            decision.protocol, decision.template_hash, by_bounce=True, doomed=doomed
        )

    def delete_externally(self) -> bool:
        candidates = [pod for pod in self.pods.values() if pod.deleting_until is None]
        if not candidates:
            return False
        pod = self.rnd.choice(candidates)
        self._delete(pod)
        self.replacements[pod.slot] = Replacement(
            None, self.template, by_bounce=False, doomed=False
        )
        return True

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        for slot, pod in list(self.pods.items()):
            if pod.deleting_until is not None and self.now >= pod.deleting_until:
                self._create(slot, self.replacements.pop(slot))
        for pod in self.pods.values():
            rejoins = pod.rejoin_at is not None and self.now >= pod.rejoin_at
            if rejoins and pod.deleting_until is None and self.member_uid.get(pod.slot) != pod.uid:
                self._rejoin(pod)
        for slot, since in list(self.down_since.items()):
            if slot in self.members and self.now - since > SESSION_TIMEOUT:
                del self.members[slot]
                self._rebalance()
        if self.rebalance_until is not None and self.now >= self.rebalance_until:
            self.rebalance_until = None
            if self.members and (self.leader_slot not in self.members or self.rnd.random() < 0.3):
                self.leader_slot = self.rnd.choice(sorted(self.members))

    def not_back(self, slots: set[int]) -> set[int]:
        """The subset of `slots` whose bounced member is not back yet."""
        return {slot for slot in slots if not self._back(slot)}

    def _back(self, slot: int) -> bool:
        pod = self.pods.get(slot)
        return (
            pod is not None
            and slot not in self.replacements
            and pod.deleting_until is None
            and pod.ready(self.now)
            and self.member_uid.get(slot) == pod.uid
        )

    def _delete(self, pod: SimPod) -> None:
        pod.deleting_until = self.now + timedelta(seconds=self.rnd.uniform(0, 8))
        if self.member_uid.get(pod.slot) == pod.uid:
            self.down_since[pod.slot] = self.now

    def _create(self, slot: int, replacement: Replacement) -> None:
        protocol = replacement.protocol or protocol_for_new_pod(
            self.operator_state.bounce_protocol,
            [p.protocol for p in self.pods.values() if p.slot != slot],
            self.desired,
        )
        doomed = replacement.doomed or (slot, protocol, replacement.template) in self.doomed_configs
        if doomed:
            # A broken configuration stays broken, whoever recreates the pod.
            self.doomed_configs.add((slot, protocol, replacement.template))
        self.pods[slot] = self._new_pod(
            slot, protocol, replacement.template, replacement.by_bounce, doomed
        )

    def _new_pod(
        self,
        slot: int,
        protocol: RebalanceProtocolSetting,
        template: str,
        by_bounce: bool,
        doomed: bool,
    ) -> SimPod:
        self.uids += 1
        rejoin_at = None if doomed else self.now + timedelta(seconds=self.rnd.uniform(0, 90))
        return SimPod(
            slot=slot,
            uid=f"u{self.uids}",
            protocol=protocol,
            template=template,
            rejoin_at=rejoin_at,
            ready_delay=timedelta(seconds=self.rnd.uniform(0, 5)),
            by_bounce=by_bounce,
        )

    def _rejoin(self, pod: SimPod) -> None:
        self.uids += 1
        offered = ASSIGNORS.offered_by(pod.protocol)
        before = self.members.get(pod.slot)
        self.members[pod.slot] = GroupMemberView(f"fleet-{pod.slot}", f"m{self.uids}", offered)
        self.member_uid[pod.slot] = pod.uid
        self.down_since.pop(pod.slot, None)
        # A static rejoin with unchanged protocols changes nothing (KIP-345); a new member
        # or changed protocols may move the selected protocol, hence a rebalance.
        if before is None or (before.supported_protocols != offered and self.rnd.random() < 0.5):
            self._rebalance()

    def _rebalance(self) -> None:
        until = self.now + timedelta(seconds=self.rnd.uniform(1, 15))
        self.rebalance_until = max(until, self.rebalance_until or until)


@dataclass
class Trace:
    decisions: list[Decision] = field(default_factory=list)
    applied: list[Bounce] = field(default_factory=list)
    # (spec epoch, slot, protocol, template) -> bounces applied
    per_phase: dict[tuple[int, int, RebalanceProtocolSetting, str], int] = field(
        default_factory=dict
    )
    external_deletions: int = 0
    spec_changes: int = 0
    doomed_step: int | None = None  # index into decisions of the doomed bounce


def simulate(scenario: Scenario) -> tuple[FleetSim, Trace]:
    rnd = random.Random(scenario.seed)
    sim = FleetSim(rnd, scenario)
    trace = Trace()
    state = RolloutStatus()
    in_flight: set[int] = set()
    doom_time: datetime | None = None
    for _ in range(MAX_STEPS):
        observation = sim.observe()
        decision = decide(observation, state, sim.now)
        trace.decisions.append(decision)
        state = decision.state  # persisted before acting
        sim.operator_state = state
        if isinstance(decision, Done) and doom_time is None:
            break
        if isinstance(decision, Bounce):
            assert doom_time is None, f"a bounce after a member that never came back: {decision}"
        if isinstance(decision, Bounce) and rnd.random() >= scenario.crash_chance:
            check_bounce(observation, decision)
            in_flight = sim.not_back(in_flight)
            assert in_flight <= {decision.slot}, f"{in_flight} still in flight: {decision.reason}"
            key = (trace.spec_changes, decision.slot, decision.protocol, decision.template_hash)
            trace.per_phase[key] = trace.per_phase.get(key, 0) + 1
            assert trace.per_phase[key] == 1, f"slot bounced twice in one phase: {key}"
            doomed = len(trace.applied) == scenario.doomed_bounce
            sim.bounce(decision, doomed)
            trace.applied.append(decision)
            in_flight.add(decision.slot)
            if doomed:
                doom_time = sim.now
                trace.doomed_step = len(trace.decisions) - 1
        elif isinstance(decision, Bounce):
            state = restarted(state)  # died between persisting and acting
        if rnd.random() < scenario.restart_chance:
            state = restarted(state)
        # A lost state also loses when the wait began, so the timeout clock restarts: keep
        # it once a member is doomed, or the pause this test waits for might never come.
        if rnd.random() < scenario.lose_state_chance and doom_time is None:
            state = RolloutStatus()
        if trace.external_deletions < scenario.external_deletions and rnd.random() < 0.05:
            trace.external_deletions += sim.delete_externally()
        if trace.spec_changes < scenario.spec_changes and rnd.random() < 0.05:
            # Someone edits the ConsumerGroup mid-rollout (possibly back to what it was).
            sim.desired = rnd.choice([EAGER, COOPERATIVE])
            sim.template = rnd.choice(["t1", "t2", "t3"])
            trace.spec_changes += 1
        sim.advance(rnd.uniform(1, 20))
        if doom_time is not None and sim.now > doom_time + timedelta(seconds=TIMEOUT * 4):
            break
    return sim, trace


def restarted(state: RolloutStatus) -> RolloutStatus:
    return RolloutStatus.model_validate(json.loads(json.dumps(state.to_wire())))


def check_bounce(observation: Observation, decision: Bounce) -> None:
    """What must hold whenever a member is bounced, judged on what the operator saw."""
    view = observation.coordinator
    assert view is not None
    in_order = "out of order" not in decision.reason
    needed = ASSIGNORS.offered_by(decision.protocol)
    assert view.group_state is GroupState.STABLE, decision.reason
    assert all(m.supported_protocols & needed for m in view.members), decision.reason
    if decision.protocol is COOPERATIVE:
        # KIP-429: nobody runs cooperative before every member offers the cooperative
        # assignor and the group is Stable with all its members.
        assert all(m.supported_protocols >= {ASSIGNORS.cooperative} for m in view.members)
    if not in_order:
        return
    live = observation.live_pods
    assert len(view.members) == observation.desired_members == len(live)
    assert view.instance_ids == {pod.instance_id for pod in live}
    remaining = [
        pod for pod in live if not pod.created_with(decision.protocol, decision.template_hash)
    ]
    if decision.instance_id == view.leader_instance_id:
        assert len(remaining) == 1, f"leader bounced with {len(remaining)} left"


SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@SETTINGS
@given(scenarios(doomed=False))
def test_when_members_come_back_the_rollout_completes(scenario: Scenario) -> None:
    sim, trace = simulate(scenario)
    last = trace.decisions[-1]
    assert isinstance(last, Done), f"not done after {len(trace.decisions)} steps: {last.reason}"
    assert all(
        pod.protocol is scenario.desired and pod.template == scenario.template
        for pod in sim.pods.values()
    )
    # Every member bounced exactly once per phase, unless it was replaced outside the
    # rollout (its replacement then already carried the phase's settings).
    if trace.external_deletions == 0:
        assert len(trace.applied) == scenario.size * scenario.planned_bounces
    # Phases in order: never a bounce of an earlier phase after one of a later phase.
    plan = rollout_bounces([(scenario.start, "t1")], scenario.desired, scenario.template)
    phases = [plan.index(bounce.protocol) for bounce in trace.applied]
    assert phases == sorted(phases)


@SETTINGS
@given(scenarios(doomed=True))
def test_a_member_that_never_comes_back_pauses_the_rollout_for_good(scenario: Scenario) -> None:
    _, trace = simulate(scenario)
    assert scenario.doomed_bounce is not None
    if trace.doomed_step is None:
        # Outside replacements left fewer bounces than the doomed ordinal: nothing doomed.
        assert trace.external_deletions and len(trace.applied) <= scenario.doomed_bounce
        assert isinstance(trace.decisions[-1], Done)
        return
    assert len(trace.applied) == scenario.doomed_bounce + 1
    after = trace.decisions[trace.doomed_step + 1 :]
    assert not any(isinstance(d, Bounce | Done) for d in after)
    assert isinstance(after[-1], Pause), after[-1].reason


@SETTINGS
@given(scenarios(doomed=False, spec_changes=True))
def test_spec_changes_mid_rollout_stay_safe_and_end_at_the_last_spec(scenario: Scenario) -> None:
    """simulate() checks the safety rules at every bounce; here the last spec wins."""
    sim, trace = simulate(scenario)
    last = trace.decisions[-1]
    assert isinstance(last, Done), f"not done after {len(trace.decisions)} steps: {last.reason}"
    assert all(
        pod.protocol is sim.desired and pod.template == sim.template for pod in sim.pods.values()
    )
