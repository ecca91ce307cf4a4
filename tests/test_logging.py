"""--log-format json|text: every long-running command writes one JSON object per line."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from staticfleet.cli import build_parser
from staticfleet.logs import configure_logging, formatter

STATICFLEET = str(Path(sys.executable).with_name("staticfleet"))
KEYS = {"timestamp", "level", "logger", "message"}


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord(
        "staticfleet.test", logging.WARNING, __file__, 1, "hi %s", ("x",), None
    )
    record.__dict__.update(extra)
    return record


def test_json_line_has_the_keys_and_the_extra_fields() -> None:
    line = formatter("json").format(_record(group="orders", generation=3))
    entry = json.loads(line)
    assert entry.keys() >= KEYS
    assert entry["level"] == "WARNING" and entry["logger"] == "staticfleet.test"
    assert entry["message"] == "hi x"
    assert entry["group"] == "orders" and entry["generation"] == 3
    assert entry["timestamp"].endswith("+00:00")


def test_json_line_carries_a_traceback() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = _record()
        record.exc_info = sys.exc_info()
    entry = json.loads(formatter("json").format(record))
    assert "RuntimeError: boom" in entry["exc_info"]


def test_text_is_one_human_line() -> None:
    line = formatter("text").format(_record())
    assert line.endswith("WARNING staticfleet.test: hi x")
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        formatter("xml")


def test_configure_logging_replaces_only_its_own_handler() -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers[:] = []
    try:
        first, second = io.StringIO(), io.StringIO()
        configure_logging("INFO", "text", stream=first)
        configure_logging("INFO", "json", stream=second)
        logging.getLogger("a").info("once")
        assert first.getvalue() == ""
        assert json.loads(second.getvalue())["message"] == "once"
        assert len(root.handlers) == 1
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


@pytest.mark.parametrize(
    "argv",
    [["coordinator", "serve"], ["member", "run"], ["operator", "run"]],
)
def test_every_long_running_command_takes_the_flag(argv: list[str], capsys) -> None:
    parser = build_parser()
    assert parser.parse_args([*argv, "--log-format", "json"]).log_format == "json"
    assert parser.parse_args(argv).log_format == "text"
    with pytest.raises(SystemExit) as refused:
        parser.parse_args([*argv, "--log-format", "xml"])
    assert refused.value.code == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err


def _json_lines(text: str) -> list[dict[str, object]]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "no log lines"
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    for entry in entries:
        assert entry.keys() >= KEYS, entry
    return entries


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return err


@pytest.mark.slow
def test_coordinator_and_member_write_json_lines(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    coordinator = subprocess.Popen(
        [
            STATICFLEET,
            "coordinator",
            "serve",
            "--store",
            "memory://",
            "--port",
            "0",
            "--insecure",
            "--initial-rebalance-delay-ms",
            "0",
            "--ready-file",
            str(ready),
            "--log-format",
            "json",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    member: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 20
        while not (ready.exists() and ready.read_text().strip()):
            assert coordinator.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        url = f"http://127.0.0.1:{ready.read_text().strip()}"
        member = subprocess.Popen(
            [
                STATICFLEET,
                "member",
                "run",
                "--coordinator-url",
                url,
                "--group-id",
                "g",
                "--instance-id",
                "m-0",
                "--topics",
                "t",
                "--log-level",
                "INFO",
                "--log-format",
                "json",
                "--event-log",
                str(tmp_path / "events.jsonl"),
            ],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        events = tmp_path / "events.jsonl"
        while '"assigned"' not in (events.read_text() if events.exists() else ""):
            assert member.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        member_err = _stop(member) if member is not None else ""
        coordinator_err = _stop(coordinator)
    served = _json_lines(coordinator_err)
    assert any(
        e["level"] == "WARNING" and "authentication disabled" in str(e["message"]) for e in served
    )
    assert any(e["logger"] == "staticfleet.coordinator" for e in served)
    joined = _json_lines(member_err)
    assert any("stable in generation" in str(e["message"]) for e in joined)


@pytest.mark.slow
def test_operator_and_kopf_write_json_lines(tmp_path: Path) -> None:
    """Kopf's own lines (its activities) come out in Kopf's JSON format: our keys plus its
    `severity`; a failed login shows its traceback as a field, not as extra lines."""
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing-kubeconfig")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen(
        [
            STATICFLEET,
            "operator",
            "run",
            "--insecure",
            "--store",
            "memory://",
            "--coordinator-port",
            "0",
            "--coordinator-host",
            "127.0.0.1",
            "--health-port",
            "0",
            "--log-format",
            "json",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    # Read its lines as they come until the failed login is logged (a busy machine takes
    # seconds to import Kopf), then stop it: a fixed wait is too short there and too long here.
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: seen.extend(proc.stderr or ()), daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while not any("kopf.activities.authentication" in line for line in seen[:]):
            assert proc.poll() is None and time.monotonic() < deadline, seen
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(timeout=10)
    entries = _json_lines("".join(seen))
    login = [e for e in entries if e["logger"] == "kopf.activities.authentication"]
    assert login and login[0]["severity"] == "error", entries
    assert "missing-kubeconfig" in str(login[0]["exc_info"])
    assert any(e["logger"] == "staticfleet.operator" for e in entries)
