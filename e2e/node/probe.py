"""Does a real node go Ready beside the e2e control plane? (docs/node.md, issue 28)

Starts the control plane of e2e/controlplane.py (the API server on the node IP), a containerd
with CRI and the bridge CNI plugin (Debian's), imports the pause and staticfleet images, starts
kubelet v1.36.3 on cgroup v1 (`failCgroupV1: false`) and waits for its Node to be Ready; then
kube-proxy and CoreDNS (e2e/node/services.py). Runs a pod of the chart's image (`staticfleet
--version`, uid 10001, read-only root) and one that resolves `kubernetes.default.svc` and calls
it with its ServiceAccount token; reads both outputs through the API server (pods/log).
Every stage's outcome and time go to <workdir>/probe.json; a failed stage carries the tail of
the log that tells why. Everything is torn down at the end, also on failure: the pod, kubelet,
containerd, CoreDNS, kube-proxy (and its chains), the control plane, the bridge, network
namespaces, mounts, cgroups and the kernel settings kubelet changes.

    python -m e2e.node.probe    # root; binaries: e2e/build.sh, scripts/node/build.sh
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.controlplane import ControlPlane, free_ports, running_control_plane
from e2e.node import services
from e2e.node.containerd import (
    Containerd,
    containerd2_cri_config,
    containerd16_cri_config,
    leave_machine_clean,
    running_containerd,
)
from e2e.node.scheduler import running_scheduler
from staticfleet.processes import terminate

ROOT = Path(__file__).resolve().parents[2]
IMAGE_ARCHIVE = ROOT / "build" / "image" / "staticfleet.oci.tar"


def build_image(*clients: str) -> Path:
    """The chart's image from the working tree, as an OCI archive, and the Kafka client images
    named (image/clients.Dockerfile's targets, `client_archive`). Built every time, not only
    when the archive is absent: an archive from older sources ran old code on the node (a
    member without a flag its pod template set). The script reuses unchanged layers and
    keeps the archive of an unchanged image, so a build with nothing new costs seconds."""
    script = ROOT / "scripts" / "build-image.sh"
    subprocess.run([str(script), *clients], check=True, timeout=1800)
    return IMAGE_ARCHIVE


def client_archive(client: str) -> Path:
    """The OCI archive of a client image `build_image(client)` wrote."""
    return IMAGE_ARCHIVE.with_name(f"staticfleet-{client}.oci.tar")


NODE_BIN = ROOT / "build" / "node" / "bin"
NODE_NAME = "staticfleet-node"
POD_CIDR = "10.244.0.0/24"
BRIDGE = "sfnode0"
CNI_NETWORK = "staticfleet-node"
# The kernel settings kubelet sets at start (protectKernelDefaults: false), and forwarding,
# which the bridge plugin turns on for its gateway; all put back at the end.
KERNEL_SETTINGS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "net.ipv4.ip_forward",
    "net.ipv6.conf.all.forwarding",
    *services.KERNEL_SETTINGS,
)
# kubelet's own iptables chains (its canary, and KUBE-FIREWALL, which drops packets to
# 127.0.0.0/8 from other sources), made in every table of iptables and ip6tables.
IPTABLES = ("iptables", "ip6tables")
IPTABLES_TABLES = ("filter", "nat", "mangle")
NETNS_DIR = Path("/run/netns")
# Fixed host paths a node run makes whatever its configured directories: kubelet's
# /var/lib/kubelet/device-plugins, and libcni's result cache /var/lib/cni (containerd's CRI).
HOST_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/pods"),
    Path("/etc/kubernetes"),
    Path("/var/lib/cni"),
)


class ProbeError(RuntimeError):
    pass


def bridge_address() -> str:
    """This host's IPv4 address on the pods' bridge (their gateway), given by the bridge
    plugin at the first pod's CNI ADD: where pods reach a process of this host."""
    shown = subprocess.run(
        ["ip", "-4", "-j", "addr", "show", "dev", BRIDGE],
        capture_output=True,
        text=True,
        check=False,
    )
    for link in json.loads(shown.stdout or "[]"):
        for address in link.get("addr_info") or []:
            return str(address["local"])
    raise ProbeError(f"the bridge {BRIDGE} has no IPv4 address yet: {shown.stderr.strip()}")


def cni_conflist(ipam_dir: Path) -> dict[str, Any]:
    """One bridge with host-local addresses from POD_CIDR, the pods' default gateway; no NAT
    rules (ipMasq false: pods reach this host and the Services, not the outside)."""
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                # A default route via the bridge: Service ClusterIPs (10.96.0.0/16) are
                # outside the pod network and reach the host's kube-proxy rules through it.
                "isDefaultGateway": True,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_config(cp: ControlPlane, workdir: Path, runtime: Path, ports: list[int]) -> str:
    """KubeletConfiguration (v1beta1) as JSON (YAML's subset)."""
    port, healthz = ports
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This machine's cgroups are v1 (docs/node.md); kubelet v1.35+ refuses them by default.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{runtime}",
        # The node IP, where the API server reaches it for `kubectl logs` (pods/log) with its
        # --kubelet-client-certificate; the serving certificate is the kubelet's self-signed
        # one (the API server is not given --kubelet-certificate-authority).
        "address": cp.node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(cp.ca_cert)},
        },
        # Only clients with a certificate of the cluster CA get in (anonymous off): the API
        # server and the admin. AlwaysAllow rather than Webhook: one fewer moving part, and
        # no node-level authorization is under test here.
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False,
        "podCIDR": POD_CIDR,
        "clusterDomain": services.CLUSTER_DOMAIN,
        "clusterDNS": [services.DNS_SERVICE_IP],
        "resolvConf": "/etc/resolv.conf",
        "podLogsDir": str(workdir / "pod-logs"),
        # A shared build machine's disk and memory: no eviction of our one pod for them.
        "evictionHard": {
            "memory.available": "1%",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
    }
    return json.dumps(config, indent=2)


class Probe:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.stages: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def stage(self, name: str, log: Callable[[], str] | None = None) -> Iterator[dict[str, Any]]:
        entry: dict[str, Any] = {"stage": name, "outcome": "running"}
        self.stages.append(entry)
        started = time.monotonic()
        print(f"node probe: {name} ...", flush=True)
        try:
            yield entry
        except BaseException as exc:
            entry["outcome"] = "failed"
            entry["error"] = str(exc)[-6000:]
            if log is not None:
                with contextlib.suppress(Exception):
                    entry["log_tail"] = log()
            raise
        else:
            entry["outcome"] = "ok"
        finally:
            entry["seconds"] = round(time.monotonic() - started, 1)
            print(f"node probe: {name} ... {entry['outcome']} ({entry['seconds']}s)", flush=True)

    def write(self) -> Path:
        path = self.workdir / "probe.json"
        path.write_text(json.dumps({"stages": self.stages}, indent=2) + "\n")
        return path


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _api(cp: ControlPlane, method: str, path: str, body: object | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{cp.server}{path}", data=data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, context=cp.ssl_context(), timeout=10) as resp:
        return json.loads(resp.read() or b"null")


def _wait(
    what: str, check: Callable[[], bool], alive: Callable[[], None], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        alive()
        try:
            if check():
                return
        except ProbeError:
            raise
        except Exception:  # the API server or the node not there yet: try again
            pass
        if time.monotonic() > deadline:
            raise ProbeError(f"no {what} after {timeout_s}s")
        time.sleep(1)


def _node_ready(cp: ControlPlane) -> bool:
    node = _api(cp, "GET", f"/api/v1/nodes/{NODE_NAME}")
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


def _pod(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "image-probe", "namespace": "default"},
        "spec": {
            "nodeName": NODE_NAME,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsUser": 10001, "runAsGroup": 10001, "runAsNonRoot": True},
            "containers": [
                {
                    "name": "staticfleet",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "args": ["--version"],
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                    },
                }
            ],
        },
    }


# Run in a pod of the image with its ServiceAccount token: resolves the API server's Service
# name through the cluster DNS and calls it at that name (in-cluster config, as the operator
# does). /version is open to any authenticated client (200); listing pods is not granted to
# the default ServiceAccount (403). Both prove the token was accepted.
IN_CLUSTER_SCRIPT = """\
import json, socket, ssl, urllib.error, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(sa + "/token").read()
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
def status(path):
    req = urllib.request.Request("https://kubernetes.default.svc" + path)
    req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
name = "kubernetes.default.svc.cluster.local"
print(json.dumps({
    "resolved": socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)[0][4][0],
    "version": status("/version"),
    "pods": status("/api/v1/namespaces/default/pods"),
}, sort_keys=True))
"""


def _in_cluster_pod(image: str) -> dict[str, Any]:
    pod = _pod(image)
    pod["metadata"]["name"] = "in-cluster-probe"
    spec = pod["spec"]
    spec["automountServiceAccountToken"] = True
    container = spec["containers"][0]
    container["command"] = ["python", "-c", IN_CLUSTER_SCRIPT]
    container.pop("args")
    return pod


def _run_pod(
    cp: ControlPlane,
    stack: contextlib.ExitStack,
    body: dict[str, Any],
    entry: dict[str, Any],
    alive: Callable[[], None],
    timeout_s: float,
) -> None:
    """Create the pod, wait for Succeeded, and record its output read through the API
    (GET pods/log: the API server fetches it from the kubelet, as `kubectl logs` does)."""
    name = body["metadata"]["name"]
    _api(cp, "POST", "/api/v1/namespaces/default/pods", body)
    stack.callback(_delete_pod, cp, name)

    def succeeded() -> bool:
        pod = _api(cp, "GET", f"/api/v1/namespaces/default/pods/{name}")
        entry["phase"] = pod["status"].get("phase")
        entry["container_statuses"] = pod["status"].get("containerStatuses")
        if entry["phase"] == "Failed":
            entry["output"] = _pod_log(cp, name).splitlines()
            raise ProbeError(f"pod failed: {json.dumps(pod['status'])}")
        return bool(entry["phase"] == "Succeeded")

    _wait(f"Succeeded pod {name}", succeeded, alive, timeout_s)
    entry["output"] = _pod_log(cp, name).splitlines()


def _pod_log(cp: ControlPlane, name: str) -> str:
    req = urllib.request.Request(f"{cp.server}/api/v1/namespaces/default/pods/{name}/log")
    try:
        with urllib.request.urlopen(req, context=cp.ssl_context(), timeout=10) as resp:
            return str(resp.read().decode())
    except urllib.error.HTTPError as err:
        raise ProbeError(f"GET pods/{name}/log: {err.code} {err.read().decode()}") from err


def kernel_settings() -> dict[str, str]:
    out = {}
    for key in KERNEL_SETTINGS:
        proc = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, check=False)
        out[key] = proc.stdout.strip()
    return out


def _restore(settings: dict[str, str]) -> None:
    for key, value in settings.items():
        if value:
            subprocess.run(["sysctl", "-q", "-w", f"{key}={value}"], check=False)


def kube_chains() -> set[tuple[str, str, str]]:
    """(binary, table, chain) of every KUBE-* chain there is now."""
    chains = set()
    for binary in IPTABLES:
        for table in IPTABLES_TABLES:
            proc = subprocess.run(
                [binary, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False
            )
            for line in proc.stdout.splitlines():
                if line.startswith("-N KUBE-"):
                    chains.add((binary, table, line.split()[1]))
    return chains


def _remove_chains(chains: set[tuple[str, str, str]]) -> None:
    """Delete the rules that jump to these chains, then the chains themselves."""
    for binary, table, chain in sorted(chains):
        rules = subprocess.run(
            [binary, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False
        ).stdout.splitlines()
        for rule in rules:
            words = shlex.split(rule)  # kube-proxy's rules carry quoted comments
            if words[:1] == ["-A"] and words[-2:] == ["-j", chain]:
                subprocess.run([binary, "-w", "-t", table, "-D", *words[1:]], check=False)
        subprocess.run([binary, "-w", "-t", table, "-F", chain], check=False)
    for binary, table, chain in sorted(chains):
        subprocess.run([binary, "-w", "-t", table, "-X", chain], check=False)


def _clean_network(netns_before: set[str]) -> None:
    subprocess.run(["ip", "link", "delete", BRIDGE], check=False, capture_output=True)
    if NETNS_DIR.is_dir():
        for ns in NETNS_DIR.iterdir():
            if ns.name not in netns_before:
                subprocess.run(["umount", str(ns)], check=False, capture_output=True)
                with contextlib.suppress(OSError):
                    ns.unlink()
        if not netns_before:
            with contextlib.suppress(OSError):
                NETNS_DIR.rmdir()


@contextlib.contextmanager
def _kubelet(cp: ControlPlane, cd: Containerd, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pod-logs").mkdir(exist_ok=True)
    config = workdir / "config.yaml"
    config.write_text(kubelet_config(cp, workdir, cd.address, free_ports(2)))
    log = workdir / "kubelet.log"
    argv = [
        str(NODE_BIN / "kubelet"),
        f"--config={config}",
        f"--kubeconfig={cp.kubeconfig}",
        f"--root-dir={workdir / 'root'}",
        f"--cert-dir={workdir / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={cp.node_ip}",
        "--v=2",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["nice", "-n", "10", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        terminate(proc, 30)


@dataclass
class Node:
    """A running node: its control plane, the staticfleet image's name in its containerd,
    and what a caller needs to run pods on it and stop them before the node stops."""

    cp: ControlPlane
    containerd: Containerd
    image: str
    stack: contextlib.ExitStack  # callbacks run before the kubelet stops
    alive: Callable[[], None]  # raises ProbeError once the kubelet has exited
    kubelet_log: Path


@contextlib.contextmanager
def running_node(probe: Probe, timeout_s: float, runtime: str, runc: Path) -> Iterator[Node]:
    """The control plane, kube-scheduler, containerd, kubelet (Node Ready), kube-proxy and
    CoreDNS, each a stage of `probe`; all torn down afterwards, and the host put back as it
    was, however the body ends."""
    workdir = probe.workdir
    # Every run starts afresh (the last one unmounted everything under workdir).
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    settings = kernel_settings()
    netns_before = set(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else set()
    paths_before = {p for p in HOST_PATHS if p.exists()}
    chains_before = kube_chains()
    try:
        with contextlib.ExitStack() as stack:
            with probe.stage("control plane (etcd, kube-apiserver, kube-controller-manager)"):
                cp = stack.enter_context(
                    running_control_plane(workdir / "control-plane", real_node=True)
                )
            sched_dir = workdir / "scheduler"
            with probe.stage("kube-scheduler", log=lambda: _tail(sched_dir / "kube-scheduler.log")):
                stack.enter_context(running_scheduler(cp, sched_dir, timeout_s))
            cni_dir = workdir / "cni" / "net.d"
            cni_dir.mkdir(parents=True, exist_ok=True)
            conflist = cni_conflist(workdir / "cni" / "ipam")
            (cni_dir / "10-staticfleet.conflist").write_text(json.dumps(conflist, indent=2))
            ctd_dir = workdir / "containerd"
            v2 = runtime == "v2"
            config = (containerd2_cri_config if v2 else containerd16_cri_config)(
                ctd_dir, cni_dir, runc
            )
            with probe.stage(
                f"containerd ({runtime}) with CRI", log=lambda: _tail(ctd_dir / "containerd.log")
            ):
                cd = stack.enter_context(
                    running_containerd(
                        ctd_dir,
                        namespace="k8s.io",
                        config=config,
                        bin_dir=NODE_BIN if v2 else None,
                    )
                )
            with probe.stage("import the pause and staticfleet images") as entry:
                cd.import_image(ROOT / "build" / "node" / "pause.oci.tar")
                image = cd.import_image(IMAGE_ARCHIVE)
                entry["image"] = image
            kubelet_dir = workdir / "kubelet"
            kubelet_log = kubelet_dir / "kubelet.log"
            with probe.stage("kubelet: Node Ready", log=lambda: _tail(kubelet_log, 60)):
                kubelet = stack.enter_context(_kubelet(cp, cd, kubelet_dir))

                def alive() -> None:
                    if kubelet.poll() is not None:
                        raise ProbeError(f"kubelet exited {kubelet.returncode}")

                _wait(f"Ready Node {NODE_NAME}", lambda: _node_ready(cp), alive, timeout_s)
            net_dir = workdir / "service-network"
            with probe.stage(
                "kube-proxy (iptables), after the Node it waits for",
                log=lambda: _tail(net_dir / "kube-proxy.log"),
            ):
                stack.enter_context(
                    services.running_kube_proxy(cp, net_dir, NODE_NAME, POD_CIDR, timeout_s)
                )
            with probe.stage(
                "CoreDNS and the kube-dns Service", log=lambda: _tail(net_dir / "coredns.log")
            ) as entry:
                dns = stack.enter_context(services.running_coredns(cp, net_dir, timeout_s))
                services.publish_dns_service(cp, dns)
                entry["coredns"] = f"{dns.ip}:{dns.port}"
            yield Node(cp, cd, image, stack, alive, kubelet_log)
    finally:
        _clean_network(netns_before)
        if kube_chains() - chains_before:
            (workdir / "service-network").mkdir(parents=True, exist_ok=True)
            services.cleanup_kube_proxy(workdir / "service-network" / "kube-proxy-cleanup.log")
        _remove_chains(kube_chains() - chains_before)
        leave_machine_clean(workdir / "kubelet", "kubepods", shim_dir_existed=True)
        _restore(settings)
        for path in HOST_PATHS:
            if path.exists() and path not in paths_before:
                shutil.rmtree(path, ignore_errors=True)


def run(workdir: Path, timeout_s: float, runtime: str, runc: Path) -> int:
    probe = Probe(workdir)
    ok = False
    try:
        with running_node(probe, timeout_s, runtime, runc) as node:
            with probe.stage(
                "pod of the chart's image: staticfleet --version",
                log=lambda: _tail(node.kubelet_log, 60),
            ) as entry:
                _run_pod(node.cp, node.stack, _pod(node.image), entry, node.alive, timeout_s)
            with probe.stage(
                "pod: the API server by its Service name, with its ServiceAccount token",
                log=lambda: _tail(node.kubelet_log, 60),
            ) as entry:
                pod = _in_cluster_pod(node.image)
                _run_pod(node.cp, node.stack, pod, entry, node.alive, timeout_s)
            ok = True
    except Exception as exc:  # the stage has recorded it; the teardown still ran
        print(f"node probe: FAILED: {exc}", file=sys.stderr)
    finally:
        print(f"node probe: {'Ready' if ok else 'FAILED'}; stages in {probe.write()}")
    return 0 if ok else 1


def _delete_pod(cp: ControlPlane, name: str) -> None:
    """Delete the pod through the API, so kubelet tears its sandbox down (CNI DEL)."""
    with contextlib.suppress(Exception):
        _api(cp, "DELETE", f"/api/v1/namespaces/default/pods/{name}")

    def gone() -> bool:
        try:
            _api(cp, "GET", f"/api/v1/namespaces/default/pods/{name}")
        except urllib.error.HTTPError as err:
            return err.code == 404
        return False

    with contextlib.suppress(ProbeError):
        _wait(f"deleted pod {name}", gone, lambda: None, 60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.node.probe", description=__doc__)
    parser.add_argument("--workdir", type=Path, default=ROOT / "build" / "node" / "run")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per stage wait")
    parser.add_argument(
        "--containerd",
        choices=("debian", "v2"),
        default="debian",
        help="Debian's containerd 1.6 (default) or v2 from scripts/node/build.sh",
    )
    parser.add_argument(
        "--runc", type=Path, default=Path("/usr/bin/runc"), help="the OCI runtime binary"
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error(
            "needs root: kubelet and containerd mount, make cgroups and network namespaces"
        )
    return run(args.workdir.resolve(), args.timeout, args.containerd, args.runc.resolve())


if __name__ == "__main__":
    sys.exit(main())
