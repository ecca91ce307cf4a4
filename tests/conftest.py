"""Fixtures shared by every test directory: the Apache Kafka broker (tests marked `kafka`).

The session broker is secured (docs/kafka.md, "The secured test broker"): PLAINTEXT as
before (its principal, ANONYMOUS, is a super user), plus SASL_SSL and SSL listeners, the
StandardAuthorizer and an OIDC provider. `secured_user` and `ssl_client` give a test a
principal of its own, with no ACL until the test grants one.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from staticfleet.kafka.broker import SCRAM_MECHANISMS, KafkaBroker
from staticfleet.kafka.pki import KeyPair


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One secured KRaft broker for the session, installed by scripts/install-kafka.sh if absent.

    Tests share it, so each one uses topics, groups and users of its own (`kafka_topic`,
    `secured_user`, `ssl_client`). A test that stops or kills a broker starts its own
    (`KafkaBroker(tmp_path)`), not this one.
    """
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), secured=True)
    broker.start()
    try:
        broker.wait_ready(timeout=120)
        yield broker
    finally:
        broker.stop()


_topic_numbers = itertools.count()
_user_numbers = itertools.count()


def _unique_name(request: pytest.FixtureRequest, counter: Iterator[int], width: int) -> str:
    # Kafka topic names allow [a-zA-Z0-9._-]; parametrized test names have more.
    base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:width].strip("-.") or "t"
    return f"{base}-{next(counter)}"


@pytest.fixture
def kafka_topic(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> Callable[[int], str]:
    """Creates a topic unique to this test with the given number of partitions; returns its name."""

    def create(partitions: int) -> str:
        name = _unique_name(request, _topic_numbers, 60)
        kafka_broker.create_topic(name, partitions)
        return name

    return create


@dataclass(frozen=True)
class SecuredUser:
    """A SCRAM user (SCRAM-SHA-512 and SCRAM-SHA-256, one password) made for one test."""

    name: str
    password: str

    @property
    def principal(self) -> str:
        return f"User:{self.name}"


@pytest.fixture
def secured_user(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> SecuredUser:
    """A fresh SCRAM user on the session broker, with no ACL; `kafka_broker.grant` gives some."""
    user = SecuredUser(_unique_name(request, _user_numbers, 40), secrets.token_hex(12))
    for mechanism in SCRAM_MECHANISMS:
        kafka_broker.add_user(user.name, user.password, mechanism)
    return user


@dataclass(frozen=True)
class SslClient:
    """A client certificate (CN=name, from the broker's CA) made for one test."""

    name: str
    pair: KeyPair

    @property
    def principal(self) -> str:
        return f"User:{self.name}"


@pytest.fixture
def ssl_client(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> SslClient:
    """A fresh client certificate for the SSL listener (principal `User:<name>`), with no ACL;
    `kafka_broker.client_properties("SSL", ssl_client.name)` reaches the listener with it."""
    name = _unique_name(request, _user_numbers, 40)
    return SslClient(name, kafka_broker.pki.client_certificate(name))
