"""A single-node Apache Kafka broker (KRaft, broker and controller in one JVM) on loopback.

The jars come from java/broker/pom.xml (`make kafka`, scripts/install-kafka.sh) into
build/kafka/libs; this module formats the storage once (`kafka.tools.StorageTool format
--standalone`), then runs `kafka.Kafka server.properties` as a child process. The settings
favour fast tests: no initial rebalance delay, a small minimum session timeout, one replica
and few partitions for the internal topics, and a short broker session so a broker killed
with SIGKILL is back within seconds on the same log directory.

`KafkaBroker(workdir, secured=True)` adds a SASL_SSL listener (SCRAM-SHA-512, SCRAM-SHA-256,
PLAIN and OAUTHBEARER against a test OIDC provider, staticfleet/kafka/oidc.py) and an SSL
listener that requires client certificates (staticfleet/kafka/pki.py), and the
StandardAuthorizer; PLAINTEXT and the controller stay as they are and their principal,
ANONYMOUS, is a super user (docs/kafka.md, "The secured test broker").

`python -m staticfleet.kafka.broker up [--secured]` starts one for manual use and prints its
bootstrap addresses; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from staticfleet.kafka.broker_security import (
    ADMIN_USER,
    DEFAULT_USERS,
    OIDC_CLIENT_ID,
    OIDC_CLIENT_SECRET,
    SASL_MECHANISMS,
    SCRAM_ITERATIONS,
    SCRAM_MECHANISMS,
    Acl,
    Listener,
    check_credentials,
    connect_error,
    principal_of,
    secured_properties,
)
from staticfleet.kafka.class_sharing import ArchiveClaim, claim
from staticfleet.processes import terminate

# The module's names; the security ones come from broker_security and are used from here.
__all__ = [
    "ADMIN_USER",
    "DEFAULT_USERS",
    "FAST_TEST_SETTINGS",
    "LIBS_DIR",
    "OIDC_CLIENT_ID",
    "PORT_RANGE",
    "REPO_ROOT",
    "SASL_MECHANISMS",
    "SCRAM_MECHANISMS",
    "Acl",
    "BrokerError",
    "KafkaBroker",
    "Listener",
    "connect_error",
    "ensure_installed",
    "format_arguments",
    "free_port",
    "new_cluster_id",
    "previous_listener_ports",
    "previous_ports",
    "running_broker",
]

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._acl import AclBinding

    from staticfleet.kafka.oidc import OidcProvider
    from staticfleet.kafka.pki import BrokerPki

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install-kafka.sh"
# STATICFLEET_KAFKA_LIBS points elsewhere (an image, a shared cache); the default is `make kafka`'s.
LIBS_DIR = Path(os.environ.get("STATICFLEET_KAFKA_LIBS", REPO_ROOT / "build" / "kafka" / "libs"))

# Ports below the ephemeral range (Linux default 32768-60999): a listener inside it can
# collide with an outgoing connection's local port, the client's own included.
PORT_RANGE = (20000, 30000)
HEAP = "-Xmx512m"

FAST_TEST_SETTINGS: Mapping[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    # The consumer protocol's sessions keep Kafka's default (45 s); a group may set a shorter
    # one of its own (`consumer.session.timeout.ms`), down to this.
    "group.consumer.min.session.timeout.ms": "6000",
    "offsets.topic.replication.factor": "1",
    # One partition: the group coordinator is ready after one partition loads.
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "num.partitions": "1",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "auto.create.topics.enable": "false",
}


class BrokerError(RuntimeError):
    """The broker could not be installed, started or reached; the message says where to look."""


def ensure_installed(libs_dir: Path = LIBS_DIR) -> Path:
    """The broker's jars, resolved by scripts/install-kafka.sh when absent (once)."""
    if libs_dir == REPO_ROOT / "build" / "kafka" / "libs":
        # The script is idempotent (a stamp of the pom) and prints one progress line.
        subprocess.run([str(INSTALL_SCRIPT)], check=True)
    if not any(libs_dir.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"no Kafka jars in {libs_dir}; run `make kafka`")
    return libs_dir


def free_port(
    low: int = PORT_RANGE[0], high: int = PORT_RANGE[1], taken: Collection[int] = ()
) -> int:
    """A port nothing holds now on any address, below the ephemeral range, and not one of
    `taken` (ports picked for another listener that is not listening yet: a broker's
    listeners picked independently once drew the same port twice, and Kafka refused to
    start). Probed on the wildcard address: a listener that binds every address (the
    operator's) is refused a port another process holds on one loopback address only."""
    for _ in range(200):
        port = random.randrange(low, high)
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise BrokerError(f"no free port in {low}-{high}")


def previous_listener_ports(workdir: Path) -> dict[str, int]:
    """Each port of the server.properties a previous start wrote, by listener name.

    The OIDC provider's port is under "OIDC" (from the broker's JWKS endpoint URL).
    """
    path = workdir / "server.properties"
    if not path.exists():
        return {}
    ports: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "listeners":
            for listener in value.split(","):
                name, _, address = listener.partition("://")
                ports[name] = int(address.rpartition(":")[2])
        elif key == "sasl.oauthbearer.jwks.endpoint.url":
            ports["OIDC"] = int(value.split("://", 1)[1].split("/", 1)[0].rpartition(":")[2])
    return ports


def previous_ports(workdir: Path) -> tuple[int | None, int | None]:
    """(client port, controller port) of the server.properties a previous start wrote."""
    ports = previous_listener_ports(workdir)
    return ports.get("PLAINTEXT"), ports.get("CONTROLLER")


def _if_free(port: int | None) -> int | None:
    if port is None:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As the servers bind (the JVM and aiohttp set SO_REUSEADDR): a port whose last
        # connections linger in TIME_WAIT is free for them.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return None
    return port


def new_cluster_id() -> str:
    """A Kafka Uuid in its usual text form: 16 random bytes, URL-safe base64, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def format_arguments(
    cluster_id: str, properties: Path, scram_users: Mapping[str, str] | None = None
) -> list[str]:
    """StorageTool's arguments to format a single-node KRaft log directory.

    Each of `scram_users` (name: password) gets SCRAM-SHA-512 and SCRAM-SHA-256 credentials
    in the metadata log, so it can log in as soon as the broker listens.
    """
    # `--cluster-id=ID` in one token: a random id may begin with "-", which argparse4j would
    # take for an option.
    arguments = ["format", "--standalone", f"--cluster-id={cluster_id}", f"--config={properties}"]
    for name, password in (scram_users or {}).items():
        for mechanism in SCRAM_MECHANISMS:
            arguments.append(f"--add-scram={mechanism}=[name={name},password={password}]")
    return arguments


class KafkaBroker:
    def __init__(
        self,
        workdir: Path | str,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        settings: Mapping[str, str] | None = None,
        libs_dir: Path = LIBS_DIR,
        secured: bool = False,
        users: Mapping[str, str] = DEFAULT_USERS,
        jvm_options: Sequence[str] = (),
        launcher: Sequence[str] = (),
        client_host: str = "127.0.0.1",
        class_sharing: bool = True,
    ) -> None:
        self.workdir = Path(workdir)
        # Where a secured broker's SASL_SSL and SSL listeners are bound and advertised, and
        # what its certificate names besides loopback: a bridge's address for clients in pods
        # (e2e/node/conftest.py). PLAINTEXT and the controller stay on loopback.
        self.client_host = client_host
        # After the defaults (a later -Xmx wins), and what the java command runs under
        # (e.g. `taskset -c 0`): the benchmarks hold the broker to a heap and a core.
        self.jvm_options = tuple(jvm_options)
        self.launcher = tuple(launcher)
        # The JVM's classes from an archive the first broker wrote (class_sharing.py).
        self.class_sharing = class_sharing
        # A log directory started before keeps its ports (its bootstrap addresses stay valid)
        # while they are free; otherwise free ones are picked.
        previous = previous_listener_ports(self.workdir)
        picked: set[int] = set()

        def pick(given: int | None, listener: str) -> int:
            """The given port, else the previous start's while free, else a free one; never
            one already picked for another listener."""
            reused = previous.get(listener)
            if given is None and reused is not None and reused not in picked:
                given = _if_free(reused)
            chosen = given or free_port(taken=picked)
            picked.add(chosen)
            return chosen

        self._pick = pick
        # A plaintext listener off loopback (add_listener): name -> (host, port, advertised).
        self.extra_listeners: dict[str, tuple[str, int, str]] = {}
        self.port = pick(port, "PLAINTEXT")
        self.controller_port = pick(controller_port, "CONTROLLER")
        self.settings = {**FAST_TEST_SETTINGS, **(settings or {})}
        self.libs_dir = libs_dir
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "broker.log"
        self._process: subprocess.Popen[bytes] | None = None
        self.secured = secured
        self._pki: BrokerPki | None = None
        self._oidc: OidcProvider | None = None
        self._oidc_process: subprocess.Popen[bytes] | None = None
        self._archive_claim = ArchiveClaim([])
        # Known passwords, for client_properties: SCRAM's by (user, mechanism), PLAIN's fixed.
        self.plain_users: Mapping[str, str] = dict(check_credentials(users)) if secured else {}
        self._scram_passwords: dict[tuple[str, str], str] = {
            (name, mechanism): password
            for name, password in self.plain_users.items()
            for mechanism in SCRAM_MECHANISMS
        }
        if secured:
            if ADMIN_USER not in users:
                raise ValueError(f"users: the super user {ADMIN_USER!r} must be one of them")
            self.sasl_ssl_port = pick(None, "SASL_SSL")
            self.ssl_port = pick(None, "SSL")
            self.oidc_port = pick(None, "OIDC")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add_listener(self, name: str, host: str, advertise: str | None = None) -> int:
        """Before start: a PLAINTEXT listener `name` on `host` (a port kept across restarts,
        as the others), advertised as `advertise` ("host:port", e.g. a relay in front of it)
        or as itself. Returns its port. The soak's members reach the broker so, through its
        relay on the soak's bridge (docs/soak.md, "The Kafka variant")."""
        if self.secured:
            raise BrokerError("add_listener: a secured broker's listeners are fixed")
        if name in ("PLAINTEXT", "CONTROLLER"):
            raise ValueError(f"listener name {name!r} is taken")
        port = self._pick(None, name)
        self.extra_listeners[name] = (host, port, advertise or f"{host}:{port}")
        return port

    @property
    def sasl_ssl_bootstrap(self) -> str:
        self._require_secured()
        return f"{self.client_host}:{self.sasl_ssl_port}"

    @property
    def ssl_bootstrap(self) -> str:
        self._require_secured()
        return f"{self.client_host}:{self.ssl_port}"

    def listener_bootstrap(self, listener: Listener) -> str:
        if listener == "PLAINTEXT":
            return self.bootstrap
        if listener == "SASL_SSL":
            return self.sasl_ssl_bootstrap
        if listener == "SSL":
            return self.ssl_bootstrap
        raise ValueError(f"listener {listener!r}: one of PLAINTEXT, SASL_SSL, SSL")

    @property
    def pki(self) -> BrokerPki:
        """The CA and certificates (made on first use, kept in workdir/pki across restarts)."""
        self._require_secured()
        if self._pki is None:
            from staticfleet.kafka.pki import BrokerPki

            ips = tuple(dict.fromkeys((BrokerPki.SERVER_IP, self.client_host)))
            self._pki = BrokerPki(self.workdir / "pki", server_ips=ips)
        return self._pki

    @property
    def oidc(self) -> OidcProvider:
        """The OIDC provider the broker trusts for OAUTHBEARER (token endpoint, clients)."""
        self._require_secured()
        if self._oidc is None:
            from staticfleet.kafka.oidc import OidcProvider

            self._oidc = OidcProvider(self.workdir / "oidc", self.oidc_port)
        return self._oidc

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _require_secured(self) -> None:
        if not self.secured:
            raise BrokerError("this broker has only PLAINTEXT; start it with secured=True")

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Format the storage on first start, then launch the broker (returns at once).

        A secured broker's OIDC provider starts first (the JVM fetches its keys at start-up)
        and formats run meanwhile.
        """
        if self.running():
            return
        ensure_installed(self.libs_dir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.secured:
            self._start_oidc()
        properties = self._write_config()
        if self.class_sharing:
            self._archive_claim = claim("kafka-broker", self.classpath)
        if not (self.data_dir / "meta.properties").exists():
            self._java(
                "kafka.tools.StorageTool",
                *format_arguments(new_cluster_id(), properties, self.plain_users),
            )
        if self.secured:
            self._wait_oidc()
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self._java_command("kafka.Kafka", str(properties)),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Block until the broker answers a metadata request; returns the seconds waited."""
        from confluent_kafka.admin import AdminClient

        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise BrokerError(f"broker exited before ready; see {self.log_path}\n{self.tail()}")
            if all(_accepts(host, port) for host, port in self._client_addresses()):
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                with contextlib.suppress(Exception):
                    if admin.list_topics(timeout=2).brokers:
                        return time.monotonic() - started
            time.sleep(0.1)
        raise BrokerError(f"broker not ready after {timeout:.0f}s; see {self.log_path}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (a controlled shutdown), then SIGKILL if it does not exit in time."""
        if self._process is not None:
            # 143: the JVM's exit on SIGTERM after its shutdown hooks (and its archive) ran.
            self._archive_claim.finish(terminate(self._process, timeout) in (0, 143))
        self._process = None
        self._stop_oidc()

    def kill(self) -> None:
        """SIGKILL: a crash, no controlled shutdown."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait()
        self._archive_claim.finish(clean_exit=False)
        self._process = None

    def restart(self, timeout: float = 60.0) -> None:
        """Stop (if running) and start again on the same log directory and ports."""
        self.stop()
        self.start()
        self.wait_ready(timeout)

    def __enter__(self) -> KafkaBroker:
        self.start()
        self.wait_ready()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ helpers

    def create_topic(self, name: str, partitions: int, timeout: float = 30.0) -> None:
        from confluent_kafka.cimpl import NewTopic

        admin = self.admin()
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            operation_timeout=timeout,
        )
        futures[name].result(timeout)
        # Metadata is eventually consistent: wait until every partition has a leader.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            topic = admin.list_topics(name, timeout=timeout).topics.get(name)
            if (
                topic is not None
                and topic.error is None
                and len(topic.partitions) == partitions
                and all(partition.leader >= 0 for partition in topic.partitions.values())
            ):
                return
            time.sleep(0.05)
        raise BrokerError(f"topic {name} has no leader for every partition after {timeout}s")

    def admin(self) -> AdminClient:
        """An AdminClient on PLAINTEXT, whose principal (ANONYMOUS) is a super user."""
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    # ------------------------------------------------------------------ users and ACLs

    def add_user(
        self,
        name: str,
        password: str,
        mechanism: str = "SCRAM-SHA-512",
        *,
        timeout: float = 30.0,
    ) -> None:
        """Creates (or re-keys) a SCRAM user through the admin API; returns once it can log in.

        PLAIN's users are fixed (`users=` at construction): PLAIN checks the passwords in the
        listener's JAAS configuration, which a running broker does not reload.
        """
        from confluent_kafka.admin._scram import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        self._require_secured()
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(
                f"mechanism {mechanism!r}: runtime users are SCRAM ({', '.join(SCRAM_MECHANISMS)});"
                " PLAIN's are fixed when the broker starts"
            )
        upsertion = UserScramCredentialUpsertion(
            name,
            ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], SCRAM_ITERATIONS),
            password.encode(),
        )
        admin = self.admin()  # kept referenced: a destroyed client fails its futures
        futures = admin.alter_user_scram_credentials([upsertion])
        for future in futures.values():
            future.result(timeout)
        self._scram_passwords[(name, mechanism)] = password
        # The credential reaches the broker's cache through the metadata log, a moment later.
        deadline = time.monotonic() + timeout
        while not self.can_connect("SASL_SSL", user=name, mechanism=mechanism):
            if time.monotonic() > deadline:
                raise BrokerError(f"user {name} cannot log in with {mechanism} after {timeout}s")

    def set_password(self, name: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        """A SCRAM user's new password (rotation): the old one is refused once this returns."""
        self.add_user(name, password, mechanism)

    def grant(self, *acls: Acl, timeout: float = 30.0) -> None:
        """Creates the ACLs; returns once the broker's authorizer applies them."""
        self._require_secured()
        admin = self.admin()  # kept referenced: a destroyed client fails its futures
        futures = admin.create_acls([acl.binding() for acl in acls])
        for future in futures.values():
            future.result(timeout)
        self._wait_acls(acls, present=True, timeout=timeout)

    def revoke(self, *acls: Acl, timeout: float = 30.0) -> None:
        """Deletes the ACLs; returns once the broker's authorizer no longer applies them."""
        self._require_secured()
        admin = self.admin()  # kept referenced: a destroyed client fails its futures
        futures = admin.delete_acls([acl.binding_filter() for acl in acls])
        for future in futures.values():
            future.result(timeout)
        self._wait_acls(acls, present=False, timeout=timeout)

    def acls(self, principal: str) -> list[AclBinding]:
        """Every ACL of `principal` (`alice` or `User:alice`)."""
        from confluent_kafka.admin._acl import AclBindingFilter, AclOperation, AclPermissionType
        from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

        anything = cast(str, None)  # None matches any name or host; the stubs say str
        query = AclBindingFilter(
            ResourceType.ANY,
            anything,
            ResourcePatternType.ANY,
            principal_of(principal),
            anything,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        admin = self.admin()  # kept referenced: a destroyed client fails its futures
        result: list[AclBinding] = admin.describe_acls(query).result(30)
        return result

    def _wait_acls(self, acls: Iterable[Acl], *, present: bool, timeout: float) -> None:
        wanted = {acl.binding() for acl in acls}
        principals = {principal_of(acl.principal) for acl in acls}
        deadline = time.monotonic() + timeout
        while True:
            have = {binding for principal in principals for binding in self.acls(principal)}
            if (wanted <= have) if present else not (wanted & have):
                return
            if time.monotonic() > deadline:
                raise BrokerError(f"ACLs {wanted} not {'applied' if present else 'removed'}")
            time.sleep(0.05)

    # ------------------------------------------------------------------ client settings

    def client_properties(
        self,
        listener: Listener,
        user: str | None = None,
        mechanism: str = "SCRAM-SHA-512",
        *,
        password: str | None = None,
    ) -> dict[str, str]:
        """librdkafka-named properties (no `bootstrap.servers`) to reach `listener` as `user`.

        SASL_SSL: `user` (default admin) with `mechanism`; its known password unless one is
        given. OAUTHBEARER: `user` is an OIDC client id (default the broker's client), and
        `password` its secret. SSL: `user` is the client certificate's CN (default admin).
        """
        if listener == "PLAINTEXT":
            return {"security.protocol": "PLAINTEXT"}
        self._require_secured()
        tls = {"ssl.ca.location": str(self.pki.ca_path)}
        if listener == "SSL":
            pair = self.pki.client_certificate(user or ADMIN_USER)
            return {
                "security.protocol": "SSL",
                **tls,
                "ssl.certificate.location": str(pair.cert),
                "ssl.key.location": str(pair.key),
            }
        if listener != "SASL_SSL":
            raise ValueError(f"listener {listener!r}: one of PLAINTEXT, SASL_SSL, SSL")
        if mechanism == "OAUTHBEARER":
            from staticfleet.kafka.oidc import DEFAULT_SCOPE

            client_id = user or OIDC_CLIENT_ID
            if password is None and client_id != OIDC_CLIENT_ID:
                raise ValueError(f"OIDC client {client_id!r}: pass its secret as password=")
            return {
                "security.protocol": "SASL_SSL",
                **tls,
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.token.endpoint.url": self.oidc.token_endpoint_url,
                "sasl.oauthbearer.client.id": client_id,
                "sasl.oauthbearer.client.secret": password or OIDC_CLIENT_SECRET,
                "sasl.oauthbearer.scope": DEFAULT_SCOPE,
            }
        if mechanism not in SASL_MECHANISMS:
            raise ValueError(f"mechanism {mechanism!r}: one of {', '.join(SASL_MECHANISMS)}")
        name = user or ADMIN_USER
        if password is None:
            known = (
                self.plain_users.get(name)
                if mechanism == "PLAIN"
                else self._scram_passwords.get((name, mechanism))
            )
            if known is None:
                raise ValueError(f"user {name!r} has no {mechanism} password this broker knows")
            password = known
        return {
            "security.protocol": "SASL_SSL",
            **tls,
            "sasl.mechanism": mechanism,
            "sasl.username": name,
            "sasl.password": password,
        }

    def client_config(
        self,
        listener: Listener,
        user: str | None = None,
        mechanism: str = "SCRAM-SHA-512",
        *,
        password: str | None = None,
    ) -> dict[str, str]:
        """client_properties plus `bootstrap.servers`: a confluent-kafka client's config."""
        return {
            "bootstrap.servers": self.listener_bootstrap(listener),
            **self.client_properties(listener, user, mechanism, password=password),
        }

    def can_connect(
        self,
        listener: Listener,
        user: str | None = None,
        mechanism: str = "SCRAM-SHA-512",
        *,
        password: str | None = None,
        timeout: float = 5.0,
    ) -> bool:
        """Whether a client with these settings gets metadata (False at once when refused)."""
        return (
            connect_error(self.client_config(listener, user, mechanism, password=password), timeout)
            is None
        )

    def write_client_properties(self, directory: Path | None = None) -> dict[str, Path]:
        """One `.properties` file per listener (as admin), for `--kafka-config`; by listener."""
        directory = directory or self.workdir / "clients"
        directory.mkdir(parents=True, exist_ok=True)
        files: dict[str, Path] = {}
        variants: list[tuple[str, Listener, str | None]] = [("plaintext", "PLAINTEXT", None)]
        if self.secured:
            variants += [
                ("sasl-ssl-scram-sha-512", "SASL_SSL", "SCRAM-SHA-512"),
                ("sasl-ssl-scram-sha-256", "SASL_SSL", "SCRAM-SHA-256"),
                ("sasl-ssl-plain", "SASL_SSL", "PLAIN"),
                ("sasl-ssl-oauthbearer", "SASL_SSL", "OAUTHBEARER"),
                ("ssl", "SSL", None),
            ]
        for stem, listener, mechanism in variants:
            properties = self.client_properties(listener, None, mechanism or "SCRAM-SHA-512")
            path = directory / f"{stem}.properties"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("".join(f"{key}={value}\n" for key, value in properties.items()))
            files[stem] = path
        return files

    def tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ internals

    def _client_addresses(self) -> list[tuple[str, int]]:
        loopback = [("127.0.0.1", self.port)]
        if not self.secured:
            return loopback
        return [
            *loopback,
            (self.client_host, self.sasl_ssl_port),
            (self.client_host, self.ssl_port),
        ]

    def _write_config(self) -> Path:
        extra = self.extra_listeners
        listeners = ",".join(
            [
                f"PLAINTEXT://127.0.0.1:{self.port}",
                f"CONTROLLER://127.0.0.1:{self.controller_port}",
                *(f"{name}://{host}:{port}" for name, (host, port, _) in extra.items()),
            ]
        )
        advertised = ",".join(
            [
                f"PLAINTEXT://127.0.0.1:{self.port}",
                *(f"{name}://{address}" for name, (_, _, address) in extra.items()),
            ]
        )
        protocols = ",".join(f"{name}:PLAINTEXT" for name in ["PLAINTEXT", "CONTROLLER", *extra])
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": protocols,
            "log.dirs": str(self.data_dir),
            **self.settings,
        }
        if self.secured:
            from staticfleet.kafka.oidc import AUDIENCE

            properties.update(
                secured_properties(
                    ports={
                        "PLAINTEXT": self.port,
                        "CONTROLLER": self.controller_port,
                        "SASL_SSL": self.sasl_ssl_port,
                        "SSL": self.ssl_port,
                    },
                    keystore=self._write_keystore(),
                    truststore=self.pki.ca_path,
                    oidc_issuer=self.oidc.issuer,
                    oidc_audience=AUDIENCE,
                    plain_users=self.plain_users,
                    # ANONYMOUS: the PLAINTEXT and CONTROLLER listeners' principal.
                    super_users=("ANONYMOUS", ADMIN_USER),
                    client_host=self.client_host,
                )
            )
            properties.update(self.settings)
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        return path

    def _write_keystore(self) -> Path:
        """Kafka's PEM key store: the server's private key, then its certificate."""
        server = self.pki.server
        path = self.workdir / "pki" / "broker-keystore.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(server.key.read_bytes() + server.cert.read_bytes())
        return path

    def _start_oidc(self) -> None:
        if self._oidc_process is not None and self._oidc_process.poll() is None:
            return
        from staticfleet.kafka.oidc import read_clients

        self.oidc.workdir.mkdir(parents=True, exist_ok=True)
        if OIDC_CLIENT_ID not in read_clients(self.oidc.workdir):
            self.oidc.add_client(OIDC_CLIENT_ID, OIDC_CLIENT_SECRET)
        with (self.workdir / "oidc.log").open("ab") as log:
            self._oidc_process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "staticfleet.kafka.oidc",
                    f"--port={self.oidc_port}",
                    f"--workdir={self.oidc.workdir}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _wait_oidc(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self._oidc_process
            if process is None or process.poll() is not None:
                log = self.workdir / "oidc.log"
                raise BrokerError(f"the OIDC provider exited; see {log}")
            if self.oidc.ready():
                return
            time.sleep(0.05)
        raise BrokerError(f"the OIDC provider not ready after {timeout:.0f}s")

    def _stop_oidc(self) -> None:
        if self._oidc_process is not None:
            terminate(self._oidc_process, 5.0)
        self._oidc_process = None

    @property
    def classpath(self) -> str:
        return f"{self.libs_dir}/*"

    def _java_command(self, main_class: str, *args: str) -> list[str]:
        # Kafka 4 fetches no OAuth URL this system property does not list (none by default).
        allowed_urls = (
            [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.oidc.jwks_endpoint_url}"]
            if self.secured
            else []
        )
        dumping = self._archive_claim.dump is not None
        return [
            *self.launcher,
            "java",
            *allowed_urls,
            HEAP,
            "-Xms64m",
            # One broker, two cores shared with the tests: the serial collector is enough
            # and keeps the resident set small; C1 alone halves the time to ready.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            *self.jvm_options,
            # The storage format maps the broker's archive, but never writes it.
            *(self._archive_claim.options if main_class == "kafka.Kafka" or not dumping else ()),
            "-cp",
            self.classpath,
            main_class,
            *args,
        ]

    def _java(self, main_class: str, *args: str) -> None:
        with self.log_path.open("ab") as log:
            result = subprocess.run(
                self._java_command(main_class, *args),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        if result.returncode != 0:
            raise BrokerError(f"{main_class} failed; see {self.log_path}\n{self.tail()}")


_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.server.name = kafka.server
logger.server.level = INFO
logger.group.name = org.apache.kafka.coordinator.group
logger.group.level = INFO
"""


def _accepts(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


@contextlib.contextmanager
def running_broker(
    workdir: Path,
    *,
    timeout: float = 60.0,
    secured: bool = False,
    settings: Mapping[str, str] | None = None,
    client_host: str = "127.0.0.1",
) -> Iterator[KafkaBroker]:
    """A broker (KafkaBroker's options) started and ready within `timeout`; stopped at the end,
    also when the block raised or the broker never got ready."""
    broker = KafkaBroker(workdir, secured=secured, settings=settings, client_host=client_host)
    broker.start()
    try:
        broker.wait_ready(timeout)
        yield broker
    finally:
        broker.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m staticfleet.kafka.broker")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start a broker and print its bootstrap; Ctrl-C stops")
    up.add_argument(
        "--workdir",
        help="storage and logs [build/kafka/run, or build/kafka/run-secured with --secured]",
    )
    up.add_argument("--port", type=int, help="client port [a free one in 20000-30000]")
    up.add_argument("--topic", action="append", default=[], help="NAME:PARTITIONS to create")
    up.add_argument(
        "--secured",
        action="store_true",
        help="add the SASL_SSL and SSL listeners, the authorizer and the OIDC provider",
    )
    args = parser.parse_args(argv)

    # Ctrl-C and SIGTERM both stop the broker and the OIDC provider (their own sessions, so
    # nothing else would); SIGINT is restored where a non-interactive shell ignored it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    # Apart: a log directory formatted without the SCRAM users cannot serve a secured broker.
    workdir = args.workdir or ("build/kafka/run-secured" if args.secured else "build/kafka/run")
    broker = KafkaBroker(workdir, port=args.port, secured=args.secured)
    broker.start()
    try:
        seconds = broker.wait_ready()
        for spec in args.topic:
            name, _, partitions = spec.partition(":")
            broker.create_topic(name, int(partitions or 1))
        print(f"kafka ready in {seconds:.1f}s: bootstrap {broker.bootstrap}", flush=True)
        if broker.secured:
            files = broker.write_client_properties()
            print(f"  PLAINTEXT {broker.bootstrap} (super user ANONYMOUS)", flush=True)
            print(f"  SASL_SSL  {broker.sasl_ssl_bootstrap}", flush=True)
            print(f"  SSL       {broker.ssl_bootstrap} (client certificate required)", flush=True)
            print(f"  CA {broker.pki.ca_path}; OIDC {broker.oidc.token_endpoint_url}", flush=True)
            print("  client properties (as admin) for --kafka-config:", flush=True)
            for stem, path in files.items():
                print(f"    {stem:24} {path}", flush=True)
        print(f"logs: {broker.log_path}; Ctrl-C stops", flush=True)
        while broker.running():
            time.sleep(0.5)
        print(f"broker exited; see {broker.log_path}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
