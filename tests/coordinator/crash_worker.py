"""A coordinator process under steady traffic, for the crash test (run with -m).

It serves four static members in-process against a SqliteStore and prints an `ACK` line
after every answered request whose effect must survive a crash: commits, stable
generations and static rejoins. The test kills it with SIGKILL at a random moment.
"""

from __future__ import annotations

import asyncio
import random
import sys

from coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    SqliteStore,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)

GROUP = "crash-group"
INSTANCES = ["i-0", "i-1", "i-2", "i-3"]


def join_request(instance: str, member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(
        GROUP, 60_000, 5_000, member_id, instance, "consumer", [JoinGroupProtocol("range", b"m")]
    )


def ack(*words: object) -> None:
    print("ACK", *words, flush=True)


async def rebalance(
    coordinator: GroupCoordinator, members: dict[str, str]
) -> tuple[int, dict[str, str]]:
    """Everyone (re)joins until one generation holds all; the leader assigns
    '<instance>:<generation>' to each. Retries like a client on REBALANCE_IN_PROGRESS."""
    while True:
        # Newcomers first: the join phase ends as soon as every known member has rejoined.
        order = sorted(INSTANCES, key=lambda i: i in members)
        tasks = {}
        for i in order:
            tasks[i] = asyncio.ensure_future(
                coordinator.join_group(join_request(i, members.get(i, "")))
            )
            await asyncio.sleep(0)
        responses: dict[str, JoinGroupResponse] = {i: await t for i, t in tasks.items()}
        members = {i: r.member_id for i, r in responses.items() if r.member_id}
        generations = {r.generation_id for r in responses.values()}
        if len(generations) != 1 or any(r.error_code != 0 for r in responses.values()):
            continue
        generation = generations.pop()
        leader = next(r for r in responses.values() if r.leader == r.member_id)
        syncs = []
        for instance, response in responses.items():
            assignments = []
            if response is leader:
                assignments = [
                    SyncGroupRequestAssignment(
                        m.member_id, f"{m.group_instance_id}:{generation}".encode()
                    )
                    for m in leader.members
                ]
            syncs.append(
                coordinator.sync_group(
                    SyncGroupRequest(
                        GROUP,
                        generation,
                        response.member_id,
                        instance,
                        "consumer",
                        "range",
                        assignments,
                    )
                )
            )
        results = await asyncio.gather(*syncs)
        if all(r.error_code == 0 for r in results):
            ack("stable", generation)
            return generation, members


async def main(path: str, seed: int, first_offset: int) -> None:
    rng = random.Random(seed)
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=0), store=SqliteStore(path)
    )
    await coordinator.start()
    generation, members = await rebalance(coordinator, {})
    offset = first_offset  # offsets only grow, across restarts too
    while True:
        action = rng.random()
        if action < 0.75:
            instance = rng.choice(INSTANCES)
            offset += 1
            response = await coordinator.commit_offsets(
                OffsetCommitRequest(
                    GROUP,
                    generation,
                    members[instance],
                    instance,
                    [OffsetCommitPartition("t", INSTANCES.index(instance), offset)],
                )
            )
            assert response.partitions[0].error_code == 0, response
            ack("commit", INSTANCES.index(instance), offset)
        elif action < 0.9:
            instance = rng.choice(INSTANCES)
            rejoin = await coordinator.join_group(join_request(instance))
            assert rejoin.error_code == 0 and rejoin.generation_id == generation, rejoin
            members[instance] = rejoin.member_id
            ack("static_rejoin", instance, rejoin.member_id, generation)
        else:
            instance = rng.choice(INSTANCES)
            await coordinator.leave_group(LeaveGroupRequest(GROUP, [MemberIdentity("", instance)]))
            members.pop(instance)
            generation, members = await rebalance(coordinator, members)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
