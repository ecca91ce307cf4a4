"""Class-data sharing for the broker's and the peer's JVMs: the first JVM to exit cleanly puts
its archive in place, nothing after a kill, and later JVMs map it (a real `java` on Kafka's
jars)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from staticfleet.kafka import class_sharing
from staticfleet.kafka.broker import LIBS_DIR, ensure_installed
from staticfleet.kafka.class_sharing import claim


def jars(tmp_path: Path, *names: str) -> str:
    libs = tmp_path / "libs"
    libs.mkdir(exist_ok=True)
    for name in names:
        (libs / name).write_bytes(b"jar")
    return f"{libs}/*"


def test_the_first_jvm_to_exit_cleanly_puts_its_archive_in_place_and_later_ones_map_it(
    tmp_path: Path,
) -> None:
    classpath = jars(tmp_path, "a.jar", "b.jar")
    archives = tmp_path / "cds"
    # Two JVMs started before there is an archive (a session's broker and a test's) each
    # write one: the one that stops first gives it, whichever it is.
    long_lived, short_lived = claim("peer", classpath, archives), claim("peer", classpath, archives)
    assert long_lived.dump is not None and short_lived.dump is not None
    assert long_lived.dump != short_lived.dump
    assert short_lived.options == [f"-XX:ArchiveClassesAtExit={short_lived.dump}"]
    short_lived.dump.write_bytes(b"short")  # what the JVM writes at exit
    short_lived.finish(clean_exit=True)
    (archive,) = archives.glob("*.jsa")
    assert archive.read_bytes() == b"short"
    assert claim("peer", classpath, archives).options == [f"-XX:SharedArchiveFile={archive}"]
    long_lived.dump.write_bytes(b"long")
    long_lived.finish(clean_exit=True)
    assert archive.read_bytes() == b"short"  # the archive in place stays, mapped or not
    assert [path.name for path in archives.iterdir()] == [archive.name]  # no dump left


def test_a_jvm_killed_puts_nothing_in_place_and_the_next_one_writes_the_archive(
    tmp_path: Path,
) -> None:
    classpath = jars(tmp_path, "a.jar")
    archives = tmp_path / "cds"
    killed = claim("broker", classpath, archives)
    assert killed.dump is not None
    killed.dump.write_bytes(b"half")  # a JVM killed while it wrote
    killed.finish(clean_exit=False)
    assert list(archives.iterdir()) == []
    assert claim("broker", classpath, archives).dump is not None


def test_a_dump_left_by_a_run_that_died_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    classpath = jars(tmp_path, "a.jar")
    archives = tmp_path / "cds"
    died = claim("broker", classpath, archives)  # never finished
    assert died.dump is not None
    died.dump.write_bytes(b"half")
    claim("broker", classpath, archives)
    assert died.dump.exists()  # recent: maybe a JVM still running
    monkeypatch.setattr(class_sharing, "STALE_DUMP_S", 0.0)
    time.sleep(0.01)
    claim("broker", classpath, archives)
    assert not died.dump.exists()


def test_new_jars_get_an_archive_of_their_own(tmp_path: Path) -> None:
    classpath = jars(tmp_path, "a.jar")
    before = class_sharing.archive_path("broker", classpath, tmp_path)
    jars(tmp_path, "c.jar")
    assert class_sharing.archive_path("broker", classpath, tmp_path) != before
    assert class_sharing.archive_path("peer", classpath, tmp_path) != class_sharing.archive_path(
        "broker", classpath, tmp_path
    )


def test_a_real_jvm_writes_an_archive_the_next_jvm_maps(tmp_path: Path) -> None:
    ensure_installed()
    classpath = f"{LIBS_DIR}/*"

    def java(options: list[str]) -> subprocess.CompletedProcess[str]:
        command = ["java", *options, "-cp", classpath, "kafka.tools.StorageTool", "random-uuid"]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    writer = claim("storage-tool", classpath, tmp_path)
    assert writer.dump is not None
    written = java(writer.options)
    assert written.returncode == 0, written.stderr
    writer.finish(clean_exit=True)
    reader = claim("storage-tool", classpath, tmp_path)
    assert reader.dump is None and reader.options[0].startswith("-XX:SharedArchiveFile=")
    # -Xshare:on: a JVM that cannot map the archive refuses to start instead of running without.
    mapped = java(["-Xshare:on", *reader.options])
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    assert len(mapped.stdout.strip()) == 22  # a base64 UUID, as without the archive
    assert os.path.getsize(reader.options[0].split("=", 1)[1]) > 1_000_000
