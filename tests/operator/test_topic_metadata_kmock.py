"""Raising `spec.topics[].partitions` reaches the running members: the operator raises the
coordinator's topic metadata, the coordinator rebalances the group consuming the topic
(docs/coordinator.md, "Topic metadata and subscription changes"), and every new partition
ends up owned, never by two members at once, after exactly one rebalance."""

from __future__ import annotations

import pytest

from coordinator.client import GroupMember
from coordinator.protocol import TopicPartition
from staticfleet_operator.backends import topics_to_raise
from tests.client.helpers import Ledger
from tests.operator.kube_harness import Cluster, managed_spec, running_cluster

TOPIC = "orders"


def partitions(count: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(TOPIC, p) for p in range(count))


def owned_once(cluster: Cluster, count: int) -> bool:
    """Every running member stable in one generation, together owning the topic's `count`
    partitions exactly once."""
    members = [m for m in cluster.kubelet.members.values() if isinstance(m, GroupMember)]
    if len(members) != 3 or any(m.state != "stable" for m in members):
        return False
    if len({m.generation_id for m in members}) != 1:
        return False
    owned = [tp for m in members for tp in m.assignment]
    return len(owned) == len(set(owned)) and set(owned) == partitions(count)


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
async def test_raising_partitions_in_the_spec_gets_every_new_partition_owned_in_one_rebalance(
    protocol: str,
) -> None:
    ledger = Ledger()
    async with running_cluster() as cluster:
        cluster.kubelet.listener_for = ledger.listener
        spec = managed_spec(replicas=3, rebalance={"protocol": protocol})
        assert spec["topics"] == [{"name": TOPIC, "partitions": 6}]
        await cluster.create_group("orders", spec)
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")
        await cluster.eventually(lambda: owned_once(cluster, 6), what="6 partitions owned")
        since = max(e.seq for e in await cluster.journal("orders"))
        generation = cluster.coordinator.generation_of("orders")

        await cluster.update_spec("orders", {"topics": [{"name": TOPIC, "partitions": 9}]})

        async def raised() -> bool:
            return (await cluster.coordinator.topic_metadata()).get(TOPIC) == 9

        await cluster.eventually(raised, what="metadata raised")
        await cluster.eventually(lambda: owned_once(cluster, 9), what="9 partitions owned")
        await cluster.passes(3)  # later passes find the metadata current: nothing more
        events = await cluster.journal("orders", since)
        kinds = [e.kind for e in events]
        assert kinds.count("rebalance_started") == 1, kinds
        changed = next(e for e in events if e.kind == "topic_metadata_changed")
        assert changed.detail == {"topics": {TOPIC: [6, 9]}}
        assert cluster.coordinator.generation_of("orders") == generation + 1
        assert ledger.violations == []
        assert set(ledger.owner) == partitions(9)
        # Partition counts are not in the pod template: no member was restarted for it.
        assert [e.verb for e in cluster.kubelet.history] == ["started"] * 3
        assert {e.protocol for e in cluster.kubelet.history} == {protocol}


def test_the_operator_only_raises_partition_counts() -> None:
    known = {TOPIC: 6, "payments": 4}
    assert topics_to_raise(known, {TOPIC: 9}) == {TOPIC: 9}
    assert topics_to_raise(known, {TOPIC: 4, "payments": 4}) == {}  # partitions never shrink
    assert topics_to_raise(known, {"audit": 2}) == {"audit": 2}  # a new topic
