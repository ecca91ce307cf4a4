"""A `KafkaAccessError` from the transport ends a `GroupMember` at once: never retried."""

from __future__ import annotations

import asyncio

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
