"""The real `staticfleet coordinator serve` process: ready file, traffic, SIGTERM, restart."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from coordinator import (
    ErrorCode,
    JoinGroupResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from coordinator.wire import from_json, to_json
from staticfleet.processes import NotReady, await_ready_port

from .messages import join_body

pytestmark = pytest.mark.slow

ADMIN = "process-admin"
MEMBER = "process-member"
GROUP = "orders-consumers"


async def start_serve(
    db: Path, ready: Path, *extra: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "staticfleet.cli",
        "coordinator",
        "serve",
        "--store",
        f"sqlite:///{db}",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--ready-file",
        str(ready),
        "--initial-rebalance-delay-ms",
        "50",
        "--min-session-timeout-ms",
        "1000",
        *extra,
        env=env if env is not None else _env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def _env() -> dict[str, str]:
    return os.environ | {
        "STATICFLEET_ADMIN_TOKEN": ADMIN,
        "STATICFLEET_MEMBER_TOKEN": f"{GROUP}:{MEMBER}",
    }


async def wait_ready(process: asyncio.subprocess.Process, ready: Path) -> str:
    try:
        port = await await_ready_port(ready, process, 30, "the server")
    except NotReady as error:
        if process.returncode is None:
            process.kill()
        _, stderr = await process.communicate()
        pytest.fail(f"{error}:\n{stderr.decode()}")
    return f"http://127.0.0.1:{port}"


async def stop(process: asyncio.subprocess.Process, signum: int) -> tuple[int, str]:
    process.send_signal(signum)
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


async def post(http: aiohttp.ClientSession, url: str, token: str, body: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    async with http.post(url, json=body, headers=headers) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def get(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url, headers={"Authorization": f"Bearer {ADMIN}"}) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def _stable_group(http: aiohttp.ClientSession, base: str) -> None:
    """Two static members through generation 1, and one committed offset."""
    group_url = f"{base}/v1/groups/{GROUP}"
    joined: Sequence[Any] = await asyncio.gather(
        post(http, group_url + "/join", MEMBER, join_body(GROUP, "m-0")),
        post(http, group_url + "/join", MEMBER, join_body(GROUP, "m-1")),
    )
    responses = [from_json(JoinGroupResponse, body) for body in joined]
    leader = next(r for r in responses if r.member_id == r.leader)
    follower = next(r for r in responses if r.member_id != r.leader)
    instance = {m.member_id: m.group_instance_id for m in leader.members}

    def sync(member_id: str, assignments: list[SyncGroupRequestAssignment]) -> Any:
        request = SyncGroupRequest(
            GROUP, 1, member_id, instance[member_id], "consumer", "range", assignments
        )
        return post(http, group_url + "/sync", MEMBER, to_json(request))

    synced = await asyncio.gather(
        sync(follower.member_id, []),
        sync(
            leader.member_id,
            [
                SyncGroupRequestAssignment(leader.member_id, b"L"),
                SyncGroupRequestAssignment(follower.member_id, b"F"),
            ],
        ),
    )
    assert [body["error"] for body in synced] == ["NONE", "NONE"]
    commit = OffsetCommitRequest(
        GROUP,
        1,
        follower.member_id,
        instance[follower.member_id],
        [OffsetCommitPartition("orders", 5, 1234)],
    )
    assert (await post(http, group_url + "/offsets/commit", MEMBER, to_json(commit)))[
        "error"
    ] == "NONE"


async def test_serve_stops_cleanly_and_a_restart_has_everything(tmp_path: Path) -> None:
    db, ready = tmp_path / "coordinator.db", tmp_path / "ready"
    process = await start_serve(db, ready, "--topics", "orders=12")
    async with aiohttp.ClientSession() as http:
        base = await wait_ready(process, ready)
        async with http.get(base + "/readyz") as response:
            assert response.status == 200
        await _stable_group(http, base)
        code, stderr = await stop(process, signal.SIGTERM)
        assert code == 0, stderr
        assert not ready.exists()

        # Restart on the same file: the group, its members, assignments, offsets and topics.
        process = await start_serve(db, ready)
        base = await wait_ready(process, ready)
        described = await get(http, f"{base}/v1/groups/{GROUP}")
        assert described["group_state"] == "Stable"
        assert described["generation_id"] == 1
        assert sorted(m["group_instance_id"] for m in described["members"]) == ["m-0", "m-1"]
        assert await get(http, f"{base}/v1/topics") == {"topics": {"orders": 12}}
        fetch = to_json(OffsetFetchRequest(GROUP, [("orders", 5)]))
        fetched = await post(http, f"{base}/v1/groups/{GROUP}/offsets/fetch", MEMBER, fetch)
        assert fetched["partitions"][0]["committed_offset"] == 1234

        # A join parked in the join phase (waiting up to the 5 s rebalance timeout for the
        # others) does not hold up shutdown: the coordinator answers it as it closes.
        parked = asyncio.create_task(
            post(http, f"{base}/v1/groups/{GROUP}/join", MEMBER, join_body(GROUP, "m-2"))
        )
        await asyncio.sleep(0.3)
        assert not parked.done()
        started = time.monotonic()
        code, stderr = await stop(process, signal.SIGINT)
        assert code == 0, stderr
        assert time.monotonic() - started < 4
        answer = await parked
        assert answer["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_serve_refuses_to_start_without_tokens(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("STATICFLEET_")}
    process = await start_serve(tmp_path / "c.db", tmp_path / "ready", env=env)
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    assert process.returncode == 2
    assert "no tokens configured" in stderr.decode()
    assert "--insecure" in stderr.decode()
