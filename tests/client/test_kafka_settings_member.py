"""A `KafkaAccessError` from the transport ends a `GroupMember` at once: never retried."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator import GroupCoordinator
from coordinator.client import GroupMember
from coordinator.client.inprocess import InProcessTransport
from coordinator.client.kafka_errors import (
    KafkaAccessError,
    KafkaAuthenticationFailed,
    KafkaAuthorizationFailed,
)
from coordinator.client.member import MemberAccessDenied
from coordinator.client.transport import TransportError
from staticfleet.member.runtime import EXIT_USAGE

from .helpers import FaultyTransport, member_config, wait_until


class DeniedTransport(FaultyTransport):
    def __init__(self, inner: InProcessTransport) -> None:
        super().__init__(inner)
        self.deny: KafkaAccessError | None = None

    def _reach(self, name: str) -> None:
        super()._reach(name)
        if self.deny is not None:
            raise self.deny


async def test_a_refused_join_is_fatal_at_once(coordinator: GroupCoordinator) -> None:
    transport = DeniedTransport(InProcessTransport(coordinator))
    transport.deny = KafkaAuthorizationFailed("JoinGroup", "Group", "fleet")
    member = GroupMember(transport, member_config("m-0"))
    await member.start()
    with pytest.raises(MemberAccessDenied) as error:
        await asyncio.wait_for(member.run(), 5)
    assert error.value.access is transport.deny
    assert str(error.value).startswith("KafkaAuthorizationFailed: not authorized: JoinGroup")
    assert not isinstance(error.value, TransportError)
    assert transport.calls.count("join") == 1  # not retried
    await member.close()


async def test_a_refused_heartbeat_is_fatal_and_the_partitions_are_lost(
    coordinator: GroupCoordinator,
) -> None:
    transport = DeniedTransport(InProcessTransport(coordinator))
    lost: list[object] = []

    class Listener:
        def on_partitions_assigned(self, partitions: object) -> None: ...

        def on_partitions_revoked(self, partitions: object) -> None: ...

        def on_partitions_lost(self, partitions: object) -> None:
            lost.append(partitions)

    member = GroupMember(transport, member_config("m-0"), Listener())
    await member.start()
    await wait_until(lambda: member.state == "stable" and member.assignment, within=10)
    transport.deny = KafkaAuthenticationFailed("broker b:1 refused SASL SCRAM-SHA-512")
    with pytest.raises(MemberAccessDenied):
        await asyncio.wait_for(member.run(), 5)
    assert isinstance(member.error, MemberAccessDenied)
    assert member.error.access.reason == "KafkaAuthenticationFailed"
    assert lost
    await member.close()


def member_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "staticfleet.cli", "member", "run", "--group-id", "g", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_member_run_refuses_a_bad_kafka_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=u\n")
    done = member_run(
        "--coordinator", "kafka://127.0.0.1:1", "--topics", "t", "--kafka-config", str(bad)
    )
    assert done.returncode == EXIT_USAGE
    assert "sasl.password is missing" in done.stderr and str(bad) in done.stderr

    missing_key = tmp_path / "tls.properties"
    missing_key.write_text(
        "security.protocol=SSL\n"
        f"ssl.certificate.location={tmp_path / 'no.crt'}\n"
        f"ssl.key.location={tmp_path / 'no.key'}\n"
    )
    done = member_run(
        "--coordinator", "kafka://127.0.0.1:1", "--topics", "t", "--kafka-config", str(missing_key)
    )
    assert done.returncode == EXIT_USAGE and "no such file" in done.stderr

    good = tmp_path / "good.properties"
    good.write_text("security.protocol=PLAINTEXT\n")
    done = member_run(
        "--coordinator", "http://127.0.0.1:1", "--topics", "t", "--kafka-config", str(good)
    )
    assert done.returncode == EXIT_USAGE and "neither" in done.stderr
