"""A member over KafkaTransport when its broker crashes (kill -9) and comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator.client import GroupMember
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.protocol import TopicPartition
from staticfleet.kafka.broker import KafkaBroker
from tests.client.helpers import member_config, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


async def test_static_member_rides_out_a_broker_crash_without_a_rebalance(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "broker")
    await asyncio.to_thread(broker.start)
    member: GroupMember | None = None
    try:
        await asyncio.to_thread(broker.wait_ready, 120)
        await asyncio.to_thread(broker.create_topic, "crash", 4)
        member = GroupMember(
            KafkaTransport(f"kafka://{broker.bootstrap}", request_timeout_ms=5_000),
            member_config(
                "m0",
                group_id="crash-group",
                topics=("crash",),
                session_timeout_ms=60_000,
                rebalance_timeout_ms=10_000,
                heartbeat_interval_ms=200,
            ),
        )
        await member.start()
        owned = await member.wait_for_assignment(60)
        generation, rebalances = member.generation_id, member.rebalances

        await asyncio.to_thread(broker.kill)
        await asyncio.sleep(1)  # heartbeats fail: TransportError, retried, nothing changes
        assert member.state == "stable" and member.assignment == owned
        await asyncio.to_thread(broker.start)
        await asyncio.to_thread(broker.wait_ready, 120)

        # The transport finds the (reloaded) coordinator again; the broker kept the group.
        async def commit() -> bool:
            try:
                await member.commit({TopicPartition("crash", 0): 5})
            except Exception:
                return False
            return True

        deadline = asyncio.get_running_loop().time() + 60
        while not await commit():
            assert asyncio.get_running_loop().time() < deadline, "no commit after the restart"
            await asyncio.sleep(0.5)
        await wait_until(lambda: member is not None and member.state == "stable", within=30)
        assert (member.generation_id, member.rebalances) == (generation, rebalances)
        assert member.assignment == owned
        assert await member.fetch_committed([TopicPartition("crash", 0)]) == {
            TopicPartition("crash", 0): 5
        }
    finally:
        if member is not None:
            await member.close()
            await member._transport.close()
        await asyncio.to_thread(broker.stop)
