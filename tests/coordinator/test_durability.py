"""Durability: a coordinator restarted on the same SQLite file serves static members their
assignments with no rebalance and keeps committed offsets — including after SIGKILL."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator import (
    CoordinatorConfig,
    ErrorCode,
    GroupCoordinator,
    JoinGroupProtocol,
    JoinGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SqliteStore,
    SyncGroupRequest,
)
from coordinator.clock import ManualClock, settle
from tests.coordinator.harness import GROUP, SESSION_MS, Harness, join_request

ROOT = Path(__file__).resolve().parents[2]


async def test_restart_on_same_sqlite_file_serves_static_members_without_rebalance(
    tmp_path: Path,
) -> None:
    path = tmp_path / "coordinator.db"
    first = await Harness(store=SqliteStore(path)).start()
    responses = await first.form_group(["i-0", "i-1", "i-2"])
    member = responses[0]
    instance = member.member_id[:3]
    await first.coordinator.commit_offsets(
        OffsetCommitRequest(
            GROUP, 1, member.member_id, instance, [OffsetCommitPartition("t", 3, 1234, "m")]
        )
    )
    # No close(): the process "dies" here; a new coordinator opens the same file.
    second = await Harness(store=SqliteStore(path)).start()
    (described,) = await second.coordinator.describe_groups([GROUP])
    assert described.group_state == "Stable"
    assert described.generation_id == 1
    assert {m.group_instance_id for m in described.members} == {"i-0", "i-1", "i-2"}
    for static in ("i-0", "i-1", "i-2"):
        rejoin = await second.coordinator.join_group(join_request(instance_id=static))
        assert rejoin.error_code == ErrorCode.NONE
        assert rejoin.generation_id == 1
        sync = await second.sync(rejoin.member_id, 1, instance_id=static)
        assert sync.assignment == static.encode()
    assert await second.state() == "Stable"
    fetched = await second.coordinator.fetch_offsets(OffsetFetchRequest(GROUP, [("t", 3)]))
    assert fetched.partitions[0].committed_offset == 1234
    rows = await second.coordinator.journal_rows(GROUP)
    assert [r.kind for r in rows].count("rebalance_started") == 1
    await second.coordinator.close()
    await first.coordinator.close()


async def test_a_coordinator_down_longer_than_a_session_expires_nobody_at_load(
    tmp_path: Path,
) -> None:
    """The operator's pod evicted by a full drain of a one-node cluster: its replacement is
    Pending until uncordon, minutes beyond the members' session. The restarted coordinator
    starts every loaded member's session from its load, not from the last heartbeat the old
    one heard (Kafka's GroupMetadataManager reschedules heartbeat expiration of every member
    of a group it loads on failover), so its own downtime expires nobody; a member still
    silent a session after the load does expire (e2e/node/test_11c_full_drain_on_node.py)."""
    path = tmp_path / "coordinator.db"
    clock = ManualClock()
    first = await Harness(store=SqliteStore(path), clock=clock).start()
    formed = await first.form_group(["i-0", "i-1", "i-2"])
    await first.coordinator.close()
    await clock.advance(10 * SESSION_MS)  # the coordinator is down: nobody heard
    second = await Harness(store=SqliteStore(path), clock=clock).start()
    await clock.advance(SESSION_MS - 1)
    assert await second.state() == "Stable"
    # Two of them heartbeat in time and keep their generation; the third stays silent.
    for response in formed[:2]:
        assert await second.heartbeat(response.member_id, 1, response.member_id[:3]) == 0
    await clock.advance(2)
    await asyncio.sleep(0.1)  # the removal's SQLite write, on the store's thread
    (described,) = await second.coordinator.describe_groups([GROUP])
    assert {m.group_instance_id for m in described.members} == {"i-0", "i-1"}
    rows = await second.coordinator.journal_rows(GROUP)
    removed = [r for r in rows if r.kind == "member_removed"]
    assert [(r.group_instance_id, r.detail.get("reason")) for r in removed] == [
        ("i-2", "session_timeout")
    ]
    await second.coordinator.close()


def _read_acks(process: subprocess.Popen[str], wanted: int) -> list[list[str]]:
    acks: list[list[str]] = []
    assert process.stdout is not None
    while len(acks) < wanted:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(
                f"worker exited early: {process.stderr.read() if process.stderr else ''}"
            )
        if line.startswith("ACK "):
            acks.append(line.split()[1:])
    return acks


async def _verify_recovery(path: Path, acks: list[list[str]]) -> None:
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=0), store=SqliteStore(path)
    )
    await coordinator.start()
    try:
        (described,) = await coordinator.describe_groups(["crash-group"])
        acked_generations = [int(a[1]) for a in acks if a[0] == "stable"]
        assert described.generation_id >= max(acked_generations)
        # Every acknowledged commit survived.
        best: dict[int, int] = {}
        for a in acks:
            if a[0] == "commit":
                best[int(a[1])] = max(best.get(int(a[1]), 0), int(a[2]))
        fetched = await coordinator.fetch_offsets(
            OffsetFetchRequest("crash-group", [("t", p) for p in range(4)])
        )
        for partition in fetched.partitions:
            assert partition.committed_offset >= best.get(partition.partition, -1)
        if described.group_state != "Stable":
            return  # killed between a leave and the next stable generation: nothing to serve
        generation = described.generation_id
        instances = sorted(m.group_instance_id or "" for m in described.members)
        for instance in instances:
            rejoin = await coordinator.join_group(
                JoinGroupRequest(
                    "crash-group",
                    60_000,
                    5_000,
                    "",
                    instance,
                    "consumer",
                    [JoinGroupProtocol("range", b"m")],
                )
            )
            assert rejoin.error_code == ErrorCode.NONE
            assert rejoin.generation_id == generation, "no rebalance after the restart"
            sync = await coordinator.sync_group(
                SyncGroupRequest(
                    "crash-group", generation, rejoin.member_id, instance, "consumer", "range", []
                )
            )
            assert sync.error_code == ErrorCode.NONE
            assert sync.assignment == f"{instance}:{generation}".encode()
        (after,) = await coordinator.describe_groups(["crash-group"])
        assert after.generation_id == generation and after.group_state == "Stable"
    finally:
        await coordinator.close()


@pytest.mark.crash
@pytest.mark.parametrize("seed", range(6))
def test_sigkill_mid_traffic_loses_no_static_member_and_no_commit(
    tmp_path: Path, seed: int
) -> None:
    path = tmp_path / "crash.db"
    rng = random.Random(seed)
    all_acks: list[list[str]] = []
    for round_ in range(2):
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.coordinator.crash_worker",
                str(path),
                str(seed * 10 + round_),
                str(round_ * 1_000_000),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            all_acks += _read_acks(process, rng.randint(20, 400))
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
        assert process.returncode == -signal.SIGKILL
        asyncio.run(_verify_recovery(path, all_acks))


async def test_static_replacement_mid_rebalance_survives_a_crash(tmp_path: Path) -> None:
    """Kafka forgets a replacement made mid-rebalance if it dies before the next sync; the
    live process would then be fenced by its own old id. We persist the new id."""
    path = tmp_path / "coordinator.db"
    first = await Harness(store=SqliteStore(path)).start()
    await first.form_group(["i-0", "i-1"])
    # A newcomer starts a rebalance; then i-0 restarts in the middle of it.
    newcomer = first.join(join_request(instance_id="i-2"))
    await settle()
    assert await first.state() == "PreparingRebalance"
    replacement = first.join(join_request(instance_id="i-0"))
    await settle()
    (described,) = await first.coordinator.describe_groups([GROUP])
    assert described.group_state == "PreparingRebalance"
    new_id = next(m.member_id for m in described.members if m.group_instance_id == "i-0")
    # Crash: a new coordinator on the same file, the old one simply stops existing.
    second = await Harness(store=SqliteStore(path)).start()
    (loaded,) = await second.coordinator.describe_groups([GROUP])
    assert loaded.group_state == "Stable" and loaded.generation_id == 1
    assert new_id in {m.member_id for m in loaded.members}
    assert await second.heartbeat(new_id, 1, "i-0") == ErrorCode.NONE, "not fenced"
    replacement.cancel()
    newcomer.cancel()
    await second.coordinator.close()
    await first.coordinator.close()
