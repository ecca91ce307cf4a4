"""Members get new partitions and new subscriptions assigned (docs/coordinator.md, "Topic
metadata and subscription changes"): a running group of `GroupMember`s, the metadata raised
by an admin, every new partition owned once, never two owners at a time, one rebalance."""

from __future__ import annotations

import aiohttp
import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, ManualClock, MemoryStore, SystemClock
from coordinator.client import GroupMember, HttpTransport, Transport
from coordinator.protocol import TopicPartition
from coordinator.server import AuthConfig, create_app, start_server

from .helpers import (
    GROUP,
    TOPIC,
    Ledger,
    advance_until,
    all_partitions,
    in_process,
    member_config,
    wait_until,
)

CLICKS = "clicks"
ADMIN_TOKEN = "admin-token"
MEMBER_TOKEN = "member-token"


async def start_static(
    transport: Transport,
    members: list[GroupMember],
    ledger: Ledger,
    instance_id: str,
    clock: ManualClock | None = None,
    **config: object,
) -> GroupMember:
    settings = member_config(instance_id, **config)
    member = GroupMember(transport, settings, ledger.listener(instance_id), clock=clock)
    members.append(member)
    await member.start()
    return member


@pytest.fixture
def coordinator(manual_coordinator: GroupCoordinator) -> GroupCoordinator:
    """Manual time for the in-process tests: they advance the test's `clock`."""
    return manual_coordinator


def owned_once(fleet: list[GroupMember], partitions: frozenset[TopicPartition]) -> bool:
    """Every member stable in one generation, together owning `partitions` exactly once."""
    if any(m.state != "stable" for m in fleet) or len({m.generation_id for m in fleet}) != 1:
        return False
    owned = [tp for m in fleet for tp in m.assignment]
    return len(owned) == len(set(owned)) and set(owned) == partitions


async def rebalances_since(coordinator: GroupCoordinator, seq: int) -> int:
    rows = await coordinator.journal_rows(GROUP, seq)
    return sum(1 for row in rows if row.kind == "rebalance_started")


async def last_seq(coordinator: GroupCoordinator) -> int:
    return max((row.seq for row in await coordinator.journal_rows(GROUP)), default=0)


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({TOPIC: 20}, all_partitions(20)),  # more partitions of a subscribed topic
        ({CLICKS: 6}, all_partitions(12) | all_partitions(6, CLICKS)),  # a topic appears
    ],
    ids=["raised", "created"],
)
async def test_new_partitions_of_subscribed_topics_get_owned_after_a_metadata_change(
    coordinator: GroupCoordinator,
    clock: ManualClock,
    members: list[GroupMember],
    protocol: str,
    change: dict[str, int],
    expected: frozenset[TopicPartition],
) -> None:
    ledger = Ledger()
    fleet = [
        await start_static(
            in_process(coordinator),
            members,
            ledger,
            f"m-{i}",
            clock,
            topics=(TOPIC, CLICKS),
            rebalance_protocol=protocol,
        )
        for i in range(3)
    ]
    await advance_until(clock, lambda: owned_once(fleet, all_partitions(12)))
    since = await last_seq(coordinator)

    await coordinator.set_topic_metadata(change)

    await advance_until(clock, lambda: owned_once(fleet, expected))
    assert ledger.violations == []
    assert set(ledger.owner) == expected
    assert await rebalances_since(coordinator, since) == 1


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
async def test_static_follower_restarting_with_another_topic_gets_it_assigned(
    coordinator: GroupCoordinator, clock: ManualClock, members: list[GroupMember], protocol: str
) -> None:
    # Beyond Kafka, deliberately: Kafka serves such a member the current generation and its
    # new topic stays unowned until something else rebalances the group.
    await coordinator.set_topic_metadata({CLICKS: 6})
    ledger = Ledger()
    fleet = [
        await start_static(
            in_process(coordinator), members, ledger, f"m-{i}", clock, rebalance_protocol=protocol
        )
        for i in range(3)
    ]
    await advance_until(clock, lambda: owned_once(fleet, all_partitions(12)))
    follower = next(m for m in fleet if not m.is_leader)
    assert follower.group_instance_id is not None
    since = await last_seq(coordinator)

    await follower.close()  # static: no LeaveGroup
    restarted = await start_static(
        in_process(coordinator),
        members,
        ledger,
        follower.group_instance_id,
        clock,
        topics=(TOPIC, CLICKS),
        rebalance_protocol=protocol,
    )
    fleet = [m for m in fleet if m is not follower] + [restarted]

    expected = all_partitions(12) | all_partitions(6, CLICKS)
    await advance_until(clock, lambda: owned_once(fleet, expected))
    assert all_partitions(6, CLICKS) <= restarted.assignment
    assert ledger.violations == []
    assert await rebalances_since(coordinator, since) == 1


async def test_over_http_the_leader_assigns_with_the_metadata_an_admin_raised(
    members: list[GroupMember],
) -> None:
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=150), SystemClock(), MemoryStore()
    )
    auth = AuthConfig(
        admin_tokens=frozenset({ADMIN_TOKEN}), member_tokens={GROUP: frozenset({MEMBER_TOKEN})}
    )
    app = create_app(coordinator, auth, initial_topics={TOPIC: 24})
    running = await start_server(app, "127.0.0.1", 0, shutdown_timeout=1.0)
    transports: list[HttpTransport] = []
    try:
        ledger = Ledger()
        fleet = []
        for i in range(4):
            transports.append(HttpTransport(running.url, MEMBER_TOKEN))
            fleet.append(await start_static(transports[-1], members, ledger, f"m-{i}"))
        await wait_until(lambda: owned_once(fleet, all_partitions(24)))
        since = await last_seq(coordinator)

        async with (
            aiohttp.ClientSession() as session,
            session.put(
                f"{running.url}/v1/topics",
                json={"topics": {TOPIC: 32}},
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            ) as response,
        ):
            assert response.status == 200, await response.text()

        await wait_until(lambda: owned_once(fleet, all_partitions(32)))
        assert ledger.violations == []
        assert await rebalances_since(coordinator, since) == 1
    finally:
        for member in members:
            await member.close()
        members.clear()
        for transport in transports:
            await transport.close()
        await running.stop()
