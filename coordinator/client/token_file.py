"""A bearer token read from a file and read again when the file changes: a projected
ServiceAccount token, which the kubelet rotates (at 80 % of its lifetime) by swapping the
volume's `..data` symlink (docs/server.md, "Members known by their pod").

One `os.stat` per request decides whether to read again (inode, size and mtime: the swap
gives a new inode); a change costs one read. Hand-written: no library does this one thing.
"""

from __future__ import annotations

import os
from pathlib import Path


class TokenFileError(ValueError):
    """The token file cannot give a token; the message names the file."""


class TokenFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int, int] | None = None
        self._token = ""
        self.reads = 0
        self.current()  # a missing or empty file is a usage error at start

    def current(self) -> str:
        """The token; the file's newest content when it changed since the last read. A file
        gone or emptied after a good read keeps the last token (a rotation in progress)."""
        try:
            stat = os.stat(self.path)
        except OSError as error:
            if self._token:
                return self._token
            raise TokenFileError(f"cannot read token file {self.path}: {error}") from None
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if seen == self._seen:
            return self._token
        try:
            token = self.path.read_text(encoding="utf-8").strip()
        except OSError as error:
            if self._token:
                return self._token
            raise TokenFileError(f"cannot read token file {self.path}: {error}") from None
        self.reads += 1
        if not token:
            if self._token:
                return self._token
            raise TokenFileError(f"token file {self.path} is empty")
        self._seen, self._token = seen, token
        return token
