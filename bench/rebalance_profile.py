"""Where a big static group's full rebalance spends the coordinator's time (issue 26).

In process, no transport: a GroupCoordinator on a ManualClock with a SqliteStore (the
harness of tests/coordinator). MEMBERS static members form a group; then, profiled under
cProfile, a new static member joins and every member rejoins with its member id (what the
fleet's members do after REBALANCE_IN_PROGRESS), the join phase completes, and all of them
sync (the leader with one assignment each). Prints the join and sync phases' wall time and
the profile's top functions; what it leaves out (HTTP, JSON, the fleet's heartbeats) is
what broker_side_by_side measures end to end.

    python -m bench.rebalance_profile [--members 1000] [--sort tottime] [--top 25]
    python -m bench.rebalance_profile --leader-sync [--members 1000] [--runs 5]

`--leader-sync`: the CPU (all threads: the store's too) of the leader's SyncGroup alone, its
body decoded and its answer encoded as the server does, one consumer-protocol assignment of
one partition per member (as bench/loadgen's fleet sends), the followers parked: from the
decode to the leader's answer, before any follower runs. Fresh store each run; the median.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from bench.leader_sync import one_partition_each
from coordinator.clock import settle
from coordinator.messages import JoinGroupResponse, SyncGroupRequest
from coordinator.store import SqliteStore
from coordinator.wire import decode_plain, encode
from tests.coordinator.harness import GROUP, Harness, join_request


async def _rejoin(
    harness: Harness, instance_ids: list[str], formed: list[JoinGroupResponse]
) -> list[JoinGroupResponse]:
    """A new static member joins the formed group and every member rejoins."""
    tasks = [harness.join(join_request(instance_id="joiner"))]
    tasks += [
        harness.join(join_request(response.member_id, instance_id=instance_id))
        for instance_id, response in zip(instance_ids, formed, strict=True)
    ]
    return await harness.finish_join(tasks)


async def profile_rebalance(members: int, sort: str, top: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        harness = await Harness(store=SqliteStore(Path(directory) / "coordinator.db")).start()
        instance_ids = [f"member-{index}" for index in range(members)]
        formed = await harness.form_group(instance_ids)
        profiler = cProfile.Profile()
        began = time.perf_counter()
        profiler.enable()
        joined = await _rejoin(harness, instance_ids, formed)
        join_done = time.perf_counter()
        await harness.complete_sync(joined)
        profiler.disable()
        synced = time.perf_counter()
        await harness.coordinator.close()
    print(
        f"{members} members + 1 joining: join phase {join_done - began:.3f} s,"
        f" sync phase {synced - join_done:.3f} s"
    )
    pstats.Stats(profiler).sort_stats(sort).print_stats(top)


async def leader_sync_cpu(members: int) -> float:
    """Seconds of CPU of one leader's SyncGroup (see the docstring)."""
    with tempfile.TemporaryDirectory() as directory:
        harness = await Harness(store=SqliteStore(Path(directory) / "coordinator.db")).start()
        instance_ids = [f"member-{index}" for index in range(members)]
        joined = await _rejoin(harness, instance_ids, await harness.form_group(instance_ids))
        leader = next(r for r in joined if r.leader == r.member_id)
        followers = [harness.sync(r.member_id, r.generation_id) for r in joined if r is not leader]
        await settle()  # every follower parked
        assignments = one_partition_each(member.member_id for member in leader.members)
        body = json.dumps(
            {
                "group_id": GROUP, "generation_id": leader.generation_id,
                "member_id": leader.member_id, "group_instance_id": None,
                "protocol_type": "consumer", "protocol_name": leader.protocol_name,
                "assignments": assignments,
            }
        ).encode()  # fmt: skip
        began = time.process_time()
        request = decode_plain(SyncGroupRequest, body)
        assert request is not None
        answer = await harness.coordinator.sync_group(request)
        encode(answer)
        spent = time.process_time() - began
        assert answer.error_code == 0, answer
        await asyncio.gather(*followers)
        await harness.coordinator.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--sort", default="tottime", help="a pstats sort key")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--leader-sync", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not args.leader_sync:
        asyncio.run(profile_rebalance(args.members, args.sort, args.top))
        return
    runs = [asyncio.run(leader_sync_cpu(args.members)) * 1000 for _ in range(args.runs)]
    print(
        f"leader's SyncGroup of {args.members} + 1 members, CPU ms: median"
        f" {statistics.median(runs):.1f}, runs {[round(run, 1) for run in runs]}"
    )


if __name__ == "__main__":
    main()
