"""Class-data sharing for the JVMs started over and over: the Kafka broker and the Java peer.

Most of a JVM's start is loading, parsing and verifying the same few thousand classes. A
dynamic CDS archive (JDK 13+) holds them as the JVM had them after a run: a JVM started
while there is no archive writes one when it exits (`-XX:ArchiveClassesAtExit`), the first
to exit cleanly puts its own in place, and every JVM started after that maps it
(`-XX:SharedArchiveFile`). A broker's start to ready then costs
about 1.4 CPU-s instead of 2.3 (docs/kafka.md, "Class-data sharing"); the suite starts
about 17 brokers, 17 storage formats and 60 Java peers.

The archive is named by a digest of what it is only valid for (the `java` binary and every
jar of the classpath, with sizes and times), so a new JDK or new jars start a new archive
instead of being refused one. A JVM given an archive that does not match still runs, without
it (`-Xshare:auto`, the default). The JVM writes the archive at exit, so it goes to a
temporary file, put in place by `ArchiveClaim.finish` once the process is gone: a JVM never
maps a half-written one. The JDK has no way to share classes without these two options;
this module only names the files and puts one in place.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

ARCHIVE_DIR = Path(__file__).resolve().parents[2] / "build" / "cds"
# A dump older than this is taken to be from a run that died before it finished (a dump
# takes a few seconds; a broker or a peer runs tens of minutes at most in the tests).
STALE_DUMP_S = 60 * 60.0


def classpath_jars(classpath: str) -> list[Path]:
    """The jars a classpath names, its `dir/*` entries expanded as the java launcher does."""
    jars: list[Path] = []
    for entry in classpath.split(os.pathsep):
        if entry.endswith("/*"):
            jars += sorted(Path(path) for path in glob.glob(f"{entry[:-2]}/*.jar"))
        elif entry:
            jars.append(Path(entry))
    return jars


def archive_path(kind: str, classpath: str, archive_dir: Path = ARCHIVE_DIR) -> Path | None:
    """Where the archive for `kind` on `classpath` is, or None without a `java` on PATH."""
    java = shutil.which("java")
    if java is None:
        return None
    digest = hashlib.sha256()
    for path in [Path(java).resolve(), *classpath_jars(classpath)]:
        with contextlib.suppress(OSError):
            status = path.stat()
            digest.update(f"{path}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    return archive_dir / f"{kind}-{digest.hexdigest()[:16]}.jsa"


@dataclass
class ArchiveClaim:
    """A JVM's part in the archive: it maps it, it writes one at exit, or neither."""

    options: list[str]
    dump: Path | None = None  # the temporary file this JVM writes at exit
    archive: Path | None = None

    def finish(self, clean_exit: bool) -> None:
        """After the JVM is gone: the archive it wrote put in place, unless another JVM's
        came first, and only after a clean exit (a JVM killed writes nothing, or part)."""
        if self.dump is None or self.archive is None:
            return
        with contextlib.suppress(OSError):
            if clean_exit and self.dump.stat().st_size > 0 and not self.archive.exists():
                os.replace(self.dump, self.archive)
        self.dump.unlink(missing_ok=True)
        self.dump = None


def _drop_stale_dumps(archive: Path) -> None:
    """Dumps left by runs that died before they finished (a dump takes seconds)."""
    for stale in archive.parent.glob(f"{archive.stem}.*.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > STALE_DUMP_S:
                stale.unlink()


def claim(kind: str, classpath: str, archive_dir: Path = ARCHIVE_DIR) -> ArchiveClaim:
    """The options for a JVM of `kind` about to start on `classpath`.

    Every JVM started while there is no archive writes one of its own, not just the first:
    the first may run for the whole session (the tests' session broker), and the archive
    is wanted as soon as any one of them stops.
    """
    archive = archive_path(kind, classpath, archive_dir)
    if archive is None:
        return ArchiveClaim([])
    if archive.exists():
        return ArchiveClaim([f"-XX:SharedArchiveFile={archive}"])
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # no place to write one: this JVM runs without
        return ArchiveClaim([])
    _drop_stale_dumps(archive)
    dump = archive.with_name(f"{archive.stem}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    return ArchiveClaim([f"-XX:ArchiveClassesAtExit={dump}"], dump=dump, archive=archive)
