"""The six scenarios. Each drives a fresh fleet in a fresh group and records what it did
and when (`ScenarioRecord`); nothing here computes a figure.

1. rolling restart, dynamic members       2. rolling restart, static members
3. eager -> compatible -> cooperative, two bounces, leader last
4. scale-down by two: a) processes just stop, b) plus one batch LeaveGroup
5. a static member restart while the coordinator is SIGKILLed and restarted
6. scale-up x2: a) members join as they start, b) with expected members
7. an active member's pod deleted: a) nothing replaces it (the session timeout), b) a plain
   static restart, c) a hot standby promoted into its place
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol, TypeVar

from coordinator import DescribedGroup
from coordinator.client import env as member_env
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.wire import WireError, from_json
from staticfleet.demo.admin import AdminClient, AdminError
from staticfleet.demo.fleet import CoordinatorProcess, Fleet, FleetError, now_ms, slot_name
from staticfleet.demo.kafka_mode import KafkaAdmin, KafkaCoordinator
from staticfleet.demo.ownership import (
    ASSIGNED,
    FATAL,
    LOST,
    REVOKED,
    STOPPED,
    MemberLog,
    Partition,
    acknowledged_offsets,
)
from staticfleet.demo.record import Marker, ScenarioRecord, ScenarioSpec, Step
from staticfleet.demo.settings import DemoSettings
from staticfleet.demo.settle import GroupView, wait_until_settled
from staticfleet_operator.local_adapter import LocalMember, LocalRollout, LocalRolloutSpec
from staticfleet_operator.rollout import (
    Assignors,
    Bounce,
    Decision,
    Done,
    Observation,
    Pause,
)

T = TypeVar("T")

EAGER = "eager"
COMPATIBLE = "compatible"
COOPERATIVE = "cooperative"
COOPERATIVE_ASSIGNOR = "cooperative-sticky"  # the member's default cooperative assignor
EAGER_ASSIGNOR = "range"  # and its default eager one
# The demo's processes have one "pod template": the Fleet's settings. Only the protocol
# changes in a bounce.
DEMO_TEMPLATE = "demo"


class Narrator(Protocol):
    """Where scenarios say what they are doing (the progress display)."""

    def status(self, text: str) -> None: ...

    def advance(self) -> None: ...


@dataclass
class DemoContext:
    settings: DemoSettings
    # Ours (`coordinator serve`) or a Kafka broker (`--coordinator kafka`): the same moves.
    coordinator: CoordinatorProcess | KafkaCoordinator
    admin: AdminClient | KafkaAdmin
    partitions: Sequence[Partition]
    log_root: Path
    source_epoch_ms: int
    narrator: Narrator
    source_url: str | None = None
    kafka_config: Path | None = None


class ScenarioRun:
    """One scenario's fleet and record, with the moves every scenario makes."""

    def __init__(
        self, context: DemoContext, spec: ScenarioSpec, *, static: bool, protocol: str
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.record = ScenarioRecord(spec=spec, static=static, protocol=protocol)
        self.fleet = Fleet(
            settings=context.settings,
            coordinator_url=context.coordinator.url,
            group_id=spec.group_id,
            token=spec.token,
            log_dir=context.log_root / spec.key,
            source_epoch_ms=context.source_epoch_ms,
            source_url=context.source_url,
            kafka_config=context.kafka_config,
        )

    @property
    def group_id(self) -> str:
        return self.record.spec.group_id

    def say(self, text: str) -> None:
        self.context.narrator.status(f"({self.record.spec.number}) {text}")

    def describe(self) -> GroupView:
        return GroupView.from_describe(self.context.admin.describe(self.group_id))

    def settle(self) -> GroupView:
        def live_logs() -> list[MemberLog]:
            # A waiting hot standby is a process but no group member (scenario 7c).
            return [
                member.member_log()
                for member in self.fleet.live_processes()
                if not member.waiting_standby
            ]

        try:
            return wait_until_settled(
                lambda: self.context.admin.describe(self.group_id),
                live_logs,
                self.context.partitions,
                now_ms,
                self.settings.settle_timeout_s,
            )
        except RuntimeError as error:
            failures = "; ".join(self.fleet.failures())
            raise RuntimeError(f"{error}{' (' + failures + ')' if failures else ''}") from error

    def start_fleet(self) -> GroupView:
        self.say(f"starting {self.settings.members} member processes")
        self.record.fleet_start_ms = now_ms()
        for index in range(self.settings.members):
            self.fleet.start(index, static=self.record.static, protocol=self.record.protocol)
        view = self.settle()
        self.record.window_start_ms = now_ms()
        self.context.narrator.advance()
        return view

    def restart(self, index: int, protocol: str, label: str) -> GroupView:
        """Stop one member process, start it again, wait until the group is Stable."""
        self.say(label)
        start = now_ms()
        self.fleet.stop([slot_name(index)])
        self.fleet.start(index, static=self.record.static, protocol=protocol)
        view = self.settle()
        self.record.steps.append(Step(label, start, now_ms()))
        self.context.narrator.advance()
        return view

    def finish(self) -> ScenarioRecord:
        """Close the window, read the journal, stop the fleet, read the logs."""
        self.record.window_end_ms = now_ms()
        self.say("collecting the journal and the member logs")
        try:
            self.record.journal = self.context.admin.journal(self.group_id)
        finally:
            self.fleet.stop_all()
            self.record.logs = self.fleet.logs()
        self.context.narrator.advance()
        return self.record

    def abort(self, error: BaseException) -> ScenarioRecord:
        """Keep what was recorded so far; the report says what went wrong."""
        self.record.error = str(error) or type(error).__name__
        if not self.record.window_end_ms:
            self.record.window_end_ms = now_ms()
        with contextlib.suppress(AdminError):  # the coordinator may be what failed
            self.record.journal = self.context.admin.journal(self.group_id)
        self.fleet.stop_all()
        self.record.logs = self.fleet.logs()
        return self.record


def rolling_restart(run: ScenarioRun) -> None:
    """(1)/(2): every member process stopped and started again, one at a time."""
    run.start_fleet()
    kind = "static" if run.record.static else "dynamic"
    for index in range(run.settings.members):
        run.restart(index, run.record.protocol, f"restarting {slot_name(index)} ({kind})")


def leader_last(view: GroupView, members: int) -> list[int]:
    """Slot indexes in order, the current leader's moved to the end (docs/demo.md,
    "The scenarios": the leader is bounced last, so the group's assignor changes in one
    final rebalance).
    Scenario (3) leaves this order to the orchestrator (`_bounce_order` there)."""
    order = list(range(members))
    leader = view.leader_instance
    if leader is not None:
        leader_index = next((i for i in order if slot_name(i) == leader), None)
        if leader_index is not None:
            order.remove(leader_index)
            order.append(leader_index)
    return order


class DemoFleetControl:
    """The operator's local-process adapter's view of one scenario's fleet (`LocalFleet`):
    slot N is the process `member-N`, started with the protocol it records; it is ready
    once its event log shows it holding an assignment; describe goes through the admin
    API, as the operator's describe_groups does."""

    def __init__(self, run: ScenarioRun) -> None:
        self._run = run

    def members(self) -> list[LocalMember]:
        members = []
        for index in range(self._run.settings.members):
            process = self._run.fleet.live(slot_name(index))
            if process is None:
                continue
            members.append(
                LocalMember(
                    slot=index,
                    instance_id=slot_name(index),
                    process=process.process,
                    protocol=RebalanceProtocolSetting(process.protocol),
                    template_hash=DEMO_TEMPLATE,
                    alive=True,
                    ready=holds_assignment(process.rows()),
                )
            )
        return members

    def describe(self) -> DescribedGroup | None:
        try:
            return from_json(DescribedGroup, self._run.context.admin.describe(self._run.group_id))
        except (AdminError, WireError):
            return None

    def stop(self, slot: int) -> None:
        self._run.fleet.stop([slot_name(slot)])

    def start(self, slot: int, env: Mapping[str, str], template_hash: str) -> None:
        if env.get(member_env.INSTANCE_ID) != slot_name(slot) or template_hash != DEMO_TEMPLATE:
            raise FleetError(f"cannot start slot {slot} with {dict(env)}, {template_hash}")
        self._run.fleet.start(slot, static=True, protocol=env[member_env.REBALANCE_PROTOCOL])


def holds_assignment(rows: Sequence[Mapping[str, object]]) -> bool:
    """A process's readiness: its latest assignment event is an `assigned` (after each
    SyncGroup, even an empty one; an eager member revokes everything before rejoining)."""
    for row in reversed(rows):
        event = row.get("event")
        if event == ASSIGNED:
            return True
        if event in (REVOKED, LOST, STOPPED, FATAL):
            return False
    return False


class UpgradeRecorder:
    """Turns the orchestrator's decisions into the scenario's record: one step per bounced
    member (from its Bounce to the orchestrator's next move), and the describe facts at the
    end of each bounce."""

    def __init__(self, run: ScenarioRun) -> None:
        self.run = run
        self.bounce_index = 0
        # The last member bounced in the current bounce, and whether it led the group then.
        self.last: tuple[str, bool] | None = None
        self.open_step: tuple[int, str, int] | None = None  # slot, label, start ms

    def on_decision(self, decision: Decision, observation: Observation) -> None:
        self._close_step(decision)
        if decision.state.bounce_index > self.bounce_index:
            self.bounce_done(self.bounce_index + 1)
            self.bounce_index = decision.state.bounce_index
        if isinstance(decision, Bounce):
            leader = observation.coordinator.leader_instance_id if observation.coordinator else None
            is_leader = decision.instance_id == leader
            self.last = (decision.instance_id, is_leader)
            label = (
                f"bounce {decision.state.bounce_index + 1}: {decision.instance_id}"
                f"{' (leader)' if is_leader else ''} -> {decision.protocol.value}"
            )
            self.run.say(label)
            self.open_step = (decision.slot, label, now_ms())

    def _close_step(self, decision: Decision) -> None:
        if self.open_step is None:
            return
        slot, label, start = self.open_step
        if isinstance(decision, Bounce | Done | Pause) or decision.state.current_slot != slot:
            self.run.record.steps.append(Step(label, start, now_ms()))
            self.open_step = None
            self.run.context.narrator.advance()

    def bounce_done(self, bounce: int) -> None:
        view = self.run.describe()
        offering = {
            instance: COOPERATIVE_ASSIGNOR in protocols
            for instance, protocols in view.protocols_by_instance.items()
        }
        leader_last = self.last[0] if self.last is not None and self.last[1] else None
        self.run.record.facts[f"bounce_{bounce}"] = {
            "leader_bounced_last": leader_last,
            "group_state": view.state,
            "selected_protocol": view.protocol,
            "members_offering_cooperative": sorted(i for i, ok in offering.items() if ok),
            "all_offer_cooperative": bool(offering) and all(offering.values()),
        }
        self.run.record.markers.append(Marker(now_ms(), f"bounce {bounce} done"))
        self.last = None


def upgrade(run: ScenarioRun) -> None:
    """(3): the KIP-429 upgrade of static members, driven by the operator's rollout
    orchestrator through its local-process adapter: bounce 1 (`compatible`), verification
    through describe, bounce 2 (`cooperative`); one member at a time, the leader last."""
    run.start_fleet()
    recorder = UpgradeRecorder(run)
    members = run.settings.members
    rollout = LocalRollout(
        DemoFleetControl(run),
        LocalRolloutSpec(
            desired_protocol=RebalanceProtocolSetting.COOPERATIVE,
            template_hash=DEMO_TEMPLATE,
            assignors=Assignors(eager=EAGER_ASSIGNOR, cooperative=COOPERATIVE_ASSIGNOR),
            desired_members=members,
            member_ready_timeout_seconds=run.settings.settle_timeout_s,
        ),
        state_path=run.fleet.log_dir / "rollout.json",
        poll_interval_s=0.1,
        on_decision=recorder.on_decision,
    )
    try:
        result = rollout.run(timeout_s=run.settings.settle_timeout_s * (2 * members + 2))
    finally:
        run.record.facts["orchestrator_decisions"] = [r.to_dict() for r in rollout.decisions]
        run.record.facts["rollout_state"] = rollout.state.to_wire()
    if isinstance(result.outcome, Pause):
        # As the operator: a pause never skips anyone. The checks show what was not reached.
        run.record.facts["rollout_paused"] = result.outcome.reason
        if "bounce_1" not in run.record.facts:
            run.record.facts["stopped_before_bounce_2"] = True
        return
    run.settle()  # the last member is back; let the logs catch up before the facts
    recorder.bounce_done(recorder.bounce_index + 1)


def scale_down(run: ScenarioRun, *, batch_leave: bool) -> None:
    """(4): the two highest slots stop (no LeaveGroup: they are static); with
    `batch_leave`, the demo then sends the one admin LeaveGroup the operator would."""
    run.start_fleet()
    members = run.settings.members
    removed = [slot_name(index) for index in (members - 2, members - 1)]
    label = f"stopping {' and '.join(removed)}" + (" + batch LeaveGroup" if batch_leave else "")
    run.say(label)
    start = now_ms()
    gone_ms = run.fleet.stop(removed)
    run.record.markers.append(Marker(gone_ms, "members gone"))
    run.record.facts["removed"] = removed
    run.record.facts["gone_ms"] = gone_ms
    if batch_leave:
        answer = run.context.admin.leave(
            run.group_id, removed, "scale-down: the pods are gone (staticfleet demo)"
        )
        sent_ms = now_ms()
        run.record.markers.append(Marker(sent_ms, "batch LeaveGroup"))
        run.record.facts["leave_sent_ms"] = sent_ms
        run.record.facts["leave_results"] = {
            str(member.get("group_instance_id")): str(member.get("error"))
            for member in answer.get("members", [])
        }
    else:
        run.say(f"{label}: waiting for the session timeout to expire them")
    run.settle()
    run.record.steps.append(Step(label, start, now_ms()))
    run.context.narrator.advance()


# New processes start this far apart, as pods of one scale-up do (scheduling, image pulls).
SCALE_UP_STAGGER_S = 0.5
SCALE_UP_EXPECTED_TIMEOUT_MS = 60_000


def scale_up(run: ScenarioRun, *, expect_members: bool) -> None:
    """(6): the fleet doubles, new processes starting SCALE_UP_STAGGER_S apart; with
    `expect_members` the demo first tells the coordinator to expect every instance id (what
    the operator does), so the coordinator holds the rebalance until the last one has joined."""
    run.start_fleet()
    members = run.settings.members
    added = list(range(members, 2 * members))
    label = f"scale-up {members} -> {2 * members}" + (
        " (expected members)" if expect_members else ""
    )
    run.say(label)
    start = now_ms()
    if expect_members:
        expected = [slot_name(index) for index in range(2 * members)]
        admin = run.context.admin
        assert isinstance(admin, AdminClient), "expected members need the embedded coordinator"
        admin.expect(run.group_id, expected, SCALE_UP_EXPECTED_TIMEOUT_MS)
        run.record.markers.append(Marker(now_ms(), "expected members set"))
    for index in added:
        run.fleet.start(index, static=True, protocol=run.record.protocol)
        time.sleep(SCALE_UP_STAGGER_S)
    run.record.markers.append(Marker(now_ms(), "last new member started"))
    run.record.facts["added"] = [slot_name(index) for index in added]
    run.record.facts["expect_members"] = expect_members
    view = run.settle()
    run.record.facts["members_after"] = sorted(view.instance_ids)
    run.record.steps.append(Step(label, start, now_ms()))
    run.context.narrator.advance()


def coordinator_crash(run: ScenarioRun) -> None:
    """(5): a static member restarts; meanwhile the coordinator is SIGKILLed and restarted
    on the same SQLite file (and port). The member comes back while it is still down."""
    view = run.start_fleet()
    run.record.facts["members_before"] = sorted(view.instance_ids)
    # Only a partition with an acknowledged commit can show a lost one: wait for all.
    run.say("waiting until every partition has a committed offset")
    _wait_for(
        lambda: (
            set(acknowledged_offsets(run.fleet.logs(), now_ms())) >= set(run.context.partitions)
        ),
        run.settings.settle_timeout_s,
        "not every partition got a committed offset",
    )
    index = run.settings.members // 2
    slot = slot_name(index)
    coordinator = run.context.coordinator
    label = f"restarting {slot}, coordinator killed meanwhile"
    run.say(f"{label}: stopping {slot}")
    start = now_ms()
    run.fleet.stop([slot])
    run.say(f"{label}: kill -9 coordinator")
    kill_ms = now_ms()
    coordinator.kill()
    run.record.markers.append(Marker(kill_ms, "coordinator killed"))
    run.record.facts["kill_ms"] = kill_ms
    run.fleet.start(index, static=True, protocol=run.record.protocol)
    run.say(f"{label}: restarting the coordinator on the same store")
    coordinator.start()
    ready_ms = now_ms()
    run.record.markers.append(Marker(ready_ms, "coordinator back"))
    run.record.facts["ready_ms"] = ready_ms
    # Read the stored offsets at once, before the members commit anything new over them.
    run.record.facts["offsets_after_restart"] = [
        [topic, partition, offset]
        for (topic, partition), offset in sorted(
            _retry(lambda: run.context.admin.committed_offsets(run.group_id)).items()
        )
    ]
    view = run.settle()
    run.record.steps.append(Step(label, start, now_ms()))
    run.record.facts["members_after"] = sorted(view.instance_ids)
    run.context.narrator.advance()


class Failover(StrEnum):
    SESSION_TIMEOUT = "session_timeout"  # nothing replaces the member
    STATIC_RESTART = "static_restart"  # a new process with its instance id (a new pod)
    STANDBY = "standby"  # a waiting hot standby is promoted into its instance id


STANDBY_NAME = "standby-0"


def member_killed(run: ScenarioRun, *, failover: Failover) -> None:
    """(7): one active member's pod is deleted (SIGTERM: a static member sends no
    LeaveGroup). Then, as the operator would: a) nothing, the coordinator expires it after
    the session timeout; b) a replacement process with the same instance id, at once (in
    Kubernetes: the pod's restart time later); c) a hot standby, waiting since the fleet
    formed, is promoted into its instance id."""
    run.start_fleet()
    admin = run.context.admin
    if failover is Failover.STANDBY:
        assert isinstance(admin, AdminClient), "hot standby needs the embedded coordinator"
        run.say("starting a hot standby")
        run.fleet.start_standby(STANDBY_NAME, protocol=run.record.protocol)
        _wait_for(
            lambda: admin.standbys(run.group_id) == [STANDBY_NAME],
            run.settings.settle_timeout_s,
            "the standby did not report in",
        )
        run.record.window_start_ms = now_ms()
    index = run.settings.members // 2
    slot = slot_name(index)
    label = (
        f"{slot}'s pod deleted"
        + {
            Failover.SESSION_TIMEOUT: ", not replaced",
            Failover.STATIC_RESTART: ", restarted (static)",
            Failover.STANDBY: f", {STANDBY_NAME} promoted",
        }[failover]
    )
    run.say(label)
    start = now_ms()
    gone_ms = run.fleet.stop([slot])
    run.record.markers.append(Marker(gone_ms, f"{slot} gone"))
    run.record.facts["gone_ms"] = gone_ms
    run.record.facts["failover"] = failover.value
    run.record.facts["killed"] = slot
    if failover is Failover.STATIC_RESTART:
        run.fleet.start(index, static=True, protocol=run.record.protocol)
        run.record.markers.append(Marker(now_ms(), f"{slot} restarted"))
    elif failover is Failover.STANDBY:
        assert isinstance(admin, AdminClient)
        answer = admin.promote(run.group_id, STANDBY_NAME, slot)
        promoted_ms = now_ms()
        run.record.markers.append(Marker(promoted_ms, f"{STANDBY_NAME} promoted"))
        run.record.facts["promoted_ms"] = promoted_ms
        run.record.facts["promote_error_code"] = int(answer.get("error_code", -1))
    else:
        run.say(f"{label}: waiting for the session timeout to expire it")
    run.settle()
    run.record.steps.append(Step(label, start, now_ms()))
    run.context.narrator.advance()


def _wait_for(condition: Callable[[], bool], timeout_s: float, failure: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{failure} in {timeout_s:.0f} s")
        time.sleep(0.1)


def _retry(call: Callable[[], T], attempts: int = 50, pause_s: float = 0.1) -> T:
    for _ in range(attempts - 1):
        try:
            return call()
        except AdminError:
            time.sleep(pause_s)
    return call()


@dataclass(frozen=True, slots=True)
class ScenarioPlan:
    key: str
    number: str
    title: str
    static: bool
    protocol: str
    body: Callable[[ScenarioRun], None]
    steps: Callable[[DemoSettings], int]  # progress units: fleet start + steps + collect


def _members_plus_two(settings: DemoSettings) -> int:
    return settings.members + 2


def _two_bounces(settings: DemoSettings) -> int:
    return 2 * settings.members + 2


def _one_step(_settings: DemoSettings) -> int:
    return 3


def _scale_down_timeout(run: ScenarioRun) -> None:
    scale_down(run, batch_leave=False)


def _scale_down_batch_leave(run: ScenarioRun) -> None:
    scale_down(run, batch_leave=True)


def _scale_up_plain(run: ScenarioRun) -> None:
    scale_up(run, expect_members=False)


def _scale_up_expected_members(run: ScenarioRun) -> None:
    scale_up(run, expect_members=True)


def _killed_not_replaced(run: ScenarioRun) -> None:
    member_killed(run, failover=Failover.SESSION_TIMEOUT)


def _killed_static_restart(run: ScenarioRun) -> None:
    member_killed(run, failover=Failover.STATIC_RESTART)


def _killed_standby(run: ScenarioRun) -> None:
    member_killed(run, failover=Failover.STANDBY)


def plans() -> list[ScenarioPlan]:
    # Eager for (1)-(3): the classic setup whose costs static membership and the upgrade
    # remove; cooperative for (4)-(5): where the upgrade leaves a fleet. Eager for (6): a
    # cooperative scale-up takes a second, revocation-driven rebalance either way, which
    # would hide the one the expected members save.
    return [
        ScenarioPlan(
            key="dynamic_restart",
            number="1",
            title="rolling restart, dynamic members",
            static=False,
            protocol=EAGER,
            body=rolling_restart,
            steps=_members_plus_two,
        ),
        ScenarioPlan(
            key="static_restart",
            number="2",
            title="rolling restart, static members",
            static=True,
            protocol=EAGER,
            body=rolling_restart,
            steps=_members_plus_two,
        ),
        ScenarioPlan(
            key="upgrade",
            number="3",
            title="eager -> compatible -> cooperative",
            static=True,
            protocol=EAGER,
            body=upgrade,
            steps=_two_bounces,
        ),
        ScenarioPlan(
            key="scale_down_timeout",
            number="4a",
            title="scale-down by 2, no LeaveGroup",
            static=True,
            protocol=COOPERATIVE,
            body=_scale_down_timeout,
            steps=_one_step,
        ),
        ScenarioPlan(
            key="scale_down_batch_leave",
            number="4b",
            title="scale-down by 2, batch LeaveGroup",
            static=True,
            protocol=COOPERATIVE,
            body=_scale_down_batch_leave,
            steps=_one_step,
        ),
        ScenarioPlan(
            key="coordinator_crash",
            number="5",
            title="static restart + coordinator kill -9",
            static=True,
            protocol=COOPERATIVE,
            body=coordinator_crash,
            steps=_one_step,
        ),
        ScenarioPlan(
            key="scale_up_plain",
            number="6a",
            title="scale-up x2, members join as they start",
            static=True,
            protocol=EAGER,
            body=_scale_up_plain,
            steps=_one_step,
        ),
        ScenarioPlan(
            key="scale_up_expected_members",
            number="6b",
            title="scale-up x2, with expected members",
            static=True,
            protocol=EAGER,
            body=_scale_up_expected_members,
            steps=_one_step,
        ),
        # Cooperative for (7): the others keep their partitions either way, so the figures
        # are the killed member's partitions alone.
        ScenarioPlan(
            key="member_killed_timeout",
            number="7a",
            title="a member's pod deleted, not replaced",
            static=True,
            protocol=COOPERATIVE,
            body=_killed_not_replaced,
            steps=_one_step,
        ),
        ScenarioPlan(
            key="member_killed_restart",
            number="7b",
            title="a member's pod deleted, static restart",
            static=True,
            protocol=COOPERATIVE,
            body=_killed_static_restart,
            steps=_one_step,
        ),
        ScenarioPlan(
            key="member_killed_standby",
            number="7c",
            title="a member's pod deleted, hot standby promoted",
            static=True,
            protocol=COOPERATIVE,
            body=_killed_standby,
            steps=_one_step,
        ),
    ]


# Scenarios with no run on a Kafka broker, and why (the report prints the reason).
KAFKA_SKIPPED: Mapping[str, str] = {
    "scale_up_plain": (
        "the baseline of 6b, which Kafka cannot run: it has no API to tell its coordinator "
        "which members to expect"
    ),
    "scale_up_expected_members": (
        "Kafka has no API to tell its coordinator which members to expect (embedded "
        "coordinator only; docs/coordinator.md, Expected members)"
    ),
    "member_killed_standby": (
        "Kafka has no standby member and no way to hand one member's assignment to another "
        "without a rebalance (embedded coordinator only; docs/coordinator.md, Hot standby)"
    ),
    "upgrade": (
        "the orchestrator verifies bounce 1 from describe's offered assignors and leader, "
        "which Kafka's DescribeGroups does not return; the two-bounce on the broker is "
        "tested in tests/kafka/test_member_on_kafka.py and test_mixed_with_java.py"
    ),
}


def kafka_plans() -> list[ScenarioPlan]:
    return [plan for plan in plans() if plan.key not in KAFKA_SKIPPED]
