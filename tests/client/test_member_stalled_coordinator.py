"""A member process outlives a coordinator process stalled past its session (SIGSTOP).

The coordinator expires the member when it wakes, and the member rejoins under a new member
id; a commit the member had sent with its old id is answered FENCED_INSTANCE_ID just after.
That answer is about an identity the member no longer holds: the member must not take it
as "another process uses my group.instance.id" and exit (docs/client.md, "Commits and
rebalances").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from staticfleet.member.events import read_events
from tests.serve import staticfleet

pytestmark = pytest.mark.slow

GROUP = "fleet"
TOPIC = "events"
ADMIN = "admin-token"
TOKEN = "member-token"
SESSION_MS = 1_500


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    ready = tmp_path / "ready"
    with (tmp_path / "coordinator.err").open("w") as stderr:
        process = subprocess.Popen(
            staticfleet(
                "coordinator",
                "serve",
                "--port",
                "0",
                "--ready-file",
                str(ready),
                "--store",
                f"sqlite:///{tmp_path / 'coordinator.db'}",
                "--admin-token",
                ADMIN,
                "--member-token",
                f"{GROUP}:{TOKEN}",
                "--topics",
                f"{TOPIC}=4",
                "--initial-rebalance-delay-ms",
                "0",
                "--min-session-timeout-ms",
                "1000",
                "--log-level",
                "WARNING",
            ),
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + 20
            while not ready.exists():
                assert process.poll() is None, (tmp_path / "coordinator.err").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.05)
            yield process, f"http://127.0.0.1:{ready.read_text().strip()}"
        finally:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)


def journal(url: str) -> list[dict[str, object]]:
    request = urllib.request.Request(
        f"{url}/v1/journal?group_id={GROUP}&limit=1000",
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        rows: list[dict[str, object]] = json.load(response)["events"]
    return rows


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def commits(log: Path) -> list[dict[str, object]]:
    return [event for event in read_events(log) if event["event"] == "commit"]


def member_environment(url: str, log: Path, **settings: str) -> dict[str, str]:
    """A static member `s-0` of the group, its event log at `log`, with `settings` over it."""
    return {
        **os.environ,
        "STATICFLEET_COORDINATOR_URL": url,
        "STATICFLEET_GROUP_ID": GROUP,
        "STATICFLEET_INSTANCE_ID": "s-0",
        "STATICFLEET_TOPICS": TOPIC,
        "STATICFLEET_EVENT_LOG": str(log),
        "STATICFLEET_TOKEN": TOKEN,
        **settings,
    }


def test_a_member_survives_a_coordinator_stalled_past_its_session(coordinator, tmp_path):
    process, url = coordinator
    log = tmp_path / "member.jsonl"
    environment = member_environment(
        url,
        log,
        STATICFLEET_REBALANCE_PROTOCOL="cooperative",
        STATICFLEET_SESSION_TIMEOUT_MS=str(SESSION_MS),
        STATICFLEET_REBALANCE_TIMEOUT_MS="3000",
        STATICFLEET_HEARTBEAT_INTERVAL_MS="100",
    )
    commit_interval_ms = 50
    member = subprocess.Popen(
        staticfleet(
            "member",
            "run",
            "--commit-interval-ms",
            str(commit_interval_ms),
            "--records-per-second",
            "200",
        ),
        env=environment,
        stderr=(tmp_path / "member.err").open("w"),
    )
    try:
        wait_for(lambda: log.exists() and len(commits(log)) >= 3)
        first_id = next(r["member_id"] for r in journal(url) if r["kind"] == "member_joined")
        stall_s = 3 * SESSION_MS / 1000
        process.send_signal(signal.SIGSTOP)
        time.sleep(stall_s)
        stalled_at = time.time()
        process.send_signal(signal.SIGCONT)

        def committed_since_the_stall() -> bool:
            assert member.poll() is None, (tmp_path / "member.err").read_text()
            return any(int(str(e["ts_ms"])) > stalled_at * 1000 for e in commits(log))

        # Whatever the coordinator read first after waking (its session timer, the member's
        # heartbeat or join), the member commits again, and stays.
        wait_for(committed_since_the_stall)
        time.sleep(1.0)  # a few more commit intervals, and the member is still there
        err = (tmp_path / "member.err").read_text()
        assert member.poll() is None, f"the member exited {member.returncode}: {err}"
        events = read_events(log)
        assert not [event for event in events if event["event"] == "fatal"]

        rows = journal(url)
        # Expired then joined anew, or replaced (KIP-345) if its join came first: one
        # instance id throughout.
        joined = [row for row in rows if row["kind"] in ("member_joined", "member_replaced")]
        assert {row["group_instance_id"] for row in joined} == {"s-0"}, rows
        current_id = joined[-1]["member_id"]
        # The coordinator may still refuse a commit the member sent with its old id before
        # it rejoined (the member takes that answer as stale); it never fences the current.
        fenced = [row for row in rows if row["kind"] == "member_fenced"]
        assert all(row["member_id"] != current_id for row in fenced), fenced
        if current_id != first_id:
            assert any(e["member_id"] == current_id for e in commits(log)), (
                "no commit succeeded under the new member id"
            )
        # No catch-up burst: the commits the stall "missed" are not sent in a row once the
        # member runs again (a loop that fell behind commits once, not stall/interval times).
        burst = [
            event
            for event in events
            if event["event"] in ("commit", "commit_failed")
            and stalled_at * 1000 <= int(str(event["ts_ms"])) <= stalled_at * 1000 + 500
        ]
        assert len(burst) <= 500 // commit_interval_ms + 2, len(burst)
    finally:
        if member.poll() is None:
            member.send_signal(signal.SIGTERM)
            member.wait(timeout=20)


def test_a_member_stopped_while_the_coordinator_answers_nothing_ends_within_its_close_timeout(
    coordinator, tmp_path
):
    # The coordinator takes the requests (the kernel queues them) and answers none: the
    # periodic commit in flight, then the revoke's commit, would each wait for the session
    # (30 s) and a pod's grace period would end first, in the kubelet's SIGKILL.
    process, url = coordinator
    log = tmp_path / "member.jsonl"
    environment = member_environment(
        url,
        log,
        STATICFLEET_SESSION_TIMEOUT_MS="30000",
        STATICFLEET_CLOSE_TIMEOUT_MS="1500",
    )
    err = tmp_path / "member.err"
    member = subprocess.Popen(
        staticfleet("member", "run", "--commit-interval-ms", "200"),
        env=environment,
        stderr=err.open("w"),
    )
    try:
        wait_for(lambda: log.exists() and len(commits(log)) >= 2)
        process.send_signal(signal.SIGSTOP)
        time.sleep(1.0)  # a periodic commit is sent and not answered
        stopped_at = time.monotonic()
        member.send_signal(signal.SIGTERM)
        code = member.wait(timeout=40)
        took_s = time.monotonic() - stopped_at
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
    text = err.read_text()
    assert code == 0, text
    assert took_s < 8, f"the stop took {took_s:.1f} s: {text}"
    assert "stopped during a commit unanswered" in text, text
    assert "close not done within 1500 ms" in text, text
    events = read_events(log)
    assigned = {tuple(p) for e in events if e["event"] == "assigned" for p in e["partitions"]}
    # What it held is said to be given up (uncommitted), then that it stopped.
    assert [e["event"] for e in events[-2:]] == ["lost", "stopped"], events[-3:]
    assert {tuple(p) for p in events[-2]["partitions"]} == assigned
