"""Runs a soak: a real `coordinator serve` on its SQLite store (or, in the Kafka variant, a
real Kafka broker; in the operator variant, `operator run` beside a real kube-apiserver,
given by e2e/soak_operator.py), real member processes of a few groups, and the seeded
faults, one after another; then hands the run to the checker.

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
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from staticfleet.demo.admin import AdminClient, AdminError
from staticfleet.demo.fleet import CoordinatorProcess, Fleet, MemberProcess, now_ms, slot_name
from staticfleet.demo.kafka_mode import KAFKA_SCHEME, KafkaCoordinator
from staticfleet.demo.settings import DemoSettings
from staticfleet.soak import records
from staticfleet.soak.checker import GroupSpec, converged, latest_member_id
from staticfleet.soak.disk import StoreDisk, remove_leftover_mounts
from staticfleet.soak.kafka_api import BrokerGroupsApi
from staticfleet.soak.network import SoakNetwork, missing_privileges, remove_leftovers
from staticfleet.soak.plan import (
    BROKER_KINDS,
    DECK,
    KAFKA_DECK,
    NETWORK_KINDS,
    OPERATOR_DECK,
    OPERATOR_KINDS,
    Fault,
    FaultKind,
    fault_plan,
)
from staticfleet.soak.relay import Delay, DelayRelay

TOPIC = "events"
ADMIN_TOKEN = "soak-admin-token"  # loopback only, a throwaway store


# How the network kinds are made here (docs/soak.md says why not with tc netem).
NETWORK_MECHANISM = (
    "a namespace and veth per member on a bridge; loss and partitions: iptables DROP in the "
    "member's namespace; delay: the soak's relay (no sch_netem in this kernel)"
)


# What holds the groups: our coordinator (`coordinator serve`), a Kafka broker (named as
# `staticfleet demo --coordinator` names them), or the operator's embedded coordinator.
Coordinator = Literal["embedded", "kafka", "operator"]
# Within this of a fault's end every group must be converged again. Ours: a rejoin round and
# a session (3 s) with a wide margin. On the broker a fault ends once it answers metadata
# again, but its group coordinator still loads __consumer_offsets, and an eager round waits
# up to the rebalance timeout (6 s) for every member, a dynamic member's old id its session
# (3 s) first: docs/soak.md, "The Kafka variant".
# The operator's: ours, its restart counted from when it serves again (its tokens are back).
RECOVERY_BOUND_S: dict[Coordinator, float] = {"embedded": 30.0, "kafka": 60.0, "operator": 30.0}
# Not in the Kafka variant's deck, and why (run.json and the report say it).
KAFKA_LEFT_OUT = {FaultKind.DISK_FULL: "the Kafka variant: no store of ours to fill"}
# The broker's listener for the members on the soak's bridge, behind the relay.
MEMBERS_LISTENER = "MEMBERS"


PAUSES = frozenset(
    {
        FaultKind.COORDINATOR_PAUSE_SHORT,
        FaultKind.COORDINATOR_PAUSE_LONG,
        FaultKind.BROKER_PAUSE_SHORT,
        FaultKind.BROKER_PAUSE_LONG,
    }
)
# The kinds aimed at what holds the groups (our coordinator, the broker or the operator).
KILLS = frozenset({FaultKind.COORDINATOR_KILL, FaultKind.BROKER_KILL, FaultKind.OPERATOR_KILL})
# Each variant's kinds that have nothing to aim at in it.
FOREIGN_KINDS: dict[Coordinator, frozenset[FaultKind]] = {
    "embedded": BROKER_KINDS | OPERATOR_KINDS,
    "kafka": (PAUSES | KILLS) - BROKER_KINDS | OPERATOR_KINDS,
    "operator": BROKER_KINDS | {FaultKind.COORDINATOR_KILL},
}
DECKS: dict[Coordinator, tuple[FaultKind, ...]] = {
    "embedded": DECK,
    "kafka": KAFKA_DECK,
    "operator": OPERATOR_DECK,
}


class GroupHost(Protocol):
    """What holds the groups and can be killed and started again on the same store and
    port: `coordinator serve` (CoordinatorProcess) or the operator (e2e/soak_operator.py)."""

    host: str  # the address it listens on, set before the first start

    @property
    def url(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def pid(self) -> int | None: ...

    def start(self, timeout_s: float = 30.0) -> None: ...

    def kill(self) -> None: ...

    def stop(self) -> int | None: ...


@runtime_checkable
class ApiServerHost(Protocol):
    """A host beside a Kubernetes API server the soak may restart."""

    def restart_apiserver(self, down_s: float) -> int:
        """Kill -9 the API server, start it again after `down_s`; ms until it is ready."""
        ...


# Makes the operator variant's host: (the soak, its store's path, group id -> member token).
HostFactory = Callable[["SoakConfig", Path, Mapping[str, str]], GroupHost]


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
    # The bound within which every group must be converged after a fault ends (None: the
    # variant's, RECOVERY_BOUND_S).
    recovery_bound_s: float | None = None
    # Stop after this many faults even if time is left (the smoke test's short run).
    max_faults: int | None = None
    # The kinds the plan deals, each as often as it is here (None: the variant's, plan.DECK
    # or plan.KAFKA_DECK); the network and disk kinds are left out without root.
    deck: tuple[FaultKind, ...] | None = None
    coordinator: Coordinator = "embedded"
    # The store's tmpfs: small, so the filler is quick, yet far above a run's store.
    store_disk_mb: int = 64
    groups: tuple[GroupSpec, ...] = (
        GroupSpec("soak-eager", static=True, protocol="eager", members=3),
        GroupSpec("soak-cooperative", static=True, protocol="cooperative", members=3),
        GroupSpec("soak-dynamic", static=False, protocol="cooperative", members=2),
    )

    def fault_deck(self) -> tuple[FaultKind, ...]:
        return self.deck if self.deck is not None else DECKS[self.coordinator]

    def bound_s(self) -> float:
        if self.recovery_bound_s is not None:
            return self.recovery_bound_s
        return RECOVERY_BOUND_S[self.coordinator]

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

    def __init__(self, config: SoakConfig, make_host: HostFactory | None = None) -> None:
        self.config = config
        if (config.coordinator == "operator") != (make_host is not None):
            raise SoakError(
                "the operator variant runs beside a Kubernetes API server: "
                "python -m e2e.soak_operator (docs/soak.md)"
            )
        run_dir = config.run_dir
        if run_dir.exists() and any(run_dir.iterdir()):
            raise SoakError(f"{run_dir} is not empty: give a new --run-dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        self.settings = config.demo_settings()
        kafka = config.coordinator == "kafka"
        deck = config.fault_deck()
        # Our coordinator's process kinds have nothing to aim at on a broker, and back.
        wrong = sorted(set(deck) & FOREIGN_KINDS[config.coordinator])
        if wrong:
            raise SoakError(f"not kinds of the {config.coordinator} variant: {', '.join(wrong)}")
        # The network and disk kinds need root (namespaces, iptables, mount).
        missing = missing_privileges()
        privileged = {*NETWORK_KINDS, FaultKind.DISK_FULL}
        self.left_out: dict[FaultKind, str] = {
            k: f"{missing}: they need root" for k in deck if missing and k in privileged
        }
        if kafka:
            self.left_out.update(KAFKA_LEFT_OUT)
        self.deck = tuple(k for k in deck if k not in self.left_out)
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
        self.coordinator: GroupHost | KafkaCoordinator
        store = (self.disk.path if self.disk else run_dir) / records.STORE
        if make_host is not None:
            self.coordinator = make_host(config, store, tokens)
        elif kafka:
            # Its own broker (a kill -9 of a shared one would break other tests), on a log
            # directory in the run directory, kept for a look afterwards.
            self.coordinator = KafkaCoordinator(run_dir / records.BROKER_DIR)
        else:
            self.coordinator = CoordinatorProcess(
                settings=self.settings,
                db_path=store,
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
        self.admin: AdminClient | BrokerGroupsApi | None = None
        # The sampler's own (a broker's API client serves one thread: kafka_api.py).
        self.sampler_admin: AdminClient | BrokerGroupsApi | None = None

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

    def _describe_all(
        self, admin: AdminClient | BrokerGroupsApi | None = None
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Every group's describe, or None and why not (kept in the sample)."""
        admin = admin or self.admin
        assert admin is not None
        try:
            return {g.group_id: admin.describe(g.group_id) for g in self.config.groups}, None
        except AdminError as error:
            return None, str(error)

    def _sample_forever(self) -> None:
        admin = self.sampler_admin
        assert admin is not None
        while not self._stop_sampling.wait(0.25):
            groups, error = self._describe_all(admin)
            ts = now_ms()
            offsets: dict[str, list[list[Any]]] = {}
            if groups is not None:
                try:
                    for g in self.config.groups:
                        committed = admin.committed_offsets(g.group_id)
                        offsets[g.group_id] = [[t, p, o] for (t, p), o in sorted(committed.items())]
                except AdminError as failed:
                    offsets, error = {}, str(failed)
            row = {"ts_ms": ts, "groups": groups, "offsets": offsets}
            self.samples.write({**row, "error": error} if error else row)

    def all_converged(self) -> bool:
        """Every group converged, by the public describe; the describe is kept as a sample
        so the checker judges the same observation (with the logs up to its time)."""
        groups, error = self._describe_all()
        ts = now_ms()
        row = {"ts_ms": ts, "groups": groups, "offsets": {}, "by": "driver"}
        self.samples.write({**row, "error": error} if error else row)
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
        elif fault.kind is FaultKind.APISERVER_RESTART:
            assert isinstance(self.coordinator, ApiServerHost)
            extra["restart_ms"] = self.coordinator.restart_apiserver(seconds)
        elif fault.kind in KILLS:
            self.coordinator.kill()
            time.sleep(seconds)
            restarted = now_ms()
            # Returns once it serves again: ours listens, the broker answers metadata, the
            # operator's coordinator is ready (every group's token registered again).
            self.coordinator.start()
            extra["restart_ms"] = now_ms() - restarted
        elif fault.kind in PAUSES:
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
        for reason in dict.fromkeys(self.left_out.values()):
            kinds = sorted(k for k, why in self.left_out.items() if why == reason)
            progress(f"soak: left out {', '.join(kinds)} ({reason})")
        (config.run_dir / records.RUN).write_text(
            json.dumps(
                {
                    "seed": config.seed,
                    "coordinator": config.coordinator,
                    "duration_s": config.duration_s,
                    "partitions": config.partitions,
                    "topic": TOPIC,
                    "session_timeout_ms": config.session_timeout_ms,
                    "recovery_bound_s": config.bound_s(),
                    "groups": [asdict(g) for g in config.groups],
                    "fault_kinds": [k.value for k in self.kinds],
                    "fault_kinds_left_out": {
                        k.value: why for k, why in sorted(self.left_out.items())
                    },
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
                recovered = self.wait_converged(config.bound_s())
                progress(
                    f"fault {count}: {fault.kind.value} {fault.target} {fault.duration_ms} ms, "
                    f"converged after {recovered if recovered is not None else 'NOT'} ms"
                )
            # The faults have stopped: the group must converge within the bound.
            stopped = now_ms()
            final = self.wait_converged(config.bound_s())
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
            self.relay = DelayRelay(network.host, network.host, seed=config.seed)
            self.relay.start()
            if isinstance(self.coordinator, KafkaCoordinator):
                # A listener on the bridge, advertised at the relay: the address every
                # member reconnects to after metadata goes through the relay too.
                self.relay.target_port = self.coordinator.broker.add_listener(
                    MEMBERS_LISTENER, network.host, f"{network.host}:{self.relay.port}"
                )
                member_url = f"{KAFKA_SCHEME}{network.host}:{self.relay.port}"
            else:
                self.coordinator.host = network.host
                member_url = f"http://{network.host}:{self.relay.port}"
            for spec in config.groups:
                prefixes[spec.group_id] = lambda slot, group=spec.group_id: network.command_prefix(
                    f"{group}/{slot}"
                )
        self.coordinator.start()
        if isinstance(self.coordinator, KafkaCoordinator):
            broker = self.coordinator.broker
            # The members read the synthetic source, as on ours; the topic is there for the
            # group's leader to assign its partitions (the cluster's metadata) and for the
            # broker to take commits for them.
            broker.create_topic(TOPIC, config.partitions)
            self.admin = BrokerGroupsApi(broker.bootstrap)
            self.sampler_admin = BrokerGroupsApi(broker.bootstrap)
            member_url = member_url or self.coordinator.url
        else:
            if self.relay is not None:
                self.relay.target_port = self.coordinator.port
            admin = AdminClient(self.coordinator.url, ADMIN_TOKEN)
            admin.set_topics({TOPIC: config.partitions})
            self.admin = self.sampler_admin = admin
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

    def _write_final_offsets(self, admin: BrokerGroupsApi) -> None:
        """The committed offsets once every member has stopped, from the broker's public
        API: what the checker holds the acknowledged commits against (a broker has no store
        file of ours to read)."""
        offsets: dict[str, list[list[Any]]] = {}
        error = None
        for attempt in range(10):
            try:
                for g in self.config.groups:
                    committed = admin.committed_offsets(g.group_id)
                    offsets[g.group_id] = [[t, p, o] for (t, p), o in sorted(committed.items())]
                error = None
                break
            except AdminError as failed:  # a broker still loading its offsets, say
                error = str(failed)
                time.sleep(0.5 * (attempt + 1))
        (self.config.run_dir / records.FINAL_OFFSETS).write_text(
            json.dumps({"ts_ms": now_ms(), "offsets": offsets, "error": error}, indent=1)
        )

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
        if isinstance(self.admin, BrokerGroupsApi):
            self._write_final_offsets(self.admin)
        for admin in (self.admin, self.sampler_admin):
            if isinstance(admin, BrokerGroupsApi):
                admin.close()
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
