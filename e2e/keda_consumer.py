"""A slow librdkafka consumer for the KEDA scenario (e2e/test_9e_keda.py), run as a member
pod's container by path (`python /…/e2e/keda_consumer.py`: the pod's working directory is
its own, where the e2e package is not importable, so this file imports only the stdlib and
confluent-kafka).

Like `staticfleet.kafka.rdkafka_pod` it is configured by the env the operator injects
(bootstrap servers, group id, group.instance.id, topics, assignment strategy) and prints one
JSON event per line (`started`, `assigned`, `revoked`, `lost`, `stopped`) for
`staticfleet.demo.ownership`. Unlike it, it spends `--ms-per-record` on every record and
commits what it processed after each batch: a fixed throughput per member, so a burst
builds lag that only more members drain, which is what an autoscaler acts on.
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


def emit(event: str, **fields: Any) -> None:
    row = {"event": event, "ts_ms": int(time.time() * 1000), "client": "librdkafka", **fields}
    sys.stdout.write(json.dumps(row, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _partitions(partitions: Sequence[TopicPartition]) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ms-per-record", type=float, default=20.0)
    parser.add_argument("--batch", type=int, default=25)
    args = parser.parse_args(argv)
    env = os.environ
    instance_id = env.get("KAFKA_GROUP_INSTANCE_ID", "")
    strategy = env["KAFKA_PARTITION_ASSIGNMENT_STRATEGY"]
    config: dict[str, Any] = {
        "bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"],
        "group.id": env["KAFKA_GROUP_ID"],
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": strategy,
        "session.timeout.ms": 30_000,
        "heartbeat.interval.ms": 1000,
        "client.id": f"keda-consumer-{instance_id or os.getpid()}",
    }
    if instance_id:
        config["group.instance.id"] = instance_id
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

    topics = env["KAFKA_TOPICS"].split(",")
    emit("started", instance_id=instance_id, strategy=strategy, pid=os.getpid(), topics=topics)
    consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    processed = 0
    try:
        while not stopping:
            records = consumer.consume(num_messages=args.batch, timeout=0.2)
            done = [r for r in records if r.error() is None]
            for _ in done:
                time.sleep(args.ms_per_record / 1000)  # the work a record costs
            if done:
                processed += len(done)
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException as error:  # e.g. revoked meanwhile: the next owner redoes it
                    emit("commit_failed", error=str(error))
    finally:
        consumer.close()
        emit("stopped", processed=processed)


if __name__ == "__main__":
    main()
