"""Our members on the secured broker: coordinator AND source on SASL_SSL and on SSL.

`staticfleet member run --kafka-config FILE` processes (docs/kafka.md, "Secured clusters"):
eager and cooperative groups, a static restart that keeps the assignment, a batch leave;
OAUTHBEARER with tokens that expire while members heartbeat; and each refusal ending the
member with exit code EXIT_KAFKA_ACCESS within 60 s, its cause in the log, no password.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coordinator.client import GroupMember
from coordinator.client.kafka_errors import KafkaSaslMechanismUnsupported
from coordinator.client.kafka_settings import KafkaClientSettings
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.errors import ErrorCode
from coordinator.messages import LeaveGroupRequest, MemberIdentity
from coordinator.protocol import TopicPartition
from staticfleet.kafka.broker import Acl, KafkaBroker, running_broker
from staticfleet.member.events import read_events
from staticfleet.member.runtime import EXIT_KAFKA_ACCESS, EXIT_OK
from tests.client.helpers import member_config, settled, wait_until
from tests.conftest import SecuredUser, SslClient
from tests.kafka.helpers import MemberRuns, end_offsets, produce, wait_for

pytestmark = pytest.mark.kafka

PARTITIONS = 4


def write_properties(path: Path, props: dict[str, str]) -> Path:
    """A .properties file; values escaped as Java's Properties.store does for `\\`."""
    lines = [f"{key}={value.replace(chr(92), chr(92) * 2)}" for key, value in props.items()]
    path.write_text("# written by the test\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def member_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "staticfleet.cli", "member", "run", *args]


class Members(MemberRuns):
    """`member run` processes of one group, coordinator and source on one secured listener."""

    def __init__(
        self, bootstrap: str, config: Path, group: str, topic: str, protocol: str, directory: Path
    ) -> None:
        super().__init__(directory)
        self.bootstrap, self.config, self.group, self.topic = bootstrap, config, group, topic
        self.protocol = protocol

    def start(self, name: str, instance_id: str) -> None:
        argv = member_command(
            "--coordinator",
            f"kafka://{self.bootstrap}",
            "--source",
            f"kafka://{self.bootstrap}",
            "--group-id",
            self.group,
            "--instance-id",
            instance_id,
            "--topics",
            self.topic,
            "--rebalance-protocol",
            self.protocol,
            "--session-timeout-ms",
            "10000",
            "--rebalance-timeout-ms",
            "10000",
            "--heartbeat-interval-ms",
            "300",
            "--commit-interval-ms",
            "200",
            "--event-log",
            str(self.event_log(name)),
        )
        self.launch(name, argv, {"STATICFLEET_KAFKA_CONFIG": str(self.config)})


def member_access(broker: KafkaBroker, principal: str, group: str, topic: str) -> None:
    """The ACLs a member needs (docs/kafka.md): READ on its group and on its topics."""
    broker.grant(Acl(principal, "READ", "GROUP", group), Acl(principal, "READ", "TOPIC", topic))


def listener_settings(
    broker: KafkaBroker, listener: str, user: SecuredUser, client: SslClient
) -> tuple[str, dict[str, str], str]:
    """(bootstrap, properties, principal) for a member on `listener`."""
    if listener == "SASL_SSL":
        props = broker.client_properties(
            "SASL_SSL", user.name, "SCRAM-SHA-512", password=user.password
        )
        return broker.sasl_ssl_bootstrap, props, user.principal
    if listener == "SASL_SSL-OAUTHBEARER":  # the broker's own OIDC client
        props = broker.client_properties("SASL_SSL", mechanism="OAUTHBEARER")
        return broker.sasl_ssl_bootstrap, props, f"User:{props['sasl.oauthbearer.client.id']}"
    return broker.ssl_bootstrap, broker.client_properties("SSL", client.name), client.principal


@pytest.mark.parametrize(
    ("listener", "protocol"),
    [
        ("SASL_SSL", "eager"),
        ("SASL_SSL", "cooperative"),
        ("SSL", "eager"),
        ("SSL", "cooperative"),
        # librdkafka's own OIDC client for the source, ours for the coordinator.
        ("SASL_SSL-OAUTHBEARER", "cooperative"),
    ],
)
def test_members_on_a_secured_listener(
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[[int], str],
    secured_user: SecuredUser,
    ssl_client: SslClient,
    tmp_path: Path,
    listener: str,
    protocol: str,
) -> None:
    topic = kafka_topic(PARTITIONS)
    group = f"{topic}-group"
    every = {(topic, partition) for partition in range(PARTITIONS)}
    bootstrap, props, principal = listener_settings(
        kafka_broker, listener, secured_user, ssl_client
    )
    member_access(kafka_broker, principal, group, topic)
    config = write_properties(tmp_path / "kafka.properties", props)
    produce(kafka_broker.bootstrap, topic, PARTITIONS, per_partition=100)
    members = Members(bootstrap, config, group, topic, protocol, tmp_path)
    try:
        members.start("a", "m-0")
        members.start("b", "m-1")

        def split_evenly() -> bool:
            owned = members.owned_now()
            return sorted(map(len, owned.values())) == [2, 2] and set().union(*owned.values()) == (
                every
            )

        wait_for(split_evenly, what=f"an even split; {members.stderr('a')}{members.stderr('b')}")
        ends = end_offsets(kafka_broker.bootstrap, topic, PARTITIONS)
        wait_for(lambda: members.committed() == ends, what="every record committed")
        before = members.owned_now()
        b_rows_before = len(next(log.rows for log in members.logs() if log.owner == "b"))

        # A static restart: same instance id, a new process, the same partitions.
        assert members.stop("a") == EXIT_OK, members.stderr("a")
        produce(kafka_broker.bootstrap, topic, PARTITIONS, per_partition=50, start=100)
        members.start("a2", "m-0")
        wait_for(lambda: members.owned_now().get("a2") == before["a"], what="a2 takes a's")
        ends = end_offsets(kafka_broker.bootstrap, topic, PARTITIONS)
        wait_for(lambda: members.committed() == ends, what="the new records committed")
        rows = {log.owner: log.rows for log in members.logs()}
        # No rebalance: b kept its partitions throughout.
        after = rows["b"][b_rows_before:]
        assert not [row for row in after if row["event"] in ("revoked", "lost")], after

        # Static members do not leave on SIGTERM (KIP-345); a batch LeaveGroup by instance
        # id (what the operator sends on scale-down) empties the group at once.
        for name in ("a2", "b"):
            assert members.stop(name) == EXIT_OK, members.stderr(name)
        settings = KafkaClientSettings.from_properties(props)
        assert asyncio.run(batch_leave(bootstrap, settings, group, ["m-0", "m-1"])) == []
        state = asyncio.run(group_state(bootstrap, settings, group))
        assert state == ("Empty", 0)
        for name in ("a", "a2", "b"):
            err = members.stderr(name)
            assert "Traceback" not in err, err
            # Exactly the documented ACLs: nothing the member (or its source's librdkafka
            # consumer, which looks up its group's coordinator) asks for is refused.
            assert "AUTHORIZATION_FAILED" not in err, err
            if "sasl.password" in props:
                assert props["sasl.password"] not in err
    finally:
        members.kill_all()


async def batch_leave(
    bootstrap: str, settings: KafkaClientSettings, group: str, instance_ids: list[str]
) -> list[str]:
    """LeaveGroup for several static members at once; returns the ids that were refused."""
    transport = KafkaTransport(f"kafka://{bootstrap}", settings=settings)
    try:
        response = await transport.leave_group(
            LeaveGroupRequest(
                group_id=group,
                members=[
                    MemberIdentity(member_id="", group_instance_id=i, reason="scale down")
                    for i in instance_ids
                ],
            )
        )
        assert response.error_code is ErrorCode.NONE, response
        return [
            str(m.group_instance_id) for m in response.members if m.error_code is not ErrorCode.NONE
        ]
    finally:
        await transport.close()


async def group_state(bootstrap: str, settings: KafkaClientSettings, group: str) -> tuple[str, int]:
    transport = KafkaTransport(f"kafka://{bootstrap}", settings=settings)
    try:
        described = await transport.describe_group(group)
        return described.group_state, len(described.members)
    finally:
        await transport.close()


# ---------------------------------------------------------------------- OAUTHBEARER


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A secured broker that ends a SASL session when its token expires (KIP-368:
    connections.max.reauth.ms > 0 bounds a session by the token's lifetime), and whose
    SASL_SSL listener does not enable PLAIN (a mechanism the cluster refuses)."""
    with running_broker(
        tmp_path_factory.mktemp("kafka-reauth"),
        timeout=120,
        secured=True,
        settings={
            "connections.max.reauth.ms": "600000",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
        },
    ) as broker:
        yield broker


async def test_oauth_members_heartbeat_across_token_refreshes(reauth_broker: KafkaBroker) -> None:
    broker = reauth_broker
    client_id, secret = "fleet-oauth", "fleet-oauth-secret"
    broker.oidc.add_client(client_id, secret, lifetime=4)
    topic, group = "oauth-topic", "oauth-group"
    broker.create_topic(topic, PARTITIONS)
    member_access(broker, f"User:{client_id}", group, topic)
    settings = KafkaClientSettings.from_properties(
        broker.client_properties("SASL_SSL", client_id, "OAUTHBEARER", password=secret)
    )
    partitions = frozenset(TopicPartition(topic, p) for p in range(PARTITIONS))
    transports = [
        KafkaTransport(f"kafka://{broker.sasl_ssl_bootstrap}", settings=settings) for _ in "ab"
    ]
    members = [
        GroupMember(
            transport,
            member_config(
                f"oauth-{n}",
                group_id=group,
                topics=(topic,),
                session_timeout_ms=6000,
                heartbeat_interval_ms=300,
            ),
        )
        for n, transport in enumerate(transports)
    ]
    try:
        for member in members:
            await member.start()
        await wait_until(lambda: settled(members, partitions), within=60)
        generation = members[0].generation_id
        issued = broker.oidc.tokens_issued(client_id)
        # Tokens live 4 s: over 14 s each transport fetches new ones and opens new
        # connections before the broker's session (the token's lifetime) ends.
        await asyncio.sleep(14)
        assert broker.oidc.tokens_issued(client_id) >= issued + 4
        assert settled(members, partitions)
        assert {m.generation_id for m in members} == {generation}
        assert all(m.error is None for m in members)
    finally:
        for member in members:
            await member.close(leave=True)
        for transport in transports:
            await transport.close()


async def test_a_mechanism_the_listener_does_not_enable(reauth_broker: KafkaBroker) -> None:
    """The broker answers SaslHandshake with UNSUPPORTED_SASL_MECHANISM (33) and the
    mechanisms it enables; the transport says so as its own error, not "unreachable"."""
    settings = KafkaClientSettings.from_properties(
        reauth_broker.client_properties("SASL_SSL", "alice", "PLAIN")
    )
    transport = KafkaTransport(f"kafka://{reauth_broker.sasl_ssl_bootstrap}", settings=settings)
    try:
        with pytest.raises(KafkaSaslMechanismUnsupported) as refused:
            await transport.describe_group("any-group")
    finally:
        await transport.close()
    message = str(refused.value)
    assert "PLAIN" in message and "SCRAM-SHA-512" in message, message


# ---------------------------------------------------------------------- refusals


def refused_cases(
    broker: KafkaBroker, user: SecuredUser, client: SslClient, group: str, topic: str
) -> dict[str, tuple[str, dict[str, str], str]]:
    """case -> (bootstrap, properties, expected reason)."""
    scram = broker.client_properties("SASL_SSL", user.name, password=user.password)
    ssl_props = broker.client_properties("SSL", client.name)
    expired = broker.pki.expired_client_certificate(client.name)
    return {
        "wrong-password": (
            broker.sasl_ssl_bootstrap,
            {**scram, "sasl.password": "wrong-" + user.password},
            "KafkaAuthenticationFailed",
        ),
        "unknown-user": (
            broker.sasl_ssl_bootstrap,
            {**scram, "sasl.username": "nobody-" + user.name},
            "KafkaAuthenticationFailed",
        ),
        "untrusted-ca": (
            broker.sasl_ssl_bootstrap,
            {**scram, "ssl.ca.location": str(broker.pki.untrusted_ca_path)},
            "KafkaTLSVerificationFailed",
        ),
        "expired-client-certificate": (
            broker.ssl_bootstrap,
            {
                **ssl_props,
                "ssl.certificate.location": str(expired.cert),
                "ssl.key.location": str(expired.key),
            },
            "KafkaTLSVerificationFailed",
        ),
        "hostname-mismatch": (
            broker.sasl_ssl_bootstrap.replace("127.0.0.1", "localhost"),
            scram,
            "KafkaTLSHostnameMismatch",
        ),
        "mechanism-not-enabled": (
            broker.ssl_bootstrap,
            {
                **ssl_props,
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user.name,
                "sasl.password": user.password,
            },
            "KafkaSaslMechanismUnsupported",
        ),
        "no-group-read-acl": (broker.sasl_ssl_bootstrap, scram, "KafkaAuthorizationFailed"),
        "no-topic-acl": (broker.sasl_ssl_bootstrap, scram, "KafkaAuthorizationFailed"),
        "topic-describe-only": (broker.sasl_ssl_bootstrap, scram, "KafkaAuthorizationFailed"),
    }


# What each ACL case grants the member's user, and what the refusal names.
ACL_CASES = {
    # It may find the group's coordinator and read the topic, but not join the group.
    "no-group-read-acl": (
        [("DESCRIBE", "GROUP"), ("READ", "TOPIC")],
        "JoinGroup on Group '{group}'",
    ),
    # It may join, but not see the topic it reads.
    "no-topic-acl": ([("READ", "GROUP")], "on Topic '{topic}'"),
    # It may see the topic, but not read it nor commit on it.
    "topic-describe-only": ([("READ", "GROUP"), ("DESCRIBE", "TOPIC")], "on Topic '{topic}'"),
}


CASES = [
    "wrong-password",
    "unknown-user",
    "untrusted-ca",
    "expired-client-certificate",
    "hostname-mismatch",
    "mechanism-not-enabled",
    "no-group-read-acl",
    "no-topic-acl",
    "topic-describe-only",
]


@pytest.mark.parametrize("case", CASES)
def test_a_refused_member_exits_naming_the_cause(
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[[int], str],
    secured_user: SecuredUser,
    ssl_client: SslClient,
    tmp_path: Path,
    case: str,
) -> None:
    topic = kafka_topic(2)
    group = f"{topic}-group"
    bootstrap, props, reason = refused_cases(kafka_broker, secured_user, ssl_client, group, topic)[
        case
    ]
    if case in ACL_CASES:
        grants, _ = ACL_CASES[case]
        kafka_broker.grant(
            *(
                Acl(secured_user.principal, op, kind, group if kind == "GROUP" else topic)
                for op, kind in grants
            )
        )
    else:
        member_access(kafka_broker, secured_user.principal, group, topic)
        member_access(kafka_broker, ssl_client.principal, group, topic)
    config = write_properties(tmp_path / "kafka.properties", props)
    log = tmp_path / "member.jsonl"
    started = time.monotonic()
    result = subprocess.run(
        member_command(
            "--coordinator",
            f"kafka://{bootstrap}",
            "--source",
            f"kafka://{bootstrap}",
            "--kafka-config",
            str(config),
            "--group-id",
            group,
            "--instance-id",
            "m-0",
            "--topics",
            topic,
            "--event-log",
            str(log),
        ),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == EXIT_KAFKA_ACCESS, result.stderr
    assert elapsed < 60, f"{elapsed:.0f}s"
    lines = [line for line in result.stderr.splitlines() if f"fatal: {reason}:" in line]
    assert len(lines) == 1, result.stderr
    if case in ACL_CASES:
        expected = ACL_CASES[case][1].format(group=group, topic=topic)
        assert expected in lines[0], lines[0]
    fatal = [row for row in read_events(log) if row["event"] == "fatal"]
    assert [row["reason"] for row in fatal] == [reason]
    for secret in (secured_user.password, props.get("sasl.password", secured_user.password)):
        assert secret not in result.stderr
        assert secret not in result.stdout
        assert secret not in log.read_text()
