"""The mixed group on SASL_SSL (SCRAM-SHA-512): our members, Java KafkaConsumers and a
librdkafka consumer, each configured by the file the operator writes for its client family
(`client_config_files`, docs/operator.md "Secured clusters"), from one ConsumerGroup's
spec.coordinator.kafka and its Secrets.

librdkafka joins the eager group beside the others and is then removed with the operator's
batch LeaveGroup (its `KafkaBackend`, same settings); the rest go through the KIP-429
two-bounce (eager -> compatible -> cooperative) as in test_mixed_with_java.py, with no
partition ever owned by two members at once.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
from staticfleet.demo.ownership import all_holdings, ownership_overlaps
from staticfleet.kafka.broker import Acl, KafkaBroker
from staticfleet.kafka.java_peer import JavaPeer
from staticfleet.member.runtime import EXIT_OK
from staticfleet_operator.backends import KafkaBackend
from staticfleet_operator.crd import ClientFamily, KafkaClientSpec
from staticfleet_operator.kafka_auth import client_settings
from staticfleet_operator.kafka_clients import PROPERTIES_FILE, client_config_files
from tests.conftest import SecuredUser

from .helpers import (
    MemberProcess,
    complete_and_disjoint,
    group_assignor,
    member_logs,
    our_member,
    owned_now,
    produce,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]

PARTITIONS = 8
OURS = ("ours-0", "ours-1")
JAVA = ("java-0", "java-1")
RDKAFKA = "rdkafka-0"
PHASES = ("eager", "compatible", "cooperative")
JAVA_STRATEGIES = {
    "eager": ("range",),
    "compatible": ("cooperative-sticky", "range"),
    "cooperative": ("cooperative-sticky",),
}


def operator_settings(broker: KafkaBroker, user: SecuredUser) -> KafkaClientSettings:
    """What the operator makes of a ConsumerGroup's spec.coordinator.kafka and Secrets."""
    spec = KafkaClientSpec.model_validate(
        {
            "authentication": {
                "type": "scram-sha-512",
                "username": user.name,
                "passwordSecret": {"secretName": "user", "password": "password"},
            },
            "tls": {"trustedCertificates": [{"secretName": "ca", "certificate": "ca.crt"}]},
        }
    )
    secrets = {
        "ca": {"ca.crt": broker.pki.ca_path.read_text()},
        "user": {"password": user.password},
    }
    return client_settings(spec, secrets, PLAINTEXT_SETTINGS)


def mount(family: ClientFamily, settings: KafkaClientSettings, directory: Path) -> Path:
    """The group's Secret as the kubelet would mount it; returns the configuration file."""
    directory.mkdir(parents=True)
    files = client_config_files(family, settings)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory / PROPERTIES_FILE


def rdkafka_member(
    bootstrap: str, config: Path, group: str, topic: str, log: Path
) -> MemberProcess:
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_GROUP_ID": group,
        "KAFKA_GROUP_INSTANCE_ID": RDKAFKA,
        "KAFKA_TOPICS": topic,
        "KAFKA_PARTITION_ASSIGNMENT_STRATEGY": "range",
        "KAFKA_CLIENT_CONFIG": str(config),
    }
    command = [
        sys.executable,
        "-m",
        "staticfleet.kafka.rdkafka_pod",
        "--session-timeout-ms",
        "10000",
    ]
    return MemberProcess(command, env, log, stdout=True)


def test_java_librdkafka_and_ours_on_sasl_ssl_two_bounce_without_double_ownership(
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[[int], str],
    secured_user: SecuredUser,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.sasl_ssl_bootstrap
    topic = kafka_topic(PARTITIONS)
    group = f"{topic}-group"
    kafka_broker.grant(
        Acl(secured_user.principal, "READ", "GROUP", group),
        Acl(secured_user.principal, "READ", "TOPIC", topic),
    )
    settings = operator_settings(kafka_broker, secured_user)
    configs = {
        family: mount(family, settings, tmp_path / family.value)
        for family in (ClientFamily.STATICFLEET, ClientFamily.JAVA, ClientFamily.LIBRDKAFKA)
    }
    every = {(topic, partition) for partition in range(PARTITIONS)}
    produce(kafka_broker.bootstrap, topic, PARTITIONS, per_partition=50)
    logs: list[tuple[str, Path]] = []
    members: dict[str, MemberProcess | JavaPeer] = {}

    def start(instance: str, phase: str) -> None:
        path = tmp_path / f"{instance}-{phase}.jsonl"
        logs.append((instance, path))
        if instance in OURS:
            config = configs[ClientFamily.STATICFLEET]
            members[instance] = our_member(bootstrap, group, topic, instance, phase, path, config)
        elif instance == RDKAFKA:
            config = configs[ClientFamily.LIBRDKAFKA]
            members[instance] = rdkafka_member(bootstrap, config, group, topic, path)
        else:
            peer = JavaPeer(
                bootstrap,
                group,
                [topic],
                path,
                instance_id=instance,
                strategies=JAVA_STRATEGIES[phase],
                client_config=configs[ClientFamily.JAVA],
            )
            peer.start()
            members[instance] = peer

    def stable(count: int) -> Callable[[], bool]:
        return lambda: complete_and_disjoint(owned_now(member_logs(logs)), every, count)

    def running() -> list[str]:
        return [
            f"{name}: {member.stderr_path.read_text()[-2000:]}"
            for name, member in members.items()
            if isinstance(member, MemberProcess) and member.process.poll() is not None
        ]

    selected: list[str] = []
    order = (OURS[0], JAVA[0], OURS[1], JAVA[1])
    try:
        for instance in (*order, RDKAFKA):
            start(instance, "eager")
        wait_for(stable(5), 120, f"five members share the topic (exited: {running()})")

        # librdkafka cannot take part in the compatible phase: it goes, and the operator's
        # batch LeaveGroup (its backend, with the same settings) rebalances at once.
        assert members[RDKAFKA].stop() == EXIT_OK, members[RDKAFKA].stderr_path.read_text()

        async def leave() -> None:
            backend = KafkaBackend(bootstrap, settings=settings)
            try:
                response = await backend.leave(group, [RDKAFKA])
                assert [m.group_instance_id for m in response.members] == [RDKAFKA]
            finally:
                await backend.close()

        asyncio.run(leave())
        del members[RDKAFKA]
        wait_for(stable(4), 60, "four members after the batch leave")

        selected.append(group_assignor(kafka_broker.bootstrap, group)[0])
        for phase in PHASES[1:]:
            for instance in order:
                member = members[instance]
                assert member.stop() == EXIT_OK, member.stderr_path.read_text()
                start(instance, phase)
                wait_for(stable(4), 120, f"{instance} back in the {phase} phase ({running()})")
                produce(kafka_broker.bootstrap, topic, PARTITIONS, per_partition=10, start=50)
            selected.append(group_assignor(kafka_broker.bootstrap, group)[0])
        for member in members.values():
            assert member.stop() == EXIT_OK, member.stderr_path.read_text()
    finally:
        for member in members.values():
            member.kill()

    assert selected == ["range", "cooperative-sticky", "cooperative-sticky"]
    everything = member_logs(logs)
    end_ms = max(int(row["ts_ms"]) for log in everything for row in log.rows) + 1
    assert list(ownership_overlaps(all_holdings(everything), end_ms)) == []
