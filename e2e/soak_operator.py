"""The fault soak's operator variant: the soak's groups on the embedded coordinator of
`staticfleet operator run`, beside a real control plane (etcd, kube-apiserver,
kube-controller-manager from e2e/build.sh), with two kinds the other variants cannot have:
`operator_kill` (kill -9 the operator, restart it on the same store and port) and
`apiserver_restart` (kill -9 kube-apiserver, restart it on the same etcd). Everything else
is the soak of staticfleet/soak/ (docs/soak.md, "The operator variant").

    python -m e2e.soak_operator --seed 36 --duration 30m --report bench/results/soak_operator.json
    make soak SOAK_COORDINATOR=operator

Each soak group is an adopted ConsumerGroup whose selector matches no pod, with
`spec.tokenSecretRef` naming a Secret that holds the soak's member token: the operator hosts
the group (registers its token, sets its topics, observes it) and leaves the soak's own
member processes alone. Managed mode would make pods that never run here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from e2e.cluster import crd_established
from e2e.controlplane import (
    DEFAULT_BIN_DIR,
    ROOT,
    ControlPlane,
    Runner,
    restart_apiserver,
    start_processes,
)
from e2e.fleet import answers_ready, wait_for
from staticfleet.demo.fleet import (
    FleetError,
    clean_environment,
    staticfleet_command,
    stop_process,
)
from staticfleet.demo.settings import DemoSettings
from staticfleet.kafka.broker import free_port
from staticfleet.soak import __main__ as soak_main
from staticfleet.soak.arguments import add_arguments
from staticfleet.soak.checker import GroupSpec
from staticfleet.soak.driver import ADMIN_TOKEN, TOPIC, GroupHost, HostFactory, SoakConfig

NAMESPACE = "soak"
# The prefix the operator would stamp on adopted pods. The soak's instance ids (`member-0`,
# ...) are not `<prefix>-<n>`, so the operator's slot table never lists them and never
# retires one with a LeaveGroup after its restart (adopted.ensure_table).
INSTANCE_ID_PREFIX = "soak-pod"


def token_secret(group_id: str) -> str:
    return f"{group_id}-soak-token"


def group_manifests(
    groups: tuple[GroupSpec, ...], tokens: Mapping[str, str], partitions: int
) -> list[dict[str, Any]]:
    """The namespace, each group's token Secret and its adopted ConsumerGroup."""
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    ]
    for group in groups:
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": token_secret(group.group_id), "namespace": NAMESPACE},
                "type": "Opaque",
                "stringData": {"token": tokens[group.group_id]},
            }
        )
        manifests.append(
            {
                "apiVersion": "staticfleet.dev/v1alpha1",
                "kind": "ConsumerGroup",
                "metadata": {"name": group.group_id, "namespace": NAMESPACE},
                "spec": {
                    "groupId": group.group_id,
                    "topics": [{"name": TOPIC, "partitions": partitions}],
                    # No pod carries this label: the members are the soak's processes.
                    "selector": {"matchLabels": {"staticfleet.dev/soak-group": group.group_id}},
                    "membership": {"instanceIdPrefix": INSTANCE_ID_PREFIX},
                    "rebalance": {"protocol": group.protocol},
                    "tokenSecretRef": {"name": token_secret(group.group_id)},
                },
            }
        )
    return manifests


class OperatorHost:
    """`staticfleet operator run` (its embedded coordinator holds the soak's groups) beside a
    control plane it logs in to with the admin kubeconfig; the soak's GroupHost, and its
    ApiServerHost for `apiserver_restart`."""

    def __init__(
        self,
        cp: ControlPlane,
        runner: Runner,
        *,
        store: Path,
        settings: DemoSettings,
        log_path: Path,
    ) -> None:
        self.cp = cp
        self.runner = runner
        # Set to the soak bridge's address before the first start when the network kinds
        # run (docs/soak.md, "The network and the disk").
        self.host = "127.0.0.1"
        self._store = store
        self._settings = settings
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._port = 0
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, timeout_s: float = 30.0) -> None:
        """Start (a free port the first time, the same port after a kill) and wait until
        its coordinator is ready: every group's member token registered from its Secret."""
        if self._process is not None and self._process.poll() is None:
            raise FleetError("the operator is already running")
        self._port = self._port or free_port()
        environment = clean_environment() | {
            "KUBECONFIG": str(self.cp.kubeconfig),
            "STATICFLEET_ADMIN_TOKEN": ADMIN_TOKEN,
        }
        settings = self._settings
        argv = staticfleet_command(
            "operator",
            "run",
            "--namespace",
            NAMESPACE,
            "--store",
            f"sqlite:///{self._store.resolve()}",
            "--coordinator-host",
            self.host,
            "--coordinator-port",
            str(self._port),
            "--coordinator-url",
            self.url,
            "--min-session-timeout-ms",
            str(settings.min_session_timeout_ms),
            "--initial-rebalance-delay-ms",
            str(settings.initial_rebalance_delay_ms),
            "--interval",
            "2",
        )
        self._log = self._log_path.open("ab")
        self._process = subprocess.Popen(
            argv,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while not answers_ready(self.url, timeout_s=2):
            if self._process.poll() is not None:
                raise FleetError(
                    f"the operator exited with {self._process.returncode}: see {self._log_path}"
                )
            if time.monotonic() > deadline:
                raise FleetError(
                    f"the operator was not ready in {timeout_s} s: see {self._log_path}"
                )
            time.sleep(0.05)

    def kill(self) -> None:
        if self._process is None:
            return
        stop_process(self._process, signal.SIGKILL, 10.0)
        self.restarts += 1
        self._close_log()

    def stop(self) -> int | None:
        if self._process is None:
            return None
        code = stop_process(self._process, signal.SIGTERM, 20.0)
        self._close_log()
        return code

    def restart_apiserver(self, down_s: float) -> int:
        return restart_apiserver(self.cp, self.runner, down_s)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def kubectl(cp: ControlPlane, *args: str, input: str | None = None) -> str:
    result = subprocess.run(
        [str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise FleetError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def prepare_cluster(cp: ControlPlane, config: SoakConfig, tokens: Mapping[str, str]) -> None:
    """The CRDs as a user applies them, then the soak's namespace, Secrets and groups."""
    kubectl(cp, "apply", "-f", str(ROOT / "crds"))
    # Polled, not `kubectl wait --for=condition=Established`, which fails at once when it
    # reads a CRD before the API server has written any condition (a CI run, under load).
    for path in sorted((ROOT / "crds").glob("*.yaml")):

        def established(name: str = path.stem) -> bool:
            return crd_established(json.loads(kubectl(cp, "get", "crd", name, "-o", "json")))

        wait_for(f"the CRD {path.stem} to be Established", established, timeout_s=60)
    items = group_manifests(config.groups, tokens, config.partitions)
    kubectl(
        cp,
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )


@contextlib.contextmanager
def operator_hosts(workdir: Path, bin_dir: Path = DEFAULT_BIN_DIR) -> Iterator[HostFactory]:
    """A control plane for the run's length, and the soak's factory of its operator host."""
    cp, runner = start_processes(workdir, bin_dir, 120)
    try:

        def make_host(config: SoakConfig, store: Path, tokens: Mapping[str, str]) -> GroupHost:
            prepare_cluster(cp, config, tokens)
            return OperatorHost(
                cp,
                runner,
                store=store,
                settings=config.demo_settings(),
                log_path=config.run_dir / "operator.log",
            )

        yield make_host
    finally:
        runner.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m e2e.soak_operator", description=__doc__)
    add_arguments(parser)
    parser.add_argument("--bin-dir", type=Path, default=DEFAULT_BIN_DIR)
    args = parser.parse_args(argv)
    if args.check_only:
        return soak_main.run(args)
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"staticfleet-soak-cp-{os.getpid()}"
    with operator_hosts(workdir, args.bin_dir) as make_host:
        return soak_main.run(args, make_host)


if __name__ == "__main__":
    sys.exit(main())
