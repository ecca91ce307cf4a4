"""Waiting for a child that announces its port in a ready file (staticfleet.processes)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from staticfleet.processes import NotReady, await_ready_port, ready_port, wait_ready_port


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_ready_port_is_none_until_the_file_has_a_port(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    assert ready_port(ready) is None
    ready.write_text("")
    assert ready_port(ready) is None
    ready.write_text("4711\n")
    assert ready_port(ready) == 4711


def test_wait_returns_the_port_the_child_writes(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    # As serve does: the whole file by rename, then it keeps running.
    code = (
        f"import os, time; time.sleep(0.2); path = {str(ready)!r}; "
        "open(path + '.t', 'w').write('5151'); os.rename(path + '.t', path); time.sleep(30)"
    )
    with subprocess.Popen(_child(code)) as process:
        try:
            assert wait_ready_port(ready, process, 30, "the child") == 5151
        finally:
            process.kill()


def test_a_child_that_exits_first_is_reported_with_its_code(tmp_path: Path) -> None:
    with (
        subprocess.Popen(_child("raise SystemExit(7)")) as process,
        pytest.raises(NotReady, match="the child exited with 7 before it was ready"),
    ):
        wait_ready_port(tmp_path / "ready", process, 30, "the child")


def test_a_child_that_never_writes_runs_out_of_time(tmp_path: Path) -> None:
    with subprocess.Popen(_child("import time; time.sleep(30)")) as process:
        try:
            with pytest.raises(NotReady, match="the child was not ready within 0 s"):
                wait_ready_port(tmp_path / "ready", process, 0.2, "the child")
        finally:
            process.kill()


async def test_the_asyncio_wait_reports_an_exit(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(*_child("raise SystemExit(3)"))
    with pytest.raises(NotReady, match="exited with 3"):
        await await_ready_port(tmp_path / "ready", process, 30, "serve")
