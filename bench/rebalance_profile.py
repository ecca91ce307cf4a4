"""Where a big static group's full rebalance spends the coordinator's time (issue 26).

In process, no transport: a GroupCoordinator on a ManualClock with a SqliteStore (the
harness of tests/coordinator). MEMBERS static members form a group; then, profiled under
cProfile, a new static member joins and every member rejoins with its member id (what the
fleet's members do after REBALANCE_IN_PROGRESS), the join phase completes, and all of them
sync (the leader with one assignment each). Prints the join and sync phases' wall time and
the profile's top functions; what it leaves out (HTTP, JSON, the fleet's heartbeats) is
what broker_side_by_side measures end to end.

    python -m bench.rebalance_profile [--members 1000] [--sort tottime] [--top 25]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from coordinator.store import SqliteStore
from tests.coordinator.harness import Harness, join_request


async def profile_rebalance(members: int, sort: str, top: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        harness = await Harness(store=SqliteStore(Path(directory) / "coordinator.db")).start()
        instance_ids = [f"member-{index}" for index in range(members)]
        formed = await harness.form_group(instance_ids)
        profiler = cProfile.Profile()
        began = time.perf_counter()
        profiler.enable()
        tasks = [harness.join(join_request(instance_id="joiner"))]
        tasks += [
            harness.join(join_request(response.member_id, instance_id=instance_id))
            for instance_id, response in zip(instance_ids, formed, strict=True)
        ]
        joined = await harness.finish_join(tasks)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--sort", default="tottime", help="a pstats sort key")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    asyncio.run(profile_rebalance(args.members, args.sort, args.top))


if __name__ == "__main__":
    main()
