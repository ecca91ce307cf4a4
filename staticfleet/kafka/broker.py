"""A single-node Apache Kafka broker (KRaft, broker and controller in one JVM) on loopback.

The jars come from java/broker/pom.xml (`make kafka`, scripts/install-kafka.sh) into
build/kafka/libs; this module formats the storage once (`kafka.tools.StorageTool format
--standalone`), then runs `kafka.Kafka server.properties` as a child process. The settings
favour fast tests: no initial rebalance delay, a small minimum session timeout, one replica
and few partitions for the internal topics, and a short broker session so a broker killed
with SIGKILL is back within seconds on the same log directory.

`python -m staticfleet.kafka.broker up` starts one for manual use and prints its bootstrap
address; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from staticfleet.processes import terminate

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


def free_port(low: int = PORT_RANGE[0], high: int = PORT_RANGE[1]) -> int:
    """A loopback port nothing listens on now, below the ephemeral range."""
    for _ in range(200):
        port = random.randrange(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise BrokerError(f"no free port in {low}-{high}")


def previous_ports(workdir: Path) -> tuple[int | None, int | None]:
    """(client port, controller port) of the server.properties a previous start wrote."""
    path = workdir / "server.properties"
    if not path.exists():
        return None, None
    ports: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "listeners":
            for listener in value.split(","):
                name, _, address = listener.partition("://")
                ports[name] = int(address.rpartition(":")[2])
    return ports.get("PLAINTEXT"), ports.get("CONTROLLER")


def _if_free(port: int | None) -> int | None:
    if port is None:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return None
    return port


def new_cluster_id() -> str:
    """A Kafka Uuid in its usual text form: 16 random bytes, URL-safe base64, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def format_arguments(cluster_id: str, properties: Path) -> list[str]:
    """StorageTool's arguments to format a single-node KRaft log directory."""
    # `--cluster-id=ID` in one token: a random id may begin with "-", which argparse4j would
    # take for an option.
    return ["format", "--standalone", f"--cluster-id={cluster_id}", f"--config={properties}"]


class KafkaBroker:
    def __init__(
        self,
        workdir: Path | str,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        settings: Mapping[str, str] | None = None,
        libs_dir: Path = LIBS_DIR,
    ) -> None:
        self.workdir = Path(workdir)
        # A log directory started before keeps its ports (its bootstrap address stays valid)
        # while they are free; otherwise free ones are picked.
        previous_port, previous_controller_port = previous_ports(self.workdir)
        self.port = port or _if_free(previous_port) or free_port()
        self.controller_port = controller_port or _if_free(previous_controller_port) or free_port()
        self.settings = {**FAST_TEST_SETTINGS, **(settings or {})}
        self.libs_dir = libs_dir
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "broker.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Format the storage on first start, then launch the broker (returns at once)."""
        if self.running():
            return
        ensure_installed(self.libs_dir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        properties = self._write_config()
        if not (self.data_dir / "meta.properties").exists():
            self._java("kafka.tools.StorageTool", *format_arguments(new_cluster_id(), properties))
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
            if _accepts(self.port):
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                with contextlib.suppress(Exception):
                    if admin.list_topics(timeout=2).brokers:
                        return time.monotonic() - started
            time.sleep(0.1)
        raise BrokerError(f"broker not ready after {timeout:.0f}s; see {self.log_path}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (a controlled shutdown), then SIGKILL if it does not exit in time."""
        if self._process is not None:
            terminate(self._process, timeout)
        self._process = None

    def kill(self) -> None:
        """SIGKILL: a crash, no controlled shutdown."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait()
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
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
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

    def tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ internals

    def _write_config(self) -> Path:
        listeners = (
            f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
        )
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **self.settings,
        }
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        return path

    def _java_command(self, main_class: str, *args: str) -> list[str]:
        return [
            "java",
            HEAP,
            "-Xms64m",
            # One broker, two cores shared with the tests: the serial collector is enough
            # and keeps the resident set small; C1 alone halves the time to ready.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            f"{self.libs_dir}/*",
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


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def running_broker(workdir: Path, *, timeout: float = 60.0) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(workdir)
    broker.start()
    try:
        broker.wait_ready(timeout)
        yield broker
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m staticfleet.kafka.broker")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start a broker and print its bootstrap; Ctrl-C stops")
    up.add_argument("--workdir", default="build/kafka/run", help="storage and logs [%(default)s]")
    up.add_argument("--port", type=int, help="client port [a free one in 20000-30000]")
    up.add_argument("--topic", action="append", default=[], help="NAME:PARTITIONS to create")
    args = parser.parse_args(argv)

    broker = KafkaBroker(args.workdir, port=args.port)
    broker.start()
    try:
        seconds = broker.wait_ready()
        for spec in args.topic:
            name, _, partitions = spec.partition(":")
            broker.create_topic(name, int(partitions or 1))
        print(f"kafka ready in {seconds:.1f}s: bootstrap {broker.bootstrap}", flush=True)
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
