"""Kafka-coordinated fleets for scenarios 8a-8c: ConsumerGroups with `spec.coordinator.type:
kafka` on the node's secured broker (`kafka_broker` in e2e/node/conftest.py), each group
with its own principal (a SCRAM user over TLS, or a client certificate on the mutual-TLS
listener) granted exactly the ACLs docs/kafka.md lists, the broker's own describe, and the
scenario every client family goes through.

The operator and the members reach the broker only on the secured listener the group's
`bootstrapServers` names (`spec.coordinator.kafka`, docs/operator.md "Secured clusters");
`describe` is the test's own witness and stays on PLAINTEXT, whose principal (ANONYMOUS) is
a super user."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from coordinator.client import env
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.transport import TransportError
from e2e.cluster import Cluster
from e2e.fleet import Record, wait_for
from e2e.groups import apply, group_status, patch_spec
from staticfleet.demo.ownership import MemberLog, all_holdings, ownership_overlaps
from staticfleet.kafka.broker import Acl, KafkaBroker

PARTITIONS = 12
STRATEGY_ENV = "KAFKA_PARTITION_ASSIGNMENT_STRATEGY"

LogReader = Callable[[], list[MemberLog]]
Security = Literal["scram", "mtls"]
CA_SECRET = "kafka-cluster-ca-cert"  # as Strimzi names it: <cluster>-cluster-ca-cert


@dataclass(frozen=True)
class SecuredAccess:
    """How a group reaches the secured broker: the listener, `spec.coordinator.kafka`, and
    what the results record (listener/mechanism)."""

    bootstrap: str
    kafka: dict[str, Any]
    security: str
    principal: str


def group_acls(principal: str, group: str, topics: list[str]) -> list[Acl]:
    """Exactly docs/kafka.md's ACLs for the operator and the members, which share the group's
    principal: READ on the group (members: join, sync, heartbeat, commit; the operator:
    describe and LeaveGroup) and READ on each topic (members fetch; the operator's
    Metadata needs DESCRIBE, which READ implies). No cluster ACL."""
    return [Acl(principal, "READ", "GROUP", group)] + [
        Acl(principal, "READ", "TOPIC", topic) for topic in topics
    ]


def secure_group(
    cluster: Cluster,
    ns: str,
    broker: KafkaBroker,
    group: str,
    security: Security,
    topics: list[str] | None = None,
) -> SecuredAccess:
    """A principal of the group's own on `broker` (a SCRAM-SHA-512 user with a random
    password, or a client certificate with CN=<ns>.<group>), its ACLs, and the Secrets in
    `ns` that `spec.coordinator.kafka` names (Strimzi's shapes: the KafkaUser's Secret, the
    cluster CA's Secret)."""
    topics = topics if topics is not None else [group]
    ca = broker.pki.ca_path.read_text()
    user = f"{ns}.{group}"
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": user},
        "type": "Opaque",
    }
    trusted = {"trustedCertificates": [{"secretName": CA_SECRET, "certificate": "ca.crt"}]}
    if security == "scram":
        password = secrets.token_urlsafe(24)
        broker.add_user(user, password, "SCRAM-SHA-512")
        secret["stringData"] = {"password": password}
        kafka: dict[str, Any] = {
            "authentication": {
                "type": "scram-sha-512",
                "username": user,
                "passwordSecret": {"secretName": user, "password": "password"},
            },
            "tls": trusted,
        }
        access = SecuredAccess(
            broker.sasl_ssl_bootstrap, kafka, "SASL_SSL/SCRAM-SHA-512", f"User:{user}"
        )
    else:
        cert, key = broker.pki.client_certificate(user)
        secret["stringData"] = {"user.crt": cert.read_text(), "user.key": key.read_text()}
        kafka = {
            "authentication": {
                "type": "tls",
                "certificateAndKey": {
                    "secretName": user,
                    "certificate": "user.crt",
                    "key": "user.key",
                },
            },
            "tls": trusted,
        }
        access = SecuredAccess(broker.ssl_bootstrap, kafka, "SSL/mutual TLS", f"User:{user}")
    broker.grant(*group_acls(access.principal, group, topics))
    apply(cluster, ns, secret)
    apply(
        cluster,
        ns,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": CA_SECRET},
            "type": "Opaque",
            "stringData": {"ca.crt": ca},
        },
    )
    return access


def check_secured(cluster: Cluster, ns: str, group: str, access: SecuredAccess) -> None:
    """The members were given the secured listener and nothing else, and the configuration
    the operator wrote them is one self-contained file for that listener (no path in it)."""
    pods = cluster.member_pods(ns, group)
    assert pods, f"{group}: no member pods"
    for pod in pods:
        values = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        bootstrap = values.get("KAFKA_BOOTSTRAP_SERVERS") or values[env.COORDINATOR_URL]
        assert bootstrap.removeprefix("kafka://") == access.bootstrap, values
    data = cluster.get_json("-n", ns, "get", "secret", f"{group}-kafka-client")["data"]
    assert len(data) == 1, sorted(data)
    text = base64.b64decode(next(iter(data.values()))).decode()
    protocol = access.security.split("/")[0]
    assert f"security.protocol={protocol}\n" in text, text.splitlines()[0]
    assert "/etc/staticfleet/" not in text and ".location=" not in text


def kafka_group(
    name: str,
    bootstrap: str,
    family: str,
    container: dict[str, Any],
    *,
    kafka: dict[str, Any] | None = None,
    replicas: int = 6,
    session_timeout_ms: int = 30_000,
) -> dict[str, Any]:
    """The ConsumerGroup; `kafka` is `spec.coordinator.kafka` (`SecuredAccess.kafka`)."""
    coordinator: dict[str, Any] = {
        "type": "kafka",
        "bootstrapServers": bootstrap,
        "clientFamily": family,
    }
    if kafka is not None:
        coordinator["kafka"] = kafka
    return {
        "apiVersion": "staticfleet.dev/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "groupId": name,
            "topics": [{"name": name}],  # partitions: read from the cluster
            "replicas": replicas,
            "coordinator": coordinator,
            "membership": {"sessionTimeoutMs": session_timeout_ms},
            "rebalance": {"protocol": "eager"},
            "rollout": {"memberReadyTimeoutSeconds": 180},
            # Scale steps are timed (and in 9e, KEDA's own HPA window already stabilizes them),
            # so the operator's scale-down window stays out of the figures.
            "scaleDown": {"stabilizationWindowSeconds": 0},
            "template": {
                "spec": {"terminationGracePeriodSeconds": 20, "containers": [container]},
            },
        },
    }


def describe(bootstrap: str, group: str) -> dict[str, Any]:
    """The broker's DescribeGroups: state, selected protocol, instance id -> member id,
    and every member id."""

    async def ask() -> dict[str, Any]:
        transport = KafkaTransport(bootstrap)
        try:
            described = await transport.describe_group(group)
        except TransportError as error:  # e.g. the offsets topic still being created
            return {"state": f"Unknown ({error})", "protocol": "", "members": {}, "member_ids": []}
        finally:
            await transport.close()
        return {
            "state": described.group_state,
            "protocol": described.protocol_data,
            "members": {m.group_instance_id: m.member_id for m in described.members},
            # Dynamic members (no instance id) collapse in `members`; these do not.
            "member_ids": sorted(m.member_id for m in described.members),
        }

    return asyncio.run(ask())


def settled(
    cluster: Cluster, ns: str, bootstrap: str, group: str, members: int
) -> dict[str, Any] | None:
    """Stable on the broker with `members` members, and the ConsumerGroup Ready."""
    described = describe(bootstrap, group)
    status = group_status(cluster, ns, group)
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
    )
    if described["state"] == "Stable" and len(described["members"]) == members and ready:
        return described
    return None


def wait_settled(
    cluster: Cluster, ns: str, bootstrap: str, group: str, members: int, timeout_s: float = 240
) -> dict[str, Any]:
    return wait_for(
        f"{group}: {members} members Stable on the broker, the ConsumerGroup Ready",
        lambda: settled(cluster, ns, bootstrap, group, members),
        timeout_s=timeout_s,
        interval_s=1.0,
        describe=lambda: json.dumps(
            {"broker": describe(bootstrap, group), "status": group_status(cluster, ns, group)}
        )[:1500],
    )


def operator_events(cluster: Cluster, ns: str, reason: str) -> list[dict[str, Any]]:
    items = cluster.get_json("-n", ns, "get", "events").get("items", [])
    return [e for e in items if e.get("reason") == reason]


def assignment_events(logs: list[MemberLog], owner: str) -> int:
    return sum(
        1 for log in logs if log.owner == owner for row in log.rows if row["event"] == "assigned"
    )


def pod_uid(cluster: Cluster, ns: str, name: str) -> str | None:
    answer = cluster.kubectl("-n", ns, "get", "pod", name, "-o", "json", check=False)
    if answer.returncode != 0:
        return None
    return str(json.loads(answer.stdout)["metadata"]["uid"])


def fleet_scenario(
    cluster: Cluster,
    ns: str,
    bootstrap: str,
    group: str,
    logs_of: LogReader,
    record: Record,
) -> None:
    """Six members: distinct ids; a deleted pod back with its id and nobody reassigned;
    eager -> cooperative in two bounces with no partition owned twice; 6 -> 4 with one
    batch LeaveGroup naming exactly the removed ids."""
    started = time.monotonic()
    wait_settled(cluster, ns, bootstrap, group, 6)
    record("create_to_stable_s", round(time.monotonic() - started, 1))
    ids = [f"{group}-{slot}" for slot in range(6)]
    assert sorted(describe(bootstrap, group)["members"]) == ids
    row = cluster.kubectl("-n", ns, "get", "cg", group, "--no-headers").stdout.split()
    assert row[1] == "Stable" and row[4] == "6", row  # kubectl get cg: from the broker

    # A deleted pod comes back with its id; the others keep their partitions.
    owners = [f"{group}-{s}" for s in (0, 1, 3)]
    before = {owner: assignment_events(logs_of(), owner) for owner in owners}
    victim = f"{group}-2"
    victim_uid = pod_uid(cluster, ns, victim)
    cluster.kubectl("-n", ns, "delete", "pod", victim, "--wait=false")
    wait_for(
        "the replacement pod",
        lambda: pod_uid(cluster, ns, victim) not in (None, victim_uid),
        timeout_s=120,
    )
    wait_settled(cluster, ns, bootstrap, group, 6, timeout_s=120)
    time.sleep(5)  # a rebalance would reassign within a heartbeat or two
    after = {owner: assignment_events(logs_of(), owner) for owner in owners}
    assert after == before, "a surviving member was reassigned: the restart rebalanced"
    assert assignment_events(logs_of(), victim) >= 2  # the replacement got its partitions

    # eager -> cooperative: two bounces, one pod at a time, gated on the broker's describe.
    started = time.monotonic()
    patch_spec(cluster, ns, group, {"rebalance": {"protocol": "cooperative"}})

    def completed() -> bool:
        status = group_status(cluster, ns, group)
        return (status.get("rollout") or {}).get("phase") == "Completed" and (
            status.get("selectedProtocol") == "cooperative-sticky"
        )

    wait_for(
        "the two-bounce to complete",
        completed,
        timeout_s=900,
        interval_s=2.0,
        describe=lambda: json.dumps(group_status(cluster, ns, group).get("rollout"))[:800],
    )
    record("two_bounce_s", round(time.monotonic() - started, 1))
    logs = logs_of()
    end_ms = max(int(r["ts_ms"]) for log in logs for r in log.rows) + 1
    assert list(ownership_overlaps(all_holdings(logs), end_ms)) == []
    record("member_processes", len(logs))
    record("partitions_owned_twice", 0)

    # 6 -> 4: one batch LeaveGroup naming exactly the two removed ids.
    started = time.monotonic()
    patch_spec(cluster, ns, group, {"replicas": 4})
    wait_settled(cluster, ns, bootstrap, group, 4, timeout_s=180)
    record("scale_down_to_stable_s", round(time.monotonic() - started, 1))
    left = operator_events(cluster, ns, "MembersLeft")
    assert len(left) == 1, left
    assert f"{group}-4" in left[0]["message"] and f"{group}-5" in left[0]["message"]
    assert sorted(describe(bootstrap, group)["members"]) == ids[:4]
