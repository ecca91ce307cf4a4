"""`python -m staticfleet.kafka.java_pod` as the Java client image runs it: the peer's jars
already there (nothing built at start), its event log on stdout for `kubectl logs`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from staticfleet.kafka import java_peer, java_pod

ENV = {
    "KAFKA_BOOTSTRAP_SERVERS": "10.244.0.1:9093",
    "KAFKA_GROUP_ID": "javafleet",
    "KAFKA_TOPICS": "javafleet",
    "KAFKA_GROUP_INSTANCE_ID": "javafleet-0",
}


def launched(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> list[str]:
    """The command java_pod execs (it replaces itself with the JVM)."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    execs: list[list[str]] = []

    def fake_exec(file: str, args: list[str]) -> Any:
        execs.append(list(args))

    monkeypatch.setattr("os.execvp", fake_exec)
    java_pod.main(argv)
    (command,) = execs
    return command


def test_in_the_image_nothing_is_built_and_the_log_goes_to_stdout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(java_peer.PEER_DIR_ENV, str(tmp_path / "java-peer"))

    def no_build(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"built at start: {args}")

    monkeypatch.setattr("subprocess.run", no_build)
    monkeypatch.chdir(tmp_path)
    command = launched(monkeypatch, ["--events-dir", "-"])
    classpath = command[command.index("-cp") + 1]
    assert classpath.startswith(f"{tmp_path / 'java-peer' / 'consumer-peer.jar'}:")
    assert command[command.index("--events") + 1] == "-"
    assert command[command.index("--instance-id") + 1] == "javafleet-0"
    assert list(tmp_path.iterdir()) == []  # no events file, no directory made


def test_by_default_the_log_is_a_file_per_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(java_peer.PEER_DIR_ENV, str(tmp_path / "java-peer"))
    events_dir = tmp_path / "events"
    command = launched(monkeypatch, ["--events-dir", str(events_dir)])
    events = Path(command[command.index("--events") + 1])
    assert events.parent == events_dir and events.name.startswith("events-")
    assert events_dir.is_dir()
