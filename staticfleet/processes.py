"""Stopping a child process the way its users expect: SIGTERM for a controlled shutdown
(a broker flushes, a consumer commits and closes), SIGKILL only if it does not exit in time."""

from __future__ import annotations

import signal
import subprocess


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
