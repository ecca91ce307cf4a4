"""The same member logic over HTTP, against a real server on loopback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore, SqliteStore, SystemClock
from coordinator.client import GroupMember, HttpTransport, TransportError
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.messages import HeartbeatRequest, LeaveGroupRequest, LeaveGroupResponse
from coordinator.server import AuthConfig, authenticator_of, create_app, start_server

from .helpers import GROUP, TOPIC, Ledger, all_partitions, member_config, settled, wait_until

PARTITIONS = all_partitions(12)
MEMBER_TOKEN = "member-token"
ADMIN_TOKEN = "admin-token"


def auth() -> AuthConfig:
    return AuthConfig(
        admin_tokens=frozenset({ADMIN_TOKEN}),
        member_tokens={GROUP: frozenset({MEMBER_TOKEN})},
    )


@asynccontextmanager
async def server(store=None, port: int = 0) -> AsyncIterator[str]:
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=150),
        SystemClock(),
        store or MemoryStore(),
    )
    app = create_app(coordinator, auth(), initial_topics={TOPIC: 12})
    running = await start_server(app, "127.0.0.1", port, shutdown_timeout=1.0)
    try:
        yield running.url
    finally:
        await running.stop()


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with server() as base_url:
        yield base_url


async def start_member(url, members, ledger, name, token=MEMBER_TOKEN, **config):
    member = GroupMember(HttpTransport(url, token), member_config(**config), ledger.listener(name))
    members.append(member)
    await member.start()
    return member


@pytest.fixture
async def members() -> AsyncIterator[list[GroupMember]]:
    started: list[GroupMember] = []
    yield started
    for member in started:
        await member.close()
        await member._transport.close()


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
async def test_group_forms_over_http(url, members, protocol):
    ledger = Ledger()
    fleet = [
        await start_member(url, members, ledger, f"m-{i}", rebalance_protocol=protocol)
        for i in range(2)
    ]
    await wait_until(lambda: settled(fleet, PARTITIONS))
    fleet.append(await start_member(url, members, ledger, "m-2", rebalance_protocol=protocol))
    await wait_until(lambda: settled(fleet, PARTITIONS))
    assert sorted(len(m.assignment) for m in fleet) == [4, 4, 4]
    assert ledger.violations == []

    offsets = {tp: 7 for tp in fleet[0].assignment}
    await fleet[0].commit(offsets)
    assert await fleet[0].fetch_committed(offsets) == offsets


async def test_static_restart_over_http_causes_no_rebalance(url, members):
    ledger = Ledger()
    a = await start_member(url, members, ledger, "a", instance_id="s-0")
    b = await start_member(url, members, ledger, "b", instance_id="s-1")
    await wait_until(lambda: settled([a, b], PARTITIONS))
    generation, owned = a.generation_id, a.assignment
    await a.close()
    again = await start_member(url, members, ledger, "a2", instance_id="s-0")
    assert await again.wait_for_assignment(5) == owned
    assert again.generation_id == generation
    await asyncio.sleep(0.2)
    assert b.generation_id == generation


async def test_a_token_refused_for_longer_than_the_retry_window_is_fatal(url, members):
    member = await start_member(
        url, members, Ledger(), "x", token="not-a-token", authorization_retry_ms=300
    )
    started = asyncio.get_running_loop().time()
    with pytest.raises(CoordinatorError) as failure:
        await asyncio.wait_for(member.run(), 5)
    assert failure.value.code is ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert asyncio.get_running_loop().time() - started >= 0.3


async def test_a_member_survives_a_coordinator_that_does_not_know_its_token_yet(members):
    """An operator restart: its embedded coordinator answers 403 until the group's first
    reconcile registers the member token again. The member retries instead of exiting."""
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=50), SystemClock(), MemoryStore()
    )
    app = create_app(
        coordinator,
        AuthConfig(admin_tokens=frozenset({ADMIN_TOKEN})),
        initial_topics={TOPIC: 12},
    )
    running = await start_server(app, "127.0.0.1", 0, shutdown_timeout=1.0)
    try:
        member = await start_member(running.url, members, Ledger(), "m-0")
        await asyncio.sleep(1.0)  # refused (403) all this time
        assert member.error is None
        authenticator_of(app).set_member_tokens(GROUP, [MEMBER_TOKEN])
        await wait_until(lambda: settled([member], PARTITIONS))
    finally:
        await running.stop()


async def test_unreachable_server_is_a_transport_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transport = HttpTransport(f"http://127.0.0.1:{port}", MEMBER_TOKEN)
    try:
        with pytest.raises(TransportError):
            await transport.heartbeat(HeartbeatRequest(GROUP, 1, "m"))
        with pytest.raises(TransportError):
            await transport.topic_metadata()
    finally:
        await transport.close()


async def test_members_ride_out_a_coordinator_restart(tmp_path, members):
    """Connection refused while the coordinator restarts on the same store: static members
    keep their ids and partitions, and the group does not rebalance (KIP-345)."""
    store_path = tmp_path / "coordinator.db"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ledger = Ledger()
    async with server(SqliteStore(store_path), port) as base_url:
        fleet = [
            await start_member(
                base_url, members, ledger, f"s-{i}", instance_id=f"s-{i}", rebalance_protocol=p
            )
            for i, p in enumerate(["cooperative", "cooperative"])
        ]
        await wait_until(lambda: settled(fleet, PARTITIONS))
        before = [(m.member_id, m.generation_id, m.assignment) for m in fleet]
    await asyncio.sleep(0.5)  # down: every heartbeat is refused
    async with server(SqliteStore(store_path), port):
        await asyncio.sleep(0.5)
        assert [(m.member_id, m.generation_id, m.assignment) for m in fleet] == before
        assert all(m.state == "stable" for m in fleet)
        for name in ("s-0", "s-1"):
            assert not [
                entry for entry in ledger.log if entry[0] == name and entry[1] != "assigned"
            ]


class _RecordingTransport(HttpTransport):
    left: LeaveGroupResponse | None = None

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        self.left = await super().leave_group(request)
        return self.left


async def test_a_member_token_leave_carries_the_members_key(url, members):
    """A member leaves itself with a member token: the server demands the key of its join
    answer (docs/server.md), and the transport sends it back."""
    transport = _RecordingTransport(url, MEMBER_TOKEN)
    member = GroupMember(transport, member_config(), Ledger().listener("m-0"))
    members.append(member)
    await member.start()
    await wait_until(lambda: settled([member], PARTITIONS))
    await member.close(leave=True)
    assert transport.left is not None
    assert transport.left.error_code == ErrorCode.NONE
    assert [m.error_code for m in transport.left.members] == [ErrorCode.NONE]


async def test_a_413_is_a_clear_error_and_the_member_keeps_retrying(members, caplog):
    """A body over the coordinator's limit: the member says what to change and stays up
    (exiting would restart it into the same refusal)."""
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=50), SystemClock(), MemoryStore()
    )
    app = create_app(coordinator, auth(), max_body_bytes=64)  # smaller than any join
    running = await start_server(app, "127.0.0.1", 0, shutdown_timeout=1.0)
    try:
        member = await start_member(running.url, members, Ledger(), "m-0")
        await asyncio.sleep(0.5)
        assert member.error is None
        refusals = [r.getMessage() for r in caplog.records if "too large" in r.getMessage()]
        assert len(refusals) >= 2, "refused, retried, refused"
        assert "--max-body-bytes" in refusals[0] and "413" in refusals[0]
    finally:
        await running.stop()
