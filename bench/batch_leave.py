"""Batch leave: reassignment time after a LeaveGroup (v3+) that names the gone members by
instance id, on a Kafka broker and on the embedded coordinator, with the same members.

A fleet of static `GroupMember`s (cooperative, `static-sticky`) is stable; `LEAVING` of them
stop without leaving (their pods are gone, as in a scale-down), then one admin LeaveGroup
names their instance ids. The figure is the time from sending that request until the
remaining members are stable in one generation and own every partition once: what a
scale-down costs in unowned partition time. The heartbeat interval is the same for both
(the remaining members learn of the rebalance from a heartbeat).

    python -m bench.run --only batch_leave
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore, SystemClock
from coordinator.client import GroupMember, MemberConfig
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.inprocess import InProcessTransport
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.transport import Transport
from coordinator.errors import ErrorCode
from coordinator.messages import LeaveGroupRequest, MemberIdentity
from coordinator.protocol import TopicPartition
from staticfleet.kafka.broker import KafkaBroker

MEMBERS = 6
LEAVING = 2
PARTITIONS = 12
HEARTBEAT_INTERVAL_MS = 100
TOPIC = "batch-leave"


async def one_run(new_transport: Any, group: str) -> dict[str, Any]:
    members = {
        f"m{i}": GroupMember(
            new_transport(f"m{i}"),
            MemberConfig(
                group_id=group,
                topics=(TOPIC,),
                group_instance_id=f"m{i}",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                rebalance_protocol=RebalanceProtocolSetting.COOPERATIVE,
                cooperative_assignor="static-sticky",
            ),
        )
        for i in range(MEMBERS)
    }
    every = {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
    for member in members.values():
        await member.start()
    await settled(members.values(), every, 60)
    generation = next(iter(members.values())).generation_id
    gone = [members.pop(f"m{i}") for i in range(LEAVING)]
    for member in gone:
        await member.close(leave=False)  # the pod is gone: no LeaveGroup of its own
    admin: Transport = new_transport("admin")
    started = time.perf_counter()
    answer = await admin.leave_group(
        LeaveGroupRequest(group, [MemberIdentity("", m.group_instance_id) for m in gone])
    )
    if answer.error_code is not ErrorCode.NONE or any(
        r.error_code is not ErrorCode.NONE for r in answer.members
    ):
        raise RuntimeError(f"LeaveGroup answered {answer}")
    await settled(members.values(), every, 60, after_generation=generation)
    seconds = time.perf_counter() - started
    for member in [*members.values(), *gone]:
        await member.close(leave=True)
        await member._transport.close()
    await admin.close()
    return {"reassignment_seconds": round(seconds, 4)}


async def settled(
    members: Any, every: set[TopicPartition], within_s: float, after_generation: int = -1
) -> None:
    deadline = time.perf_counter() + within_s
    while True:
        members = list(members)
        owned = [tp for m in members for tp in m.assignment]
        if (
            all(m.state == "stable" for m in members)
            and len({m.generation_id for m in members}) == 1
            and members[0].generation_id > after_generation
            and len(owned) == len(set(owned))
            and set(owned) == every
        ):
            return
        if time.perf_counter() > deadline:
            raise RuntimeError("the members did not settle")
        await asyncio.sleep(0.005)


async def embedded_runs(runs: int) -> list[float]:
    coordinator = GroupCoordinator(
        CoordinatorConfig(group_min_session_timeout_ms=1_000, group_initial_rebalance_delay_ms=0),
        SystemClock(),
        MemoryStore(),
    )
    await coordinator.start()
    await coordinator.set_topic_metadata({TOPIC: PARTITIONS})
    transport = InProcessTransport(coordinator)
    try:
        return [
            (await one_run(lambda _: transport, f"embedded-{n}"))["reassignment_seconds"]
            for n in range(runs)
        ]
    finally:
        await coordinator.close()


async def kafka_runs(bootstrap: str, runs: int) -> list[float]:
    return [
        (
            await one_run(
                lambda name: KafkaTransport(f"kafka://{bootstrap}", client_id=name),
                f"kafka-{n}",
            )
        )["reassignment_seconds"]
        for n in range(runs)
    ]


def figures(samples: list[float]) -> dict[str, Any]:
    return {
        "runs": len(samples),
        "median_seconds": round(statistics.median(samples), 4),
        "max_seconds": round(max(samples), 4),
        "samples": samples,
    }


def run(quick: bool) -> dict[str, Any]:
    runs = 2 if quick else 5
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as workdir:
        broker = KafkaBroker(Path(workdir), class_sharing=False)
        broker.start()
        try:
            broker.wait_ready(timeout=120)
            broker.create_topic(TOPIC, PARTITIONS)
            kafka = asyncio.run(kafka_runs(broker.bootstrap, runs))
        finally:
            broker.stop()
    embedded = asyncio.run(embedded_runs(runs))
    return {
        "setup": {
            "members": MEMBERS,
            "leaving": LEAVING,
            "partitions": PARTITIONS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "protocol": "cooperative, static-sticky",
            "broker": "Apache Kafka 4.4.0, KRaft single node on loopback",
        },
        "kafka": figures(kafka),
        "embedded": figures(embedded),
    }
