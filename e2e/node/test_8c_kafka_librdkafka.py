"""Scenario 8c: a librdkafka fleet on a real Kafka broker; the operator refuses the unsafe
two-bounce and the documented alternative (`protocolChange: Switch`) works.

Each pod runs a real librdkafka consumer (`python -m staticfleet.kafka.rdkafka_pod`,
confluent-kafka) configured by the operator's env, from the librdkafka client image
(image/clients.Dockerfile) on the real node. librdkafka refuses a strategy list mixing
eager and cooperative assignors, so KIP-429's bridge bounce is impossible: the change is
refused with a condition and an Event and no pod is touched. With `Switch`, the fleet stops,
one batch LeaveGroup names every instance id, and all restart on cooperative-sticky: one
rebalance, a gap in consumption (measured here), no partition owned twice. On the secured
broker's SASL_SSL listener with a SCRAM-SHA-512 user of the group's own (exactly
docs/kafka.md's ACLs), the consumers reading the group's `-kafka-client` Secret
(`KAFKA_CLIENT_CONFIG`, PEM inline); `describe` is the test's view, on PLAINTEXT.
"""

from __future__ import annotations

import json
import time
from typing import Any

from e2e.cluster import Cluster
from e2e.fleet import Record, wait_for
from e2e.groups import RDKAFKA_IMAGE, apply, group_status, namespace, patch_spec
from e2e.kafka_fleet import (
    PARTITIONS,
    STRATEGY_ENV,
    check_secured,
    describe,
    kafka_group,
    operator_events,
    pod_uid,
    secure_group,
    wait_settled,
)
from e2e.rollouts import member_logs
from staticfleet.demo.ownership import MemberLog, all_holdings, ownership_overlaps
from staticfleet.kafka.broker import KafkaBroker

GROUP = "rdkfleet"
REPLICAS = 3


def degraded(cluster: Cluster, ns: str) -> dict[str, Any] | None:
    status = group_status(cluster, ns, GROUP)
    return next(
        (c for c in status.get("conditions", []) if c["type"] == "Degraded"),
        None,
    )


def test_librdkafka_two_bounce_refused_and_switch_works(
    cluster: Cluster, operator_release: None, record: Record, kafka_broker: KafkaBroker
) -> None:
    bootstrap = kafka_broker.bootstrap
    kafka_broker.create_topic(GROUP, PARTITIONS)
    container = {
        "name": "consumer",
        "image": RDKAFKA_IMAGE,
        "command": ["python", "-m", "staticfleet.kafka.rdkafka_pod"],
    }

    def logs(ns: str) -> list[MemberLog]:
        return member_logs(cluster, ns, (f"{GROUP}-{slot}" for slot in range(REPLICAS)), "consumer")

    with namespace(cluster, "e2e-kafka-rdk") as ns:
        access = secure_group(cluster, ns, kafka_broker, GROUP, "scram")
        record("security", access.security)
        group = kafka_group(
            GROUP, access.bootstrap, "librdkafka", container, kafka=access.kafka, replicas=REPLICAS
        )
        apply(cluster, ns, group)
        wait_settled(cluster, ns, bootstrap, GROUP, REPLICAS)
        assert describe(bootstrap, GROUP)["protocol"] == "range"
        check_secured(cluster, ns, GROUP, access)
        uids = {s: pod_uid(cluster, ns, f"{GROUP}-{s}") for s in range(REPLICAS)}

        # The unsafe two-bounce is refused: a condition, one Event, no pod touched.
        patch_spec(cluster, ns, GROUP, {"rebalance": {"protocol": "cooperative"}})
        condition = wait_for(
            "the refusal",
            lambda: (c := degraded(cluster, ns)) and c["reason"] == "ProtocolChangeRefused" and c,
            timeout_s=60,
        )
        assert "protocolChange: Switch" in condition["message"]
        time.sleep(10)
        assert {s: pod_uid(cluster, ns, f"{GROUP}-{s}") for s in range(REPLICAS)} == uids
        assert len(operator_events(cluster, ns, "ProtocolChangeRefused")) == 1
        assert describe(bootstrap, GROUP)["protocol"] == "range"

        # The documented alternative: Switch.
        started = time.monotonic()
        patch_spec(
            cluster,
            ns,
            GROUP,
            {"rebalance": {"protocol": "cooperative", "protocolChange": "Switch"}},
        )

        def switched() -> bool:
            pods = cluster.member_pods(ns, GROUP)
            strategies = {
                e.get("value")
                for p in pods
                for e in p["spec"]["containers"][0].get("env", [])
                if e["name"] == STRATEGY_ENV
            }
            return strategies == {"cooperative-sticky"} and (
                describe(bootstrap, GROUP)["protocol"] == "cooperative-sticky"
            )

        wait_for("the switch", switched, timeout_s=240, interval_s=1.0)
        wait_settled(cluster, ns, bootstrap, GROUP, REPLICAS, timeout_s=120)
        record("switch_to_stable_s", round(time.monotonic() - started, 1))
        left = operator_events(cluster, ns, "MembersLeft")
        assert len(left) == 1, left
        assert all(f"{GROUP}-{s}" in left[0]["message"] for s in range(REPLICAS))

        # The cost: nothing was owned from the old members' stop to the new ones' assignment.
        everything = logs(ns)

        def strategy(log: MemberLog) -> str:
            return str(next((r.get("strategy") for r in log.rows if r["event"] == "started"), ""))

        old_end = max(
            int(row["ts_ms"]) for log in everything if strategy(log) == "range" for row in log.rows
        )
        new_start = min(
            int(row["ts_ms"])
            for log in everything
            if strategy(log) == "cooperative-sticky"
            for row in log.rows
            if row["event"] == "assigned"
        )
        record("switch_unowned_gap_ms", new_start - old_end)
        end_ms = max(int(r["ts_ms"]) for log in everything for r in log.rows) + 1
        assert list(ownership_overlaps(all_holdings(everything), end_ms)) == []
        record("partitions_owned_twice", 0)
        print(json.dumps({"switch_unowned_gap_ms": new_start - old_end}))
        cluster.kubectl("-n", ns, "delete", "cg", GROUP, "--wait=true", "--timeout=120s")
