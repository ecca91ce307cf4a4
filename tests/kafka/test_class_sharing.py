"""Class-data sharing for the broker's and the peer's JVMs: one JVM writes the archive, it is
put in place only after a clean exit, and later JVMs map it (a real `java` on Kafka's jars)."""

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


def test_one_jvm_writes_the_archive_and_the_others_run_without_until_it_is_in_place(
    tmp_path: Path,
) -> None:
    classpath = jars(tmp_path, "a.jar", "b.jar")
    archives = tmp_path / "cds"
    writer = claim("peer", classpath, archives)
    assert writer.dump is not None and writer.options == [f"-XX:ArchiveClassesAtExit={writer.dump}"]
    assert claim("peer", classpath, archives).options == []  # the archive is being written
    writer.dump.write_bytes(b"archive")  # what the JVM writes at exit
    writer.finish(clean_exit=True)
    (archive,) = archives.glob("*.jsa")
    assert archive.read_bytes() == b"archive"
    assert claim("peer", classpath, archives).options == [f"-XX:SharedArchiveFile={archive}"]
    assert [path.name for path in archives.iterdir()] == [archive.name]  # no claim, no dump left


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


def test_a_claim_left_by_a_run_that_died_is_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    classpath = jars(tmp_path, "a.jar")
    archives = tmp_path / "cds"
    assert claim("broker", classpath, archives).dump is not None  # never finished
    assert claim("broker", classpath, archives).dump is None
    monkeypatch.setattr(class_sharing, "STALE_CLAIM_S", 0.0)
    time.sleep(0.01)
    assert claim("broker", classpath, archives).dump is not None


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
