"""Scenario 8a: a managed fleet of Java KafkaConsumer pods on a real Kafka broker.

`spec.coordinator.type: kafka`, `clientFamily: java`: the operator (the chart's, a local
process) describes the group on the broker and sends the batch LeaveGroup there; each pod
runs the Java peer (`python -m staticfleet.kafka.java_pod`, which execs the JVM) from the Java
client image (image/clients.Dockerfile: Debian's JRE and the peer's jars) on the real node,
configured by the env the operator injected (`KAFKA_GROUP_INSTANCE_ID`, the strategy as class
names), its event log on stdout (`--events-dir -`), read back with `kubectl logs`.
On the secured broker's mutual-TLS listener (SSL, `authentication.type: tls`): the group's
client certificate (CN = its principal) has exactly the ACLs docs/kafka.md lists, and the
operator and the consumers use it through `spec.coordinator.kafka` (the consumers read the
Java properties of the group's `-kafka-client` Secret, PEM inline).
The scenario is `kafka_fleet.fleet_scenario`; the witnesses are the broker's describe (on
PLAINTEXT, the test's own view) and the consumers' own callback logs.
"""

from __future__ import annotations

from e2e.cluster import Cluster
from e2e.fleet import Record
from e2e.groups import JAVA_IMAGE, apply, namespace
from e2e.kafka_fleet import PARTITIONS, check_secured, fleet_scenario, kafka_group, secure_group
from e2e.rollouts import member_logs
from staticfleet.demo.ownership import MemberLog
from staticfleet.kafka.broker import KafkaBroker

GROUP = "javafleet"


def test_java_fleet_on_kafka(
    cluster: Cluster, operator_release: None, record: Record, kafka_broker: KafkaBroker
) -> None:
    kafka_broker.create_topic(GROUP, PARTITIONS)
    container = {
        "name": "consumer",
        "image": JAVA_IMAGE,
        "command": ["python", "-m", "staticfleet.kafka.java_pod"],
        "args": ["--events-dir", "-"],
    }

    def logs(ns: str) -> list[MemberLog]:
        return member_logs(cluster, ns, (f"{GROUP}-{slot}" for slot in range(6)), "consumer")

    with namespace(cluster, "e2e-kafka-java") as ns:
        access = secure_group(cluster, ns, kafka_broker, GROUP, "mtls")
        record("security", access.security)
        group = kafka_group(GROUP, access.bootstrap, "java", container, kafka=access.kafka)
        apply(cluster, ns, group)
        fleet_scenario(cluster, ns, kafka_broker.bootstrap, GROUP, lambda: logs(ns), record)
        check_secured(cluster, ns, GROUP, access)
        cluster.kubectl("-n", ns, "delete", "cg", GROUP, "--wait=true", "--timeout=120s")
