"""Facts about the host the node agent runs on: its address, memory, architecture."""

from __future__ import annotations

import contextlib
import platform
import socket
from pathlib import Path


def first_ipv4() -> str:
    """The first non-loopback IPv4 address (the route to a TEST-NET address picks it)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.254", 9))
        ip = str(s.getsockname()[0])
        if not ip.startswith("127."):
            return ip
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            ip = str(info[4][0])
            if not ip.startswith("127."):
                return ip
    return "127.0.0.1"


def memory_bytes() -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 4 * 2**30


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None
