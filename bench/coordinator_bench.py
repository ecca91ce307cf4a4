"""Coordinator benchmarks (docs/performance.md): the embedded `GroupCoordinator`, in-process.

What is measured, for each store (`MemoryStore`, and `SqliteStore` on a temporary file with
its default `synchronous=FULL`), in a child process pinned to one core:

1. Formation: 1,000 static members join one new group at once (initial rebalance delay
   0 ms), the leader runs the real cooperative-sticky assignor over 8 topics x 1,000
   partitions (8 partitions per member) through `coordinator.client.leader.assign`, and
   every member syncs. Time from the first JoinGroup to the last SyncGroup answer, i.e.
   until the group is Stable with every member holding its assignment.
2. Heartbeats per second for the 1,000 members of the Stable group: back-to-back awaited
   `GroupCoordinator.heartbeat` calls ("direct"), and rounds of one task per heartbeat for
   all 1,000 members at once ("one task each", closer to a server's one task per request).
3. Full rebalance, `REBALANCE_RUNS` (5) times in a row: one member leaves (a batch
   LeaveGroup by instance id, as the operator's scale-down sends it) and the others rejoin
   with their member ids and owned partitions (cooperative), the leader assigns again,
   everyone syncs. Time from the LeaveGroup to the last SyncGroup answer (how soon members
   notice the rebalance, a heartbeat interval in real life, is not included). The
   target (docs/performance.md, "Targets"): under 2 s, judged on the median run; every
   run is reported with the process's CPU time, so a run slowed by other work on the
   machine shows as wall >> CPU.

Members here are plain request loops (`Fleet`, shared with `bench.http_bench`), not
`GroupMember`s: the figure is the coordinator's (plus the leader's assignor, which is on the
critical path). Member-side encoding of subscriptions happens before the clock starts.

    python -m bench.run --only coordinator [--quick]
    python -m bench.coordinator_bench --store memory            # one case, JSON on stdout
    python -m bench.coordinator_bench --store sqlite --profile /tmp/c.prof   # + cProfile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import resource
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.child import run_child
from coordinator import (
    CoordinatorConfig,
    ErrorCode,
    GroupCoordinator,
    GroupState,
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    LeaveGroupRequest,
    MemberIdentity,
    MemoryStore,
    SqliteStore,
    Store,
    SyncGroupRequest,
    SystemClock,
)
from coordinator.assignors import get_assignor
from coordinator.client.inprocess import InProcessTransport
from coordinator.client.leader import assign
from coordinator.client.transport import Transport
from coordinator.messages import SyncGroupRequestAssignment
from coordinator.protocol import (
    Subscription,
    TopicPartition,
    decode_assignment,
    encode_cooperative_sticky_user_data,
    encode_subscription,
)

TARGET_SECONDS = 2.0
REPO_ROOT = Path(__file__).resolve().parent.parent
GROUP_ID = "bench-group"
ASSIGNOR = "cooperative-sticky"
PROTOCOL_TYPE = "consumer"
SESSION_TIMEOUT_MS = 60_000
REBALANCE_TIMEOUT_MS = 60_000
INITIAL_REBALANCE_DELAY_MS = 0
STORES = ("memory", "sqlite")
# The full rebalance is measured this many times in a row (one member leaves each time);
# the target is judged on the median, and every run is reported.
REBALANCE_RUNS = 5


@dataclass(frozen=True)
class Sizes:
    members: int
    topics: int
    partitions_per_topic: int
    heartbeat_seconds: float


def sizes(quick: bool) -> Sizes:
    if quick:
        return Sizes(members=100, topics=8, partitions_per_topic=100, heartbeat_seconds=1.0)
    return Sizes(members=1000, topics=8, partitions_per_topic=1000, heartbeat_seconds=5.0)


class BenchError(RuntimeError):
    """The coordinator answered something a healthy group never answers here."""


# -- the fleet: plain members over any transport (shared with bench.http_bench) -------------


@dataclass
class FleetMember:
    index: int
    instance_id: str
    member_id: str = ""
    generation_id: int = -1
    metadata: bytes = b""
    owned: tuple[TopicPartition, ...] = ()
    assignment: bytes = b""


@dataclass
class _Round:
    """Bookkeeping of one rebalance round, from the members' side."""

    size: int
    started: float
    done: asyncio.Event = field(default_factory=asyncio.Event)
    synced: dict[str, tuple[int, float]] = field(default_factory=dict)  # instance -> gen, t
    last_join_answered: float = 0.0
    leader_assign_seconds: float = 0.0
    leader_sync_sent: float = 0.0
    join_requests: int = 0
    sync_requests: int = 0
    heartbeats_while_waiting: int = 0
    retries: list[str] = field(default_factory=list)

    def mark_synced(self, member: FleetMember, now: float) -> None:
        self.synced[member.instance_id] = (member.generation_id, now)
        if len(self.synced) == self.size:
            generations = {generation for generation, _ in self.synced.values()}
            # Every member synced in the same generation: nobody is left to trigger another
            # rebalance, so the group is Stable in that generation.
            if len(generations) == 1:
                self.done.set()


class Fleet:
    """`size` static members of one group, driven round by round as real members would be:
    join (long poll), the leader assigns, sync (followers long-poll for the leader), and
    while others are still syncing, heartbeat so that a further rebalance is noticed."""

    def __init__(
        self,
        transport: Transport,
        size: int,
        partitions_per_topic: dict[str, int],
        *,
        admin_transport: Transport | None = None,
        group_id: str = GROUP_ID,
        heartbeat_interval_s: float = 1.0,
    ) -> None:
        self.transport = transport
        self.admin_transport = admin_transport or transport
        self.group_id = group_id
        self.partitions_per_topic = dict(partitions_per_topic)
        self.topics = tuple(sorted(partitions_per_topic))
        self.heartbeat_interval_s = heartbeat_interval_s
        self.assignor = get_assignor(ASSIGNOR)
        self.members = [FleetMember(i, f"instance-{i:05d}") for i in range(size)]
        for member in self.members:
            member.metadata = self._subscription(member)

    def _subscription(self, member: FleetMember) -> bytes:
        return encode_subscription(
            Subscription(
                self.topics,
                user_data=encode_cooperative_sticky_user_data(member.generation_id),
                owned_partitions=member.owned,
                generation_id=member.generation_id,
            )
        )

    def join_request(self, member: FleetMember) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            member_id=member.member_id,
            group_instance_id=member.instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=[JoinGroupProtocol(ASSIGNOR, member.metadata)],
            client_id="bench",
            client_host="127.0.0.1",
        )

    def heartbeat_request(self, member: FleetMember) -> HeartbeatRequest:
        return HeartbeatRequest(
            self.group_id, member.generation_id, member.member_id, member.instance_id
        )

    async def form(self) -> dict[str, Any]:
        """Every member joins the (new) group; returns the round's figures."""
        return await self._round(time.perf_counter())

    async def leave_and_rebalance(self) -> dict[str, Any]:
        """The last member leaves by instance id; the rest rejoin with what they own."""
        leaving = self.members.pop()
        for member in self.members:
            # What a cooperative member sends when it rejoins: its owned partitions and the
            # generation they are from (KIP-429, KIP-792). Built before the clock starts.
            member.metadata = self._subscription(member)
        started = time.perf_counter()
        response = await self.admin_transport.leave_group(
            LeaveGroupRequest(self.group_id, [MemberIdentity("", leaving.instance_id)])
        )
        leave_seconds = time.perf_counter() - started
        codes = [result.error_code for result in response.members]
        if response.error_code is not ErrorCode.NONE or codes != [ErrorCode.NONE]:
            raise BenchError(f"LeaveGroup answered {response.error_code.name}, {codes}")
        figures = await self._round(started)
        figures["leave_request_seconds"] = round(leave_seconds, 4)
        return figures

    async def _round(self, started: float) -> dict[str, Any]:
        state = _Round(size=len(self.members), started=started)
        cpu = time.process_time()
        await asyncio.gather(*(self._member_round(member, state) for member in self.members))
        stable_at = max(t for _, t in state.synced.values())
        cpu_seconds = time.process_time() - cpu
        previously_owned = {member.instance_id: set(member.owned) for member in self.members}
        for member in self.members:
            member.owned = decode_assignment(member.assignment).partitions
        counts = [len(member.owned) for member in self.members]
        everything = [tp for member in self.members for tp in member.owned]
        revoked = sum(
            len(previously_owned[member.instance_id] - set(member.owned)) for member in self.members
        )
        leader_sync = state.leader_sync_sent
        return {
            "members": len(self.members),
            "generation_id": self.members[0].generation_id,
            "seconds_to_stable": round(stable_at - started, 4),
            "seconds_to_last_join_answer": round(state.last_join_answered - started, 4),
            "leader_assign_seconds": round(state.leader_assign_seconds, 4),
            "seconds_leader_sync_to_stable": round(stable_at - leader_sync, 4)
            if leader_sync
            else None,
            "join_requests": state.join_requests,
            "sync_requests": state.sync_requests,
            "heartbeats_while_waiting": state.heartbeats_while_waiting,
            "retries": len(state.retries),
            "retry_reasons": sorted(set(state.retries)),
            "partitions_assigned": len(everything),
            "partitions_assigned_once": len(everything) == len(set(everything)),
            "min_partitions_per_member": min(counts, default=0),
            "max_partitions_per_member": max(counts, default=0),
            "partitions_revoked_from_members_that_stayed": revoked,
            # CPU time of this whole process (every thread) during the round: with a
            # pinned, otherwise idle core it is close to the wall time of busy phases.
            "process_cpu_seconds": round(cpu_seconds, 4),
        }

    async def _member_round(self, member: FleetMember, state: _Round) -> None:
        while True:
            if await self._join_and_sync(member, state) and await self._wait_for_all(member, state):
                return

    async def _join_and_sync(self, member: FleetMember, state: _Round) -> bool:
        state.join_requests += 1
        joined = await self.transport.join_group(self.join_request(member))
        if joined.error_code is not ErrorCode.NONE:
            raise BenchError(f"{member.instance_id}: JoinGroup {joined.error_code.name}")
        state.last_join_answered = max(state.last_join_answered, time.perf_counter())
        member.member_id = joined.member_id
        member.generation_id = joined.generation_id
        assignments: list[SyncGroupRequestAssignment] = []
        if joined.leader == joined.member_id:
            clock = time.perf_counter()
            assignments = assign(self.assignor, joined.members, self.partitions_per_topic)
            state.leader_sync_sent = time.perf_counter()
            state.leader_assign_seconds = state.leader_sync_sent - clock
        state.sync_requests += 1
        synced = await self.transport.sync_group(
            SyncGroupRequest(
                self.group_id,
                joined.generation_id,
                joined.member_id,
                member.instance_id,
                joined.protocol_type,
                joined.protocol_name,
                assignments,
            )
        )
        if synced.error_code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            # A further rebalance started before ours completed: rejoin, as a member would.
            state.retries.append(f"sync {synced.error_code.name}")
            return False
        if synced.error_code is not ErrorCode.NONE:
            raise BenchError(f"{member.instance_id}: SyncGroup {synced.error_code.name}")
        member.assignment = synced.assignment
        state.mark_synced(member, time.perf_counter())
        return True

    async def _wait_for_all(self, member: FleetMember, state: _Round) -> bool:
        """Wait for the rest of the fleet; False when a heartbeat says rejoin."""
        retry = (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION)
        while not state.done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.done.wait(), self.heartbeat_interval_s)
            if state.done.is_set():
                break
            state.heartbeats_while_waiting += 1
            beat = await self.transport.heartbeat(self.heartbeat_request(member))
            if beat.error_code in retry:
                state.retries.append(f"heartbeat {beat.error_code.name}")
                state.synced.pop(member.instance_id, None)
                return False
            if beat.error_code is not ErrorCode.NONE:
                raise BenchError(f"{member.instance_id}: Heartbeat {beat.error_code.name}")
        return True


# -- heartbeats in-process -------------------------------------------------------------------


async def _heartbeat_rate(
    coordinator: GroupCoordinator,
    requests: list[HeartbeatRequest],
    seconds: float,
    *,
    one_task_each: bool,
    max_heartbeats: int = 50_000_000,
) -> dict[str, Any]:
    count = errors = 0
    cpu = time.process_time()
    started = time.perf_counter()
    deadline = started + seconds
    while count < max_heartbeats:
        if one_task_each:
            responses = await asyncio.gather(*(coordinator.heartbeat(r) for r in requests))
            errors += sum(1 for r in responses if r.error_code is not ErrorCode.NONE)
        else:
            for request in requests:
                response = await coordinator.heartbeat(request)
                if response.error_code is not ErrorCode.NONE:
                    errors += 1
        count += len(requests)
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - started
    return {
        "heartbeats": count,
        "errors": errors,
        "seconds": round(elapsed, 3),
        "heartbeats_per_second": round(count / elapsed),
        "microseconds_per_heartbeat": round(elapsed / count * 1e6, 2),
        "cpu_seconds": round(time.process_time() - cpu, 3),
    }


# -- one case (child process) ----------------------------------------------------------------


async def run_case_async(store_name: str, quick: bool) -> dict[str, Any]:
    size = sizes(quick)
    topics = {f"topic-{t:02d}": size.partitions_per_topic for t in range(size.topics)}
    with tempfile.TemporaryDirectory(prefix="staticfleet-bench-") as directory:
        store: Store
        store_detail: dict[str, Any]
        if store_name == "sqlite":
            path = Path(directory) / "coordinator.db"
            store = SqliteStore(path)
            store_detail = {"kind": "SqliteStore", "synchronous": "FULL", "file": str(path)}
        else:
            store = MemoryStore()
            store_detail = {"kind": "MemoryStore"}
        config = CoordinatorConfig(group_initial_rebalance_delay_ms=INITIAL_REBALANCE_DELAY_MS)
        coordinator = GroupCoordinator(config, SystemClock(), store)
        await coordinator.start()
        await coordinator.set_topic_metadata(topics)
        try:
            fleet = Fleet(InProcessTransport(coordinator), size.members, topics)
            formation = await fleet.form()
            _check_stable(coordinator)
            # Heartbeats while all members are in the group, then the rebalances.
            requests = [fleet.heartbeat_request(member) for member in fleet.members]
            direct = await _heartbeat_rate(
                coordinator, requests, size.heartbeat_seconds, one_task_each=False
            )
            tasks = await _heartbeat_rate(
                coordinator, requests, size.heartbeat_seconds, one_task_each=True
            )
            rebalances = []
            for _ in range(REBALANCE_RUNS):
                rebalances.append(await fleet.leave_and_rebalance())
                _check_stable(coordinator)
            journal_rows = len(await coordinator.journal_rows(GROUP_ID))
        finally:
            await coordinator.close()
    return {
        "store": store_detail,
        "setup": {
            "members": size.members,
            "static_members": True,
            "initial_rebalance_delay_ms": INITIAL_REBALANCE_DELAY_MS,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
            "assignor": f"{ASSIGNOR} (real, run by the leader via coordinator.client.leader)",
            "partitions": size.topics * size.partitions_per_topic,
            "topics": size.topics,
        },
        "formation": formation,
        "full_rebalance": summarize_rebalances(rebalances),
        "heartbeats": {
            "members": len(requests),
            "direct": direct,
            "one_task_each": tasks,
        },
        "journal_rows": journal_rows,
    }


def summarize_rebalances(runs: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = sorted(run["seconds_to_stable"] for run in runs)
    return {
        "runs": runs,
        "seconds_to_stable_each": [run["seconds_to_stable"] for run in runs],
        "seconds_to_stable_median": seconds[len(seconds) // 2],
        "seconds_to_stable_max": seconds[-1],
    }


def load_average() -> list[float] | None:
    """Other work on the machine shows here; figures taken under load are noisier."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def _check_stable(coordinator: GroupCoordinator) -> None:
    state = coordinator.group_state(GROUP_ID)
    if state is not GroupState.STABLE:
        raise BenchError(f"group is {state}, expected Stable")


def run_case(store_name: str, quick: bool, profile: Path | None = None) -> dict[str, Any]:
    pinned_cpu = pin_to_one_core()
    baseline = peak_rss_mib()
    load_before = load_average()
    if profile is None:
        result = asyncio.run(run_case_async(store_name, quick))
    else:
        result = _profiled(lambda: run_case_async(store_name, quick), profile)
    result["pinned_cpu"] = pinned_cpu
    result["load_average_before_after"] = [load_before, load_average()]
    result["peak_rss_mib"] = peak_rss_mib()
    result["baseline_rss_mib"] = baseline
    return result


def _profiled(make: Callable[[], Awaitable[dict[str, Any]]], output: Path) -> dict[str, Any]:
    profiler = cProfile.Profile()

    async def wrapped() -> dict[str, Any]:
        return await make()

    profiler.enable()
    result = asyncio.run(wrapped())
    profiler.disable()
    profiler.dump_stats(output)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).strip_dirs()
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    print(text.getvalue(), file=sys.stderr)
    return result


def pin_to_one_core() -> int | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def peak_rss_mib() -> float:
    # ru_maxrss is KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    divisor = 1024 * 1024 if sys.platform == "darwin" else 1024
    return round(peak / divisor, 1)


# -- parent side -----------------------------------------------------------------------------


def run(quick: bool) -> dict[str, Any]:
    """Each store in its own pinned child process; the figures `bench.run` writes to JSON."""
    cases: dict[str, Any] = {}
    for store_name in STORES:
        cases[store_name] = run_child(
            "bench.coordinator_bench", ["--store", store_name], quick, 900
        )
        case = cases[store_name]
        if "error" in case:
            print(f"  {store_name}: error {case['error'][-1:]}", flush=True)
            continue
        print(
            f"  {store_name}: formation {case['formation']['seconds_to_stable']} s, "
            f"full rebalance {case['full_rebalance']['seconds_to_stable_each']} s, "
            f"heartbeats {case['heartbeats']['direct']['heartbeats_per_second']}/s",
            flush=True,
        )
    figures = {
        name: case.get("full_rebalance", {}).get("seconds_to_stable_median")
        for name, case in cases.items()
    }
    met = all(isinstance(s, float) and s < TARGET_SECONDS for s in figures.values())
    return {
        "target": {
            "what": (
                "1,000 static members, one full rebalance (one member leaves, 999 rejoin, "
                "leader assigns cooperative-sticky, all sync) until Stable, in-process, one core"
            ),
            "target_seconds": TARGET_SECONDS,
            "full_rebalance_seconds_median": figures,
            "met": met if not quick else None,
        },
        "cases": cases,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.coordinator_bench")
    parser.add_argument("--store", choices=STORES, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--profile", type=Path, help="run under cProfile: stats to this file, top to stderr"
    )
    args = parser.parse_args(argv)
    print(json.dumps(run_case(args.store, args.quick, args.profile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
