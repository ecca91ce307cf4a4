"""A real Kubernetes control plane on loopback for the e2e tests.

Starts etcd, kube-apiserver and kube-controller-manager (binaries from e2e/build.sh, in
build/e2e/bin) with fresh certificates (e2e/certs.py), each in its own process group with
its log in <workdir>/logs/, on free loopback ports. There is no scheduler, kubelet or
kube-proxy: e2e/node/ adds a real node beside it (docs/node.md). Admission webhooks
that name a Service are called at its EndpointSlice address (--enable-aggregator-routing).

    with running_control_plane(workdir, bin_dir) as cp:
        ...  # cp.kubeconfig, cp.server, cp.ca_cert / cp.admin_cert / cp.admin_key

By hand:

    python -m e2e.controlplane up --workdir build/e2e/run
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from e2e.certs import ClusterCerts, KeyPair, generate_certs
from staticfleet.kafka.broker import free_port

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BIN_DIR = ROOT / "build" / "e2e" / "bin"
DEFAULT_WORKDIR = ROOT / "build" / "e2e" / "run"

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
KUBECONFIG_CONTEXT = "e2e"

# What a cluster with one fake node and no cloud needs (names as in `kube-controller-manager
# --help` of 1.36). Not node-lifecycle, node-ipam, cloud or csr controllers; of the volume
# controllers only the binder (a claim binds to the node's pre-made PersistentVolume, as
# `helm install --wait` waits for) and the protection ones (a claim or volume in use is not
# deleted from under a pod).
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "root-ca-certificate-publisher-controller",
    "job-controller",
    "statefulset-controller",
    "disruption-controller",
    "clusterrole-aggregation-controller",
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    # KEDA's ScaledObjects (e2e/node/test_9e_keda.py) scale through an HPA.
    "horizontal-pod-autoscaler-controller",
)

# With a real kubelet (e2e/node/): it registers its Node tainted not-ready, and only this
# controller lifts the taint (a control plane without a node, as the operator soak's and the
# operator benchmark's, has no Node for it to watch).
REAL_NODE_CONTROLLERS = ("node-lifecycle-controller",)

# Added to the default admission plugins (which already include these but NodeRestriction;
# listing them makes the intent explicit and survives a change of defaults).
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "DefaultTolerationSeconds",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ResourceQuota",
)

_LOG_TAIL_LINES = 40
_STOP_GRACE_S = 10.0


class ControlPlaneError(RuntimeError):
    """The control plane did not start (the message carries the relevant log's tail)."""


@dataclass(frozen=True)
class ControlPlane:
    workdir: Path
    server: str  # "https://127.0.0.1:<port>" (or the node IP: start_control_plane)
    kubeconfig: Path  # admin, client-cert auth, context "e2e"
    ca_cert: Path
    admin_cert: Path
    admin_key: Path
    node_ip: str  # first non-loopback IPv4 of this host
    bin_dir: Path

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts the cluster CA and presents the admin cert."""
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        ctx.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return ctx


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    log_file: IO[bytes]
    argv: list[str]


def node_ip() -> str:
    """The first non-loopback IPv4 address of this host."""
    candidates: list[str] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["hostname", "-I"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
        candidates += out.split()
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.255", 9))  # no packet is sent: this only picks a route
        candidates.append(s.getsockname()[0])
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            candidates.append(str(info[4][0]))
    for ip in candidates:
        parts = ip.split(".")
        is_ipv4 = len(parts) == 4 and all(p.isdigit() for p in parts)
        if is_ipv4 and not ip.startswith("127.") and ip != "0.0.0.0":
            return ip
    raise ControlPlaneError(
        "no non-loopback IPv4 address on this host (hostname -I, the default route and "
        f"getaddrinfo({socket.gethostname()!r}) gave {candidates}); kube-apiserver needs one "
        "to advertise and the pods of the e2e node use it as their IP"
    )


def free_ports(n: int) -> list[int]:
    """n distinct free ports, below the ephemeral range and free on every address
    (`staticfleet.kafka.broker.free_port`). An ephemeral port the kernel handed out on
    127.0.0.1 was once held on 127.0.0.137 by another process's connection, and the
    operator, which binds 0.0.0.0, could not start."""
    ports: list[int] = []
    for _ in range(n):
        ports.append(free_port(taken=ports))
    return ports


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"(cannot read {path}: {e})"
    return "\n".join(text.splitlines()[-lines:])


def _b64(path: Path) -> str:
    return b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, ca: Path, client: KeyPair, user: str) -> None:
    """A kubeconfig (JSON, which is YAML) with the certificates embedded."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": KUBECONFIG_CONTEXT,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [
            {"name": KUBECONFIG_CONTEXT, "context": {"cluster": KUBECONFIG_CONTEXT, "user": user}}
        ],
        "current-context": KUBECONFIG_CONTEXT,
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


class Runner:
    """Starts the processes and stops them all, once, whatever happened."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.processes: list[_Process] = []
        self._lock = threading.Lock()
        self._stopped = False
        atexit.register(self.stop)

    def start(self, name: str, argv: list[str]) -> _Process:
        log = self.logs / f"{name}.log"
        log_file = log.open("ab")
        log_file.write(f"### {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
        log_file.flush()
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc = _Process(name, popen, log, log_file, argv)
        self.processes.append(proc)
        return proc

    def kill(self, name: str) -> _Process:
        """SIGKILL one process and its group, as a crash would; returns it (to restart)."""
        process = next(p for p in self.processes if p.name == name)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.popen.pid, signal.SIGKILL)
        process.popen.wait(timeout=10)
        process.log_file.close()
        return process

    def restart(self, process: _Process) -> _Process:
        """Start a killed process again with the same arguments, in its place."""
        again = self.start(process.name, process.argv)
        self.processes.remove(again)
        self.processes[self.processes.index(process)] = again
        return again

    def check_alive(self) -> None:
        for p in self.processes:
            rc = p.popen.poll()
            if rc is not None:
                raise ControlPlaneError(
                    f"{p.name} exited with status {rc}; last lines of {p.log}:\n{_tail(p.log)}"
                )

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        # One at a time, dependents first: controller-manager, apiserver, then etcd (an
        # apiserver whose etcd is gone does not finish its graceful shutdown).
        for p in reversed(self.processes):
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.popen.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.popen.wait(timeout=_STOP_GRACE_S)
            # The group too: a child the process left behind must not outlive the run.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=5)
            p.log_file.close()
        atexit.unregister(self.stop)


def _get(cp: ControlPlane, path: str, ctx: ssl.SSLContext) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(cp.server + path, context=ctx, timeout=5) as r:
            return int(r.status), r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _wait(
    what: str,
    check: Callable[[], bool],
    runner: Runner,
    deadline: float,
    log: Path,
) -> None:
    last_error = ""
    while True:
        runner.check_alive()
        try:
            if check():
                return
        except (OSError, http.client.HTTPException) as e:
            last_error = f" (last error: {e})"
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"timed out waiting for {what}{last_error}; last lines of {log}:\n{_tail(log)}"
            )
        time.sleep(0.5)


def _etcd_healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
        return bool(json.loads(r.read()).get("health") == "true")


def _require_binaries(bin_dir: Path) -> None:
    names = ("etcd", "kube-apiserver", "kube-controller-manager")
    missing = [n for n in names if not os.access(bin_dir / n, os.X_OK)]
    if missing:
        raise ControlPlaneError(
            f"missing in {bin_dir}: {', '.join(missing)}; build them with e2e/build.sh"
        )


def start_control_plane(
    workdir: Path,
    bin_dir: Path = DEFAULT_BIN_DIR,
    *,
    timeout_s: float = 120,
    real_node: bool = False,
) -> tuple[ControlPlane, Callable[[], None]]:
    """Start etcd, kube-apiserver and kube-controller-manager; return the cluster and stop().

    The API server listens on loopback. With real_node (a real kubelet: e2e/node/,
    docs/node.md) it listens on the host's node IP instead, which it advertises as the
    `kubernetes` Service's endpoint and a pod reaches through kube-proxy, and the
    controller-manager also runs the node lifecycle controller, which lifts the not-ready
    taint a kubelet registers its Node with. cp.server names the address it listens on.

    The etcd data and the certificates in workdir are recreated: every start is a fresh
    cluster. stop() is idempotent and also registered with atexit. On a failure to start,
    everything started is stopped and ControlPlaneError carries the relevant log's tail.
    """
    cp, runner = start_processes(workdir, bin_dir, timeout_s, real_node)
    return cp, runner.stop


def start_processes(
    workdir: Path, bin_dir: Path, timeout_s: float, real_node: bool = False
) -> tuple[ControlPlane, Runner]:
    """start_control_plane, with the Runner itself: its processes can be restarted
    (restart_apiserver) and runner.stop() stops them all."""
    workdir = workdir.resolve()
    bin_dir = bin_dir.resolve()
    _require_binaries(bin_dir)
    ip = node_ip()
    for sub in ("etcd", "pki", "kcm"):
        shutil.rmtree(workdir / sub, ignore_errors=True)
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for old in logs.glob("*.log"):
        old.unlink()
    certs = generate_certs(workdir / "pki", ip)
    etcd_client, etcd_peer, api_port, kcm_port = free_ports(4)
    bind_address = ip if real_node else "127.0.0.1"
    server = f"https://{bind_address}:{api_port}"
    kubeconfig = workdir / "kubeconfig"
    write_kubeconfig(kubeconfig, server, certs.ca.cert, certs.admin, "e2e-admin")
    kcm_kubeconfig = workdir / "controller-manager.kubeconfig"
    write_kubeconfig(
        kcm_kubeconfig,
        server,
        certs.ca.cert,
        certs.controller_manager,
        "system:kube-controller-manager",
    )
    cp = ControlPlane(
        workdir=workdir,
        server=server,
        kubeconfig=kubeconfig,
        ca_cert=certs.ca.cert,
        admin_cert=certs.admin.cert,
        admin_key=certs.admin.key,
        node_ip=ip,
        bin_dir=bin_dir,
    )
    runner = Runner(logs)
    try:
        deadline = time.monotonic() + timeout_s
        etcd_url = f"http://127.0.0.1:{etcd_client}"
        etcd = runner.start("etcd", _etcd_argv(bin_dir, workdir, etcd_url, etcd_client, etcd_peer))
        _wait(f"{etcd_url}/health", lambda: _etcd_healthy(etcd_url), runner, deadline, etcd.log)
        api = runner.start(
            "kube-apiserver", _apiserver_argv(bin_dir, certs, ip, bind_address, api_port, etcd_url)
        )
        ctx = cp.ssl_context()
        _wait(
            f"{server}/readyz",
            lambda: _get(cp, "/readyz", ctx) == (200, "ok"),
            runner,
            deadline,
            api.log,
        )
        kcm = runner.start(
            "kube-controller-manager",
            _controller_manager_argv(
                bin_dir,
                certs,
                kcm_kubeconfig,
                workdir / "kcm",
                kcm_port,
                (*CONTROLLERS, *REAL_NODE_CONTROLLERS) if real_node else CONTROLLERS,
            ),
        )
        _wait(
            "the ServiceAccount default/default (made by kube-controller-manager)",
            lambda: _get(cp, "/api/v1/namespaces/default/serviceaccounts/default", ctx)[0] == 200,
            runner,
            deadline,
            kcm.log,
        )
    except BaseException:
        runner.stop()
        raise
    return cp, runner


def restart_apiserver(
    cp: ControlPlane, runner: Runner, down_s: float, timeout_s: float = 60
) -> int:
    """kill -9 kube-apiserver, start it again after `down_s` on the same etcd, flags and
    port; ms from the new start until /readyz answers ok (the soak's `apiserver_restart`)."""
    process = runner.kill("kube-apiserver")
    time.sleep(down_s)
    started = time.monotonic()
    again = runner.restart(process)
    ctx = cp.ssl_context()
    _wait(
        f"{cp.server}/readyz after a restart",
        lambda: _get(cp, "/readyz", ctx) == (200, "ok"),
        runner,
        started + timeout_s,
        again.log,
    )
    return int((time.monotonic() - started) * 1000)


def _etcd_argv(bin_dir: Path, workdir: Path, url: str, client: int, peer: int) -> list[str]:
    peer_url = f"http://127.0.0.1:{peer}"
    return [
        str(bin_dir / "etcd"),
        "--name=e2e",
        f"--data-dir={workdir / 'etcd'}",
        f"--listen-client-urls={url}",
        f"--advertise-client-urls={url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=e2e={peer_url}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",  # a throwaway cluster: no durability, much faster
        "--log-level=warn",
    ]


def _apiserver_argv(
    bin_dir: Path, certs: ClusterCerts, ip: str, bind_address: str, port: int, etcd_url: str
) -> list[str]:
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers={etcd_url}",
        f"--bind-address={bind_address}",
        f"--advertise-address={ip}",
        f"--secure-port={port}",
        f"--tls-cert-file={certs.apiserver.cert}",
        f"--tls-private-key-file={certs.apiserver.key}",
        f"--client-ca-file={certs.ca.cert}",
        # What the API server shows a real node's kubelet for logs and exec (e2e/node/).
        f"--kubelet-client-certificate={certs.kubelet_client.cert}",
        f"--kubelet-client-key={certs.kubelet_client.key}",
        # At the node's IP: its name (the kubelet's --hostname-override) is in no DNS.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={certs.service_account_pub}",
        f"--service-account-signing-key-file={certs.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--authorization-mode=Node,RBAC",
        f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        # Webhooks (and APIServices) that name a Service are called at the address of the
        # Service's endpoints, not its ClusterIP: there is no kube-proxy.
        "--enable-aggregator-routing=true",
        "--allow-privileged=true",
        # The aggregation layer's front proxy, as kubeadm sets it up.
        f"--requestheader-client-ca-file={certs.front_proxy_ca.cert}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={certs.front_proxy_client.cert}",
        f"--proxy-client-key-file={certs.front_proxy_client.key}",
        "--profiling=false",
        "--v=1",
    ]


def _controller_manager_argv(
    bin_dir: Path,
    certs: ClusterCerts,
    kubeconfig: Path,
    cert_dir: Path,
    port: int,
    controllers: tuple[str, ...] = CONTROLLERS,
) -> list[str]:
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={certs.service_account_key}",
        f"--root-ca-file={certs.ca.cert}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--leader-elect=false",
        f"--controllers={','.join(controllers)}",
        # A scenario's scaling steps in seconds, not the default 15 s apart.
        "--horizontal-pod-autoscaler-sync-period=5s",
        "--profiling=false",
        "--v=1",
    ]


@contextlib.contextmanager
def running_control_plane(
    workdir: Path,
    bin_dir: Path = DEFAULT_BIN_DIR,
    *,
    timeout_s: float = 120,
    real_node: bool = False,
) -> Iterator[ControlPlane]:
    """A started control plane, torn down on exit (also on exceptions)."""
    cp, stop = start_control_plane(workdir, bin_dir, timeout_s=timeout_s, real_node=real_node)
    try:
        yield cp
    finally:
        stop()


def _up(args: argparse.Namespace) -> int:
    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # SIGINT too: a shell starts a background job (`... up &`) with SIGINT ignored.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cp, runner = start_processes(args.workdir, args.bin_dir, args.timeout)
    except ControlPlaneError as e:
        print(f"control plane failed to start: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    try:
        print(f"control plane up: {cp.server} (node IP {cp.node_ip}; logs in {cp.workdir}/logs)")
        print(f"export KUBECONFIG={cp.kubeconfig}", flush=True)
        while True:
            time.sleep(1)
            runner.check_alive()
    except KeyboardInterrupt:
        print("stopping the control plane", flush=True)
        return 0
    except ControlPlaneError as e:
        print(f"control plane failed: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        runner.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.controlplane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the control plane and wait for Ctrl-C / SIGTERM")
    up.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    up.add_argument("--bin-dir", type=Path, default=DEFAULT_BIN_DIR)
    up.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.command == "up":
        return _up(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
