"""Scenario 8a: a managed fleet of Java KafkaConsumer pods on a real Kafka broker.

`spec.coordinator.type: kafka`, `clientFamily: java`: the operator (the chart's, a local
process) describes the group on the broker and sends the batch LeaveGroup there; each pod
runs the Java peer (`python -m staticfleet.kafka.java_pod`, which execs the JVM) configured
by the env the operator injected (`KAFKA_GROUP_INSTANCE_ID`, the strategy as class names).
The scenario is `kafka_fleet.fleet_scenario`; the witnesses are the broker's describe and
the consumers' own callback logs.
"""

from __future__ import annotations

from e2e.cluster import Cluster, LocalCluster
from e2e.fleet import Record
from e2e.groups import IMAGE, apply, namespace
from e2e.kafka_fleet import PARTITIONS, fleet_scenario, kafka_group
from staticfleet.commands.member_cmd import read_events
from staticfleet.demo.ownership import MemberLog
from staticfleet.kafka.broker import KafkaBroker

GROUP = "javafleet"


def test_java_fleet_on_kafka(
    cluster: Cluster, operator_release: None, record: Record, kafka_broker: KafkaBroker
) -> None:
    assert isinstance(cluster, LocalCluster), "Java pods run on the local node agent only"
    kafka_broker.create_topic(GROUP, PARTITIONS)
    container = {
        "name": "consumer",
        "image": IMAGE,
        "command": ["python", "-m", "staticfleet.kafka.java_pod"],
    }

    def logs(ns: str) -> list[MemberLog]:
        found = []
        for path in sorted((cluster.node_workdir / "pods" / ns).glob("*/events-*.jsonl")):
            rows = read_events(path)
            if rows:
                found.append(MemberLog(owner=path.parent.name, process=path.stem, rows=rows))
        return found

    with namespace(cluster, "e2e-kafka-java") as ns:
        apply(cluster, ns, kafka_group(GROUP, kafka_broker.bootstrap, "java", container))
        fleet_scenario(cluster, ns, kafka_broker.bootstrap, GROUP, lambda: logs(ns), record)
        cluster.kubectl("-n", ns, "delete", "cg", GROUP, "--wait=true", "--timeout=120s")
