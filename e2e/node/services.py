"""The node's Service network: kube-proxy and a cluster DNS (docs/node.md, issue 28).

kube-proxy v1.36.3 (scripts/node/build.sh) in iptables mode programs the Services' ClusterIPs
on this host: the `kubernetes` Service (10.96.0.1:443 -> the API server at the node IP, where
e2e/controlplane.py binds it with real_node) and `kube-system/kube-dns` (10.96.0.10:53).

CoreDNS (e2e/node/go/coredns) runs as a host process, not a pod: it needs no image of its own
(no registry reaches here; a CoreDNS image would be a second image build for one binary), it
starts before the kubelet (so the first pod already resolves), and it is the node's process
to stop like kube-proxy's. It listens on the node IP at a free port; `kube-dns` is a Service
without a selector whose EndpointSlice names that address, so pods use the ClusterIP the
kubelet's `clusterDNS` gives them, as on any cluster.

    with running_kube_proxy(cp, workdir) as kp, running_coredns(cp, workdir) as dns:
        publish_dns_service(cp, dns)
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.controlplane import ControlPlane, free_ports
from staticfleet.processes import terminate

ROOT = Path(__file__).resolve().parents[2]
NODE_BIN = ROOT / "build" / "node" / "bin"
CLUSTER_DOMAIN = "cluster.local"
# The tenth address of e2e/controlplane.py's 10.96.0.0/16, as kubeadm's clusterDNS.
DNS_SERVICE_IP = "10.96.0.10"
# Kernel settings kube-proxy could change (and does not, with the config below); the probe
# records them before and after.
KERNEL_SETTINGS = (
    "net.ipv4.conf.all.route_localnet",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
    "net.bridge.bridge-nf-call-iptables",
)


class ServiceNetworkError(RuntimeError):
    pass


def kube_proxy_config(
    cp: ControlPlane, node_name: str, pod_cidr: str, healthz: int, metrics: int
) -> str:
    """KubeProxyConfiguration (v1alpha1) as JSON (YAML's subset)."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        # No `nft` binary here, so not nftables mode; ipvs would add a dummy interface and
        # kernel modules for nothing a one-node cluster needs.
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(cp.kubeconfig)},
        "hostnameOverride": node_name,
        "clusterCIDR": pod_cidr,
        "healthzBindAddress": f"127.0.0.1:{healthz}",
        "metricsBindAddress": f"127.0.0.1:{metrics}",
        # Every Service packet is masqueraded: a pod reaching another pod on the same bridge
        # through a ClusterIP then gets the reply back through the host (de-NATed by
        # conntrack) without br_netfilter's bridge-nf-call-iptables, a kernel setting the
        # host would keep after us.
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
        # 0 = leave the kernel's conntrack table size and timeouts as they are.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
    return json.dumps(config, indent=2)


def _get_json(url: str, timeout: float = 3.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def _wait_until(what: str, check: Any, proc: subprocess.Popen[bytes], log: Path, t: float) -> None:
    deadline = time.monotonic() + t
    while True:
        if proc.poll() is not None:
            raise ServiceNetworkError(f"{what}: exited {proc.returncode}; log {log}")
        with contextlib.suppress(Exception):
            if check():
                return
        if time.monotonic() > deadline:
            raise ServiceNetworkError(f"no {what} after {t}s; log {log}")
        time.sleep(0.5)


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            ["nice", "-n", "10", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@contextlib.contextmanager
def running_kube_proxy(
    cp: ControlPlane, workdir: Path, node_name: str, pod_cidr: str, timeout_s: float = 90
) -> Iterator[subprocess.Popen[bytes]]:
    """kube-proxy, healthy (its /healthz); its iptables chains are the caller's to remove."""
    workdir.mkdir(parents=True, exist_ok=True)
    healthz, metrics = free_ports(2)
    config = workdir / "kube-proxy.yaml"
    config.write_text(kube_proxy_config(cp, node_name, pod_cidr, healthz, metrics))
    log = workdir / "kube-proxy.log"
    proc = _start([str(NODE_BIN / "kube-proxy"), f"--config={config}", "--v=2"], log)
    try:
        # /livez: the rules are synced. /healthz also wants its Node, which the kubelet
        # registers later (503 with "nodeEligible": false until then).
        _wait_until(
            "live kube-proxy",
            lambda: _get_json(f"http://127.0.0.1:{healthz}/livez").get("healthy") is True,
            proc,
            log,
            timeout_s,
        )
        yield proc
    finally:
        terminate(proc, 15)


def cleanup_kube_proxy(log: Path) -> None:
    """`kube-proxy --cleanup`: its own removal of its chains and jumps (the probe then
    removes what is left, KUBE-FIREWALL among them)."""
    binary = NODE_BIN / "kube-proxy"
    if binary.exists():
        with open(log, "ab") as out:
            subprocess.run(
                [str(binary), "--cleanup"], stdout=out, stderr=subprocess.STDOUT, check=False
            )


@dataclass(frozen=True)
class Dns:
    ip: str  # the node IP CoreDNS listens on
    port: int
    proc: subprocess.Popen[bytes]


def corefile(cp: ControlPlane, port: int, health: int, ready: int) -> str:
    return f"""\
.:{port} {{
    bind {cp.node_ip}
    errors
    health 127.0.0.1:{health}
    ready 127.0.0.1:{ready}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {cp.kubeconfig} e2e
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
    cache 30
}}
"""


def _free_port_on(ip: str) -> int:
    """A port free for both TCP and UDP on ip (DNS serves both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind((ip, 0))
            port = int(tcp.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind((ip, port))
                except OSError:
                    continue
                return port
    raise ServiceNetworkError(f"no port free for TCP and UDP on {ip}")


@contextlib.contextmanager
def running_coredns(cp: ControlPlane, workdir: Path, timeout_s: float = 60) -> Iterator[Dns]:
    """CoreDNS serving cluster.local from the API server, ready (its /ready)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = _free_port_on(cp.node_ip)
    health, ready = free_ports(2)
    path = workdir / "Corefile"
    path.write_text(corefile(cp, port, health, ready))
    log = workdir / "coredns.log"
    proc = _start([str(NODE_BIN / "coredns"), "-conf", str(path)], log)
    try:

        def is_ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{ready}/ready", timeout=3) as r:
                return int(r.status) == 200

        _wait_until("ready CoreDNS", is_ready, proc, log, timeout_s)
        yield Dns(cp.node_ip, port, proc)
    finally:
        terminate(proc, 10)


def dns_service_objects(dns: Dns) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object): the kube-dns Service (no selector) and its EndpointSlice."""
    ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system"},
        "spec": {
            "clusterIP": DNS_SERVICE_IP,
            "ports": [
                {"name": n, "protocol": p, "port": 53, "targetPort": dns.port} for n, p in ports
            ],
        },
    }
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kube-dns-host",
            "namespace": "kube-system",
            "labels": {
                "kubernetes.io/service-name": "kube-dns",
                "endpointslice.kubernetes.io/managed-by": "staticfleet-e2e-node",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [dns.ip], "conditions": {"ready": True}}],
        "ports": [{"name": n, "protocol": p, "port": dns.port} for n, p in ports],
    }
    return [
        ("/api/v1/namespaces/kube-system/services", service),
        ("/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices", slice_),
    ]


def publish_dns_service(cp: ControlPlane, dns: Dns) -> None:
    for collection, body in dns_service_objects(dns):
        req = urllib.request.Request(
            f"{cp.server}{collection}", data=json.dumps(body).encode(), method="POST"
        )
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=cp.ssl_context(), timeout=10):
                pass
        except urllib.error.HTTPError as err:
            raise ServiceNetworkError(
                f"POST {collection}: {err.code} {err.read().decode(errors='replace')}"
            ) from err
