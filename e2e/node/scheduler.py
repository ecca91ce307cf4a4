"""kube-scheduler v1.36.3 for the real node (scripts/node/build.sh; docs/node.md).

e2e/controlplane.py starts no scheduler (the operator benchmark binds its pods itself). A real
kubelet runs only pods bound to its Node, and the chart's Deployment and the operator's
member pods name no node, so the real node needs the scheduler.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from e2e.controlplane import ControlPlane, free_ports
from e2e.node.services import NODE_BIN, ServiceNetworkError
from staticfleet.processes import terminate


def scheduler_config(cp: ControlPlane) -> str:
    """KubeSchedulerConfiguration (v1) as JSON: one scheduler, no leader election."""
    return json.dumps(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(cp.kubeconfig)},
            "leaderElection": {"leaderElect": False},
        },
        indent=2,
    )


@contextlib.contextmanager
def running_scheduler(
    cp: ControlPlane, workdir: Path, timeout_s: float = 60
) -> Iterator[subprocess.Popen[bytes]]:
    """kube-scheduler, healthy (/healthz on its own loopback port)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "kube-scheduler.yaml"
    config.write_text(scheduler_config(cp))
    (port,) = free_ports(1)
    log = workdir / "kube-scheduler.log"
    argv = [
        str(NODE_BIN / "kube-scheduler"),
        f"--config={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={workdir / 'scheduler-pki'}",
        "--v=1",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["nice", "-n", "10", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    # Its serving certificate is self-signed; /healthz is open to anyone by default.
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise ServiceNetworkError(f"kube-scheduler exited {proc.returncode}; log {log}")
            with contextlib.suppress(OSError):
                url = f"https://127.0.0.1:{port}/healthz"
                with urllib.request.urlopen(url, context=insecure, timeout=3) as resp:
                    if resp.status == 200:
                        break
            if time.monotonic() > deadline:
                raise ServiceNetworkError(
                    f"no healthy kube-scheduler after {timeout_s}s; log {log}"
                )
            time.sleep(0.5)
        yield proc
    finally:
        terminate(proc, 10)
