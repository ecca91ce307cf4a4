"""Runs a soak: a real `coordinator serve` on its SQLite store, real member processes of a
few groups, and the seeded faults, one after another; then hands the run to the checker.

Faults are sequential: each one ends (the process is continued or restarted), then the
driver waits for every group to converge again (up to `recovery_bound_s`) before the next,
so each fault has one recovery time. Members that exit on their own are restarted at once,
as a kubelet would, and recorded (an unexpected exit is reported by the checker).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from staticfleet.demo.admin import AdminClient, AdminError
from staticfleet.demo.fleet import CoordinatorProcess, Fleet, MemberProcess, now_ms, slot_name
from staticfleet.demo.settings import DemoSettings
from staticfleet.soak import records
from staticfleet.soak.checker import GroupSpec, converged, latest_member_id
from staticfleet.soak.disk import StoreDisk, remove_leftover_mounts
from staticfleet.soak.network import SoakNetwork, missing_privileges, remove_leftovers
from staticfleet.soak.plan import DECK, NETWORK_KINDS, Fault, FaultKind, fault_plan
from staticfleet.soak.relay import Delay, DelayRelay

TOPIC = "events"
ADMIN_TOKEN = "soak-admin-token"  # loopback only, a throwaway store


# How the network kinds are made here (docs/soak.md says why not with tc netem).
NETWORK_MECHANISM = (
    "a namespace and veth per member on a bridge; loss and partitions: iptables DROP in the "
    "member's namespace; delay: the soak's relay (no sch_netem in this kernel)"
)


class SoakError(RuntimeError):
    """The soak could not run (a process would not start, the fleet never formed)."""


@dataclass(frozen=True, slots=True)
class SoakConfig:
    seed: int
    duration_s: float
    run_dir: Path
    partitions: int = 12
    session_timeout_ms: int = 3_000
    heartbeat_interval_ms: int = 500
    # The bound within which every group must be converged after a fault ends.
    recovery_bound_s: float = 30.0
    # Stop after this many faults even if time is left (the smoke test's short run).
    max_faults: int | None = None
    # The kinds the plan deals, each as often as it is here (plan.DECK); the network and
    # disk kinds are left out without root.
    deck: tuple[FaultKind, ...] = DECK
    # The store's tmpfs: small, so the filler is quick, yet far above a run's store.
    store_disk_mb: int = 64
    groups: tuple[GroupSpec, ...] = (
        GroupSpec("soak-eager", static=True, protocol="eager", members=3),
        GroupSpec("soak-cooperative", static=True, protocol="cooperative", members=3),
        GroupSpec("soak-dynamic", static=False, protocol="cooperative", members=2),
    )

    def slot_names(self) -> list[str]:
        """The member slots faults may target, `<group>/member-<i>`, in a fixed order."""
        return [f"{g.group_id}/{slot_name(i)}" for g in self.groups for i in range(g.members)]

    def demo_settings(self) -> DemoSettings:
        return DemoSettings(
            members=3,
            partitions=self.partitions,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            rebalance_timeout_ms=2 * self.session_timeout_ms,
            initial_rebalance_delay_ms=300,
            commit_interval_ms=500,
            records_per_second=20.0,
            topic=TOPIC,
        )


@dataclass
class _Slot:
    group: GroupSpec
    fleet: Fleet
    index: int
    recorded: set[int] = field(default_factory=set)  # incarnations whose end is written

    @property
    def name(self) -> str:
        return f"{self.group.group_id}/{slot_name(self.index)}"


class Soak:
    SETTLE_S = 3.0

    def __init__(self, config: SoakConfig) -> None:
        self.config = config
        run_dir = config.run_dir
        if run_dir.exists() and any(run_dir.iterdir()):
            raise SoakError(f"{run_dir} is not empty: give a new --run-dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        self.settings = config.demo_settings()
        # The network and disk kinds need root (namespaces, iptables, mount).
        self.left_out = missing_privileges()
        privileged = {*NETWORK_KINDS, FaultKind.DISK_FULL}
        self.deck = tuple(k for k in config.deck if self.left_out is None or k not in privileged)
        self.kinds = tuple(dict.fromkeys(self.deck))
        needs_network = any(k in NETWORK_KINDS for k in self.kinds)
        self.network = SoakNetwork(config.slot_names()) if needs_network else None
        self.relay: DelayRelay | None = None
        self.disk = (
            StoreDisk(run_dir / "store", config.store_disk_mb)
            if FaultKind.DISK_FULL in self.kinds
            else None
        )
        tokens = {g.group_id: f"soak-token-{g.group_id}" for g in config.groups}
        self.coordinator = CoordinatorProcess(
            settings=self.settings,
            db_path=(self.disk.path if self.disk else run_dir) / records.STORE,
            run_dir=run_dir,
            log_path=run_dir / "coordinator.log",
            admin_token=ADMIN_TOKEN,
            member_tokens=tokens,
        )
        self.processes = records.JsonLines(run_dir / records.PROCESSES)
        self.faults = records.JsonLines(run_dir / records.FAULTS)
        self.samples = records.JsonLines(run_dir / records.SAMPLES)
        self.slots: list[_Slot] = []
        self._tokens = tokens
        self._stop_sampling = threading.Event()
        self.admin: AdminClient | None = None

    # --- processes -------------------------------------------------------------------------

    def _start_member(self, slot: _Slot) -> MemberProcess:
        member = slot.fleet.start(
            slot.index, static=slot.group.static, protocol=slot.group.protocol
        )
        self.processes.write(
            {
                "event": "started",
                "group_id": slot.group.group_id,
                "slot": slot.name,
                "incarnation": member.incarnation,
                "log": str(member.log_path.relative_to(self.config.run_dir)),
                "pid": member.popen.pid,
                "ts_ms": member.started_ms,
            }
        )
        return member

    def _record_end(self, slot: _Slot, member: MemberProcess, how: str) -> None:
        if member.incarnation in slot.recorded:
            return
        slot.recorded.add(member.incarnation)
        self.processes.write(
            {
                "event": "ended",
                "slot": slot.name,
                "incarnation": member.incarnation,
                "how": how,
                "exit_code": member.exit_code,
                "ts_ms": member.exited_ms or now_ms(),
            }
        )

    def _kill_member(self, slot: _Slot) -> None:
        member = slot.fleet.live(slot_name(slot.index))
        if member is None:
            return
        member.popen.kill()
        member.exit_code = member.popen.wait()
        member.exited_ms = now_ms()
        member.stderr.close()
        self._record_end(slot, member, "killed")

    def supervise(self) -> None:
        """Restart every member that is not running (restartPolicy: Always)."""
        for slot in self.slots:
            if slot.fleet.live(slot_name(slot.index)) is not None:
                continue
            for member in slot.fleet.processes:
                if member.slot == slot_name(slot.index) and member.incarnation not in slot.recorded:
                    member.exit_code = member.popen.wait()
                    member.exited_ms = member.exited_ms or now_ms()
                    member.stderr.close()
                    self._record_end(slot, member, "exited")
            self._start_member(slot)

    # --- the public API ----------------------------------------------------------------------

    def _describe_all(self) -> dict[str, Any] | None:
        assert self.admin is not None
        try:
            return {g.group_id: self.admin.describe(g.group_id) for g in self.config.groups}
        except AdminError:
            return None

    def _sample_forever(self) -> None:
        assert self.admin is not None
        while not self._stop_sampling.wait(0.25):
            groups = self._describe_all()
            ts = now_ms()
            offsets: dict[str, list[list[Any]]] = {}
            if groups is not None:
                try:
                    for g in self.config.groups:
                        committed = self.admin.committed_offsets(g.group_id)
                        offsets[g.group_id] = [[t, p, o] for (t, p), o in sorted(committed.items())]
                except AdminError:
                    offsets = {}
            self.samples.write({"ts_ms": ts, "groups": groups, "offsets": offsets})

    def all_converged(self) -> bool:
        """Every group converged, by the public describe; the describe is kept as a sample
        so the checker judges the same observation (with the logs up to its time)."""
        groups = self._describe_all()
        ts = now_ms()
        self.samples.write({"ts_ms": ts, "groups": groups, "offsets": {}, "by": "driver"})
        if groups is None:
            return False
        for spec in self.config.groups:
            live_ids = set()
            for slot in self.slots:
                member = slot.fleet.live(slot_name(slot.index)) if slot.group is spec else None
                if member is not None:
                    live_ids.add(latest_member_id(member.rows(), until_ms=ts))
            if not converged(groups[spec.group_id], spec, live_ids):
                return False
        return True

    def wait_converged(self, bound_s: float) -> int | None:
        """ms from now until every group converged, or None past the bound."""
        start = time.monotonic()
        while time.monotonic() - start < bound_s:
            self.supervise()
            if self.all_converged():
                return int((time.monotonic() - start) * 1000)
            time.sleep(0.1)
        return None

    # --- faults ------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        start = now_ms()
        seconds = fault.duration_ms / 1000
        coordinator_pid = self.coordinator.pid
        extra: dict[str, Any] = {}
        if fault.kind in NETWORK_KINDS:
            self._network_fault(fault)
        elif fault.kind is FaultKind.DISK_FULL:
            assert self.disk is not None
            extra["filled_bytes"] = self.disk.fill()
            try:
                time.sleep(seconds)
            finally:
                self.disk.free()
        elif fault.kind is FaultKind.COORDINATOR_KILL:
            self.coordinator.kill()
            time.sleep(seconds)
            self.coordinator.start()
        elif fault.kind in (FaultKind.COORDINATOR_PAUSE_SHORT, FaultKind.COORDINATOR_PAUSE_LONG):
            assert coordinator_pid is not None
            os.kill(coordinator_pid, signal.SIGSTOP)
            time.sleep(seconds)
            os.kill(coordinator_pid, signal.SIGCONT)
        else:
            slot = next(s for s in self.slots if s.name == fault.target)
            if fault.kind is FaultKind.MEMBER_KILL:
                self._kill_member(slot)
                time.sleep(seconds)
                self._start_member(slot)
            else:
                member = slot.fleet.live(slot_name(slot.index))
                if member is None:
                    return
                member.popen.send_signal(signal.SIGSTOP)
                paused = now_ms()
                time.sleep(seconds)
                # Read before SIGCONT: the checker counts the process as running from then on
                # (the conservative side of the few microseconds the signal takes).
                resumed = now_ms()
                member.popen.send_signal(signal.SIGCONT)
                self.processes.write(
                    {
                        "event": "paused",
                        "slot": slot.name,
                        "incarnation": member.incarnation,
                        "start_ms": paused,
                        "end_ms": resumed,
                    }
                )
        self.faults.write(
            {
                **asdict(fault),
                **extra,
                "kind": fault.kind.value,
                "start_ms": start,
                "end_ms": now_ms(),
            }
        )

    def _network_fault(self, fault: Fault) -> None:
        """Between the target's namespace and the coordinator, for the fault's duration."""
        assert self.network is not None and self.relay is not None
        address = self.network.address(fault.target)
        if fault.kind in (FaultKind.NETWORK_DELAY_SHORT, FaultKind.NETWORK_DELAY_LONG):
            self.relay.set_delay(address, Delay(fault.delay_ms, fault.jitter_ms))
        elif fault.kind is FaultKind.NETWORK_LOSS:
            self.network.drop(fault.target, fault.loss_percent)
        else:
            self.network.drop(fault.target, 100)
        try:
            time.sleep(fault.duration_ms / 1000)
        finally:
            self.relay.set_delay(address, None)
            self.network.heal(fault.target)

    # --- the run -----------------------------------------------------------------------------

    def run(self, progress: Any = print) -> None:
        config = self.config
        left_out = sorted(set(config.deck) - set(self.kinds))
        if left_out:
            progress(f"soak: left out {', '.join(left_out)} ({self.left_out}: they need root)")
        (config.run_dir / records.RUN).write_text(
            json.dumps(
                {
                    "seed": config.seed,
                    "duration_s": config.duration_s,
                    "partitions": config.partitions,
                    "topic": TOPIC,
                    "session_timeout_ms": config.session_timeout_ms,
                    "recovery_bound_s": config.recovery_bound_s,
                    "groups": [asdict(g) for g in config.groups],
                    "fault_kinds": [k.value for k in self.kinds],
                    "fault_kinds_left_out": {k.value: self.left_out for k in left_out},
                    "network": NETWORK_MECHANISM if self.network else None,
                },
                indent=2,
            )
        )
        sampler = threading.Thread(target=self._sample_forever, name="soak-sampler", daemon=True)
        try:
            self._start_fleet(progress)
            if self.wait_converged(60.0) is None:
                raise SoakError("the fleet did not form in 60 s; see the run directory")
            sampler.start()
            plan = fault_plan(
                random.Random(config.seed),
                config.slot_names(),
                config.session_timeout_ms,
                self.deck,
            )
            deadline = time.monotonic() + config.duration_s
            count = 0
            while time.monotonic() < deadline and count < (config.max_faults or count + 1):
                fault = next(plan)
                time.sleep(fault.gap_ms / 1000)
                self.supervise()
                self.inject(fault)
                count += 1
                recovered = self.wait_converged(config.recovery_bound_s)
                progress(
                    f"fault {count}: {fault.kind.value} {fault.target} {fault.duration_ms} ms, "
                    f"converged after {recovered if recovered is not None else 'NOT'} ms"
                )
            # The faults have stopped: the group must converge within the bound.
            stopped = now_ms()
            final = self.wait_converged(config.recovery_bound_s)
            self.faults.write({"kind": "faults_stopped", "ts_ms": stopped, "converged": final})
            # A few quiet seconds, sampled: the groups must stay converged, and the last
            # sample is the end state the checker judges.
            time.sleep(self.SETTLE_S)
            self.all_converged()
        finally:
            self._stop_sampling.set()
            if sampler.is_alive():
                sampler.join(timeout=10)
            self._shutdown()

    def _start_fleet(self, progress: Any) -> None:
        """The network and the store's disk (when root), the coordinator, the members."""
        config = self.config
        member_url = None
        prefixes: dict[str, Any] = {}
        if self.network is not None or self.disk is not None:
            removed = remove_leftovers() + remove_leftover_mounts()
            if removed:
                progress(f"soak: removed leftovers of an earlier run: {', '.join(removed)}")
        if self.disk is not None:
            self.disk.mount()
        if self.network is not None:
            network = self.network
            network.create()
            self.coordinator.host = network.host
            self.relay = DelayRelay(network.host, network.host, seed=config.seed)
            self.relay.start()
            member_url = f"http://{network.host}:{self.relay.port}"
            for spec in config.groups:
                prefixes[spec.group_id] = lambda slot, group=spec.group_id: network.command_prefix(
                    f"{group}/{slot}"
                )
        self.coordinator.start()
        if self.relay is not None:
            self.relay.target_port = self.coordinator.port
        self.admin = AdminClient(self.coordinator.url, ADMIN_TOKEN)
        self.admin.set_topics({TOPIC: config.partitions})
        epoch = now_ms()
        for spec in config.groups:
            fleet = Fleet(
                settings=self.settings,
                coordinator_url=member_url or self.coordinator.url,
                group_id=spec.group_id,
                token=self._tokens[spec.group_id],
                log_dir=config.run_dir / records.MEMBERS_DIR / spec.group_id,
                source_epoch_ms=epoch,
                command_prefix=prefixes.get(spec.group_id),
            )
            for index in range(spec.members):
                slot = _Slot(group=spec, fleet=fleet, index=index)
                self.slots.append(slot)
                self._start_member(slot)

    def _shutdown(self) -> None:
        # Continue anything a failure left stopped, so SIGTERM can reach it.
        for slot in self.slots:
            member = slot.fleet.live(slot_name(slot.index))
            if member is not None:
                member.popen.send_signal(signal.SIGCONT)
        if self.coordinator.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.coordinator.pid, signal.SIGCONT)
        fleets = {id(s.fleet): s.fleet for s in self.slots}
        for fleet in fleets.values():
            fleet.stop_all()
        for slot in self.slots:
            for member in slot.fleet.processes:
                if member.slot == slot_name(slot.index):
                    self._record_end(slot, member, "terminated")
        self.coordinator.stop()
        for stream in (self.processes, self.faults, self.samples):
            stream.close()
        # What the soak made goes, also after a failure; the store is kept (the checker's).
        if self.relay is not None:
            self.relay.stop()
        if self.network is not None:
            self.network.remove()
        if self.disk is not None:
            self.disk.unmount(keep=self.config.run_dir)
