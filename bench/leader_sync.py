"""The leader's SyncGroup of a big static group over HTTP (issue 26): the server CPU it costs.

`coordinator serve` (SQLite, member tokens: `bench.capacity.capacity_server`) and MEMBERS
static members on keep-alive loopback connections, speaking as the load generator's fleet
members do (bench/loadgen/fleet.go: the same bodies, a range assignment of one partition
each). The members join; every follower sends its SyncGroup and is parked; once the server is
idle, the leader sends its SyncGroup (MEMBERS assignments, ~120 KB of JSON for 1,000). Timed
from the leader's request to its answer and to the last follower's, and the server's CPU over
that span (all its threads, and the event loop's alone; /proc/PID/task/*/schedstat:
nanoseconds, not 10 ms ticks), and before it the CPU the followers' SyncGroups took to park.
Each run starts a new server; the medians are printed, with every run. Wall times include
this Python client's own reading; the CPU figures are the ones to compare.

    python -m bench.leader_sync [--members 1000] [--runs 3] [--server-source DIR]
                                [--profile FILE]

`--server-source DIR` serves another checkout's coordinator (default: this one's, also when
the virtualenv's install points elsewhere): before/after on one machine.
`--profile FILE`: the event loop thread's cProfile from the followers' SyncGroups to the last
answer (its CPU figures are then inflated by the profiler), `python -m pstats FILE` to read it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.capacity import REPO_ROOT, capacity_server
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    encode_assignment,
    encode_subscription,
)

GROUP = "cap-0000"
TOPIC = "fleet"
IDLE_CPU_NS = 2_000_000  # under this much server CPU in IDLE_POLL_S: the followers are parked
IDLE_POLL_S = 0.2


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def server_cpu_ns(pid: int, thread: str = "*") -> int:
    """CPU time of `pid`'s threads (`thread`: one thread id, or all)."""
    tasks = Path(f"/proc/{pid}/task").glob(f"{thread}/schedstat")
    return sum(int(path.read_text().split()[0]) for path in tasks)


def one_partition_each(member_ids: Iterable[str]) -> list[dict[str, str]]:
    """A leader's SyncGroup assignments as the load generator's fleet sends them: one
    partition of TOPIC per member (sorted by member id), consumer protocol v0, base64."""
    return [
        {
            "member_id": member_id,
            "assignment": _b64(
                encode_assignment(Assignment((TopicPartition(TOPIC, partition),)), version=0)
            ),
        }
        for partition, member_id in enumerate(sorted(member_ids))
    ]


class Member:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(self, route: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        raw = json.dumps(body).encode()
        self.writer.write(
            f"POST /v1/groups/{GROUP}/{route} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n".encode()
            + raw
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        answer: dict[str, Any] = json.loads(await self.reader.readexactly(length))
        return answer


async def one_run(
    port: int, token: str, pid: int, members: int, profiled: bool
) -> dict[str, float]:
    connections = [
        Member(*await asyncio.open_connection("127.0.0.1", port)) for _ in range(members)
    ]
    metadata = _b64(encode_subscription(Subscription(topics=(TOPIC,)), version=0))
    joined = await asyncio.gather(
        *(
            member.post(
                "join",
                token,
                {
                    "group_id": GROUP, "session_timeout_ms": 45_000,
                    "rebalance_timeout_ms": 60_000, "member_id": "",
                    "group_instance_id": f"member-{index}", "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": metadata}],
                },
            )
            for index, member in enumerate(connections)
        )
    )  # fmt: skip
    assert all(answer["error_code"] == 0 for answer in joined), joined[0]

    def sync(index: int, assignments: list[dict[str, str]] | None) -> Any:
        body: dict[str, Any] = {
            "group_id": GROUP, "generation_id": joined[index]["generation_id"],
            "member_id": joined[index]["member_id"], "group_instance_id": f"member-{index}",
            "protocol_type": "consumer", "protocol_name": "range",
        }  # fmt: skip
        if assignments is not None:
            body["assignments"] = assignments
        return connections[index].post("sync", token, body)

    leader = next(i for i, answer in enumerate(joined) if answer["leader"] == answer["member_id"])
    if profiled:
        os.kill(pid, signal.SIGUSR1)
    parking = server_cpu_ns(pid)
    followers = [
        asyncio.create_task(sync(index, None)) for index in range(members) if index != leader
    ]
    before = parking
    while True:  # until every follower's SyncGroup is parked
        await asyncio.sleep(IDLE_POLL_S)
        before, previous = server_cpu_ns(pid), before
        if before - previous < IDLE_CPU_NS:
            break
    assignments = one_partition_each(m["member_id"] for m in joined[leader]["members"])
    main_before = server_cpu_ns(pid, str(pid))
    began = time.perf_counter()
    answer = await sync(leader, assignments)
    leader_done = time.perf_counter()
    answers = await asyncio.gather(*followers)
    all_done = time.perf_counter()
    cpu = server_cpu_ns(pid) - before
    main_cpu = server_cpu_ns(pid, str(pid)) - main_before
    if profiled:
        os.kill(pid, signal.SIGUSR2)
    assert answer["error_code"] == 0 and all(a["error_code"] == 0 for a in answers), answer
    for member in connections:
        member.writer.close()
    return {
        "followers_parked_server_cpu_ms": round((previous - parking) / 1e6, 1),
        "leader_answered_ms": round((leader_done - began) * 1000, 1),
        "all_answered_ms": round((all_done - began) * 1000, 1),
        "server_cpu_ms": round(cpu / 1e6, 1),
        "event_loop_thread_cpu_ms": round(main_cpu / 1e6, 1),
    }


def run(
    members: int, runs: int, server_source: Path | None, profile: Path | None
) -> dict[str, Any]:
    launcher: tuple[str, ...] = ("-m", "staticfleet.cli")
    if profile is not None:
        launcher = (str(REPO_ROOT / "bench" / "signal_profile.py"), str(profile.resolve()))
    results = []
    for _ in range(runs):
        with (
            tempfile.TemporaryDirectory(prefix="staticfleet-leader-sync-") as tmp,
            capacity_server(
                Path(tmp), 1, launcher=launcher, server_source=server_source or REPO_ROOT
            ) as server,
        ):
            token = json.loads(server.tokens_file.read_text())["members"][GROUP][0]
            pid = server.process.pid
            results.append(asyncio.run(one_run(server.port, token, pid, members, bool(profile))))
    medians = {key: statistics.median(r[key] for r in results) for key in results[0]}
    return {"members": members, "median": medians, "runs": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--server-source", type=Path)
    parser.add_argument("--profile", type=Path, help="the last run's server profile (pstats)")
    args = parser.parse_args()
    print(json.dumps(run(args.members, args.runs, args.server_source, args.profile), indent=2))


if __name__ == "__main__":
    main()
