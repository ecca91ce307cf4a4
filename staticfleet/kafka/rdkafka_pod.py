"""`python -m staticfleet.kafka.rdkafka_pod`: a librdkafka consumer as a member pod.

A stock librdkafka client (confluent-kafka's `Consumer`) in a Kafka-coordinated
ConsumerGroup with `clientFamily: librdkafka`, configured by the env the operator injects
(`spec.coordinator.env`, defaults below): bootstrap servers, group id, group.instance.id,
topics and `partition.assignment.strategy` (`range` or `cooperative-sticky`: librdkafka
refuses a list mixing eager and cooperative assignors), or `KAFKA_GROUP_PROTOCOL=consumer`
for KIP-848's protocol (the broker assigns); on a secured cluster, the mounted
client configuration file `KAFKA_CLIENT_CONFIG` names (librdkafka's property names). It
polls until SIGTERM, then closes (a static member sends no LeaveGroup), and prints one JSON
event per line in the shape of `staticfleet member run`'s (`started`, `assigned`, `revoked`,
`lost`, `stopped`, with `ts_ms` and `partitions`), so `staticfleet.demo.ownership` reads its
log.

With `--ms-per-record` it also works: it spends that long on every record it reads and
commits what it processed after each batch, a fixed throughput per member, so a burst
builds lag that only more members drain (what an autoscaler acts on: e2e/node/test_9e_keda.py).
Without it, it only holds its assignment and commits nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from jproperties import Properties  # type: ignore[import-untyped]


def emit(event: str, **fields: Any) -> None:
    row = {"event": event, "ts_ms": int(time.time() * 1000), "client": "librdkafka", **fields}
    sys.stdout.write(json.dumps(row, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _partitions(partitions: Sequence[TopicPartition]) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def read_properties(path: str) -> dict[str, str]:
    """The mounted client configuration (librdkafka names: security.protocol, sasl.*,
    ssl.*), as confluent-kafka takes it."""
    parsed = Properties()
    with open(path, "rb") as file:
        parsed.load(file, "utf-8")
    return {key: value.data for key, value in parsed.items()}


def group_protocol_config(protocol: str, strategy: str, session_timeout_ms: int) -> dict[str, Any]:
    """The group settings of `protocol`: classic takes the assignment strategy and the
    session; `consumer` (KIP-848, librdkafka >= 2.12) refuses all three (the broker assigns
    and times sessions out), so only `group.protocol` is set."""
    if protocol == "consumer":
        return {"group.protocol": "consumer"}
    if protocol != "classic":
        raise SystemExit(f"group protocol: classic or consumer, not {protocol!r}")
    return {
        "partition.assignment.strategy": strategy,
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": 1000,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--instance-id-env", default="KAFKA_GROUP_INSTANCE_ID")
    parser.add_argument("--group-id-env", default="KAFKA_GROUP_ID")
    parser.add_argument("--bootstrap-env", default="KAFKA_BOOTSTRAP_SERVERS")
    parser.add_argument("--strategy-env", default="KAFKA_PARTITION_ASSIGNMENT_STRATEGY")
    parser.add_argument("--topics-env", default="KAFKA_TOPICS")
    parser.add_argument("--client-config-env", default="KAFKA_CLIENT_CONFIG")
    parser.add_argument("--session-timeout-ms", type=int, default=30_000)
    parser.add_argument("--group-protocol-env", default="KAFKA_GROUP_PROTOCOL")
    parser.add_argument("--remote-assignor-env", default="KAFKA_GROUP_REMOTE_ASSIGNOR")
    parser.add_argument(
        "--ms-per-record",
        type=float,
        help="work: spend this long per record and commit after each batch (default: none)",
    )
    parser.add_argument("--batch", type=int, default=25, help="records per batch of work")
    args = parser.parse_args(argv)
    env = os.environ
    instance_id = env.get(args.instance_id_env) or ""
    # A consumer-protocol pod gets no strategy (librdkafka refuses one on that protocol).
    strategy = env.get(args.strategy_env, "")
    protocol = env.get(args.group_protocol_env) or "classic"
    config: dict[str, Any] = {
        "bootstrap.servers": env[args.bootstrap_env],
        "group.id": env[args.group_id_env],
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "client.id": f"rdkafka-{instance_id or os.getpid()}",
    }
    config.update(group_protocol_config(protocol, strategy, args.session_timeout_ms))
    if protocol == "consumer" and (remote := env.get(args.remote_assignor_env)):
        config["group.remote.assignor"] = remote
    if instance_id:
        config["group.instance.id"] = instance_id
    client_config = env.get(args.client_config_env)
    if client_config:
        config.update(read_properties(client_config))
    consumer = Consumer(config)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def on_assign(_: Consumer, partitions: list[TopicPartition]) -> None:
        emit("assigned", partitions=_partitions(partitions), strategy=strategy)

    def on_revoke(_: Consumer, partitions: list[TopicPartition]) -> None:
        emit("revoked", partitions=_partitions(partitions))

    def on_lost(_: Consumer, partitions: list[TopicPartition]) -> None:
        emit("lost", partitions=_partitions(partitions))

    topics = env[args.topics_env].split(",")
    emit("started", instance_id=instance_id, strategy=strategy, pid=os.getpid(), topics=topics)
    consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    processed = 0
    try:
        while not stopping:
            if args.ms_per_record is None:
                consumer.poll(0.2)
            else:
                processed += work(consumer, args.batch, args.ms_per_record)
    finally:
        consumer.close()
        emit("stopped", processed=processed)


def work(consumer: Consumer, batch: int, ms_per_record: float) -> int:
    """One batch: read up to `batch` records, spend `ms_per_record` on each, commit them."""
    done = [r for r in consumer.consume(num_messages=batch, timeout=0.2) if r.error() is None]
    if not done:
        return 0
    time.sleep(len(done) * ms_per_record / 1000)  # the work the records cost
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as error:  # e.g. revoked meanwhile: the next owner redoes it
        emit("commit_failed", error=str(error))
    return len(done)


if __name__ == "__main__":
    main()
