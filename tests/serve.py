"""A `staticfleet coordinator serve` process for tests: started on a free port, ready when it
writes its ready file, stopped with SIGTERM (a clean shutdown, as a user's Ctrl-C)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def staticfleet(*args: str) -> list[str]:
    return [sys.executable, "-m", "staticfleet.cli", *args]


@contextlib.contextmanager
def serve_coordinator(directory: Path, *args: str) -> Iterator[str]:
    """`coordinator serve --port 0 --ready-file …` plus `args`; yields its base URL."""
    ready = directory / "ready"
    errors = directory / "coordinator.err"
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            staticfleet("coordinator", "serve", "--port", "0", "--ready-file", str(ready), *args),
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + 20
            while not ready.exists():
                assert process.poll() is None, errors.read_text()
                assert time.monotonic() < deadline, "coordinator did not start"
                time.sleep(0.05)
            yield f"http://127.0.0.1:{ready.read_text().strip()}"
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)
