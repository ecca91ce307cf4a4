"""Scenario 9e: KEDA scales a Kafka-coordinated ConsumerGroup through its /scale subresource,
and, in the same run, the same consumers as a KEDA-scaled Deployment, side by side.

On the real node (e2e/node): the members are containers the kubelet runs; KEDA v2.21 (built
from its Go module, e2e/keda.py) runs as host processes beside the control plane. A
ScaledObject's scaleTargetRef is the ConsumerGroup and its trigger is KEDA's own `kafka`
scaler pointed at the group on the node's broker (the broker holds the group's commits, so
KEDA reads the lag there; docs/operator.md "Autoscaling"), on the SASL_SSL listener the
members use, as the group's SCRAM-SHA-512 user through a TriggerAuthentication (docs/kafka.md's
ACLs, READ on the group and the topic, cover KEDA's metadata, offsets and commits reads); the
test's own view (lag, bursts, the broker's describe) is PLAINTEXT on loopback. The members are
slow librdkafka consumers (`staticfleet.kafka.rdkafka_pod --ms-per-record`, in the librdkafka
client image: a fixed cost per record), so a burst builds lag that only more members drain.
The HPA KEDA makes adds one member per step; each step is one rebalance (the first member's
`assigned` callbacks), the burst drains, and the group goes back to one member: each step
down one batch LeaveGroup (the operator's MembersLeft Event) naming exactly the removed
instance ids.

Then the comparison: the same consumer program, cost, partitions, burst and trigger, as a
plain Deployment (what users run today) in a group and topic of its own, scaled by its own
ScaledObject, twice, with the same credentials (a copy of the group's client configuration
Secret, as a user's KafkaUser would give, and the same principal granted the same ACLs on
the Deployment's group and topic). Their pods are followed (e2e/cluster.py, PodLogs): a pod
the scale-down deletes takes its log with it. Dynamic members (no group.instance.id) first:
what most users run, as a Deployment's pods get new random names on every start, so an
instance id per pod survives no restart; a dynamic member sends a LeaveGroup when it closes.
Then static members named after their pods (the downward API), which users set to spare a
rebalance per restart: a static member sends no LeaveGroup, so one a scale-down removed holds
its partitions until its session times out (what the operator's batch LeaveGroup is for).
The bursts run one after the other (three fleets at once would share the machine's two cores
and starve each other). All three are measured by the same code from the consumers' own
assigned/revoked logs (staticfleet.demo.ownership): rebalances, partitions moved, unowned
partition-seconds; and from the broker: peak lag, time to drain.

Last, with the same KEDA (a module fixture: started once): an embedded-coordinator group
whose members (`staticfleet member run` in the librdkafka image, the chart's plus the `kafka`
extra a Kafka source needs; the same cost per record) read the topic on the broker's SASL_SSL
listener (a client configuration Secret of their own, `--kafka-config`) and commit to the
embedded coordinator, `spec.source.kafka` set (the same user and CA) so the operator computes
the lag, scaled by KEDA's `metrics-api` trigger on the coordinator's
`GET /v1/groups/{groupId}/lag` with the group's member token: the same steps and figures.
An in-cluster KEDA would call the coordinator Service by its DNS name (docs/operator.md's
`http://<service>.<namespace>.svc:9092/...`); this KEDA is a host process, which the
cluster's DNS does not serve, so its URL names the Service's ClusterIP, which kube-proxy's
rules route from the host as from a pod (the same Service, port and route).
"""

from __future__ import annotations

import base64
import itertools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from e2e.cluster import BUILD, FOLLOW_LOGS_LABEL, Cluster
from e2e.fleet import Record, member_logs_from_text, wait_for
from e2e.groups import RDKAFKA_IMAGE, apply, namespace, wait_stable
from e2e.kafka_fleet import (
    CA_SECRET,
    SecuredAccess,
    describe,
    group_acls,
    kafka_group,
    operator_events,
    secure_group,
    wait_settled,
)
from e2e.keda import Keda, running_keda
from e2e.node.cluster import NodeCluster
from e2e.node.conftest import FleetNode
from staticfleet.demo.ownership import (
    MemberLog,
    all_holdings,
    assignment_rounds,
    partitions_moved,
    unowned_partition_seconds,
)
from staticfleet.kafka.broker import KafkaBroker

GROUP = "kedafleet"  # the ConsumerGroup: its group id, topic and ScaledObject
# The same consumers as Deployments, each with its own group and topic: dynamic members
# (what users run), and static ones named after their pods (the issue's "removed pods wait
# out the session timeout").
DEPLOYMENT = "kedadeploy"
STATIC_DEPLOYMENT = "kedastatic"
PARTITIONS = 4  # maxReplicaCount: a member per partition at most
MS_PER_RECORD = 20  # 50 records/s per member
BURST = 8000
LAG_THRESHOLD = 100
STEP_PERIOD_S = 15  # the HPA adds at most one member per period
CONSUMER = [
    "python",
    "-m",
    "staticfleet.kafka.rdkafka_pod",
    "--ms-per-record",
    str(MS_PER_RECORD),
]
# The figures compared, each as the Deployment's over the ConsumerGroup's.
COMPARED = ("rebalances", "partitions_moved", "unowned_partition_s", "peak_lag", "drain_s")
# Where the operator mounts a group's client configuration Secret (its -kafka-client); the
# Deployments mount their copy there too, the embedded members their own.
CLIENT_CONFIG_DIR = "/etc/staticfleet/kafka"
KEDA_AUTH = "kafka-scram"  # the TriggerAuthentication of the three `kafka` triggers


def keda_kafka_auth(ns: str, access: SecuredAccess) -> list[dict[str, Any]]:
    """KEDA's credentials for its `kafka` scaler: the group's SCRAM user (its password in the
    Secret the ConsumerGroup names, the CA in the cluster CA's Secret, as Strimzi has them;
    the user name, which Strimzi's KafkaUser Secret does not hold, in a Secret of its own)."""
    authentication = access.kafka["authentication"]
    username_secret = f"{KEDA_AUTH}-username"
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": username_secret, "namespace": ns},
            "type": "Opaque",
            "stringData": {"username": authentication["username"]},
        },
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "TriggerAuthentication",
            "metadata": {"name": KEDA_AUTH, "namespace": ns},
            "spec": {
                "secretTargetRef": [
                    {"parameter": "username", "name": username_secret, "key": "username"},
                    {
                        "parameter": "password",
                        "name": authentication["passwordSecret"]["secretName"],
                        "key": authentication["passwordSecret"]["password"],
                    },
                    {"parameter": "ca", "name": CA_SECRET, "key": "ca.crt"},
                ]
            },
        },
    ]


def scaled_object(ns: str, bootstrap: str, group: str, target: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": group, "namespace": ns},
        "spec": {
            "scaleTargetRef": target,
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
                        "consumerGroup": group,
                        "topic": group,
                        "lagThreshold": str(LAG_THRESHOLD),
                        "offsetResetPolicy": "earliest",
                        # The broker is Kafka 4, which dropped the pre-2.1 protocol versions
                        # (KIP-896) that KEDA's default (sarama's 1.0.0) would speak.
                        "version": "4.0.0",
                        "sasl": "scram_sha512",
                        "tls": "enable",
                    },
                    "authenticationRef": {"name": KEDA_AUTH},
                }
            ],
        },
    }


def deployment(name: str, bootstrap: str, secret: str, *, static: bool) -> dict[str, Any]:
    """The same consumer as a Deployment: the env the operator would give a librdkafka member
    of an eager group (`range`), the client configuration from `secret` mounted where the
    operator mounts its own; KAFKA_GROUP_INSTANCE_ID only if `static`, then the pod's name
    (the downward API), which a restarted or replaced pod does not keep."""
    values = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_GROUP_ID": name,
        "KAFKA_TOPICS": name,
        "KAFKA_PARTITION_ASSIGNMENT_STRATEGY": "range",
        "KAFKA_CLIENT_CONFIG": f"{CLIENT_CONFIG_DIR}/client.properties",
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    if static:
        env.append(
            {
                "name": "KAFKA_GROUP_INSTANCE_ID",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
            }
        )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                # Followed: a pod the scale-down deletes takes its log with it (PodLogs).
                "metadata": {"labels": {"app": name, FOLLOW_LOGS_LABEL: "true"}},
                "spec": {
                    "terminationGracePeriodSeconds": 20,
                    "volumes": [{"name": "client", "secret": {"secretName": secret}}],
                    "containers": [
                        {
                            "name": "consumer",
                            "image": RDKAFKA_IMAGE,
                            "command": CONSUMER,
                            "env": env,
                            "volumeMounts": [
                                {"name": "client", "mountPath": CLIENT_CONFIG_DIR, "readOnly": True}
                            ],
                        }
                    ],
                },
            },
        },
    }


def total_lag(bootstrap: str, group: str) -> int:
    """The group's lag as the broker sees it: end offsets minus committed offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        tps = [TopicPartition(group, p) for p in range(PARTITIONS)]
        committed = consumer.committed(tps, timeout=10)
        lag = 0
        for tp in committed:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            lag += high - (tp.offset if tp.offset >= 0 else low)
        return lag
    finally:
        consumer.close()


def produce_burst(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        producer.produce(topic, value=b"x" * 100, key=str(i).encode())
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


@dataclass
class Burst:
    """One fleet's burst: the replica steps the HPA wrote, the lag, the time window."""

    steps: list[dict[str, Any]]  # {"replicas": n, "at_s": t, "since_ms": ms}
    peak_lag: int
    drain_s: float
    start_ms: int  # wall clock, as the consumers' logs
    end_ms: int = 0  # set once the fleet is back to one member, Stable on the broker

    @property
    def sizes(self) -> list[int]:
        return [s["replicas"] for s in self.steps]


def burst_and_scale(
    cluster: Cluster,
    keda: Keda,
    ns: str,
    bootstrap: str,
    group: str,
    replicas: Callable[[], tuple[int, int]],
    *,
    count: int = BURST,
    lag_of: Callable[[], int] | None = None,
) -> Burst:
    """Produce the burst into `group`'s topic and watch until the lag is drained and the
    target is back to one replica; `replicas()` is the target's (asked for, running);
    `lag_of()` the group's lag (default: its commits on the broker)."""
    wait_for(
        f"KEDA's HPA for {group}",
        lambda: (
            cluster.kubectl("-n", ns, "get", "hpa", f"keda-hpa-{group}", check=False).returncode
            == 0
        ),
        timeout_s=60,
    )
    burst_at = time.monotonic()
    burst = Burst(steps=[], peak_lag=0, drain_s=-1.0, start_ms=int(time.time() * 1000))
    produce_burst(bootstrap, group, count)
    last_poll_ms = [burst.start_ms]

    def watch() -> bool:
        keda.check_alive()
        now = round(time.monotonic() - burst_at, 1)
        wall_ms = int(time.time() * 1000)
        # The steps are spec.replicas (what the HPA wrote through /scale); a step's
        # rebalance comes after the change, so after the last poll that saw the old value.
        asked, running = replicas()
        if not burst.steps or burst.steps[-1]["replicas"] != asked:
            burst.steps.append({"replicas": asked, "at_s": now, "since_ms": last_poll_ms[0]})
        last_poll_ms[0] = wall_ms
        lag = lag_of() if lag_of is not None else total_lag(bootstrap, group)
        burst.peak_lag = max(burst.peak_lag, lag)
        if lag == 0 and burst.drain_s < 0:
            burst.drain_s = now
        return burst.drain_s >= 0 and asked == running == 1 and len(burst.steps) > 2

    wait_for(
        f"{group} to scale up, drain the burst and scale back to one member",
        watch,
        timeout_s=600,
        interval_s=1.0,
        describe=lambda: json.dumps(
            {
                "steps": burst.steps,
                "hpa": cluster.get_json("-n", ns, "get", "hpa", f"keda-hpa-{group}").get("status"),
            }
        )[:2000],
    )
    return burst


def check_steps(burst: Burst) -> tuple[int, list[int]]:
    """Up one member at a time to the peak, then down to one (in one step, or more when
    the HPA's scale-down window still holds an intermediate recommendation): the HPA's
    behaviour, the same whichever the target. The peak and the sizes on the way down."""
    sizes = burst.sizes
    peak = max(sizes)
    top = sizes.index(peak)
    assert sizes[: top + 1] == list(range(1, peak + 1)), burst.steps
    down = sizes[top:]
    assert all(a > b for a, b in itertools.pairwise(down)) and down[-1] == 1, burst.steps
    assert peak >= 3, burst.steps
    return peak, down


def one_member_stable(bootstrap: str, group: str) -> bool:
    described = describe(bootstrap, group)
    return bool(described["state"] == "Stable" and len(described["member_ids"]) == 1)


def figures(logs: list[MemberLog], burst: Burst, topic: str) -> dict[str, Any]:
    """One fleet's figures over the burst's window, the same code for both fleets."""
    held = all_holdings(logs)
    partitions = [(topic, p) for p in range(PARTITIONS)]
    return {
        "steps": [{"replicas": s["replicas"], "at_s": s["at_s"]} for s in burst.steps],
        "rebalances": assignment_rounds(held, partitions, burst.start_ms, burst.end_ms),
        "partitions_moved": partitions_moved(held, burst.start_ms, burst.end_ms),
        "unowned_partition_s": round(
            unowned_partition_seconds(held, partitions, burst.start_ms, burst.end_ms), 1
        ),
        "peak_lag": burst.peak_lag,
        "drain_s": burst.drain_s,
        "scaled_in_s": burst.steps[-1]["at_s"],
        "member_processes": len(logs),
    }


def rebalances_and_leaves(
    cluster: Cluster,
    ns: str,
    burst: Burst,
    group: str,
    container: str,
    peak: int,
    down: list[int],
) -> tuple[list[int], dict[str, Any]]:
    """A group's burst judged from its members' logs and the operator's Events: one
    rebalance per step (the first member, there throughout, is assigned once per rebalance:
    eager, every rebalance revokes and reassigns everything), each step down one batch
    LeaveGroup naming exactly the ids it removed, and the figures from every member's log,
    whose rebalances agree with the first member's. The rebalances per step, the figures."""
    logs = member_logs_from_text(f"{group}-0", cluster.container_log(ns, f"{group}-0", container))
    assigned = [int(r["ts_ms"]) for log in logs for r in log.rows if r["event"] == "assigned"]
    bounds = [s["since_ms"] for s in burst.steps[1:]] + [burst.end_ms]
    per_step = [sum(1 for t in assigned if lo <= t < hi) for lo, hi in itertools.pairwise(bounds)]
    assert per_step == [1] * len(per_step), (per_step, burst.steps)

    left = sorted(
        operator_events(cluster, ns, "MembersLeft"),
        key=lambda e: e["metadata"]["creationTimestamp"],
    )
    assert len(left) == len(down) - 1, left
    for event, (before, after) in zip(left, itertools.pairwise(down), strict=True):
        for slot in range(peak):
            named = f"{group}-{slot}" in event["message"]
            assert named == (after <= slot < before), (slot, event["message"])

    every_log = [
        log
        for slot in range(PARTITIONS)
        for log in member_logs_from_text(
            f"{group}-{slot}", cluster.container_log(ns, f"{group}-{slot}", container)
        )
    ]
    found = figures(every_log, burst, group)
    assert found["rebalances"] == len(per_step), (found, per_step)
    return per_step, found


def ratios(deployment_figures: dict[str, Any], group_figures: dict[str, Any]) -> dict[str, Any]:
    return {
        key: (
            round(deployment_figures[key] / group_figures[key], 2) if group_figures[key] else None
        )
        for key in COMPARED
    }


@pytest.fixture(scope="module")
def keda_started(fleet_node: FleetNode) -> Iterator[tuple[Keda, float]]:
    """KEDA, started once for this file's tests on the node's control plane (the release
    fleet_node installed); and how long it took to start."""
    started = time.monotonic()
    with running_keda(fleet_node.cluster, BUILD / "e2e" / "keda") as running:
        yield running, round(time.monotonic() - started, 1)


def test_keda_scales_a_kafka_group_through_scale(
    cluster: Cluster,
    operator_release: None,
    keda_started: tuple[Keda, float],
    record: Record,
    kafka_broker: KafkaBroker,
) -> None:
    assert isinstance(cluster, NodeCluster), "KEDA runs beside the node's control plane"
    keda, keda_start_s = keda_started
    bootstrap = kafka_broker.bootstrap  # PLAINTEXT on loopback: the test's own view
    kafka_broker.create_topic(GROUP, PARTITIONS)
    kafka_broker.create_topic(DEPLOYMENT, PARTITIONS)
    kafka_broker.create_topic(STATIC_DEPLOYMENT, PARTITIONS)
    container = {"name": "consumer", "image": RDKAFKA_IMAGE, "command": CONSUMER}
    record("keda_start_s", keda_start_s)
    with namespace(cluster, "e2e-keda") as ns:
        # --- the ConsumerGroup -------------------------------------------------------------
        access = secure_group(cluster, ns, kafka_broker, GROUP, "scram")
        record("security", access.security)
        group = kafka_group(
            GROUP, access.bootstrap, "librdkafka", container, kafka=access.kafka, replicas=1
        )
        apply(cluster, ns, group)
        wait_settled(cluster, ns, bootstrap, GROUP, 1)
        for manifest in keda_kafka_auth(ns, access):
            apply(cluster, ns, manifest)
        group_target = {
            "apiVersion": "staticfleet.dev/v1alpha1",
            "kind": "ConsumerGroup",
            "name": GROUP,
        }
        apply(cluster, ns, scaled_object(ns, access.bootstrap, GROUP, group_target))

        def group_replicas() -> tuple[int, int]:
            group = cluster.get_json("-n", ns, "get", "consumergroup", GROUP)
            running = int((group.get("status") or {}).get("replicas") or 0)
            return int(group["spec"]["replicas"]), running

        burst = burst_and_scale(cluster, keda, ns, bootstrap, GROUP, group_replicas)
        wait_settled(cluster, ns, bootstrap, GROUP, 1, timeout_s=120)
        burst.end_ms = int(time.time() * 1000)
        peak, down = check_steps(burst)

        per_step, group_figures = rebalances_and_leaves(
            cluster, ns, burst, GROUP, "consumer", peak, down
        )
        assert sorted(describe(bootstrap, GROUP)["members"]) == [f"{GROUP}-0"]

        record("burst_records", BURST)
        record("lag_threshold", LAG_THRESHOLD)
        record("steps", group_figures["steps"])
        record("rebalances_per_step", per_step)
        record("peak_lag", burst.peak_lag)
        record("drain_s", burst.drain_s)
        record("scaled_in_s", group_figures["scaled_in_s"])
        # The same credentials for the Deployments (a user's KafkaUser): the operator's client
        # configuration, copied before the ConsumerGroup (its owner) goes, and the group's
        # principal granted the same ACLs on their groups and topics.
        client = cluster.get_json("-n", ns, "get", "secret", f"{GROUP}-kafka-client")["data"]
        assert "client.properties" in client, sorted(client)
        secret = f"{DEPLOYMENT}-kafka-client"
        apply(
            cluster,
            ns,
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}, "data": client},
        )
        for name in (DEPLOYMENT, STATIC_DEPLOYMENT):
            kafka_broker.grant(*group_acls(access.principal, name, [name]))
        cluster.kubectl("-n", ns, "delete", "scaledobject", GROUP, "--wait=true")
        cluster.kubectl("-n", ns, "delete", "cg", GROUP, "--wait=true", "--timeout=120s")

        # --- the same consumers as Deployments, one burst after the other -----------------
        secured = {"secured": access.bootstrap, "secret": secret}
        dynamic = deployment_burst(
            cluster, keda, ns, bootstrap, DEPLOYMENT, **secured, static=False
        )
        static = deployment_burst(
            cluster, keda, ns, bootstrap, STATIC_DEPLOYMENT, **secured, static=True
        )
        record(
            "side_by_side",
            {
                "consumergroup": group_figures,
                "deployment_dynamic": dynamic,
                "deployment_static": static,
                "over_consumergroup": {
                    "deployment_dynamic": ratios(dynamic, group_figures),
                    "deployment_static": ratios(static, group_figures),
                },
                "order": "sequential: the ConsumerGroup's burst, then each Deployment's",
            },
        )


def deployment_burst(
    cluster: NodeCluster,
    keda: Keda,
    ns: str,
    bootstrap: str,
    name: str,
    *,
    secured: str,
    secret: str,
    static: bool,
) -> dict[str, Any]:
    """The burst through a KEDA-scaled Deployment `name` (its own group and topic): its
    figures, measured as the ConsumerGroup's. `bootstrap` is the test's view (PLAINTEXT),
    `secured` the consumers' and KEDA's (SASL_SSL), `secret` the client configuration."""
    apply(cluster, ns, deployment(name, secured, secret, static=static))
    wait_for(
        f"{name}: one member Stable on the broker",
        lambda: one_member_stable(bootstrap, name),
        timeout_s=120,
        interval_s=1.0,
        describe=lambda: json.dumps(describe(bootstrap, name)),
    )
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    apply(cluster, ns, scaled_object(ns, secured, name, target))

    def replicas() -> tuple[int, int]:
        found = cluster.get_json("-n", ns, "get", "deployment", name)
        running = int((found.get("status") or {}).get("replicas") or 0)
        return int(found["spec"]["replicas"]), running

    burst = burst_and_scale(cluster, keda, ns, bootstrap, name, replicas)
    # Static members removed by the scale-down are on the broker until their sessions end.
    wait_for(
        f"{name}: back to one member Stable on the broker",
        lambda: one_member_stable(bootstrap, name),
        timeout_s=120,
        interval_s=1.0,
        describe=lambda: json.dumps(describe(bootstrap, name)),
    )
    burst.end_ms = int(time.time() * 1000)
    peak, _ = check_steps(burst)
    pods = [p for p in cluster.pods_run(ns) if p.startswith(f"{name}-")]
    logs = [
        log
        for pod in pods
        for log in member_logs_from_text(pod, cluster.container_log(ns, pod, "consumer"))
    ]
    found = figures(logs, burst, name)
    # Every step up is a rebalance (a join). Steps down need not be: static members removed
    # within one session timeout of each other expire in one rebalance.
    assert found["rebalances"] >= peak - 1, found
    found["membership"] = "static (group.instance.id: the pod's name)" if static else "dynamic"
    cluster.kubectl("-n", ns, "delete", "scaledobject", name, "--wait=true")
    cluster.kubectl("-n", ns, "delete", "deployment", name, "--wait=true", "--timeout=120s")
    return found


# --- an embedded-coordinator group, scaled on the coordinator's lag route -------------------

EMBEDDED = "kedaembed"  # its group id, topic, ScaledObject and TriggerAuthentication
EMBEDDED_BURST = 5000  # smaller than the Kafka group's: the added e2e time stays short
WARM_UP = 100  # records before the burst, so every partition has a commit (lag counts it)


def source_secret(name: str, access: SecuredAccess, password: str, ca: str) -> dict[str, Any]:
    """The members' client configuration for their source (the operator writes one only for a
    Kafka coordinator): the group's SCRAM user over TLS, the CA beside it."""
    properties = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": access.kafka["authentication"]["username"],
        "sasl.password": password,
        "ssl.ca.location": f"{CLIENT_CONFIG_DIR}/ca.crt",
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "Opaque",
        "stringData": {
            "client.properties": "".join(f"{k}={v}\n" for k, v in properties.items()),
            "ca.crt": ca,
        },
    }


def embedded_group(name: str, access: SecuredAccess, secret: str) -> dict[str, Any]:
    """Members are `staticfleet member run` reading the topic on the broker (SASL_SSL, the
    client configuration in `secret`), committing to the embedded coordinator, at the Kafka
    group's cost per record (small polls, so a member's batch of work stays under a second);
    spec.source names the broker and the same user, so the operator computes the lag the
    route serves."""
    member = {
        "name": "member",
        # The librdkafka image: the chart's with confluent-kafka (the `kafka` extra a Kafka
        # source needs, which the chart's image leaves out); its entrypoint is rdkafka_pod's.
        "image": RDKAFKA_IMAGE,
        "command": ["staticfleet"],
        "args": [
            "member",
            "run",
            "--topics",
            name,
            "--source",
            f"kafka://{access.bootstrap}",
            "--kafka-config",
            f"{CLIENT_CONFIG_DIR}/client.properties",
            "--ms-per-record",
            str(MS_PER_RECORD),
            "--max-poll-records",
            "50",
        ],
        "volumeMounts": [{"name": "source", "mountPath": CLIENT_CONFIG_DIR, "readOnly": True}],
    }
    return {
        "apiVersion": "staticfleet.dev/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "groupId": name,
            "topics": [{"name": name, "partitions": PARTITIONS}],
            "replicas": 1,
            "source": {"kafka": {"bootstrapServers": access.bootstrap, **access.kafka}},
            "membership": {"instanceIdPrefix": name, "sessionTimeoutMs": 30_000},
            "rebalance": {"protocol": "eager"},
            "rollout": {"memberReadyTimeoutSeconds": 180},
            # KEDA's HPA window stabilizes the steps; the operator's would only add wait.
            "scaleDown": {"stabilizationWindowSeconds": 0},
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 10,
                    "volumes": [{"name": "source", "secret": {"secretName": secret}}],
                    "containers": [member],
                },
            },
        },
    }


def lag_scaled_object(ns: str, name: str, url: str) -> list[dict[str, Any]]:
    """The ScaledObject of docs/operator.md "Autoscaling" (the HPA behaviour of the Kafka
    group's): KEDA's `metrics-api` trigger on the coordinator's lag route, with the group's
    member token through a TriggerAuthentication."""
    auth = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "secretTargetRef": [
                {"parameter": "token", "name": f"{name}-member-token", "key": "token"}
            ]
        },
    }
    target = {"apiVersion": "staticfleet.dev/v1alpha1", "kind": "ConsumerGroup", "name": name}
    scaled = scaled_object(ns, "", name, target)
    scaled["spec"]["triggers"] = [
        {
            "type": "metrics-api",
            "metadata": {
                "url": url,
                "valueLocation": "lag",
                "targetValue": str(LAG_THRESHOLD),
                "authMode": "bearer",
            },
            "authenticationRef": {"name": name},
        }
    ]
    return [auth, scaled]


def embedded_lag(bootstrap: str, committed: dict[tuple[str, int], int], topic: str) -> int:
    """Log ends on the broker minus the commits in the embedded coordinator (no commit: from
    the start of the log)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-lag", "log_level": 0})
    try:
        lag = 0
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            lag += high - committed.get((topic, p), low)
        return lag
    finally:
        consumer.close()


def lag_route(url: str, token: str) -> dict[str, Any] | None:
    """The route's answer, as KEDA gets it (None: 404, no figure yet)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def test_keda_scales_an_embedded_group_on_the_lag_route(
    cluster: Cluster,
    operator_release: None,
    keda_started: tuple[Keda, float],
    record: Record,
    kafka_broker: KafkaBroker,
) -> None:
    assert isinstance(cluster, NodeCluster), "KEDA runs beside the node's control plane"
    keda, _ = keda_started
    bootstrap = kafka_broker.bootstrap  # PLAINTEXT on loopback: the test's own view
    kafka_broker.create_topic(EMBEDDED, PARTITIONS)
    admin = cluster.admin()
    started = time.monotonic()
    with namespace(cluster, "e2e-keda-embedded") as ns:
        access = secure_group(cluster, ns, kafka_broker, EMBEDDED, "scram")
        user = cluster.get_json("-n", ns, "get", "secret", f"{ns}.{EMBEDDED}")["data"]
        password = base64.b64decode(user["password"]).decode()
        source = f"{EMBEDDED}-source"
        ca = kafka_broker.pki.ca_path.read_text()
        apply(cluster, ns, source_secret(source, access, password, ca))
        apply(cluster, ns, embedded_group(EMBEDDED, access, source))
        wait_stable(cluster, ns, EMBEDDED, 1)
        secret = cluster.get_json("-n", ns, "get", "secret", f"{EMBEDDED}-member-token")
        token = base64.b64decode(secret["data"]["token"]).decode()
        # The coordinator Service's ClusterIP (a host process cannot resolve its DNS name).
        url = f"{cluster.coordinator_base_url()}/v1/groups/{EMBEDDED}/lag"

        def lag_now() -> int:
            return embedded_lag(bootstrap, admin.committed_offsets(EMBEDDED), EMBEDDED)

        # A commit on every partition first: the route counts a partition without one as 0.
        produce_burst(bootstrap, EMBEDDED, WARM_UP)
        wait_for(
            f"{EMBEDDED}: the warm-up committed, the route's figure caught up",
            lambda: (
                len(admin.committed_offsets(EMBEDDED)) == PARTITIONS
                and lag_now() == 0
                and (answer := lag_route(url, token)) is not None
                and answer["lag"] == 0
                and answer["partitions_without_commit"] == 0
            ),
            timeout_s=90,
            interval_s=1.0,
            describe=lambda: json.dumps(
                {
                    "committed": len(admin.committed_offsets(EMBEDDED)),
                    "route": lag_route(url, token),
                }
            ),
        )
        for manifest in lag_scaled_object(ns, EMBEDDED, url):
            apply(cluster, ns, manifest)

        def group_replicas() -> tuple[int, int]:
            group = cluster.get_json("-n", ns, "get", "consumergroup", EMBEDDED)
            running = int((group.get("status") or {}).get("replicas") or 0)
            return int(group["spec"]["replicas"]), running

        burst = burst_and_scale(
            cluster,
            keda,
            ns,
            bootstrap,
            EMBEDDED,
            group_replicas,
            count=EMBEDDED_BURST,
            lag_of=lag_now,
        )
        wait_stable(cluster, ns, EMBEDDED, 1, timeout_s=120)
        burst.end_ms = int(time.time() * 1000)
        peak, down = check_steps(burst)

        per_step, found = rebalances_and_leaves(cluster, ns, burst, EMBEDDED, "member", peak, down)
        found["burst_records"] = EMBEDDED_BURST
        found["rebalances_per_step"] = per_step
        found["trigger"] = "metrics-api on GET /v1/groups/{groupId}/lag (bearer: member token)"
        found["security"] = access.security
        record("embedded_group", found)
        record("embedded_group_s", round(time.monotonic() - started, 1))
        cluster.kubectl("-n", ns, "delete", "scaledobject", EMBEDDED, "--wait=true")
