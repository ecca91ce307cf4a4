"""The rollout orchestrator, one rule at a time, over hand-built observations."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from coordinator import DescribedGroup, DescribedGroupMember, ErrorCode, GroupState
from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.blockers import BlockerCode
from staticfleet_operator.crd import FleetProtocol
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
    RolloutPhase,
    RolloutStatus,
    Wait,
    decide,
    protocol_bounces,
    protocol_for_new_pod,
    rollout_bounces,
)

EAGER = RebalanceProtocolSetting.EAGER
COMPATIBLE = RebalanceProtocolSetting.COMPATIBLE
COOPERATIVE = RebalanceProtocolSetting.COOPERATIVE
ASSIGNORS = Assignors(eager="range", cooperative="cooperative-sticky")
T0 = datetime(2025, 1, 1, tzinfo=UTC)
TIMEOUT = 60.0


@dataclass
class Fleet:
    """A static group whose bounced members come back at once, unless told otherwise."""

    size: int
    protocol: RebalanceProtocolSetting
    template: str = "t1"
    leader_slot: int = 0
    assignors: Assignors = ASSIGNORS
    group_state: GroupState = GroupState.STABLE
    pods: dict[int, MemberPod] = field(default_factory=dict)
    members: dict[int, GroupMemberView] = field(default_factory=dict)
    uids: int = 0

    def __post_init__(self) -> None:
        for slot in range(self.size):
            self.recreate(slot, self.protocol, self.template)

    def recreate(
        self,
        slot: int,
        protocol: RebalanceProtocolSetting,
        template: str,
        come_back: bool = True,
    ) -> None:
        self.uids += 1
        self.pods[slot] = MemberPod(
            slot=slot,
            instance_id=f"fleet-{slot}",
            pod_name=f"fleet-{slot}-{self.uids}",
            protocol=protocol,
            template_hash=template,
            ready=come_back,
            pod_uid=f"uid-{self.uids}",
        )
        if come_back:
            self.rejoin(slot, self.assignors.offered_by(protocol))

    def rejoin(self, slot: int, offered: frozenset[str]) -> None:
        self.uids += 1
        self.members[slot] = GroupMemberView(f"fleet-{slot}", f"member-{self.uids}", offered)

    def apply(self, decision: Decision, come_back: bool = True) -> None:
        if isinstance(decision, Bounce):
            self.recreate(decision.slot, decision.protocol, decision.template_hash, come_back)

    def observe(
        self,
        desired: RebalanceProtocolSetting,
        template: str = "t1",
        expected: int | None = None,
    ) -> Observation:
        view = CoordinatorView(
            group_state=self.group_state,
            generation_id=7,
            leader_instance_id=f"fleet-{self.leader_slot}",
            members=tuple(self.members[slot] for slot in sorted(self.members)),
        )
        return Observation(
            desired_protocol=desired,
            desired_template_hash=template,
            assignors=self.assignors,
            desired_members=self.size if expected is None else expected,
            member_ready_timeout_seconds=TIMEOUT,
            pods=tuple(self.pods[slot] for slot in sorted(self.pods)),
            coordinator=view,
        )


@dataclass
class Run:
    bounces: list[tuple[int, RebalanceProtocolSetting]]
    last: Decision
    state: RolloutStatus
    now: datetime


def run(
    fleet: Fleet,
    desired: RebalanceProtocolSetting,
    template: str = "t1",
    state: RolloutStatus | None = None,
    now: datetime = T0,
    max_bounces: int = 100,
) -> Run:
    """Drive decide() against the fleet until it stops bouncing, or `max_bounces` were done."""
    state = state or RolloutStatus()
    bounces: list[tuple[int, RebalanceProtocolSetting]] = []
    decision: Decision = Wait("not started", state)
    while len(bounces) < max_bounces:
        decision = decide(fleet.observe(desired, template), state, now)
        state = decision.state
        if not isinstance(decision, Bounce):
            break
        bounces.append((decision.slot, decision.protocol))
        fleet.apply(decision)
        now += timedelta(seconds=1)
    return Run(bounces, decision, state, now)


def upgrade_order(size: int, leader: int) -> list[int]:
    return [slot for slot in range(size) if slot != leader] + [leader]


# --- planning ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("present", "desired", "bounces"),
    [
        ({EAGER}, COOPERATIVE, (COMPATIBLE, COOPERATIVE)),
        ({EAGER, COMPATIBLE}, COOPERATIVE, (COMPATIBLE, COOPERATIVE)),
        ({COMPATIBLE}, COOPERATIVE, (COOPERATIVE,)),
        ({COMPATIBLE, COOPERATIVE}, COOPERATIVE, (COOPERATIVE,)),
        ({COOPERATIVE}, COOPERATIVE, ()),
        ({COOPERATIVE}, EAGER, (COMPATIBLE, EAGER)),
        ({COOPERATIVE, COMPATIBLE}, EAGER, (COMPATIBLE, EAGER)),
        ({COMPATIBLE, EAGER}, EAGER, (EAGER,)),
        ({EAGER}, EAGER, ()),
        (set(), COOPERATIVE, ()),
    ],
)
def test_protocol_bounces(
    present: set[RebalanceProtocolSetting],
    desired: RebalanceProtocolSetting,
    bounces: tuple[RebalanceProtocolSetting, ...],
) -> None:
    assert protocol_bounces(present, desired) == bounces


def test_compatible_is_never_a_desired_protocol() -> None:
    with pytest.raises(ValueError, match="eager or cooperative"):
        protocol_bounces({EAGER}, COMPATIBLE)
    with pytest.raises(ValueError, match="eager or cooperative"):
        Fleet(1, EAGER).observe(COMPATIBLE)


def test_a_template_change_alone_is_one_bounce_with_the_same_protocol() -> None:
    pods = [(COOPERATIVE, "t1"), (COOPERATIVE, "t2")]
    assert rollout_bounces(pods, COOPERATIVE, "t2") == (COOPERATIVE,)
    # With a protocol change the template rides along: no third bounce.
    assert rollout_bounces([(EAGER, "t1")], COOPERATIVE, "t2") == (COMPATIBLE, COOPERATIVE)


def test_protocol_for_new_pods() -> None:
    # During a rollout: the current bounce's protocol, so the newcomer needs no bounce.
    assert protocol_for_new_pod(COMPATIBLE, [EAGER], COOPERATIVE) is COMPATIBLE
    # Otherwise the bounce the other pods are in, as a re-plan would read it.
    assert protocol_for_new_pod(None, [EAGER, EAGER], EAGER) is EAGER
    assert protocol_for_new_pod(None, [EAGER, EAGER], COOPERATIVE) is COMPATIBLE
    assert protocol_for_new_pod(None, [EAGER, COMPATIBLE], COOPERATIVE) is COMPATIBLE
    assert protocol_for_new_pod(None, [COMPATIBLE, COOPERATIVE], COOPERATIVE) is COOPERATIVE
    assert protocol_for_new_pod(None, [COMPATIBLE, EAGER], EAGER) is EAGER
    assert protocol_for_new_pod(None, [EAGER, COOPERATIVE], EAGER) is COMPATIBLE
    # A new fleet starts where the spec says.
    assert protocol_for_new_pod(None, [], COOPERATIVE) is COOPERATIVE


def test_assignors_offered_per_protocol() -> None:
    assert ASSIGNORS.offered_by(EAGER) == {"range"}
    assert ASSIGNORS.offered_by(COMPATIBLE) == {"range", "cooperative-sticky"}
    assert ASSIGNORS.offered_by(COOPERATIVE) == {"cooperative-sticky"}


# --- ordering ------------------------------------------------------------------------------


@pytest.mark.parametrize("leader", [0, 2, 4])
def test_upgrade_is_two_bounces_one_member_at_a_time_leader_last(leader: int) -> None:
    fleet = Fleet(5, EAGER, leader_slot=leader)
    result = run(fleet, COOPERATIVE)
    order = upgrade_order(5, leader)
    assert result.bounces == [(s, COMPATIBLE) for s in order] + [(s, COOPERATIVE) for s in order]
    assert isinstance(result.last, Done)
    assert result.state.phase is RolloutPhase.COMPLETED
    assert result.state.from_protocol is EAGER and result.state.to_protocol == COOPERATIVE.value
    assert all(pod.created_with(COOPERATIVE, "t1") for pod in fleet.pods.values())


def test_downgrade_walks_back_through_compatible_then_eager() -> None:
    fleet = Fleet(3, COOPERATIVE, leader_slot=1)
    result = run(fleet, EAGER)
    order = upgrade_order(3, 1)
    assert result.bounces == [(s, COMPATIBLE) for s in order] + [(s, EAGER) for s in order]
    assert isinstance(result.last, Done)


def test_template_only_change_is_one_static_bounce_with_the_same_protocol() -> None:
    fleet = Fleet(3, COOPERATIVE, leader_slot=0)
    result = run(fleet, COOPERATIVE, template="t2")
    assert result.bounces == [(1, COOPERATIVE), (2, COOPERATIVE), (0, COOPERATIVE)]
    assert isinstance(result.last, Done)
    assert result.state.bounces == (COOPERATIVE,)


def test_nothing_to_roll_is_done_and_keeps_the_last_record() -> None:
    fleet = Fleet(3, COOPERATIVE)
    first = decide(fleet.observe(COOPERATIVE), RolloutStatus(), T0)
    assert isinstance(first, Done)
    assert first.state.phase is RolloutPhase.IDLE
    again = decide(fleet.observe(COOPERATIVE), first.state, T0 + timedelta(seconds=5))
    assert again.state == first.state


def test_a_new_leader_is_reordered_to_go_last() -> None:
    fleet = Fleet(3, EAGER, leader_slot=2)
    first = decide(fleet.observe(COOPERATIVE), RolloutStatus(), T0)
    assert isinstance(first, Bounce) and first.slot == 0
    fleet.apply(first)
    fleet.leader_slot = 1  # the coordinator elected another leader meanwhile
    second = decide(fleet.observe(COOPERATIVE), first.state, T0 + timedelta(seconds=1))
    assert isinstance(second, Bounce) and second.slot == 2
    assert "1 member after it" in second.reason


def test_bounce_names_the_pod_and_the_env_to_set() -> None:
    fleet = Fleet(2, EAGER, leader_slot=1)
    decision = decide(fleet.observe(COOPERATIVE), RolloutStatus(), T0)
    assert isinstance(decision, Bounce)
    pod = fleet.pods[0]
    assert (decision.pod_name, decision.pod_uid) == (pod.pod_name, pod.pod_uid)
    assert decision.member_env == {
        env.INSTANCE_ID: "fleet-0",
        env.REBALANCE_PROTOCOL: "compatible",
    }
    assert "bounce 1 of 2 (compatible)" in decision.reason
    # Write-ahead: the state names the member in flight and its replaced incarnation.
    assert decision.state.current_slot == 0
    assert decision.state.current_pod_uid == pod.pod_uid
    assert decision.state.current_member_id == fleet.members[0].member_id
    assert decision.state.current_slot_bounced_at == T0
    assert decision.state.bounced_slots == (0,)
    assert decision.state.pending_slots == (0, 1)


# --- waiting for the bounced member ----------------------------------------------------------


def bounce_first(fleet: Fleet, desired: RebalanceProtocolSetting = COOPERATIVE) -> Bounce:
    decision = decide(fleet.observe(desired), RolloutStatus(), T0)
    assert isinstance(decision, Bounce)
    return decision


def test_each_wait_for_the_bounced_member_must_clear_before_the_next() -> None:
    fleet = Fleet(3, EAGER, leader_slot=2)
    first = bounce_first(fleet)
    old_member = fleet.members[0]
    fleet.apply(first, come_back=False)
    later = T0 + timedelta(seconds=5)

    def step() -> Decision:
        return decide(fleet.observe(COOPERATIVE), first.state, later)

    assert "not ready" in wait_reason(step())
    fleet.pods[0] = replace(fleet.pods[0], ready=True)
    assert "still lists the replaced member id" in wait_reason(step())
    fleet.rejoin(0, ASSIGNORS.offered_by(COMPATIBLE))
    fleet.group_state = GroupState.PREPARING_REBALANCE
    assert "PreparingRebalance" in wait_reason(step())
    fleet.group_state = GroupState.STABLE
    del fleet.members[1]
    assert "2 members, 3 desired" in wait_reason(step())
    fleet.rejoin(1, ASSIGNORS.offered_by(EAGER))
    nxt = step()
    assert isinstance(nxt, Bounce) and nxt.slot == 1
    assert fleet.members[0] != old_member


def wait_reason(decision: Decision) -> str:
    assert isinstance(decision, Wait), decision
    return decision.reason


def test_bounce_2_waits_until_the_last_member_of_bounce_1_offers_cooperative() -> None:
    """The leader (last of bounce 1) came back offering only the eager assignor."""
    fleet = Fleet(3, COMPATIBLE, leader_slot=2)
    fleet.recreate(2, EAGER, "t1")
    first = decide(fleet.observe(COOPERATIVE), RolloutStatus(), T0)
    assert isinstance(first, Bounce) and (first.slot, first.protocol) == (2, COMPATIBLE)
    fleet.apply(first, come_back=False)
    fleet.pods[2] = replace(fleet.pods[2], ready=True)
    fleet.rejoin(2, ASSIGNORS.offered_by(EAGER))  # a member that ignored its env
    for seconds in (1, 30, 59):
        decision = decide(fleet.observe(COOPERATIVE), first.state, T0 + timedelta(seconds=seconds))
        assert "rejoined offering [range]" in wait_reason(decision)
    paused = decide(fleet.observe(COOPERATIVE), first.state, T0 + timedelta(seconds=61))
    assert isinstance(paused, Pause) and paused.slot == 2
    assert paused.state.phase is RolloutPhase.PAUSED
    assert paused.state.bounce_index == 0  # still bounce 1: bounce 2 never started


def test_bounce_2_needs_every_member_offering_cooperative_and_stable_expected_count() -> None:
    fleet = Fleet(3, COMPATIBLE, leader_slot=0)
    state = RolloutStatus(
        phase=RolloutPhase.BOUNCE1,
        from_protocol=EAGER,
        to_protocol=FleetProtocol.COOPERATIVE,
        template_hash="t1",
        bounces=(COMPATIBLE, COOPERATIVE),
        bounced_slots=(1, 2, 0),
        started_at=T0,
        waiting_since=T0,
    )
    now = T0 + timedelta(seconds=10)

    # A member's pod says compatible, but the coordinator still sees it offering eager only.
    fleet.members[1] = replace(fleet.members[1], supported_protocols=frozenset({"range"}))
    assert "fleet-1 offers [range]" in wait_reason(decide(fleet.observe(COOPERATIVE), state, now))
    fleet.rejoin(1, ASSIGNORS.offered_by(COMPATIBLE))

    fleet.group_state = GroupState.COMPLETING_REBALANCE
    between = decide(fleet.observe(COOPERATIVE), state, now)
    assert "not Stable" in wait_reason(between)
    # Bounce 1 reached everyone, bounce 2 has not started: the phase says so.
    assert between.state.phase is RolloutPhase.VERIFY_COMPATIBLE
    assert between.state.blocker is BlockerCode.GROUP_NOT_STABLE
    fleet.group_state = GroupState.STABLE

    observation = fleet.observe(COOPERATIVE, expected=4)
    assert "3 member pods are live, 4 desired" in wait_reason(decide(observation, state, now))

    start = decide(fleet.observe(COOPERATIVE), state, now)
    assert isinstance(start, Bounce) and start.protocol is COOPERATIVE and start.slot == 1
    assert start.state.bounce_index == 1 and start.state.bounced_slots == (1,)
    assert start.state.phase is RolloutPhase.BOUNCE2 and start.state.blocker is None


def test_a_stranger_in_the_group_blocks_the_rollout() -> None:
    fleet = Fleet(2, EAGER, leader_slot=1)
    fleet.members[9] = GroupMemberView(None, "dynamic-1", frozenset({"range"}))
    observation = fleet.observe(COOPERATIVE, expected=2)
    decision = decide(observation, RolloutStatus(), T0)
    assert "3 members, 2 desired" in wait_reason(decision)


def test_describe_failing_means_wait() -> None:
    fleet = Fleet(2, EAGER)
    observation = replace(fleet.observe(COOPERATIVE), coordinator=None)
    decision = decide(observation, RolloutStatus(), T0)
    assert "unavailable" in wait_reason(decision)
    assert isinstance(decision, Wait) and decision.blocker is not None
    assert decision.blocker.code is BlockerCode.COORDINATOR_VIEW_UNAVAILABLE
    assert decision.state.blocker is BlockerCode.COORDINATOR_VIEW_UNAVAILABLE


# --- pausing -------------------------------------------------------------------------------


def test_a_member_that_never_comes_back_pauses_the_rollout_and_nothing_is_skipped() -> None:
    fleet = Fleet(3, EAGER, leader_slot=2)
    first = bounce_first(fleet)
    fleet.apply(first, come_back=False)
    state = first.state
    at_limit = decide(fleet.observe(COOPERATIVE), state, T0 + timedelta(seconds=TIMEOUT))
    assert isinstance(at_limit, Wait)
    for minutes in (2, 10, 600):
        decision = decide(fleet.observe(COOPERATIVE), state, T0 + timedelta(minutes=minutes))
        assert isinstance(decision, Pause) and decision.slot == 0
        assert "memberReadyTimeoutSeconds" in decision.reason
        assert "Nothing is skipped" in decision.reason
        # Named by its cause: the Event's reason, status.rollout.blocker, the paused phase.
        assert decision.event_reason == "PodNotReady"
        assert decision.blocker.code is BlockerCode.POD_NOT_READY
        state = decision.state
        assert state.phase is RolloutPhase.PAUSED and state.current_slot == 0
        assert state.blocker is BlockerCode.POD_NOT_READY
        assert state.paused_phase is RolloutPhase.BOUNCE1

    # It comes back at last: the rollout resumes with the next member, not slot 0 again.
    fleet.pods[0] = replace(fleet.pods[0], ready=True)
    fleet.rejoin(0, ASSIGNORS.offered_by(COMPATIBLE))
    resumed = decide(fleet.observe(COOPERATIVE), state, T0 + timedelta(minutes=601))
    assert isinstance(resumed, Bounce) and resumed.slot == 1
    assert resumed.state.phase is RolloutPhase.BOUNCE1 and resumed.state.blocker is None
    assert resumed.state.bounced_slots == (0, 1)


def test_a_fleet_that_never_settles_pauses_before_the_first_bounce() -> None:
    fleet = Fleet(2, EAGER)
    fleet.group_state = GroupState.PREPARING_REBALANCE
    state = decide(fleet.observe(COOPERATIVE), RolloutStatus(), T0).state
    decision = decide(fleet.observe(COOPERATIVE), state, T0 + timedelta(seconds=TIMEOUT + 1))
    assert isinstance(decision, Pause) and decision.slot is None
    assert "PreparingRebalance" in decision.reason


def test_identical_assignor_names_cannot_verify_a_protocol_change() -> None:
    same = Assignors(eager="cooperative-sticky", cooperative="cooperative-sticky")
    fleet = Fleet(2, EAGER, assignors=same)
    decision = decide(fleet.observe(COOPERATIVE), RolloutStatus(), T0)
    assert isinstance(decision, Pause)
    assert "spec.rebalance" in decision.reason
    # A template-only rollout needs no protocol proof, so it is fine with one name.
    assert isinstance(decide(fleet.observe(EAGER, "t2"), RolloutStatus(), T0), Bounce)


# --- restarts ------------------------------------------------------------------------------


def reference_bounces(size: int, leader: int) -> list[tuple[int, RebalanceProtocolSetting]]:
    return run(Fleet(size, EAGER, leader_slot=leader), COOPERATIVE).bounces


@pytest.mark.parametrize("stop_after", [1, 3, 4, 5, 7])
@pytest.mark.parametrize("lose_state", [False, True])
def test_a_restarted_operator_bounces_exactly_the_remaining_members(
    stop_after: int, lose_state: bool
) -> None:
    """Mid bounce 1 (1, 3), at its end (4), mid bounce 2 (5, 7); state kept or lost."""
    fleet = Fleet(4, EAGER, leader_slot=1)
    before = run(fleet, COOPERATIVE, max_bounces=stop_after)
    assert len(before.bounces) == stop_after
    # The operator dies right after the last Bounce was carried out.
    saved = json.loads(json.dumps(before.state.to_wire()))
    state = RolloutStatus() if lose_state else RolloutStatus.model_validate(saved)
    after = run(fleet, COOPERATIVE, state=state, now=before.now)
    assert isinstance(after.last, Done)
    assert before.bounces + after.bounces == reference_bounces(4, 1)


def test_a_bounce_persisted_but_never_carried_out_is_issued_again_once() -> None:
    fleet = Fleet(3, EAGER, leader_slot=2)
    first = bounce_first(fleet)
    # The operator stopped after persisting, before replacing the pod.
    state = RolloutStatus.model_validate(first.state.to_wire())
    again = decide(fleet.observe(COOPERATIVE), state, T0 + timedelta(seconds=3))
    assert isinstance(again, Bounce) and again.slot == 0
    assert "never reached it" in again.reason
    assert again.state.bounced_slots == (0,)


def test_a_member_in_flight_replaced_outside_the_rollout_is_judged_by_its_pod() -> None:
    fleet = Fleet(3, EAGER, leader_slot=2)
    first = bounce_first(fleet)
    fleet.recreate(0, EAGER, "t1")  # deleted and recreated by someone else, still eager
    decision = decide(fleet.observe(COOPERATIVE), first.state, T0 + timedelta(seconds=3))
    # The bounce is over; slot 0 still needs bounce 1, with a note saying why again.
    assert isinstance(decision, Bounce) and decision.slot == 0
    assert "replaced outside the rollout as eager/t1" in decision.reason
    assert "bounced earlier in this bounce" in decision.reason
    assert decision.state.bounced_slots == (0,)


def test_state_round_trips_through_json() -> None:
    fleet = Fleet(3, EAGER, leader_slot=2)
    state = bounce_first(fleet).state
    data = json.loads(json.dumps(state.to_wire()))
    assert data["phase"] == "Bounce1" and data["targetProtocol"] == "compatible"
    assert data["currentSlotBouncedAt"] == "2025-01-01T00:00:00Z"
    assert RolloutStatus.model_validate(data) == state
    assert RolloutStatus.model_validate({}) == RolloutStatus()


@pytest.mark.parametrize(
    "garbage",
    [
        {"phase": "Sideways"},
        {"phase": "Bounce1", "bounces": []},
        {"bounces": ["eager"], "bounceIndex": 3, "phase": "StaticBounce"},
        {"bouncedSlots": [True]},
        {"bouncedSlots": "0,1"},
        {"startedAt": "yesterday"},
        {"startedAt": "2025-01-01T00:00:00"},
        {"toProtocol": "turbo"},
    ],
)
def test_unreadable_state_is_a_value_error(garbage: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RolloutStatus.model_validate(garbage)


# --- things changing under the rollout -------------------------------------------------------


def test_a_pod_deleted_outside_the_rollout_is_waited_for_and_not_bounced_again() -> None:
    fleet = Fleet(4, EAGER, leader_slot=3)
    first = bounce_first(fleet)
    fleet.apply(first)
    # Slot 2 is deleted by someone else while slot 0 is in flight.
    fleet.pods[2] = replace(fleet.pods[2], deleting=True)
    now = T0 + timedelta(seconds=2)
    assert "3 member pods are live" in wait_reason(
        decide(fleet.observe(COOPERATIVE), first.state, now)
    )
    del fleet.pods[2]
    # Its replacement is created for the current bounce (what the webhook injects).
    protocol = protocol_for_new_pod(first.state.bounce_protocol, [], COOPERATIVE)
    fleet.recreate(2, protocol, "t1", come_back=False)
    assert "not ready" in wait_reason(decide(fleet.observe(COOPERATIVE), first.state, now))
    fleet.pods[2] = replace(fleet.pods[2], ready=True)
    fleet.rejoin(2, ASSIGNORS.offered_by(COMPATIBLE))
    rest = run(fleet, COOPERATIVE, state=first.state, now=now)
    assert isinstance(rest.last, Done)
    # Slot 2 already carries `compatible`: it needs no bounce 1, but does get bounce 2.
    assert rest.bounces == [
        (1, COMPATIBLE),
        (3, COMPATIBLE),
        (0, COOPERATIVE),
        (1, COOPERATIVE),
        (2, COOPERATIVE),
        (3, COOPERATIVE),
    ]


def test_a_desired_change_mid_rollout_finishes_the_member_in_flight_then_replans() -> None:
    fleet = Fleet(3, EAGER, leader_slot=2)
    first = bounce_first(fleet)
    fleet.apply(first, come_back=False)
    # The user goes back to eager while slot 0 is coming back as compatible.
    holding = decide(fleet.observe(EAGER), first.state, T0 + timedelta(seconds=5))
    assert "finishing slot 0" in wait_reason(holding)
    fleet.pods[0] = replace(fleet.pods[0], ready=True)
    fleet.rejoin(0, ASSIGNORS.offered_by(COMPATIBLE))
    rest = run(fleet, EAGER, state=holding.state, now=T0 + timedelta(seconds=6))
    # Re-planned from the pods: only slot 0 differs from eager; one bounce puts it back.
    assert rest.bounces == [(0, EAGER)]
    assert isinstance(rest.last, Done)


def test_a_downgrade_requested_during_bounce_2_walks_back_from_where_the_pods_are() -> None:
    fleet = Fleet(3, EAGER, leader_slot=2)
    upgrade = run(fleet, COOPERATIVE, max_bounces=4)  # bounce 1 done, slot 0 cooperative
    assert upgrade.bounces[-1] == (0, COOPERATIVE)
    replanned = decide(fleet.observe(EAGER), upgrade.state, upgrade.now)
    assert isinstance(replanned, Bounce) and "re-planned" in replanned.reason
    assert replanned.state.bounces == (COMPATIBLE, EAGER)
    rest = run(fleet, EAGER, state=upgrade.state, now=upgrade.now)
    # The cooperative member goes back to compatible first, then everyone to eager.
    assert rest.bounces == [(0, COMPATIBLE), (0, EAGER), (1, EAGER), (2, EAGER)]
    assert isinstance(rest.last, Done)


def test_a_template_change_mid_rollout_rebounces_under_a_new_plan() -> None:
    fleet = Fleet(3, COOPERATIVE, leader_slot=2)
    first = decide(fleet.observe(COOPERATIVE, "t2"), RolloutStatus(), T0)
    assert isinstance(first, Bounce)
    fleet.apply(first)
    rest = run(fleet, COOPERATIVE, template="t3", state=first.state, now=T0 + timedelta(seconds=1))
    assert rest.bounces == [(0, COOPERATIVE), (1, COOPERATIVE), (2, COOPERATIVE)]
    assert isinstance(rest.last, Done)
    assert all(pod.template_hash == "t3" for pod in fleet.pods.values())


def test_reverting_a_broken_template_replaces_the_stuck_member_first() -> None:
    fleet = Fleet(3, COOPERATIVE, leader_slot=0)
    first = decide(fleet.observe(COOPERATIVE, "broken"), RolloutStatus(), T0)
    assert isinstance(first, Bounce) and first.slot == 1
    fleet.apply(first, come_back=False)  # the broken pod never gets ready
    paused = decide(fleet.observe(COOPERATIVE, "broken"), first.state, T0 + timedelta(minutes=5))
    assert isinstance(paused, Pause)
    # The user reverts the template: the stuck member is replaced, then nothing else is.
    later = T0 + timedelta(minutes=6)
    repair = decide(fleet.observe(COOPERATIVE, "t1"), paused.state, later)
    assert isinstance(repair, Bounce) and repair.slot == 1 and repair.template_hash == "t1"
    assert "is down" in repair.reason
    fleet.apply(repair)
    rest = run(fleet, COOPERATIVE, template="t1", state=repair.state, now=later)
    assert rest.bounces == [] and isinstance(rest.last, Done)


# --- the coordinator view ------------------------------------------------------------------


def test_coordinator_view_from_describe_names_the_leader_by_instance_id() -> None:
    members = [
        DescribedGroupMember("m-a", "fleet-0", "c", "h", b"", b"", ["cooperative-sticky"]),
        DescribedGroupMember("m-b", "fleet-1", "c", "h", b"", b"", ["range"]),
    ]
    described = DescribedGroup(
        ErrorCode.NONE, "g", "Stable", "consumer", "range", members, 4, leader="m-b"
    )
    view = CoordinatorView.from_described(described)
    assert view.group_state is GroupState.STABLE and view.generation_id == 4
    assert view.leader_instance_id == "fleet-1"
    member = view.member("fleet-0")
    assert member is not None and member.supported_protocols == {"cooperative-sticky"}

    missing = DescribedGroup(ErrorCode.GROUP_ID_NOT_FOUND, "g", "Dead", "", "")
    assert CoordinatorView.from_described(missing).group_state is GroupState.DEAD
