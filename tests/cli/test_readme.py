"""The README's "A coordinator and members by hand" block works as written: the coordinator
knows the topic, and the two members share its partitions.

The block is run line by line as a shell would (activating the venv puts its bin/ first on
PATH; `&` lines start in the background), with two substitutions so the test never touches
a coordinator a user runs: a free port for 9092 and a temporary store for /tmp/sf.db.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from staticfleet.kafka.broker import (
    free_port,  # below the ephemeral range: not reused by the kernel meanwhile
)

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- tests/cli/test_readme.py runs this block"


def readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    after = text[text.index(MARKER) :]
    body = after[after.index("```bash\n") + len("```bash\n") :]
    return [line for line in body[: body.index("```")].splitlines() if line.strip()]


def assigned(log: Path) -> set[tuple[str, int]] | None:
    """The partitions of the member's latest `assigned` event (None: none yet)."""
    latest = None
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "assigned":
                latest = {(str(t), int(p)) for t, p in event["partitions"]}
    return latest


@pytest.mark.slow
def test_the_readme_coordinator_and_members_share_the_topic(tmp_path: Path) -> None:
    lines = readme_block()
    assert lines[0] == ". .venv/bin/activate"
    port = str(free_port())
    store = "sqlite://" + str(tmp_path / "sf.db")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        for number, line in enumerate(lines[1:]):
            assert line.endswith(" &"), line
            argv = [
                word.replace("9092", port).replace("sqlite:///tmp/sf.db", store)
                for word in shlex.split(line.removesuffix(" &"))
            ]
            log = tmp_path / f"process-{number}.log"
            logs.append(log)
            with log.open("wb") as out:
                processes.append(
                    subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
                )
            if number == 0:  # the coordinator: wait until it answers, as a user would
                deadline = time.monotonic() + 30
                while True:
                    try:
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
                        break
                    except OSError:
                        assert time.monotonic() < deadline, log.read_text()
                        time.sleep(0.2)
        members = logs[1:]
        assert len(members) == 2
        every_partition = {("orders", p) for p in range(12)}
        deadline = time.monotonic() + 60
        while True:
            held = [assigned(log) for log in members]
            if all(held) and set().union(*held) == every_partition:  # type: ignore[arg-type]
                break
            assert time.monotonic() < deadline, [log.read_text()[-2000:] for log in logs]
            time.sleep(0.5)
        assert all(len(h or ()) == 6 for h in held)
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
