"""Scenario 8b: a managed fleet of our own members on a real Kafka broker.

`clientFamily: staticfleet`: each pod runs `staticfleet member run` with the
`STATICFLEET_*` env the operator injects, its coordinator `kafka://<bootstrap>` (the Kafka
transport of the member client), on the secured broker's SASL_SSL listener with a
SCRAM-SHA-512 user of the group's own (exactly docs/kafka.md's ACLs), read from the group's
`-kafka-client` Secret (`STATICFLEET_KAFKA_CONFIG`, PEM inline). The same scenario as the
Java fleet (scenario 8a); the witnesses are the broker's describe (on PLAINTEXT, the test's
own view) and the members' event logs (their container logs).
"""

from __future__ import annotations

from e2e.cluster import Cluster
from e2e.fleet import Record
from e2e.groups import IMAGE, apply, namespace
from e2e.kafka_fleet import PARTITIONS, check_secured, fleet_scenario, kafka_group, secure_group
from e2e.rollouts import member_logs
from staticfleet.demo.ownership import MemberLog
from staticfleet.kafka.broker import KafkaBroker

GROUP = "ourfleet"


def test_our_members_on_kafka(
    cluster: Cluster, operator_release: None, record: Record, kafka_broker: KafkaBroker
) -> None:
    kafka_broker.create_topic(GROUP, PARTITIONS)
    container = {
        "name": "member",
        "image": IMAGE,
        "args": ["member", "run", "--records-per-second", "5"],
    }

    def logs(ns: str) -> list[MemberLog]:
        return member_logs(cluster, ns, (f"{GROUP}-{slot}" for slot in range(6)))

    with namespace(cluster, "e2e-kafka-members") as ns:
        access = secure_group(cluster, ns, kafka_broker, GROUP, "scram")
        record("security", access.security)
        group = kafka_group(GROUP, access.bootstrap, "staticfleet", container, kafka=access.kafka)
        apply(cluster, ns, group)
        fleet_scenario(cluster, ns, kafka_broker.bootstrap, GROUP, lambda: logs(ns), record)
        check_secured(cluster, ns, GROUP, access)
        cluster.kubectl("-n", ns, "delete", "cg", GROUP, "--wait=true", "--timeout=120s")
