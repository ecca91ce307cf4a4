"""Scenario 9e: KEDA scales a Kafka-coordinated ConsumerGroup through its /scale subresource.

KEDA v2.21 (built from its Go module, e2e/keda.py) runs beside the control plane; a
ScaledObject's scaleTargetRef is the ConsumerGroup and its trigger is KEDA's own `kafka`
scaler pointed at the group on the e2e broker (the broker holds the group's commits, so
KEDA reads the lag there; docs/operator.md "Autoscaling"). The members are slow librdkafka
consumers (`staticfleet.kafka.rdkafka_pod --ms-per-record`: a fixed cost per record), so a
burst builds lag that only more members drain. The HPA KEDA makes adds one member per step;
each step is one rebalance (the first member's `assigned` callbacks), the burst drains, and
the group goes back to one member: each step down one batch LeaveGroup (the operator's
MembersLeft Event) naming exactly the removed instance ids. Recorded: the steps, rebalances
per step, peak lag, time to drain.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from e2e.cluster import BUILD, Cluster, LocalCluster
from e2e.fleet import Record, member_logs_from_text, wait_for
from e2e.groups import IMAGE, apply, namespace
from e2e.kafka_fleet import describe, kafka_group, operator_events, wait_settled
from e2e.keda import running_keda
from staticfleet.kafka.broker import KafkaBroker

GROUP = "kedafleet"
PARTITIONS = 4  # maxReplicaCount: a member per partition at most
MS_PER_RECORD = 20  # 50 records/s per member
BURST = 8000
LAG_THRESHOLD = 100
STEP_PERIOD_S = 15  # the HPA adds at most one member per period


def scaled_object(ns: str, bootstrap: str) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": GROUP, "namespace": ns},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "staticfleet.dev/v1alpha1",
                "kind": "ConsumerGroup",
                "name": GROUP,
            },
            "pollingInterval": 5,
            "minReplicaCount": 1,
            "maxReplicaCount": PARTITIONS,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        # One member per step: each step is one rebalance of the group.
                        "scaleUp": {
                            "stabilizationWindowSeconds": 0,
                            "policies": [
                                {"type": "Pods", "value": 1, "periodSeconds": STEP_PERIOD_S}
                            ],
                        },
                        # Back to one member in one step once drained: one batch LeaveGroup.
                        "scaleDown": {
                            "stabilizationWindowSeconds": 15,
                            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
                        },
                    }
                }
            },
            "triggers": [
                {
                    "type": "kafka",
                    "metadata": {
                        "bootstrapServers": bootstrap,
                        "consumerGroup": GROUP,
                        "topic": GROUP,
                        "lagThreshold": str(LAG_THRESHOLD),
                        "offsetResetPolicy": "earliest",
                        # The broker is Kafka 4, which dropped the pre-2.1 protocol versions
                        # (KIP-896) that KEDA's default (sarama's 1.0.0) would speak.
                        "version": "4.0.0",
                    },
                }
            ],
        },
    }


def total_lag(bootstrap: str) -> int:
    """The group's lag as the broker sees it: end offsets minus committed offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "log_level": 0})
    try:
        tps = [TopicPartition(GROUP, p) for p in range(PARTITIONS)]
        committed = consumer.committed(tps, timeout=10)
        lag = 0
        for tp in committed:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            lag += high - (tp.offset if tp.offset >= 0 else low)
        return lag
    finally:
        consumer.close()


def produce_burst(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        producer.produce(GROUP, value=b"x" * 100, key=str(i).encode())
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def test_keda_scales_a_kafka_group_through_scale(
    cluster: Cluster, operator_release: None, record: Record, kafka_broker: KafkaBroker
) -> None:
    assert isinstance(cluster, LocalCluster), "the members and KEDA run as local processes"
    bootstrap = kafka_broker.bootstrap
    kafka_broker.create_topic(GROUP, PARTITIONS)
    container = {
        "name": "consumer",
        "image": IMAGE,
        "command": [
            "python",
            "-m",
            "staticfleet.kafka.rdkafka_pod",
            "--ms-per-record",
            str(MS_PER_RECORD),
        ],
    }
    started = time.monotonic()
    with (
        running_keda(cluster, BUILD / "e2e" / "keda") as keda,
        namespace(cluster, "e2e-keda") as ns,
    ):
        record("keda_start_s", round(time.monotonic() - started, 1))
        apply(cluster, ns, kafka_group(GROUP, bootstrap, "librdkafka", container, replicas=1))
        wait_settled(cluster, ns, bootstrap, GROUP, 1)
        apply(cluster, ns, scaled_object(ns, bootstrap))
        wait_for(
            "KEDA's HPA for the ConsumerGroup",
            lambda: (
                cluster.kubectl("-n", ns, "get", "hpa", f"keda-hpa-{GROUP}", check=False).returncode
                == 0
            ),
            timeout_s=60,
        )

        # The burst, then watch: the replicas per step, the lag, until drained and back to 1.
        burst_at = time.monotonic()
        produce_burst(bootstrap, BURST)
        steps: list[dict[str, Any]] = []  # {"replicas": n, "at_s": t, "since_ms": ms}
        peak_lag = 0
        drained_s: float | None = None
        last_poll_ms = [int(time.time() * 1000)]

        def watch() -> bool:
            nonlocal peak_lag, drained_s
            keda.check_alive()
            now = round(time.monotonic() - burst_at, 1)
            wall_ms = int(time.time() * 1000)
            # The steps are spec.replicas (what the HPA wrote through /scale); a step's
            # rebalance comes after the change, so after the last poll that saw the old value.
            group = cluster.get_json("-n", ns, "get", "consumergroup", GROUP)
            replicas = int(group["spec"]["replicas"])
            running = int((group.get("status") or {}).get("replicas") or 0)
            if not steps or steps[-1]["replicas"] != replicas:
                # The change happened after the previous poll, which still saw the old value.
                steps.append({"replicas": replicas, "at_s": now, "since_ms": last_poll_ms[0]})
            last_poll_ms[0] = wall_ms
            lag = total_lag(bootstrap)
            peak_lag = max(peak_lag, lag)
            if lag == 0 and drained_s is None:
                drained_s = now
            return drained_s is not None and replicas == running == 1 and len(steps) > 2

        wait_for(
            "the group to scale up, drain the burst and scale back to one member",
            watch,
            timeout_s=600,
            interval_s=1.0,
            describe=lambda: json.dumps(
                {
                    "steps": steps,
                    "hpa": cluster.get_json("-n", ns, "get", "hpa", f"keda-hpa-{GROUP}").get(
                        "status"
                    ),
                }
            )[:2000],
        )
        wait_settled(cluster, ns, bootstrap, GROUP, 1, timeout_s=120)
        sizes = [s["replicas"] for s in steps]
        peak = max(sizes)
        top = sizes.index(peak)
        # Up one member at a time to the peak, then down to one (in one step, or more when
        # the HPA's scale-down window still holds an intermediate recommendation).
        assert sizes[: top + 1] == list(range(1, peak + 1)), steps
        down = sizes[top:]
        assert all(a > b for a, b in itertools.pairwise(down)) and down[-1] == 1, steps
        assert peak >= 3, steps

        # Rebalances per step: the first member, there throughout, is assigned once per
        # rebalance (eager `range`: every rebalance revokes and reassigns everything).
        text = cluster.container_log(ns, f"{GROUP}-0", "consumer")
        logs = member_logs_from_text(f"{GROUP}-0", text)
        assigned = [int(r["ts_ms"]) for log in logs for r in log.rows if r["event"] == "assigned"]
        bounds = [s["since_ms"] for s in steps[1:]] + [int(time.time() * 1000)]
        per_step = [
            sum(1 for t in assigned if lo <= t < hi) for lo, hi in itertools.pairwise(bounds)
        ]
        assert per_step == [1] * len(per_step), (per_step, steps)

        # Each step down is one batch LeaveGroup naming exactly the ids it removed.
        left = sorted(
            operator_events(cluster, ns, "MembersLeft"),
            key=lambda e: e["metadata"]["creationTimestamp"],
        )
        assert len(left) == len(down) - 1, left
        for event, (before, after) in zip(left, itertools.pairwise(down), strict=True):
            for slot in range(peak):
                named = f"{GROUP}-{slot}" in event["message"]
                assert named == (after <= slot < before), (slot, event["message"])
        assert sorted(describe(bootstrap, GROUP)["members"]) == [f"{GROUP}-0"]

        record("burst_records", BURST)
        record("lag_threshold", LAG_THRESHOLD)
        record("steps", [{"replicas": s["replicas"], "at_s": s["at_s"]} for s in steps])
        record("rebalances_per_step", per_step)
        record("peak_lag", peak_lag)
        record("drain_s", drained_s)
        record("scaled_in_s", steps[-1]["at_s"])
        cluster.kubectl("-n", ns, "delete", "scaledobject", GROUP, "--wait=true")
        cluster.kubectl("-n", ns, "delete", "cg", GROUP, "--wait=true", "--timeout=120s")
