"""`staticfleet member run` against `coordinator serve --tls-cert-file`: processes, real TLS."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from staticfleet.kafka.pki import CertificateAuthority, ip_sans, name
from staticfleet.member.runtime import EXIT_KAFKA_ACCESS
from staticfleet.member.settings import Overrides, settings_from
from tests.serve import serve_coordinator, staticfleet

pytestmark = pytest.mark.slow

TOKEN = "member-token"


def member_env(url: str, log: Path, ca_file: Path) -> dict[str, str]:
    return {
        **os.environ,
        "STATICFLEET_COORDINATOR_URL": url,
        "STATICFLEET_COORDINATOR_CA_FILE": str(ca_file),
        "STATICFLEET_GROUP_ID": "fleet",
        "STATICFLEET_INSTANCE_ID": "s-0",
        "STATICFLEET_TOPICS": "events",
        "STATICFLEET_SESSION_TIMEOUT_MS": "6000",
        "STATICFLEET_HEARTBEAT_INTERVAL_MS": "200",
        "STATICFLEET_TOKEN": TOKEN,
        "STATICFLEET_EVENT_LOG": str(log),
    }


def test_member_processes_over_https_trust_only_their_ca(tmp_path):
    pki = tmp_path / "pki"
    ca = CertificateAuthority.create(pki, "ca", "coordinator-ca")
    pair = ca.issue(pki, "tls", name("127.0.0.1"), server=True, sans=[*ip_sans("127.0.0.1")])
    stranger = CertificateAuthority.create(tmp_path / "other", "ca", "someone-else")
    with serve_coordinator(
        tmp_path,
        "--host",
        "127.0.0.1",
        "--tls-cert-file",
        str(pair.cert),
        "--tls-key-file",
        str(pair.key),
        "--store",
        "memory://",
        "--member-token",
        f"fleet:{TOKEN}",
        "--topics",
        "events=4",
        "--initial-rebalance-delay-ms",
        "0",
    ) as url:
        https = url.replace("http://", "https://")
        refused = subprocess.run(
            staticfleet("member", "run"),
            env=member_env(https, tmp_path / "refused.jsonl", stranger.cert_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == EXIT_KAFKA_ACCESS, refused.stderr
        assert "CoordinatorCertificateUntrusted" in refused.stderr
        assert "untrusted" in refused.stderr

        trusted = subprocess.Popen(
            staticfleet("member", "run", "--commit-interval-ms", "200"),
            env=member_env(https, tmp_path / "trusted.jsonl", ca.cert_path),
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            log = tmp_path / "trusted.jsonl"
            deadline = time.monotonic() + 30
            while not (log.exists() and '"commit"' in log.read_text()):
                assert trusted.poll() is None, trusted.stderr.read() if trusted.stderr else ""
                assert time.monotonic() < deadline, "no commit over HTTPS"
                time.sleep(0.1)
        finally:
            trusted.terminate()
            assert trusted.wait(timeout=20) == 0


def test_a_ca_file_needs_an_https_url(tmp_path):
    with pytest.raises(ValueError, match="not https://"):
        settings_from(
            Overrides(
                coordinator_url="http://coordinator:9092",
                coordinator_ca_file=str(tmp_path / "ca.crt"),
                group_id="g",
                topics="t",
            ),
            {},
        )
    with pytest.raises(ValueError, match="does not exist"):
        settings_from(
            Overrides(
                coordinator_url="https://coordinator:9092",
                coordinator_ca_file=str(tmp_path / "missing.crt"),
                group_id="g",
                topics="t",
            ),
            {},
        )
