"""Run one benchmark case in a child process, so its peak memory and CPU pinning are its own.

The child prints its result as the last line of stdout, as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def run_child(module: str, arguments: list[str], quick: bool, timeout_s: int) -> dict[str, Any]:
    command = [sys.executable, "-m", module, *arguments]
    if quick:
        command.append("--quick")
    completed = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-20:]}
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds `pid` (all its threads) has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
