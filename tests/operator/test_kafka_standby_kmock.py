"""Hot standby on a consumer-protocol Kafka group, end to end: the real Kopf operator on
kmock, our members on Kafka's consumer protocol (KIP-848) against the session's broker. The
operator starts one standby per slot with the slot's instance id (waiting on it); a slot pod
killed with SIGKILL (no closing heartbeat) is taken over by a static leave on its member's
behalf, and its standby joins with its partitions: nobody else moves, the group epoch stays.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from coordinator.client.kafka_transport import KafkaTransport
from coordinator.protocol import TopicPartition
from staticfleet.kafka.broker import KafkaBroker
from tests.operator.kube_harness import ConsumerPod, running_cluster
from tests.operator.test_kafka_kmock import events, kafka_spec

pytestmark = pytest.mark.kafka


class Witness:
    """Every pod's callbacks, with when (monotonic) they ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, str, str, list[int]]] = []

    def for_pod(self, pod: str) -> Any:
        calls = self.calls

        class Listener:
            def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
                calls.append(
                    (time.monotonic(), pod, "revoked", sorted(tp.partition for tp in partitions))
                )

            def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
                calls.append(
                    (time.monotonic(), pod, "assigned", sorted(tp.partition for tp in partitions))
                )

            def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
                calls.append(
                    (time.monotonic(), pod, "lost", sorted(tp.partition for tp in partitions))
                )

        return Listener()


async def test_a_killed_slot_pod_is_taken_over_in_place_by_its_standby(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str]
) -> None:
    topic = kafka_topic(6)
    bootstrap = kafka_broker.bootstrap
    group_id, spec = kafka_spec(
        bootstrap, topic, replicas=3, rebalance={"protocol": "consumer"}, standbys=3
    )
    witness = Witness()
    transport = KafkaTransport(bootstrap)
    async with running_cluster() as cluster:
        cluster.kubelet.listener_for = witness.for_pod
        await cluster.create_group("ks", spec)
        await cluster.eventually(lambda: cluster.group_settled("ks", 3), timeout=120)

        def waiting() -> bool:
            pods = {k: m for k, m in cluster.kubelet.members.items() if isinstance(m, ConsumerPod)}
            standbys = [m for m in pods.values() if m.member.waiting_for_instance_id]
            return len(pods) == 6 and len(standbys) == 3

        await cluster.eventually(waiting, timeout=60, what="3 members and 3 waiting standbys")
        before = await transport.describe_consumer_group(group_id)
        assert before.converged and len(before.members) == 3
        victim = f"{group_id}-1"
        [held] = [m for m in before.members if m.instance_id == victim]
        # Either of the slot's pods may hold it (both started at once): the client id (the
        # pod's name) tells which; the other waits.
        assert held.client_id in ("ks-1", "ks-standby-1")
        holder = held.client_id
        standby = "ks-standby-1" if holder == "ks-1" else "ks-1"
        partitions = sorted(p for _, p in held.assignment)
        assert len(partitions) == 2

        killed_at = time.monotonic()
        await cluster.kubelet.exit(holder, 137, killed=True)

        def taken_over() -> bool:
            return any(
                pod == standby and kind == "assigned" and at > killed_at
                for at, pod, kind, _ in witness.calls
            )

        await cluster.eventually(taken_over, timeout=30, what="the standby's first partitions")
        [(first_at, _, _, first)] = [
            c for c in witness.calls if c[1] == standby and c[0] > killed_at
        ][:1]
        took_ms = (first_at - killed_at) * 1000
        print(f"\nkill -9 -> the standby's first partitions: {took_ms:.0f} ms")
        assert first == partitions  # exactly the killed member's
        after = await transport.describe_consumer_group(group_id)
        assert after.group_epoch == before.group_epoch  # no reassignment
        [now] = [m for m in after.members if m.instance_id == victim]
        assert now.client_id == standby and now.member_id != held.member_id
        # In place: no other pod had a callback since the kill.
        # (The killed pod's own listener still hears its revocation here: its in-process
        # member is closed over the cut transport; a real SIGKILL runs nothing.)
        others = [c for c in witness.calls if c[0] > killed_at and c[1] not in (standby, holder)]
        assert others == []
        promoted = await events(cluster, "StandbyPromoted")
        assert len(promoted) == 1 and victim in promoted[0]["message"]
        body = await cluster.get_group("ks")
        assert body["status"]["lastPromotion"]["standby"] == standby
        assert not body["status"].get("promotions")
    await transport.close()
