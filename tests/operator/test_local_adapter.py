"""The local-process adapter drives the orchestrator over a fake fleet of processes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from coordinator import DescribedGroup, DescribedGroupMember, ErrorCode
from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.local_adapter import (
    LocalMember,
    LocalRollout,
    LocalRolloutSpec,
    load_state,
    observation_of,
)
from staticfleet_operator.rollout import Assignors, Done, Pause, RolloutPhase, RolloutStatus

EAGER = RebalanceProtocolSetting.EAGER
COMPATIBLE = RebalanceProtocolSetting.COMPATIBLE
COOPERATIVE = RebalanceProtocolSetting.COOPERATIVE
ASSIGNORS = Assignors(eager="range", cooperative="cooperative-sticky")
TEMPLATE = "demo"
TIMEOUT = 5.0
POLL = 0.2


@dataclass
class Proc:
    incarnation: int
    protocol: RebalanceProtocolSetting
    template_hash: str
    polls_to_join: int
    alive: bool = True


@dataclass
class FakeFleet:
    """Static members; a started process joins (new member id, new offers) after a few
    describes, unless its slot is in `never_back`. The leader stays on `leader_slot`."""

    size: int
    protocol: RebalanceProtocolSetting = EAGER
    leader_slot: int = 1
    never_back: set[int] = field(default_factory=set)
    rejoin_polls: int = 2
    procs: dict[int, Proc] = field(default_factory=dict)
    listed: dict[int, tuple[str, frozenset[str]]] = field(default_factory=dict)
    generation: int = 1
    actions: list[tuple[str, int, RebalanceProtocolSetting | None]] = field(default_factory=list)
    # At each start: what the coordinator showed every member offering.
    offers_at_start: list[tuple[int, RebalanceProtocolSetting, dict[int, frozenset[str]]]] = field(
        default_factory=list
    )

    def __post_init__(self) -> None:
        for slot in range(self.size):
            self.procs[slot] = Proc(1, self.protocol, TEMPLATE, 0)
            self.listed[slot] = (f"m{slot}-1", ASSIGNORS.offered_by(self.protocol))

    def members(self) -> Sequence[LocalMember]:
        return [
            LocalMember(
                slot=slot,
                instance_id=f"member-{slot}",
                process=f"member-{slot}#{proc.incarnation}",
                protocol=proc.protocol,
                template_hash=proc.template_hash,
                alive=proc.alive,
                ready=proc.alive and proc.polls_to_join == 0 and not self.stuck(slot),
            )
            for slot, proc in sorted(self.procs.items())
        ]

    def stuck(self, slot: int) -> bool:
        return slot in self.never_back and self.procs[slot].incarnation > 1

    def describe(self) -> DescribedGroup:
        for slot, proc in self.procs.items():
            if proc.alive and proc.polls_to_join > 0:
                proc.polls_to_join -= 1
                if proc.polls_to_join == 0 and not self.stuck(slot):
                    member_id = f"m{slot}-{proc.incarnation}"
                    self.listed[slot] = (member_id, ASSIGNORS.offered_by(proc.protocol))
                    self.generation += 1
        return DescribedGroup(
            error_code=ErrorCode.NONE,
            group_id="g",
            group_state="Stable",
            protocol_type="consumer",
            protocol_data="range",
            members=[
                DescribedGroupMember(
                    member_id=member_id,
                    group_instance_id=f"member-{slot}",
                    client_id="c",
                    client_host="h",
                    member_metadata=b"",
                    member_assignment=b"",
                    supported_protocols=sorted(offers),
                )
                for slot, (member_id, offers) in sorted(self.listed.items())
            ],
            generation_id=self.generation,
            leader=self.listed[self.leader_slot][0],
        )

    def stop(self, slot: int) -> None:
        self.procs[slot].alive = False
        self.actions.append(("stop", slot, None))

    def start(self, slot: int, member_env: Mapping[str, str], template_hash: str) -> None:
        assert member_env[env.INSTANCE_ID] == f"member-{slot}"
        assert not self.procs[slot].alive, "two processes in one slot"
        protocol = RebalanceProtocolSetting(member_env[env.REBALANCE_PROTOCOL])
        self.offers_at_start.append(
            (slot, protocol, {s: offers for s, (_id, offers) in self.listed.items()})
        )
        incarnation = self.procs[slot].incarnation + 1
        self.procs[slot] = Proc(incarnation, protocol, template_hash, self.rejoin_polls)
        self.actions.append(("start", slot, protocol))


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def spec(size: int, protocol: RebalanceProtocolSetting = COOPERATIVE) -> LocalRolloutSpec:
    return LocalRolloutSpec(
        desired_protocol=protocol,
        template_hash=TEMPLATE,
        assignors=ASSIGNORS,
        desired_members=size,
        member_ready_timeout_seconds=TIMEOUT,
    )


def rollout(fleet: FakeFleet, clock: FakeClock, state_path: Path | None = None) -> LocalRollout:
    return LocalRollout(
        fleet,
        spec(fleet.size),
        state_path=state_path,
        poll_interval_s=POLL,
        clock=clock,
        sleep=clock.sleep,
    )


def starts(fleet: FakeFleet) -> list[tuple[int, RebalanceProtocolSetting | None]]:
    return [(slot, protocol) for kind, slot, protocol in fleet.actions if kind == "start"]


def test_upgrade_walks_eager_compatible_cooperative_leader_last() -> None:
    fleet, clock = FakeFleet(4, leader_slot=1), FakeClock()
    result = rollout(fleet, clock).run()

    assert isinstance(result.outcome, Done) and result.completed
    order = [0, 2, 3, 1]  # slot order, the leader (slot 1) last
    assert starts(fleet) == [(s, COMPATIBLE) for s in order] + [(s, COOPERATIVE) for s in order]
    # Every start follows the stop of the same slot, one member at a time.
    kinds = [(kind, slot) for kind, slot, _ in fleet.actions]
    assert kinds == [step for slot in order + order for step in (("stop", slot), ("start", slot))]
    assert result.state.phase is RolloutPhase.COMPLETED and result.state.completed_at is not None
    bounces = result.bounces
    assert [(b.slot, b.protocol) for b in bounces] == [(s, p and p.value) for s, p in starts(fleet)]
    assert all(b.leader_instance_id == "member-1" for b in bounces)
    assert "the group leader, bounced last" in bounces[3].reason
    assert result.decisions[-1].kind == "done"
    assert all(record.reason for record in result.decisions)


def test_bounce_2_only_once_every_member_offers_the_cooperative_assignor() -> None:
    fleet, clock = FakeFleet(3, leader_slot=0, rejoin_polls=4), FakeClock()
    result = rollout(fleet, clock).run()

    assert result.completed
    cooperative = [entry for entry in fleet.offers_at_start if entry[1] is COOPERATIVE]
    assert len(cooperative) == 3
    for _slot, _protocol, offers in cooperative:
        assert all("cooperative-sticky" in offered for offered in offers.values())
    # The first cooperative start came after the last compatible member had rejoined.
    first = fleet.offers_at_start.index(cooperative[0])
    last_compatible_slot = fleet.offers_at_start[first - 1][0]
    assert cooperative[0][2][last_compatible_slot] == ASSIGNORS.offered_by(COMPATIBLE)
    verified = [r for r in result.decisions if "bounce 1 of 2 (compatible) verified" in r.reason]
    assert verified and verified[0].kind == "bounce" and verified[0].protocol == "cooperative"


def test_a_member_that_never_comes_back_pauses_with_nothing_skipped() -> None:
    fleet, clock = FakeFleet(4, leader_slot=1, never_back={2}), FakeClock()
    result = rollout(fleet, clock).run()

    assert isinstance(result.outcome, Pause)
    assert result.outcome.slot == 2
    assert starts(fleet) == [(0, COMPATIBLE), (2, COMPATIBLE)]  # nothing after slot 2
    assert result.state.phase is RolloutPhase.PAUSED
    assert result.state.bounced_slots == (0, 2)
    assert result.state.current_slot == 2
    assert set(result.state.pending_slots) >= {3, 1}
    assert "memberReadyTimeoutSeconds" in result.decisions[-1].reason
    assert result.decisions[-1].kind == "pause"
    # It waited the timeout, no less.
    assert (clock.now - result.bounces[-1].at).total_seconds() > TIMEOUT


def test_a_restarted_driver_resumes_from_its_state_file(tmp_path: Path) -> None:
    state_path = tmp_path / "rollout.json"
    fleet, clock = FakeFleet(4, leader_slot=3), FakeClock()
    first = rollout(fleet, clock, state_path)
    while len(starts(fleet)) < 2:  # stop the driver in the middle of bounce 1
        first.step()
        clock.sleep(POLL)
    saved = load_state(state_path)
    assert saved.phase is RolloutPhase.BOUNCE1 and saved.bounced_slots == (0, 1)

    result = rollout(fleet, clock, state_path).run()

    assert result.completed
    order = [0, 1, 2, 3]
    assert starts(fleet) == [(s, COMPATIBLE) for s in order] + [(s, COOPERATIVE) for s in order]
    assert load_state(state_path) == result.state


def test_an_unreadable_state_file_starts_from_the_processes(tmp_path: Path) -> None:
    state_path = tmp_path / "rollout.json"
    state_path.write_text("[1, 2]")
    assert load_state(state_path) == RolloutStatus()
    state_path.write_text('{"phase": "Rolling"}')  # a Rolling rollout with no bounces
    assert load_state(state_path) == RolloutStatus()
    fleet, clock = FakeFleet(3, protocol=COOPERATIVE), FakeClock()
    result = rollout(fleet, clock, state_path).run()
    assert result.completed and fleet.actions == []
    assert [r.kind for r in result.decisions] == ["done"]


def test_a_repeated_bounce_does_not_start_a_second_process() -> None:
    fleet, clock = FakeFleet(3, leader_slot=2), FakeClock()
    driver = rollout(fleet, clock)
    decision = driver.step()
    assert fleet.actions == [("stop", 0, None), ("start", 0, COMPATIBLE)]
    # The driver restarted between persist and act's end: the same Bounce again.
    driver._bounce(decision)  # type: ignore[arg-type]
    assert fleet.actions == [("stop", 0, None), ("start", 0, COMPATIBLE)]


def test_dead_processes_are_gone_pods_and_a_failed_describe_is_no_view() -> None:
    fleet = FakeFleet(3)
    fleet.procs[1].alive = False
    observation = observation_of(spec(3), fleet.members(), None)
    assert [pod.slot for pod in observation.pods] == [0, 2]
    assert observation.coordinator is None
    assert all(pod.pod_uid == pod.pod_name for pod in observation.pods)
