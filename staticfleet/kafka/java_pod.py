"""`python -m staticfleet.kafka.java_pod`: the Java peer as a member pod's container.

A stock Java consumer in a Kafka-coordinated ConsumerGroup is configured by the env the
operator injects (`spec.coordinator.env`, defaults below): bootstrap servers, group id,
group.instance.id, topics and the assignment strategy of the current rollout phase (class
names), and on a secured cluster the path of the mounted client properties (TLS, SASL:
`KAFKA_CLIENT_CONFIG`, docs/operator.md "Secured clusters"), which the peer merges in. This
launcher reads them and replaces itself with the Java process (`exec`), so the pod's SIGTERM
reaches the consumer, which closes as a static member (no LeaveGroup). Its event log goes to
`--events-dir` (default: the working directory), one file per start, or with `--events-dir -`
to stdout, the container's log (`kubectl logs`), as `member run` writes it.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

from staticfleet.kafka.java_peer import JavaPeer, ensure_built


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events-dir", default=str(Path.cwd()))
    parser.add_argument("--instance-id-env", default="KAFKA_GROUP_INSTANCE_ID")
    parser.add_argument("--group-id-env", default="KAFKA_GROUP_ID")
    parser.add_argument("--bootstrap-env", default="KAFKA_BOOTSTRAP_SERVERS")
    parser.add_argument("--strategy-env", default="KAFKA_PARTITION_ASSIGNMENT_STRATEGY")
    parser.add_argument("--topics-env", default="KAFKA_TOPICS")
    parser.add_argument("--client-config-env", default="KAFKA_CLIENT_CONFIG")
    # KIP-848: `consumer` makes the peer subscribe with group.protocol=consumer.
    parser.add_argument("--group-protocol-env", default="KAFKA_GROUP_PROTOCOL")
    # With `consumer`: group.remote.assignor (the operator maps it from the classic assignor).
    parser.add_argument("--remote-assignor-env", default="KAFKA_GROUP_REMOTE_ASSIGNOR")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    args = parser.parse_args(argv)
    env = os.environ
    to_stdout = args.events_dir == "-"
    # "-": the peer's own stdout (ConsumerPeer's --events -).
    events = Path("-") if to_stdout else Path(args.events_dir) / f"events-{time.time_ns()}.jsonl"
    # A consumer-protocol pod gets no strategy (the broker assigns; Java refuses one there).
    strategy = env.get(args.strategy_env) or "range"
    peer = JavaPeer(
        env[args.bootstrap_env],
        env[args.group_id_env],
        env[args.topics_env].split(","),
        events,
        instance_id=env.get(args.instance_id_env) or None,
        strategies=strategy.split(","),
        session_timeout_ms=args.session_timeout_ms,
        client_config=Path(config) if (config := env.get(args.client_config_env)) else None,
        group_protocol=env.get(args.group_protocol_env) or "classic",
        remote_assignor=env.get(args.remote_assignor_env) or None,
    )
    ensure_built()
    if not to_stdout:
        events.parent.mkdir(parents=True, exist_ok=True)
    command = peer.command()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
