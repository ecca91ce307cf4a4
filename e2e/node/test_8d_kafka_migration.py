"""Scenario 8d: a classic Java fleet migrated to Kafka's consumer protocol (KIP-848) by the
operator and back, then the same fleet migrated by hand as a StatefulSet, side by side.

Both fleets are three static Java KafkaConsumer pods (kafka-clients 4.4, `python -m
staticfleet.kafka.java_pod` in the Java client image on the real node, its event log on stdout)
on the secured broker's mutual-TLS listener, classic cooperative
(`cooperative-sticky`, remote assignor `uniform`), each with a 6-partition topic of its own into
which a producer writes a numbered sequence throughout. Cooperative, because an eager fleet's
classic members give up every partition at each rebalance of a migration, whoever bounces them
(docs/operator.md, "Migrating a fleet to the consumer protocol"). The operator's fleet moves by
`spec.rebalance.protocol: consumer`, then `cooperative` (one static bounce each way, each step
gated on the member being back and the group settled); the StatefulSet's by what a user does
today: the template's env gets `group.protocol=consumer` (and back), rolled by the
StatefulSet's RollingUpdate, which waits for each new pod to be Ready and nothing else. Both
are measured by the same code from the consumers' own event logs (staticfleet.demo.ownership):
each direction's duration (change to the group settled on the new protocol with every pod
updated), unowned partition-seconds, rebalances and moves, partitions owned twice, and records
lost: a produced sequence number is consumed once its offset lies below the position its
partition's consumers committed by the end (the Java peer commits only positions it has read,
`enable.auto.commit=false`, and starts a partition at the group's commit).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import KafkaError, Message, Producer

from coordinator.client.kafka_groups import MemberType
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.transport import TransportError
from e2e.cluster import FOLLOW_LOGS_LABEL, Cluster
from e2e.fleet import Record, Timeout, wait_for
from e2e.groups import JAVA_IMAGE, apply, group_status, namespace, patch_spec
from e2e.kafka_fleet import describe, group_acls, kafka_group, secure_group, wait_settled
from e2e.rollouts import member_logs
from staticfleet.demo.ownership import (
    MemberLog,
    Partition,
    acknowledged_offsets,
    all_holdings,
    assignment_rounds,
    commit_regressions,
    ownership_overlaps,
    partitions_moved,
    unowned_partition_seconds,
    unowned_steps,
)
from staticfleet.kafka.broker import Acl, KafkaBroker

GROUP = "migfleet"  # the ConsumerGroup: group id and topic
MANUAL = "migsts"  # the StatefulSet: group id and topic
PARTITIONS = 6
REPLICAS = 3
RECORDS_PER_SECOND = 50
CONSUMER = ["python", "-m", "staticfleet.kafka.java_pod"]
# Its event log on stdout, the container's log (read back through `kubectl logs`).
CONSUMER_ARGS = ["--events-dir", "-"]
CLIENT_CONFIG_DIR = "/etc/staticfleet/kafka"  # where the operator mounts its client Secret
Protocol = Literal["classic", "consumer"]
# Both fleets: Java's CooperativeStickyAssignor on the classic side, the broker's sticky
# `uniform` on the consumer side (the operator's mapping for the non-range assignors).
CLASSIC_ASSIGNOR = "cooperative-sticky"
REMOTE_ASSIGNOR = "uniform"


@dataclass
class SequenceProducer:
    """Writes 0, 1, 2, ... to `topic` (partition = n mod PARTITIONS, acks=all) in a thread
    until stopped; `acked` is n -> (partition, offset) from the broker's delivery reports."""

    bootstrap: str
    topic: str
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SequenceProducer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[int, tuple[int, int]]:
        """Stops, flushes; n -> (partition, offset) of every acknowledged record."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        assert not self.failed, self.failed[:5]
        # The whole sequence, each number acknowledged once.
        assert sorted(self.acked) == list(range(self.sent)), (len(self.acked), self.sent)
        return dict(self.acked)

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "log_level": 0})

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                self.failed.append(str(error))
            else:
                n = int(message.value() or b"-1")
                self.acked[n] = (int(message.partition() or 0), int(message.offset() or 0))

        interval = 1 / RECORDS_PER_SECOND
        next_at = time.monotonic()
        while not self._stop.is_set():
            n = self.sent
            producer.produce(
                self.topic, value=str(n).encode(), partition=n % PARTITIONS, on_delivery=delivered
            )
            self.sent += 1
            producer.poll(0)
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        if producer.flush(30) != 0:
            self.failed.append("records still unacknowledged 30 s after the producer stopped")


def unconsumed(
    produced: dict[int, tuple[int, int]], topic: str, committed: dict[Partition, int]
) -> list[int]:
    """Sequence numbers whose offset is not below their partition's committed position."""
    return sorted(
        n for n, (p, offset) in produced.items() if committed.get((topic, p), -1) <= offset
    )


def fleet_logs(cluster: Cluster, ns: str, prefix: str) -> list[MemberLog]:
    """The event log of every consumer process of the pods named `<prefix>-<n>`: every
    incarnation's container log (the node's cluster follows each from the moment it runs)."""
    return member_logs(cluster, ns, (f"{prefix}-{slot}" for slot in range(REPLICAS)), "consumer")


def on_protocol(bootstrap: str, group: str, protocol: Protocol) -> bool:
    """The broker's view: a consumer group converged with REPLICAS consumer-protocol members
    (ConsumerGroupDescribe), or a classic group Stable on CLASSIC_ASSIGNOR with REPLICAS
    members."""
    if protocol == "classic":
        described = describe(bootstrap, group)
        return bool(
            described["state"] == "Stable"
            and described["protocol"] == CLASSIC_ASSIGNOR
            and len(described["members"]) == REPLICAS
        )

    async def ask() -> bool:
        transport = KafkaTransport(bootstrap)
        try:
            answer = await transport.describe_consumer_group(group)
        except TransportError:
            return False
        finally:
            await transport.close()
        return (
            answer.error_code == 0
            and answer.converged
            and len(answer.members) == REPLICAS
            and all(m.member_type is MemberType.CONSUMER for m in answer.members)
        )

    return asyncio.run(ask())


@dataclass(frozen=True)
class Window:
    """One direction: from the change (wall clock, as the consumers' logs) to settled."""

    name: str
    start_ms: int
    end_ms: int


def migrate(name: str, change: Callable[[], None], done: Callable[[], bool], what: str) -> Window:
    start_ms = int(time.time() * 1000)
    change()
    wait_for(what, done, timeout_s=240, interval_s=1.0)
    return Window(name, start_ms, int(time.time() * 1000))


def figures(
    logs: list[MemberLog],
    topic: str,
    windows: list[Window],
    produced: dict[int, tuple[int, int]],
) -> dict[str, Any]:
    """One fleet's figures, the same code for both: per direction duration, unowned
    partition-seconds and the most partitions unowned at once, rebalances and moves; over
    the whole run partitions owned twice, commits gone backwards and records lost."""
    held = all_holdings(logs)
    partitions = [(topic, p) for p in range(PARTITIONS)]
    end_ms = max(int(row["ts_ms"]) for log in logs for row in log.rows) + 1
    committed = acknowledged_offsets(logs, end_ms)
    result: dict[str, Any] = {
        w.name: {
            "duration_s": round((w.end_ms - w.start_ms) / 1000, 1),
            "unowned_partition_s": round(
                unowned_partition_seconds(held, partitions, w.start_ms, w.end_ms), 1
            ),
            # The most partitions without an owner at once (6: the whole topic).
            "peak_unowned_partitions": max(
                (count for _, _, count in unowned_steps(held, partitions, w.start_ms, w.end_ms)),
                default=0,
            ),
            "rebalances": assignment_rounds(held, partitions, w.start_ms, w.end_ms),
            "partitions_moved": partitions_moved(held, w.start_ms, w.end_ms),
        }
        for w in windows
    }
    result["partitions_owned_twice"] = len({o.partition for o in ownership_overlaps(held, end_ms)})
    result["commit_regressions"] = len(commit_regressions(logs))
    result["records_produced"] = len(produced)
    result["records_lost"] = len(unconsumed(produced, topic, committed))
    result["member_processes"] = len(logs)
    return result


def drain(cluster: Cluster, ns: str, prefix: str, produced: dict[int, tuple[int, int]]) -> None:
    """Until every produced record is below its partition's committed position (or 60 s:
    what is left is then counted as lost)."""

    def caught_up() -> bool:
        logs = fleet_logs(cluster, ns, prefix)
        return not unconsumed(produced, prefix, acknowledged_offsets(logs, 2**62))

    with contextlib.suppress(Timeout):  # what is left is counted in figures()
        wait_for(f"{prefix}: every produced record committed", caught_up, timeout_s=60)


def statefulset(name: str, bootstrap: str, secret: str) -> dict[str, Any]:
    """The same consumers by hand: the env the operator gives a Java member of a cooperative
    group, group.instance.id = the pod's name (a StatefulSet keeps it), the client
    configuration from a Secret mounted where the operator mounts its own."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": REPLICAS,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                # Followed: a bounced pod's log goes with it (e2e/cluster.py, PodLogs).
                "metadata": {"labels": {"app": name, FOLLOW_LOGS_LABEL: "true"}},
                "spec": {
                    "terminationGracePeriodSeconds": 20,
                    "volumes": [{"name": "client", "secret": {"secretName": secret}}],
                    "containers": [
                        {
                            "name": "consumer",
                            "image": JAVA_IMAGE,
                            "command": CONSUMER,
                            "args": CONSUMER_ARGS,
                            "env": manual_env(name, bootstrap, "classic"),
                            "volumeMounts": [
                                {"name": "client", "mountPath": CLIENT_CONFIG_DIR, "readOnly": True}
                            ],
                        }
                    ],
                },
            },
        },
    }


def manual_env(name: str, bootstrap: str, protocol: Protocol) -> list[dict[str, Any]]:
    """Classic: the strategy; consumer: group.protocol and the remote assignor the operator
    maps a cooperative fleet to (Java refuses a strategy on the consumer protocol), as
    docs/kafka.md says."""
    values = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_GROUP_ID": name,
        "KAFKA_TOPICS": name,
        "KAFKA_CLIENT_CONFIG": f"{CLIENT_CONFIG_DIR}/client.properties",
    }
    if protocol == "consumer":
        values |= {
            "KAFKA_GROUP_PROTOCOL": "consumer",
            "KAFKA_GROUP_REMOTE_ASSIGNOR": REMOTE_ASSIGNOR,
        }
    else:
        values["KAFKA_PARTITION_ASSIGNMENT_STRATEGY"] = CLASSIC_ASSIGNOR
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    env.append(
        {
            "name": "KAFKA_GROUP_INSTANCE_ID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        }
    )
    return env


def rolled(cluster: Cluster, ns: str, name: str) -> bool:
    """The StatefulSet's RollingUpdate finished: every pod of the current revision, Ready."""
    sts = cluster.get_json("-n", ns, "get", "statefulset", name)
    status = sts.get("status") or {}
    return bool(
        status.get("observedGeneration", 0) >= sts["metadata"]["generation"]
        and status.get("updateRevision") == status.get("currentRevision")
        and status.get("updatedReplicas") == REPLICAS
        and status.get("readyReplicas") == REPLICAS
    )


def rollout_done(cluster: Cluster, ns: str, protocol: str) -> bool:
    rollout = group_status(cluster, ns, GROUP).get("rollout") or {}
    return bool(rollout.get("phase") == "Completed" and rollout.get("toProtocol") == protocol)


def test_migration_by_the_operator_and_by_hand(
    cluster: Cluster, operator_release: None, record: Record, kafka_broker: KafkaBroker
) -> None:
    plain = kafka_broker.bootstrap  # the test's own view (producer, describe)
    for topic in (GROUP, MANUAL):
        kafka_broker.create_topic(topic, PARTITIONS)
    container = {
        "name": "consumer",
        "image": JAVA_IMAGE,
        "command": CONSUMER,
        "args": CONSUMER_ARGS,
    }

    with namespace(cluster, "e2e-kafka-migration") as ns:
        access = secure_group(cluster, ns, kafka_broker, GROUP, "mtls")
        record("security", access.security)
        # The migration's pre-check reads group.consumer.migration.policy (docs/operator.md).
        kafka_broker.grant(Acl(access.principal, "DESCRIBE_CONFIGS", "CLUSTER"))
        group = kafka_group(
            GROUP, access.bootstrap, "java", container, kafka=access.kafka, replicas=REPLICAS
        )
        # cooperativeAssignor is cooperative-sticky by default; the remote one is said.
        group["spec"]["rebalance"] = {"protocol": "cooperative", "remoteAssignor": REMOTE_ASSIGNOR}
        apply(cluster, ns, group)
        wait_settled(cluster, ns, plain, GROUP, REPLICAS)

        # --- the operator: consumer, then back to cooperative ----------------------------------
        producer = SequenceProducer(plain, GROUP).start()
        up = migrate(
            "classic_to_consumer",
            lambda: patch_spec(cluster, ns, GROUP, {"rebalance": {"protocol": "consumer"}}),
            lambda: rollout_done(cluster, ns, "consumer") and on_protocol(plain, GROUP, "consumer"),
            "the operator's migration to the consumer protocol",
        )
        assert group_status(cluster, ns, GROUP).get("groupProtocol") == "consumer"
        down = migrate(
            "consumer_to_classic",
            lambda: patch_spec(cluster, ns, GROUP, {"rebalance": {"protocol": "cooperative"}}),
            lambda: (
                rollout_done(cluster, ns, "cooperative") and on_protocol(plain, GROUP, "classic")
            ),
            "the operator's migration back to the classic protocol",
        )
        produced = producer.stop()
        drain(cluster, ns, GROUP, produced)
        by_operator = figures(fleet_logs(cluster, ns, GROUP), GROUP, [up, down], produced)
        record("operator", by_operator)
        bounced = [
            e
            for e in cluster.get_json("-n", ns, "get", "events")["items"]
            if e.get("reason") == "MemberBounced"
        ]
        assert len(bounced) == 2 * REPLICAS, [e["message"] for e in bounced]

        # The same credentials for the fleet by hand (a user's KafkaUser): the operator's
        # client configuration, copied before the ConsumerGroup (its owner) goes.
        client = cluster.get_json("-n", ns, "get", "secret", f"{GROUP}-kafka-client")["data"]
        secret = f"{MANUAL}-kafka-client"
        apply(
            cluster,
            ns,
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}, "data": client},
        )
        assert "client.properties" in client, sorted(client)
        assert b"security.protocol=SSL" in base64.b64decode(client["client.properties"])
        kafka_broker.grant(*group_acls(access.principal, MANUAL, [MANUAL]))
        # One fleet at a time: six JVMs would share the two cores and slow both.
        cluster.kubectl("-n", ns, "delete", "cg", GROUP, "--wait=true", "--timeout=120s")

        # --- by hand: a StatefulSet, its template's env changed and rolled ---------------
        apply(cluster, ns, statefulset(MANUAL, access.bootstrap, secret))
        wait_for(
            "the StatefulSet's consumers Stable on the broker",
            lambda: rolled(cluster, ns, MANUAL) and on_protocol(plain, MANUAL, "classic"),
            timeout_s=180,
            interval_s=1.0,
            describe=lambda: json.dumps(describe(plain, MANUAL)),
        )

        def set_env(protocol: Protocol) -> None:
            patch = [
                {
                    "op": "replace",
                    "path": "/spec/template/spec/containers/0/env",
                    "value": manual_env(MANUAL, access.bootstrap, protocol),
                }
            ]
            cluster.kubectl(
                "-n", ns, "patch", "statefulset", MANUAL, "--type", "json", "-p", json.dumps(patch)
            )

        producer = SequenceProducer(plain, MANUAL).start()

        def roll(name: str, protocol: Protocol) -> Window:
            return migrate(
                name,
                lambda: set_env(protocol),
                lambda: rolled(cluster, ns, MANUAL) and on_protocol(plain, MANUAL, protocol),
                f"the StatefulSet rolled to the {protocol} protocol",
            )

        windows = [roll("classic_to_consumer", "consumer"), roll("consumer_to_classic", "classic")]
        produced = producer.stop()
        drain(cluster, ns, MANUAL, produced)
        by_hand = figures(fleet_logs(cluster, ns, MANUAL), MANUAL, windows, produced)
        record("statefulset", by_hand)
        cluster.kubectl("-n", ns, "delete", "statefulset", MANUAL, "--wait=true", "--timeout=120s")

    # The operator's guarantees; the StatefulSet's figures are what they are.
    assert by_operator["partitions_owned_twice"] == 0, by_operator
    assert by_operator["records_lost"] == 0, by_operator
    assert by_operator["records_produced"] > 0
    # One member out at a time, and cooperative members keep what does not move: never the
    # whole topic without an owner (an eager fleet's classic members revoke everything at each
    # step's rebalance, so there it can happen for a few ms: docs/operator.md).
    assert all(by_operator[w.name]["peak_unowned_partitions"] < PARTITIONS for w in (up, down))
    assert by_operator["member_processes"] == 3 * REPLICAS, by_operator
