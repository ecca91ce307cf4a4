"""Child processes: stopping one the way its users expect (SIGTERM for a controlled shutdown:
a broker flushes, a consumer commits and closes; SIGKILL only if it does not exit in time),
and waiting for one that announces its port in a ready file (`coordinator serve --ready-file`)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path


def terminate(process: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM, wait up to `timeout` seconds, then SIGKILL; the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


class NotReady(Exception):
    """A child that announces readiness by a file (`--ready-file`) exited or ran out of time."""


def ready_port(path: Path) -> int | None:
    """The port a `--ready-file` names, or None before the child wrote it (it writes the file
    whole, by rename, so a file that exists is complete)."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else None


def _not_ready(what: str, returncode: int | None, timeout_s: float) -> NotReady:
    if returncode is not None:
        return NotReady(f"{what} exited with {returncode} before it was ready")
    return NotReady(f"{what} was not ready within {timeout_s:.0f} s")


def wait_ready_port(
    path: Path, process: subprocess.Popen[bytes], timeout_s: float, what: str
) -> int:
    """Poll `path` until the child writes its port; NotReady if it exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while (port := ready_port(path)) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            raise _not_ready(what, process.returncode, timeout_s)
        time.sleep(0.02)
    return port


async def await_ready_port(
    path: Path, process: asyncio.subprocess.Process, timeout_s: float, what: str
) -> int:
    """`wait_ready_port` for an asyncio child."""
    deadline = time.monotonic() + timeout_s
    while (port := ready_port(path)) is None:
        if process.returncode is not None or time.monotonic() > deadline:
            raise _not_ready(what, process.returncode, timeout_s)
        await asyncio.sleep(0.02)
    return port
