"""Fixtures shared by every test directory: the Apache Kafka broker (tests marked `kafka`).

The session broker is secured (docs/kafka.md, "The secured test broker"): PLAINTEXT as
before (its principal, ANONYMOUS, is a super user), plus SASL_SSL and SSL listeners, the
StandardAuthorizer and an OIDC provider. `secured_user` and `ssl_client` give a test a
principal of its own, with no ACL until the test grants one.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _pytest.nodeid import NodeId
from hypothesis import settings

from staticfleet.kafka.broker import SCRAM_MECHANISMS, KafkaBroker, running_broker
from staticfleet.kafka.pki import KeyPair

# Hypothesis's per-example deadline is a wall-clock check: on a busy 2-core machine (the suite
# runs on parallel workers) it fails a correct property. Speed is measured in `make bench`.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# `make test` runs the suite on several pytest-xdist workers (`--dist loadgroup`). A fixture
# of ours that lives longer than a test (the session broker, the SparkSession, a module's API
# server) would start once on every worker that runs one of its users; the tests that share
# such fixtures run on one worker instead, so each starts once, as in a serial run.
_SHARED_SCOPES = frozenset({"session", "package", "module"})
# Two exceptions keep the longest chain of one worker well below a third of the suite:
# - the session broker's users (about 10 of the suite's 28 worker-minutes) form two groups,
#   those in tests/kafka/ (about 7.5) and the others (conformance, operator: about 2.5), so
#   two brokers start (one if both groups land on one worker); each test still uses topics,
#   groups and users of its own, as the broker's fixture asks;
# - a test that reads the quick demo's run joins the demo's group, not the SparkSession's:
#   a second SparkSession (about 15 s) costs less than the demo run (about 4 minutes) and the
#   Spark tests (2.5-4 minutes) one after the other on one worker.
_SPLIT_BY_DIRECTORY = {"kafka_broker": "tests/kafka/"}
_LEFT_FOR = {"quick_demo": frozenset({"spark"})}


def _shared_fixtures(item: pytest.Item) -> set[str]:
    info = getattr(item, "_fixtureinfo", None)
    keys: set[str] = set()
    for name, definitions in info.name2fixturedefs.items() if info else ():
        for definition in definitions:
            # pytest's and plugins' own (tmp_path_factory, ...) cost nothing to share.
            if definition.scope in _SHARED_SCOPES and getattr(
                definition.func, "__module__", ""
            ).startswith("tests."):
                module = item.nodeid.split("::")[0]
                if definition.scope == "module":
                    keys.add(f"{module}::{name}")
                elif (directory := _SPLIT_BY_DIRECTORY.get(name)) is not None:
                    keys.add(f"{name}:{'in' if module.startswith(directory) else 'outside'}")
                else:
                    keys.add(name)
    for key, left in _LEFT_FOR.items():
        if key in keys:
            keys -= left
    return keys


def _tell_xdist(item: pytest.Item, group: str) -> None:
    """pytest-xdist's loadgroup scheduler learns a test's group from the node id its worker
    reports, `<id>@<group>`: xdist 3.8 writes that suffix to `item._nodeid`, which pytest 9.2
    no longer reads (the id is the structured `item._id`), so every mark was ignored and each
    worker started a broker and a SparkSession of its own (pytest-dev/pytest-xdist#1386).
    Until xdist writes it again, the suffix is written here, the way xdist means to."""
    if not item.nodeid.endswith(f"@{group}") and isinstance(getattr(item, "_id", None), NodeId):
        item._id = NodeId.parse(f"{item.nodeid}@{group}")


# First: pytest-xdist's worker reads the xdist_group marks in its own modifyitems hook
# (`--dist loadgroup`), so the marks must be on the items before it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests joined by any shared fixture form one group (union-find over the fixtures).
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    uses = {item.nodeid: sorted(_shared_fixtures(item)) for item in items}
    for keys in uses.values():
        for other in keys[1:]:
            parent[root(other)] = root(keys[0])
    groups: dict[str, str] = {}
    for item in items:
        if keys := uses[item.nodeid]:
            groups[item.nodeid] = root(keys[0])
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        for item in items:
            if (group := groups.get(item.nodeid)) is not None:
                _tell_xdist(item, group)
    # Workers take work in collection order, so the long chains start first and the short
    # tests fill in around them: groups by size, then the slow tests, then the rest (a
    # stable sort: each part keeps its order). A serial run is reordered the same way.
    sizes = Counter(groups.values())

    def weight(item: pytest.Item) -> tuple[int, int]:
        if (group := groups.get(item.nodeid)) is not None:
            return (0, -sizes[group])
        return (1, 0) if item.get_closest_marker("slow") else (2, 0)

    items.sort(key=weight)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One secured KRaft broker for the session, installed by scripts/install-kafka.sh if absent.

    Tests share it, so each one uses topics, groups and users of its own (`kafka_topic`,
    `secured_user`, `ssl_client`). A test that stops or kills a broker starts its own
    (`KafkaBroker(tmp_path)`), not this one.
    """
    with running_broker(tmp_path_factory.mktemp("kafka"), timeout=120, secured=True) as broker:
        yield broker


@dataclass(frozen=True)
class QuickDemo:
    """One finished `staticfleet demo --quick --coordinator both` run: its output directory
    (`embedded/`, `kafka/`, `comparison.json`) and what it printed."""

    output: Path
    returncode: int
    stdout: str
    stderr: str

    @property
    def embedded(self) -> Path:
        """The embedded coordinator's run: what `--coordinator embedded` writes to the output."""
        return self.output / "embedded"

    @property
    def embedded_ok(self) -> bool:
        """The embedded half's exit status (what `--coordinator embedded` would return)."""
        comparison = self.output / "comparison.json"
        return comparison.is_file() and json.loads(comparison.read_text())["embedded_ok"] is True

    @property
    def failure(self) -> str:
        return self.stdout[-6000:] + self.stderr[-4000:]


# About 230 s in make test (the embedded scenarios and Spark's figures, then the same on a
# Kafka broker); a guard against a hang.
QUICK_DEMO_TIMEOUT_S = 720


@pytest.fixture(scope="session")
def quick_demo(tmp_path_factory: pytest.TempPathFactory) -> QuickDemo:
    """`staticfleet demo --quick --coordinator both`, run once for the tests that read it: the
    embedded end-to-end check and Spark's cross-check read its embedded half (the default
    engine: Spark's analytics over the journals, in a child), the side-by-side test the Kafka
    half and the comparison. One run, not one per reader: the embedded half is the same run
    `--coordinator embedded` makes (staticfleet.demo.runner.run_demo)."""
    output = tmp_path_factory.mktemp("quick-demo") / "demo"
    command = [sys.executable, "-m", "staticfleet.cli", "demo", "--quick"]
    try:
        done = subprocess.run(
            [*command, "--coordinator", "both", "--output-dir", str(output)],
            capture_output=True,
            text=True,
            timeout=QUICK_DEMO_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as error:
        # Each user fails with what the run printed, rather than with the fixture's error.
        return QuickDemo(
            output,
            -1,
            _text(error.stdout),
            f"{_text(error.stderr)}\ntimed out after {error.timeout} s",
        )
    return QuickDemo(output, done.returncode, done.stdout, done.stderr)


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


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
