"""How members of a Kafka-coordinated group are configured, per client family. Pure.

Stock clients read their settings from env under names their image chooses
(`spec.coordinator.env`); the assignment strategy of the current rollout phase is spelled
the way the family's `partition.assignment.strategy` takes it. Our own member gets its
usual `STATICFLEET_*` env with a `kafka://` coordinator URL (no token: the cluster
authenticates it, through the client Secret's settings).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from pydantic import SecretStr

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.kafka_settings import KafkaClientSettings, SaslMechanism, jaas_quote
from staticfleet_operator.crd import ClientFamily, ConsumerGroupSpec
from staticfleet_operator.owned import group_secret

JAVA_PACKAGE: Final = "org.apache.kafka.clients.consumer."
# Protocol (assignor) names as members put them in JoinGroup -> Java's class names.
JAVA_ASSIGNORS: Final = {
    "range": JAVA_PACKAGE + "RangeAssignor",
    "roundrobin": JAVA_PACKAGE + "RoundRobinAssignor",
    "sticky": JAVA_PACKAGE + "StickyAssignor",
    "cooperative-sticky": JAVA_PACKAGE + "CooperativeStickyAssignor",
}


# KIP-848: what a stock client's pod reads to run on Kafka's consumer group protocol (the
# names staticfleet.kafka.java_pod and rdkafka_pod read; set only on pods created with
# `consumer`, so a classic pod's env, and every existing fleet's, is as it was).
GROUP_PROTOCOL_ENV: Final = "KAFKA_GROUP_PROTOCOL"
REMOTE_ASSIGNOR_ENV: Final = "KAFKA_GROUP_REMOTE_ASSIGNOR"


def remote_assignor(spec: ConsumerGroupSpec) -> str:
    """`group.remote.assignor` for a fleet migrated off the classic protocol: the spec's
    `rebalance.remoteAssignor`, else the broker's `range` for a range fleet (the same
    partitions per member) and its `uniform` (sticky, balanced) for the other assignors.
    A pod is created knowing only the spec, not which classic assignor the fleet ran last,
    so the eager assignor decides; a cooperative fleet sets remoteAssignor."""
    if spec.rebalance.remote_assignor is not None:
        return spec.rebalance.remote_assignor.value
    return "range" if spec.rebalance.eager_assignor.value == "range" else "uniform"


class UnsupportedProtocol(ValueError):
    """The family cannot be configured for this protocol (librdkafka and kafka-python
    refuse a list mixing eager and cooperative assignors)."""


def assignor_names(spec: ConsumerGroupSpec, protocol: RebalanceProtocolSetting) -> list[str]:
    """The assignors a member offers in `protocol`, most preferred first (as the rollout's
    `Assignors.offered_by`: compatible offers the cooperative one first; a consumer-protocol
    member offers none: the broker assigns)."""
    eager = spec.rebalance.eager_assignor.value
    cooperative = spec.rebalance.cooperative_assignor.value
    if protocol is RebalanceProtocolSetting.CONSUMER:
        return []
    if protocol is RebalanceProtocolSetting.EAGER:
        return [eager]
    if protocol is RebalanceProtocolSetting.COOPERATIVE:
        return [cooperative]
    return [cooperative, eager]


def assignment_strategy(spec: ConsumerGroupSpec, protocol: RebalanceProtocolSetting) -> str:
    """`partition.assignment.strategy` for the spec's client family in `protocol`."""
    family = spec.coordinator.client_family
    names = assignor_names(spec, protocol)
    if len(names) > 1 and not family.mixes_assignors:
        raise UnsupportedProtocol(
            f"{family.value} clients cannot offer {', '.join(names)} at once "
            "(they refuse eager and cooperative assignors together)"
        )
    if family is ClientFamily.JAVA:
        return ",".join(JAVA_ASSIGNORS[name] for name in names)
    return ",".join(names)


# How long a pod of a consumer-protocol group with standbys waits for its slot's instance id
# while the slot's other pod holds it: a day (then it exits 3 and its container restarts).
STANDBY_WAIT_MS: Final = 86_400_000


def kafka_member_env(
    spec: ConsumerGroupSpec, instance_id: str, protocol: RebalanceProtocolSetting
) -> list[dict[str, Any]]:
    """The env entries (core/v1 EnvVar) of a member of a Kafka-coordinated group."""
    coordinator = spec.coordinator
    bootstrap = coordinator.bootstrap_servers or ""
    topics = ",".join(topic.name for topic in spec.topics)
    if coordinator.client_family is ClientFamily.STATICFLEET:
        values = {
            env.COORDINATOR_URL: f"kafka://{bootstrap}",
            env.GROUP_ID: spec.group_id,
            env.INSTANCE_ID: instance_id,
            env.TOPICS: topics,
            env.REBALANCE_PROTOCOL: protocol.value,
            env.EAGER_ASSIGNOR: spec.rebalance.eager_assignor.value,
            env.COOPERATIVE_ASSIGNOR: spec.rebalance.cooperative_assignor.value,
            env.SESSION_TIMEOUT_MS: str(spec.membership.session_timeout_ms),
            env.REBALANCE_TIMEOUT_MS: str(spec.membership.rebalance_timeout_ms),
        }
        if protocol is RebalanceProtocolSetting.CONSUMER:
            values[env.REMOTE_ASSIGNOR] = remote_assignor(spec)  # refused on classic
            if spec.standbys > 0:
                # Two pods per slot share its instance id (docs/kafka.md, "Hot standby"):
                # whichever the broker refuses waits for it instead of exiting.
                values[env.STANDBY_WAIT_MS] = str(STANDBY_WAIT_MS)
    elif protocol is RebalanceProtocolSetting.CONSUMER:
        # No partition.assignment.strategy (Java and librdkafka refuse it on this protocol).
        names = coordinator.env
        values = {
            names.bootstrap_servers: bootstrap,
            names.group_id: spec.group_id,
            names.instance_id: instance_id,
            names.topics: topics,
            GROUP_PROTOCOL_ENV: "consumer",
            REMOTE_ASSIGNOR_ENV: remote_assignor(spec),
        }
    else:
        names = coordinator.env
        values = {
            names.bootstrap_servers: bootstrap,
            names.group_id: spec.group_id,
            names.instance_id: instance_id,
            names.topics: topics,
            names.assignment_strategy: assignment_strategy(spec, protocol),
        }
    entries: list[dict[str, Any]] = [
        {"name": name, "value": value} for name, value in values.items()
    ]
    if env.STANDBY_WAIT_MS in values:
        # The client id names the pod: ConsumerGroupDescribe then tells which pod holds the id.
        pod_name = {"fieldRef": {"fieldPath": "metadata.name"}}
        entries.append({"name": env.CLIENT_ID, "valueFrom": pod_name})
    return entries + client_config_env_entry(spec)


def client_env_from(spec: ConsumerGroupSpec) -> list[dict[str, Any]]:
    """`envFrom` entries: the client Secret's settings (TLS/SASL), when one is named."""
    ref = spec.coordinator.client_secret_ref
    return [{"secretRef": {"name": ref.name}}] if ref is not None else []


# --------------------------------------------------------------------------- secured clusters
# The operator writes one Secret per group (`client_config_secret_name`) holding one file,
# the client configuration in the family's own dialect with every PEM inline (no path to a
# sibling file: the file is self-contained, replaced whole on rotation, and means the same
# wherever it is mounted), mounts it read-only at CLIENT_CONFIG_DIR in every member container
# and points the client at it with one env variable: STATICFLEET_KAFKA_CONFIG for our member,
# env.clientConfig (KAFKA_CLIENT_CONFIG) for stock clients. No secret is put in env.
# docs/operator.md, "Secured clusters".

CLIENT_CONFIG_DIR: Final = "/etc/staticfleet/kafka"
CLIENT_CONFIG_VOLUME: Final = "staticfleet-kafka-client"
CLIENT_CONFIG_SUFFIX: Final = "-kafka-client"
STATICFLEET_KAFKA_CONFIG: Final = "STATICFLEET_KAFKA_CONFIG"  # `member run --kafka-config`
PROPERTIES_FILE: Final = "client.properties"
JSON_FILE: Final = "client.json"  # kafka-python: its KafkaConsumer's keyword arguments
JAVA_SCRAM_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
JAVA_PLAIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAVA_OAUTH_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
JAVA_OAUTH_HANDLER: Final = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
)


def client_config_secret_name(group_name: str) -> str:
    return f"{group_name}{CLIENT_CONFIG_SUFFIX}"


def client_config_file(family: ClientFamily) -> str:
    return JSON_FILE if family is ClientFamily.KAFKA_PYTHON else PROPERTIES_FILE


def client_config_env(spec: ConsumerGroupSpec) -> str:
    """The env variable a member reads its configuration file's path from."""
    if spec.coordinator.client_family is ClientFamily.STATICFLEET:
        return STATICFLEET_KAFKA_CONFIG
    return spec.coordinator.env.client_config


def _path(name: str, directory: str = CLIENT_CONFIG_DIR) -> str:
    return f"{directory}/{name}"


def librdkafka_properties(settings: KafkaClientSettings) -> dict[str, str]:
    """librdkafka's names (and our member's: the same), PEMs inline: `ssl.ca.pem`,
    `ssl.certificate.pem`, `ssl.key.pem`."""
    return settings.to_properties()


def java_properties(settings: KafkaClientSettings) -> dict[str, str]:
    """Java's client properties: sasl.jaas.config, PEM trust and key stores inline
    (`ssl.truststore.certificates`; `ssl.keystore.certificate.chain` and `ssl.keystore.key`,
    the key as PKCS#8, KIP-651)."""
    props = {"security.protocol": settings.security_protocol.value}
    mechanism = settings.sasl_mechanism
    if mechanism is not None:
        props["sasl.mechanism"] = mechanism.value
    if mechanism is SaslMechanism.OAUTHBEARER:
        options = [
            f"clientId={jaas_quote(settings.oauth_client_id or '')}",
            f"clientSecret={jaas_quote(_secret(settings.oauth_client_secret))}",
        ]
        if settings.oauth_scope:
            options.append(f"scope={jaas_quote(settings.oauth_scope)}")
        props["sasl.jaas.config"] = f"{JAVA_OAUTH_MODULE} required {' '.join(options)};"
        props["sasl.login.callback.handler.class"] = JAVA_OAUTH_HANDLER
        props["sasl.oauthbearer.token.endpoint.url"] = settings.oauth_token_endpoint_url or ""
    elif mechanism is not None:
        module = JAVA_PLAIN_MODULE if mechanism is SaslMechanism.PLAIN else JAVA_SCRAM_MODULE
        props["sasl.jaas.config"] = (
            f"{module} required username={jaas_quote(settings.sasl_username or '')} "
            f"password={jaas_quote(_secret(settings.sasl_password))};"
        )
    if settings.security_protocol.uses_tls:
        if settings.ssl_ca_pem:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.certificates"] = settings.ssl_ca_pem
        if settings.ssl_certificate_pem and settings.ssl_key_pem is not None:
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.certificate.chain"] = settings.ssl_certificate_pem
            props["ssl.keystore.key"] = pkcs8(settings.ssl_key_pem.get_secret_value())
        # Java spells "no hostname check" as an empty algorithm.
        props["ssl.endpoint.identification.algorithm"] = (
            "https" if settings.ssl_endpoint_identification else ""
        )
    return props


def kafka_python_config(settings: KafkaClientSettings) -> dict[str, Any]:
    """kafka-python's KafkaConsumer keyword arguments, plus what JSON cannot hold as such:
    OAUTHBEARER's settings under `sasl_oauth_token_provider` (the pod program builds
    kafka-python's AbstractTokenProvider from them), and the PEMs inline under
    `ssl_ca_pem`, `ssl_certificate_pem`, `ssl_key_pem` (kafka-python takes only file
    names: the program builds its `ssl_context` from them, `cadata=` for the CA and a
    private temporary file for the certificate chain, which `load_cert_chain` reads)."""
    config: dict[str, Any] = {"security_protocol": settings.security_protocol.value}
    mechanism = settings.sasl_mechanism
    if mechanism is not None:
        config["sasl_mechanism"] = mechanism.value
    if mechanism is SaslMechanism.OAUTHBEARER:
        config["sasl_oauth_token_provider"] = {
            "token_endpoint_url": settings.oauth_token_endpoint_url,
            "client_id": settings.oauth_client_id,
            "client_secret": _secret(settings.oauth_client_secret),
            "scope": settings.oauth_scope,
        }
    elif mechanism is not None:
        config["sasl_plain_username"] = settings.sasl_username
        config["sasl_plain_password"] = _secret(settings.sasl_password)
    if settings.security_protocol.uses_tls:
        config["ssl_check_hostname"] = settings.ssl_endpoint_identification
        if settings.ssl_ca_pem:
            config["ssl_ca_pem"] = settings.ssl_ca_pem
        if settings.ssl_certificate_pem and settings.ssl_key_pem is not None:
            config["ssl_certificate_pem"] = settings.ssl_certificate_pem
            config["ssl_key_pem"] = settings.ssl_key_pem.get_secret_value()
    return config


def client_config_files(family: ClientFamily, settings: KafkaClientSettings) -> dict[str, str]:
    """The files of a group's client configuration Secret (name -> text) for `family`: one,
    the configuration in the family's dialect, self-contained."""
    if family is ClientFamily.KAFKA_PYTHON:
        return {JSON_FILE: json.dumps(kafka_python_config(settings), indent=2, sort_keys=True)}
    if family is ClientFamily.JAVA:
        return {PROPERTIES_FILE: properties_text(java_properties(settings))}
    return {PROPERTIES_FILE: properties_text(librdkafka_properties(settings))}


def client_config_secret(
    namespace: str, group_name: str, owner_uid: str, files: Mapping[str, str]
) -> dict[str, Any]:
    """The manifest of the group's client configuration Secret (owned by the group)."""
    return group_secret(
        namespace, client_config_secret_name(group_name), group_name, owner_uid, files
    )


def client_config_mount(
    spec: ConsumerGroupSpec, group_name: str
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(pod volume, container volumeMount) of the client configuration; None when the group
    has no spec.coordinator.kafka. A directory mount, not subPath: the kubelet refreshes
    it when the Secret changes."""
    if not spec.coordinator.is_kafka or spec.coordinator.kafka is None:
        return None
    volume = {
        "name": CLIENT_CONFIG_VOLUME,
        "secret": {"secretName": client_config_secret_name(group_name)},
    }
    mount = {"name": CLIENT_CONFIG_VOLUME, "mountPath": CLIENT_CONFIG_DIR, "readOnly": True}
    return volume, mount


def client_config_env_entry(spec: ConsumerGroupSpec) -> list[dict[str, Any]]:
    """The one env entry pointing the member at its configuration file, or none."""
    if not spec.coordinator.is_kafka or spec.coordinator.kafka is None:
        return []
    family = spec.coordinator.client_family
    return [{"name": client_config_env(spec), "value": _path(client_config_file(family))}]


# Hand-written: jproperties (which reads them) writes a timestamp comment and escapes
# differently on every version; this writes what Java's Properties.load reads back.
def properties_text(props: Mapping[str, str]) -> str:
    """A Java .properties file of `props` (keys are plain property names)."""
    lines = [f"{key}={_escape_property(value)}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def _escape_property(value: str) -> str:
    escaped = (
        value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    )
    return "\\" + escaped if escaped.startswith(" ") else escaped


def _secret(value: SecretStr | None) -> str:
    return value.get_secret_value() if value is not None else ""


def pkcs8(key_pem: str) -> str:
    """The key as unencrypted PKCS#8 PEM (`BEGIN PRIVATE KEY`), the only unencrypted form
    Java's PEM key store reads; PKCS#1 / SEC1 keys are converted with `cryptography`."""
    if "-----BEGIN PRIVATE KEY-----" in key_pem:
        return key_pem if key_pem.endswith("\n") else key_pem + "\n"
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
