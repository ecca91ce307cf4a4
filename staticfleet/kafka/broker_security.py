"""The secured test broker's security settings, as pure functions and values.

What `KafkaBroker(workdir, secured=True)` (staticfleet/kafka/broker.py) writes into
server.properties for its SASL_SSL and SSL listeners and the StandardAuthorizer, its users,
the ACLs it grants (`Acl`), and `connect_error`, which says why a client is refused
(docs/kafka.md, "The secured test broker").
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from confluent_kafka.admin._acl import AclBinding, AclBindingFilter

Listener = Literal["PLAINTEXT", "SASL_SSL", "SSL"]
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
SASL_MECHANISMS = (*SCRAM_MECHANISMS, "PLAIN", "OAUTHBEARER")
SCRAM_ITERATIONS = 4096
# The users of a secured broker: SCRAM (both mechanisms) from format time, and PLAIN's fixed
# users (PLAIN's are in the listener's JAAS configuration and cannot change while it runs).
# `admin` is a super user; the others have no ACL until a test grants one.
ADMIN_USER = "admin"
DEFAULT_USERS: Mapping[str, str] = {
    ADMIN_USER: "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
}
# The OIDC client the broker's provider knows from the start: its tokens' `sub`, so the
# principal on OAUTHBEARER is `User:oauth-client`.
OIDC_CLIENT_ID = "oauth-client"
OIDC_CLIENT_SECRET = "oauth-client-secret"
# Kafka's DN of a client certificate is `CN=name` (RFC 2253); the principal is the CN.
PRINCIPAL_MAPPING_RULES = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"
_CLUSTER_RESOURCE = "kafka-cluster"


_FORMAT_SAFE = re.compile(r"^[A-Za-z0-9._@+-]+$")


def check_credentials(users: Mapping[str, str]) -> Mapping[str, str]:
    """Users whose names and passwords StorageTool's `--add-scram` parses as written."""
    for name, password in users.items():
        for what, value in (("name", name), ("password", password)):
            if not _FORMAT_SAFE.match(value):
                raise ValueError(
                    f"user {name!r}: its {what} may hold only letters, digits and ._@+- "
                    "(StorageTool --add-scram parses the rest as syntax)"
                )
    return users


def jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes (JAAS escapes `"` and `\\` with a backslash)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _host(listener: str, client_host: str) -> str:
    return client_host if listener in ("SASL_SSL", "SSL") else "127.0.0.1"


def secured_properties(
    *,
    ports: Mapping[str, int],
    keystore: Path,
    truststore: Path,
    oidc_issuer: str,
    oidc_audience: str,
    plain_users: Mapping[str, str],
    super_users: Iterable[str],
    client_host: str = "127.0.0.1",
) -> dict[str, str]:
    """The server.properties a secured broker adds to the PLAINTEXT one (docs/kafka.md).

    Names as Kafka 4.4 spells them (SaslConfigs, BrokerSecurityConfigs); per-listener and
    per-mechanism settings carry the `listener.name.<listener>.<mechanism>.` prefix.
    """
    sasl = "listener.name.sasl_ssl."
    plain_jaas = " ".join(f"user_{name}={jaas_quote(pw)}" for name, pw in plain_users.items())
    return {
        # The secured listeners on `client_host`, where the clients are; PLAINTEXT (the tests'
        # own view) and the controller stay on loopback.
        "listeners": ",".join(
            f"{name}://{_host(name, client_host)}:{ports[name]}"
            for name in ("PLAINTEXT", "CONTROLLER", "SASL_SSL", "SSL")
        ),
        "advertised.listeners": ",".join(
            f"{name}://{_host(name, client_host)}:{ports[name]}"
            for name in ("PLAINTEXT", "SASL_SSL", "SSL")
        ),
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL"
        ),
        # PEM files, no Java key store: the key is PKCS#8 and unencrypted, so no password.
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(truststore),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": PRINCIPAL_MAPPING_RULES,
        f"{sasl}sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        f"{sasl}scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        f"{sasl}scram-sha-256.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        f"{sasl}plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_jaas};"
        ),
        f"{sasl}oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        ),
        f"{sasl}oauthbearer.sasl.server.callback.handler.class": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
        ),
        "sasl.oauthbearer.jwks.endpoint.url": f"{oidc_issuer}/jwks",
        "sasl.oauthbearer.expected.issuer": oidc_issuer,
        "sasl.oauthbearer.expected.audience": oidc_audience,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": ";".join(f"User:{name}" for name in super_users),
    }


def principal_of(user: str) -> str:
    """`User:alice` for `alice`; a principal already typed (`User:alice`) as it is."""
    return user if ":" in user else f"User:{user}"


@dataclass(frozen=True)
class Acl:
    """One ACL: `principal` may (or, with permission DENY, may not) do `operation` on a resource.

    Names as Kafka's kafka-acls tool spells them, case-insensitive: operation READ, WRITE,
    DESCRIBE, ALL, ...; resource_type TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID; pattern_type
    LITERAL or PREFIXED. The CLUSTER resource's name is `kafka-cluster`.
    """

    principal: str
    operation: str
    resource_type: str
    resource_name: str = _CLUSTER_RESOURCE
    pattern_type: str = "LITERAL"
    permission: str = "ALLOW"
    host: str = "*"

    def binding(self) -> AclBinding:
        from confluent_kafka.admin._acl import AclBinding

        return AclBinding(*self._fields())

    def binding_filter(self) -> AclBindingFilter:
        """The filter that matches exactly this ACL (what delete_acls takes)."""
        from confluent_kafka.admin._acl import AclBindingFilter

        return AclBindingFilter(*self._fields())

    def _fields(self) -> tuple[Any, ...]:
        # confluent-kafka's public names are re-exports its stubs do not declare.
        from confluent_kafka.admin._acl import AclOperation, AclPermissionType
        from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

        resource_type = self.resource_type.upper()
        try:
            return (
                # confluent-kafka names the cluster resource BROKER.
                ResourceType["BROKER" if resource_type == "CLUSTER" else resource_type],
                self.resource_name,
                ResourcePatternType[self.pattern_type.upper()],
                principal_of(self.principal),
                self.host,
                AclOperation[self.operation.upper()],
                AclPermissionType[self.permission.upper()],
            )
        except KeyError as missing:
            raise ValueError(f"ACL {self}: unknown name {missing}") from None


def connect_error(config: Mapping[str, str], timeout: float = 5.0) -> str | None:
    """None when a client with `config` gets metadata; else librdkafka's error, at once when
    the broker refuses it (authentication, TLS), after `timeout` otherwise."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    refused: list[str] = []
    done = threading.Event()

    def on_error(error: KafkaError) -> None:
        # _AUTHENTICATION: SASL refused; _SSL: the client refused the broker's certificate;
        # _TRANSPORT: on a listening loopback broker, the broker closed the connection (it
        # refused the client's certificate: "alert bad certificate").
        if error.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError._TRANSPORT):
            refused.append(error.str())
            done.set()

    client_config: dict[str, Any] = {**config, "log_level": 0, "error_cb": on_error}
    admin = AdminClient(client_config)
    deadline = time.monotonic() + timeout
    while not done.is_set() and time.monotonic() < deadline:
        admin.poll(0)  # serves error_cb
        with contextlib.suppress(KafkaException):
            if admin.list_topics(timeout=0.2).brokers:
                return None
    return refused[0] if refused else f"no metadata after {timeout}s"
