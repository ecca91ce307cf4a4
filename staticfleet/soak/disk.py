"""The store's filesystem: a small tmpfs the soak mounts for the coordinator's SQLite file,
which the disk-full fault fills with a filler file and frees again. Needs root."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from staticfleet.soak.network import PREFIX, pid_alive, run, stale_owners

FILLER = "filler"


def remove_leftover_mounts() -> list[str]:
    """Unmount the store filesystems of soaks whose driver is gone; returns their paths."""
    mounts = [line.split()[:2] for line in Path("/proc/mounts").read_text().splitlines()]
    sources = [source for source, _target in mounts if source.startswith(PREFIX)]
    tags = [source[len(PREFIX) :].split("-")[0] for source in sources]
    owners = [int(tag) for tag in tags if tag.isdigit()]
    stale = stale_owners(sources, [pid for pid in owners if pid_alive(pid)])
    removed = []
    for source, target in mounts:
        if source in stale:
            # /proc/mounts escapes a space as \040.
            path = target.replace("\\040", " ")
            run("umount", "-l", path, check=False)
            removed.append(path)
    return removed


class StoreDisk:
    """A tmpfs of `size_mb` at `path`, named `sfs<pid>-store` in the mount table."""

    def __init__(self, path: Path, size_mb: int, owner: int | None = None) -> None:
        self.path = path
        self.size_mb = size_mb
        self.source = f"{PREFIX}{owner or os.getpid()}-store"
        self.mounted = False

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        run(
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={self.size_mb}m,mode=0755",
            self.source,
            str(self.path),
        )
        self.mounted = True

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def fill(self) -> int:
        """Take every free byte with the filler file; returns how many it took. In steps,
        down to a page: the store may grow between a look at the free space and the
        filler's allocation."""
        taken = 0
        with (self.path / FILLER).open("wb") as stream:
            for step in (1 << 20, 1 << 12):
                while True:
                    try:
                        os.posix_fallocate(stream.fileno(), taken, step)
                    except OSError as error:
                        if error.errno != errno.ENOSPC:
                            raise
                        break
                    taken += step
        return taken

    def free(self) -> None:
        (self.path / FILLER).unlink(missing_ok=True)

    def unmount(self, keep: Path) -> None:
        """Copy the store's files (not the filler) into `keep`, then unmount."""
        if not self.mounted:
            return
        self.free()
        for item in self.path.iterdir():
            if item.is_file():
                shutil.copy2(item, keep / item.name)
        # Lazy: a store file a failed test left open must not keep the mount.
        if run("umount", "-l", str(self.path), check=False).returncode == 0:
            self.path.rmdir()
        self.mounted = False
