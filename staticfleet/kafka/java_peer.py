"""Launch the Java peer (java/consumer-peer): a real KafkaConsumer in a group on the broker.

It is the reference client: what Kafka's own consumer does in a rebalance (the KIP-429
two-bounce, static membership) is what ours is compared with, and a group can mix both. Its
event log has the shape of `staticfleet member run`'s (plus `"client": "java"`), so
`staticfleet.demo.ownership` reads either.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from staticfleet.kafka.broker import REPO_ROOT
from staticfleet.kafka.class_sharing import ArchiveClaim, claim
from staticfleet.processes import terminate

BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-java-peer.sh"
PEER_DIR = REPO_ROOT / "build" / "java-peer"
MAIN_CLASS = "io.staticfleet.peer.ConsumerPeer"
# Set: the peer's jars are there already (the Java client image, image/clients.Dockerfile),
# nothing is built.
PEER_DIR_ENV = "STATICFLEET_JAVA_PEER_DIR"


def peer_dir() -> Path:
    given = os.environ.get(PEER_DIR_ENV)
    return Path(given) if given else PEER_DIR


def ensure_built() -> Path:
    """Build the peer with Maven when absent or changed (once; prints one progress line);
    where it was built into an image (`PEER_DIR_ENV`), only its directory."""
    if not os.environ.get(PEER_DIR_ENV):
        subprocess.run([str(BUILD_SCRIPT)], check=True)
    return peer_dir()


class JavaPeer:
    """One Java consumer process; `start()` returns at once, `stop()` is SIGTERM (clean)."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        topics: Sequence[str],
        event_log: Path,
        *,
        instance_id: str | None = None,
        strategies: Sequence[str] = ("range",),
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 500,
        commit_interval_ms: int = 500,
        client_config: Path | None = None,
        group_protocol: str = "classic",
        remote_assignor: str | None = None,
    ) -> None:
        """`group_protocol="consumer"`: KIP-848's protocol, the broker assigning with
        `remote_assignor` (None: the broker's default); `strategies` and the session and
        heartbeat settings are then the broker's (group-level), not the client's."""
        self.event_log = Path(event_log)
        self.stderr_path = self.event_log.with_suffix(".err")
        self.arguments = [
            "--bootstrap",
            bootstrap,
            "--group-id",
            group_id,
            "--topics",
            ",".join(topics),
            "--strategies",
            ",".join(strategies),
            "--session-timeout-ms",
            str(session_timeout_ms),
            "--heartbeat-interval-ms",
            str(heartbeat_interval_ms),
            "--commit-interval-ms",
            str(commit_interval_ms),
            "--events",
            str(self.event_log),
        ]
        if instance_id:
            self.arguments += ["--instance-id", instance_id]
        if group_protocol != "classic":
            self.arguments += ["--group-protocol", group_protocol]
        if remote_assignor:
            self.arguments += ["--remote-assignor", remote_assignor]
        if client_config is not None:
            # Java client properties (TLS, SASL) merged into the consumer's configuration.
            self.arguments += ["--client-config", str(client_config)]
        self._process: subprocess.Popen[bytes] | None = None
        self._archive_claim = ArchiveClaim([])

    @staticmethod
    def classpath() -> str:
        built = peer_dir()
        return f"{built / 'consumer-peer.jar'}:{built / 'lib'}/*"

    def command(self, jvm_options: Sequence[str] = ()) -> list[str]:
        # A small client JVM: two cores are shared by the broker, the peers and the tests.
        return [
            "java",
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            *jvm_options,
            "-cp",
            self.classpath(),
            MAIN_CLASS,
            *self.arguments,
        ]

    def start(self) -> None:
        ensure_built()
        self.event_log.parent.mkdir(parents=True, exist_ok=True)
        # Shared classes where this process sees the JVM exit (a pod's launcher execs it).
        self._archive_claim = claim("java-peer", self.classpath())
        with self.stderr_path.open("ab") as stderr:
            self._process = subprocess.Popen(
                self.command(self._archive_claim.options),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
            )

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM: the consumer commits, closes (a static member stays in the group)."""
        if self._process is None:
            return 0
        code = terminate(self._process, timeout)
        self._archive_claim.finish(code in (0, 143))
        return code

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._archive_claim.finish(clean_exit=False)
