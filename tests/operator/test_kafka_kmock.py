"""The real Kopf operator against kmock, with groups on a real Kafka broker.

The harness's kubelet starts each member pod's process from its env: our member over the
Kafka transport (clientFamily staticfleet), the Java KafkaConsumer peer (java), or our
member holding one assignor in the role of a librdkafka client. The broker is the witness:
its DescribeGroups, and the members' own generations.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator.client import GroupMember
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.journal import read_jsonl
from staticfleet.demo.ownership import all_holdings, ownership_overlaps
from staticfleet.kafka.broker import KafkaBroker
from tests.kafka.helpers import member_logs
from tests.operator.kube_harness import (
    STOCK_STRATEGY,
    Cluster,
    env_of,
    managed_spec,
    running_cluster,
)

pytestmark = pytest.mark.kafka


def kafka_spec(
    bootstrap: str, topic: str, replicas: int, family: str = "staticfleet", **extra: Any
) -> tuple[str, dict[str, Any]]:
    group_id = f"kop-{uuid.uuid4().hex[:8]}"
    spec = managed_spec(
        group_id=group_id,
        replicas=replicas,
        topics=[{"name": topic}],
        coordinator={"type": "kafka", "bootstrapServers": bootstrap, "clientFamily": family},
        **extra,
    )
    return group_id, spec


async def broker_members(bootstrap: str, group_id: str) -> dict[str, str]:
    """instance id -> member id, as the broker describes the group."""
    transport = KafkaTransport(bootstrap)
    try:
        described = await transport.describe_group(group_id)
    finally:
        await transport.close()
    return {m.group_instance_id or "": m.member_id for m in described.members}


def our_members(cluster: Cluster) -> list[GroupMember]:
    return [m for m in cluster.kubelet.members.values() if isinstance(m, GroupMember)]


async def events(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in await cluster.events() if e.get("reason") == reason]


def condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in body["status"]["conditions"] if c["type"] == kind)


async def test_our_members_on_kafka_ids_restart_scale_down_and_two_bounce(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(6)
    bootstrap = kafka_broker.bootstrap
    group_id, spec = kafka_spec(bootstrap, topic, replicas=4)
    async with running_cluster(journal=tmp_path / "journal") as cluster:
        await cluster.create_group("ours", spec)
        body = await cluster.eventually(
            lambda: cluster.group_settled("ours", 4), timeout=60, what="4 members Stable"
        )
        ids = [f"{group_id}-{slot}" for slot in range(4)]
        assert sorted((await broker_members(bootstrap, group_id)).keys()) == ids
        assert body["status"]["groupState"] == "Stable"
        assert body["status"]["selectedProtocol"] == "range"
        assert sorted(m["instanceId"] for m in body["status"]["memberInstances"]) == ids
        assert all(m.get("memberId") for m in body["status"]["memberInstances"])

        # A deleted pod comes back with its instance id and the broker does not rebalance:
        # the members that stayed keep their generation.
        stayed = [m for m in our_members(cluster) if m.config.group_instance_id != ids[1]]
        generations = {m.config.group_instance_id: m.generation_id for m in stayed}
        await cluster.kube.delete_pod("default", "ours-1")
        await cluster.eventually(
            lambda: sum(1 for e in cluster.kubelet.history if e.name == "ours-1") >= 2,
            what="ours-1 restarted",
        )
        await cluster.eventually(lambda: cluster.group_settled("ours", 4), timeout=30)
        assert {m.config.group_instance_id: m.generation_id for m in stayed} == generations

        # Scale 4 -> 2: pods go, then one batch LeaveGroup names exactly the removed ids,
        # and the broker rebalances at once (well before the 6 s session timeout).
        await cluster.update_spec("ours", {"replicas": 2})
        await cluster.eventually(lambda: cluster.group_settled("ours", 2), timeout=30)
        left = await events(cluster, "MembersLeft")
        assert len(left) == 1 and ids[2] in left[0]["message"] and ids[3] in left[0]["message"]
        assert sorted(await broker_members(bootstrap, group_id)) == ids[:2]

        # eager -> cooperative: the same orchestrator, fed by the broker's describe.
        await cluster.update_spec("ours", {"rebalance": {"protocol": "cooperative"}})

        async def completed() -> dict[str, Any] | None:
            body = await cluster.get_group("ours")
            status = body.get("status") or {}
            done = (status.get("rollout") or {}).get("phase") == "Completed"
            return body if done and status.get("selectedProtocol") == "cooperative-sticky" else None

        body = await cluster.eventually(completed, timeout=90, what="two-bounce completed")
        assert body["status"]["effectiveRebalanceProtocol"] == "cooperative"
        bounced = [e for e in cluster.kubelet.history if e.verb == "started"][-4:]
        assert [e.protocol for e in bounced] == ["compatible"] * 2 + ["cooperative"] * 2
        await cluster.eventually(lambda: cluster.group_settled("ours", 2), timeout=30)

    # The rebalances the operator saw on the broker, in the analytics' journal format.
    rows = list(read_jsonl(tmp_path / "journal" / f"{group_id}.jsonl"))
    kinds = [row.kind for row in rows]
    assert "generation_started" in kinds and "assignment" in kinds and "stable" in kinds
    assert [row.seq for row in rows] == list(range(1, len(rows) + 1))


async def test_java_fleet_restart_two_bounce_without_double_ownership_and_scale_down(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    topic = kafka_topic(6)
    bootstrap = kafka_broker.bootstrap
    group_id, spec = kafka_spec(bootstrap, topic, replicas=3, family="java")
    logs = tmp_path / "java"
    async with running_cluster(java_logs=logs) as cluster:
        await cluster.create_group("jv", spec)
        await cluster.eventually(lambda: cluster.group_settled("jv", 3), timeout=120)
        ids = [f"{group_id}-{slot}" for slot in range(3)]
        assert sorted(await broker_members(bootstrap, group_id)) == ids
        pods = await cluster.pods("jv")
        assert {env_of(p)[STOCK_STRATEGY] for p in pods} == {
            "org.apache.kafka.clients.consumer.RangeAssignor"
        }

        await cluster.update_spec("jv", {"rebalance": {"protocol": "cooperative"}})

        async def completed() -> dict[str, Any] | None:
            body = await cluster.get_group("jv")
            status = body.get("status") or {}
            done = (status.get("rollout") or {}).get("phase") == "Completed"
            return body if done and status.get("selectedProtocol") == "cooperative-sticky" else None

        await cluster.eventually(completed, timeout=240, what="Java two-bounce completed")
        strategies = {env_of(p)[STOCK_STRATEGY] for p in await cluster.pods("jv")}
        assert strategies == {"org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}

        await cluster.update_spec("jv", {"replicas": 2})
        await cluster.eventually(lambda: cluster.group_settled("jv", 2), timeout=60)
        left = await events(cluster, "MembersLeft")
        assert len(left) == 1 and ids[2] in left[0]["message"]
        assert sorted(await broker_members(bootstrap, group_id)) == ids[:2]

    # From the consumers' own callback logs: no partition was ever owned by two of them.
    everything = member_logs([(path.stem.rsplit("-", 1)[0], path) for path in logs.glob("*.jsonl")])
    assert len(everything) == 3 + 2 * 3  # the first three, then two bounces of three
    end_ms = max(int(row["ts_ms"]) for log in everything for row in log.rows) + 1
    assert list(ownership_overlaps(all_holdings(everything), end_ms)) == []


async def test_java_consumer_protocol_fleet_is_seen_converged_rolled_and_scaled_down(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], tmp_path: Path
) -> None:
    """Java pods whose template sets group.protocol=consumer (KIP-848): the operator reads the
    group with ConsumerGroupDescribe, its rollout gates on convergence, its scale-down is one
    batch LeaveGroup by instance id on the consumer group."""
    topic = kafka_topic(6)
    bootstrap = kafka_broker.bootstrap
    consumer_env = [{"name": "KAFKA_GROUP_PROTOCOL", "value": "consumer"}]
    template = {
        "spec": {"containers": [{"name": "member", "image": "java:1", "env": consumer_env}]}
    }
    group_id, spec = kafka_spec(bootstrap, topic, replicas=3, family="java", template=template)
    transport = KafkaTransport(bootstrap)
    async with running_cluster(java_logs=tmp_path / "java") as cluster:
        await cluster.create_group("kc", spec)
        body = await cluster.eventually(lambda: cluster.group_settled("kc", 3), timeout=120)
        status = body["status"]
        assert status["groupProtocol"] == "consumer" and status["converged"] is True
        assert status["groupEpoch"] == status["assignmentEpoch"] == status["generation"]
        assert status["convergedMembers"] == 3 and status["selectedProtocol"] == "uniform"
        first = await transport.describe_consumer_group(group_id)
        assert sorted(str(m.instance_id) for m in first.members) == [
            f"{group_id}-{slot}" for slot in range(3)
        ]

        # A template change: a static bounce, each step waiting for convergence.
        bumped = {
            "spec": {"containers": [{"name": "member", "image": "java:2", "env": consumer_env}]}
        }
        await cluster.update_spec("kc", {"template": bumped})

        async def rolled() -> dict[str, Any] | None:
            body = await cluster.get_group("kc")
            status = body.get("status") or {}
            done = (status.get("rollout") or {}).get("phase") == "Completed"
            return body if done and status.get("converged") is True else None

        await cluster.eventually(rolled, timeout=240, what="consumer-group rollout completed")
        after = await transport.describe_consumer_group(group_id)
        assert after.converged and len(after.members) == 3
        # Static restarts within the session: no member was removed, so no epoch bump.
        assert after.group_epoch == first.group_epoch

        await cluster.update_spec("kc", {"replicas": 2})
        await cluster.eventually(lambda: cluster.group_settled("kc", 2), timeout=90)
        left = await events(cluster, "MembersLeft")
        assert len(left) == 1 and f"{group_id}-2" in left[0]["message"]
        final = await transport.describe_consumer_group(group_id)
        assert sorted(str(m.instance_id) for m in final.members) == [
            f"{group_id}-0",
            f"{group_id}-1",
        ]
        assert final.group_epoch == first.group_epoch + 1  # the one removal
    await transport.close()
