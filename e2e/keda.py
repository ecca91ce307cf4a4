"""KEDA on the e2e control plane, for the autoscaling scenario (e2e/node/test_9e_keda.py).

KEDA's two programs, built from its Go module by scripts/build-keda.sh into build/e2e/bin,
run as host processes of the test with the admin kubeconfig, as the control plane does (on
the real node too: only the members are pods):

- `keda` (its operator) turns a ScaledObject into an HPA and serves the scalers' metrics
  over gRPC (mutual TLS) on loopback; its scalers call what they watch from this host (the
  node's broker on the pods' bridge, the coordinator at its Service's ClusterIP: a host
  process does not resolve the cluster's DNS names);
- `keda-adapter` serves `external.metrics.k8s.io` to the API server: the APIService names
  the Service keda/keda-metrics-apiserver, whose EndpointSlice points at the host address the
  adapter listens on, and its caBundle is the CA of the adapter's serving certificate. The
  API server (e2e/controlplane.py) runs with --enable-aggregator-routing, so it calls that
  EndpointSlice address itself; kube-proxy, which the node runs, also routes the Service's
  ClusterIP there, but the API server does not go through it.

One CA signs one certificate for both (KEDA's programs read ca.crt, tls.crt and tls.key from
one --cert-dir, for gRPC as client and server and for HTTPS), naming the Service, 127.0.0.1
and the node IP. KEDA's CRDs are applied from the module cache (config/crd/bases/ of the
pinned version), not copied into the repository. On the way out, ScaledObjects left by a
failed test are deleted while KEDA still runs (it removes its finalizer from them, so their
namespaces can go), then the APIService and KEDA's namespace.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID

from e2e.cluster import E2E_BIN, ROOT, Cluster
from e2e.controlplane import free_ports, node_ip
from e2e.fleet import wait_for
from staticfleet.kafka.pki import CertificateAuthority, name, new_key, write_cert, write_key

NAMESPACE = "keda"
ADAPTER_SERVICE = "keda-metrics-apiserver"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
MODULE_DIR = ROOT / "e2e" / "go" / "keda"
BUILD_SCRIPT = ROOT / "scripts" / "build-keda.sh"
_STOP_GRACE_S = 10.0
_BOTH_USAGES = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]


class KedaError(RuntimeError):
    """KEDA did not start (the message carries the relevant log's tail)."""


def crd_dir() -> Path:
    """config/crd/bases/ of the pinned KEDA module, downloaded into the module cache."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", "github.com/kedacore/keda/v2"],
        cwd=MODULE_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise KedaError(f"go mod download in {MODULE_DIR} failed: {out.stderr.strip()}")
    bases = Path(json.loads(out.stdout)["Dir"]) / "config" / "crd" / "bases"
    if not bases.is_dir():
        raise KedaError(f"no {bases} in the KEDA module")
    return bases


def write_certs(directory: Path, ip: str) -> Path:
    """ca.crt, tls.crt, tls.key in `directory`: one leaf for serving and for gRPC clients.

    staticfleet.kafka.pki issues server-only or client-only leaves; KEDA's gRPC presents the
    same tls.crt on both ends, so this leaf carries both extended key usages."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority.create(directory, "ca", "e2e-keda-ca")  # ca.crt, ca.key
    key = new_key()
    now = datetime.datetime.now(datetime.UTC)
    dns = [
        f"{ADAPTER_SERVICE}.{NAMESPACE}.svc",
        f"{ADAPTER_SERVICE}.{NAMESPACE}.svc.cluster.local",
        f"keda-operator.{NAMESPACE}.svc.cluster.local",
        "localhost",
    ]
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted({"127.0.0.1", ip})]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("keda"))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    write_cert(directory / "tls.crt", cert)
    write_key(directory / "tls.key", key)
    return directory


def aggregation_manifests(ip: str, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The Service (no selector), its EndpointSlice at ip:port and the APIService."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
    }
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{ADAPTER_SERVICE}-host",
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": ADAPTER_SERVICE},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }
    api_service = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": API_SERVICE},
        "spec": {
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
            "service": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE, "port": 443},
            "caBundle": base64.b64encode(ca_bundle).decode(),
        },
    }
    return [service, slice_, api_service]


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    log_file: IO[bytes]


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(cannot read {path}: {e})"


@dataclass
class Keda:
    workdir: Path
    processes: list[_Process]

    def check_alive(self) -> None:
        for p in self.processes:
            if p.popen.poll() is not None:
                raise KedaError(
                    f"{p.name} exited with {p.popen.returncode}; {p.log}:\n{_tail(p.log)}"
                )

    def stop(self) -> None:
        for p in reversed(self.processes):
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.popen.pid, signal.SIGTERM)
                try:
                    p.popen.wait(timeout=_STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    os.killpg(p.popen.pid, signal.SIGKILL)
                    p.popen.wait(timeout=5)
            p.log_file.close()


def _start(name: str, argv: list[str], env: dict[str, str], logs: Path) -> _Process:
    log = logs / f"{name}.log"
    log_file = log.open("ab")
    popen = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return _Process(name, popen, log, log_file)


def _external_metrics_available(cluster: Cluster) -> bool:
    status = cluster.get_json("get", "apiservice", API_SERVICE).get("status") or {}
    return any(
        c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions") or []
    )


@contextlib.contextmanager
def running_keda(cluster: Cluster, workdir: Path) -> Iterator[Keda]:
    """KEDA's CRDs applied, its operator and metrics adapter running, the APIService
    Available; everything stopped (the APIService deleted) afterwards."""
    subprocess.run([str(BUILD_SCRIPT)], check=True)
    shutil.rmtree(workdir, ignore_errors=True)
    logs = workdir / "logs"
    logs.mkdir(parents=True)
    ip = node_ip()
    certs = write_certs(workdir / "certs", ip)
    cluster.kubectl("apply", "--server-side", "-f", str(crd_dir()))
    cluster.wait_crd_established("scaledobjects.keda.sh")
    cluster.kubectl("create", "namespace", NAMESPACE)
    grpc_port, adapter_port, *other = free_ports(6)
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "WATCH_NAMESPACE": "",
        "POD_NAMESPACE": NAMESPACE,
        "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
    }
    keda = Keda(workdir, [])
    try:
        keda.processes.append(
            _start(
                "keda-operator",
                [
                    str(E2E_BIN / "keda"),
                    f"--metrics-bind-address=127.0.0.1:{other[0]}",
                    f"--health-probe-bind-address=127.0.0.1:{other[1]}",
                    f"--metrics-service-bind-address=127.0.0.1:{grpc_port}",
                    f"--cert-dir={certs}",
                    "--enable-cert-rotation=false",
                    "--leader-elect=false",
                    "--zap-log-level=info",
                ],
                env,
                logs,
            )
        )
        keda.processes.append(
            _start(
                "keda-adapter",
                [
                    str(E2E_BIN / "keda-adapter"),
                    f"--secure-port={adapter_port}",
                    f"--bind-address={ip}",
                    f"--tls-cert-file={certs / 'tls.crt'}",
                    f"--tls-private-key-file={certs / 'tls.key'}",
                    f"--cert-dir={certs}",
                    f"--lister-kubeconfig={cluster.kubeconfig}",
                    f"--authentication-kubeconfig={cluster.kubeconfig}",
                    f"--authorization-kubeconfig={cluster.kubeconfig}",
                    f"--metrics-service-address=127.0.0.1:{grpc_port}",
                    f"--port={other[2]}",
                    "--zap-log-level=info",
                ],
                env,
                logs,
            )
        )
        for manifest in aggregation_manifests(ip, adapter_port, (certs / "ca.crt").read_bytes()):
            cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))

        def available() -> bool:
            keda.check_alive()
            return _external_metrics_available(cluster)

        wait_for(
            f"the APIService {API_SERVICE} to be Available",
            available,
            timeout_s=120,
            interval_s=1.0,
            describe=lambda: (
                json.dumps(cluster.get_json("get", "apiservice", API_SERVICE).get("status"))
                + "\n"
                + _tail(logs / "keda-adapter.log")
            ),
        )
        yield keda
    finally:
        # The cluster outlives KEDA (the node's later scenarios): a ScaledObject KEDA no longer
        # runs for would keep its finalizer, and its namespace Terminating.
        cluster.kubectl(
            "delete", "scaledobjects.keda.sh", "--all", "-A", "--timeout=60s", check=False
        )
        cluster.kubectl("delete", "apiservice", API_SERVICE, "--ignore-not-found", check=False)
        keda.stop()
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
