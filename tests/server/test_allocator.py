"""The allocator's policy: after a large block is freed, the next one is still mapped on its
own (so freeing it returns it), as it is not with glibc's moving threshold."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from coordinator.server.allocator import ENV, fix_mmap_threshold

# Run apart: the threshold is the process's, and glibc moves it on the first large free.
PROBE = """
import ctypes, sys
from coordinator.server.allocator import fix_mmap_threshold

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
# Larger than asyncio's 256 KiB TLS read buffer: a block the heap's free top already holds is
# served from there whatever the threshold, and a small one sometimes is; 8 MiB never is.
size = 8 * 1024 * 1024
libc.free(libc.malloc(size))  # the first free of a mapped block: glibc raises its threshold
before = libc.mallinfo2().hblkhd
block = libc.malloc(size)
print(libc.mallinfo2().hblkhd - before >= size)
libc.free(block)
"""


def _second_block_mapped(mode: str) -> bool:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    return result.stdout.strip() == "True"


def test_a_freed_large_block_leaves_the_next_one_mapped_only_with_the_threshold_fixed() -> None:
    assert _second_block_mapped("moving") is False
    assert _second_block_mapped("fixed") is True


def test_a_threshold_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "65536")
    assert fix_mmap_threshold() is False
