"""The node agent's pure parts: no API server, no processes; and its pod watch against
kmock's Kubernetes emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kmock
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from e2e.kube_api import Kube, watch_pods
from e2e.node_agent import (
    container_argv,
    exit_code_of,
    expand,
    field_ref,
    image_repository_name,
    image_runnable,
    kept_environment,
    longest_first,
    map_executable,
    parse_quantity,
    probe_port,
    resource_field,
    rewrite_path,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("$(A)", "1"),
        ("x-$(A)-$(B)", "x-1-two"),
        ("$$(A)", "$(A)"),
        ("$$", "$"),
        ("$(MISSING)", "$(MISSING)"),
        ("$(A", "$(A"),
        ("a$", "a$"),
        ("$x", "$x"),
        ("$$$(A)", "$1"),
        ("", ""),
        ("no refs", "no refs"),
    ],
)
def test_expand_follows_kubernetes_rules(value: str, expected: str) -> None:
    assert expand(value, {"A": "1", "B": "two"}) == expected


@pytest.mark.parametrize(
    ("image", "name", "runnable"),
    [
        ("staticfleet:0.1.0", "staticfleet", True),
        ("staticfleet", "staticfleet", True),
        ("ghcr.io/x/staticfleet:1", "staticfleet", True),
        ("localhost:5000/staticfleet", "staticfleet", True),
        ("registry/staticfleet@sha256:abc", "staticfleet", True),
        ("busybox:1.36", "busybox", False),
        ("staticfleet/other:1", "other", False),
    ],
)
def test_image_name(image: str, name: str, runnable: bool) -> None:
    assert image_repository_name(image) == name
    assert image_runnable(image) is runnable


def test_command_and_args_semantics() -> None:
    assert container_argv({}) == ["staticfleet", "operator", "run"]
    assert container_argv({"args": ["--help"]}) == ["staticfleet", "--help"]
    assert container_argv({"args": []}) == ["staticfleet"]
    assert container_argv({"command": ["staticfleet", "member", "run"]}) == [
        "staticfleet",
        "member",
        "run",
    ]
    assert container_argv({"command": ["sh"], "args": ["-c", "x"]}) == ["sh", "-c", "x"]


def test_executable_mapping(tmp_path: Path) -> None:
    exe = tmp_path / "bin" / "staticfleet"
    assert map_executable(["staticfleet", "x"], exe) == [str(exe), "x"]
    assert map_executable(["/usr/local/bin/staticfleet"], exe) == [str(exe)]
    assert map_executable(["python3", "-V"], exe) == [str(tmp_path / "bin" / "python"), "-V"]
    assert map_executable(["sleep", "1"], exe) == ["sleep", "1"]


def test_path_rewriting(tmp_path: Path) -> None:
    data, certs, tmp = tmp_path / "data", tmp_path / "certs", tmp_path / "tmp"
    mounts = longest_first([("/data", data), ("/certs/", certs), ("/tmp", tmp)])
    assert rewrite_path("/data/coordinator.db", mounts) == f"{data}/coordinator.db"
    assert rewrite_path("/data", mounts) == str(data)
    assert rewrite_path("sqlite:///data/x.db", mounts) == f"sqlite://{data}/x.db"
    assert rewrite_path("--store=sqlite:///data/x.db", mounts) == f"--store=sqlite://{data}/x.db"
    cert = rewrite_path("--webhook-cert=/certs/tls.crt", mounts)
    assert cert == f"--webhook-cert={certs}/tls.crt"
    assert rewrite_path("/tmp/sock", mounts) == f"{tmp}/sock"
    # Not under a mount, or not a path at all: unchanged.
    assert rewrite_path("/database", mounts) == "/database"
    assert rewrite_path("/tmpfile", mounts) == "/tmpfile"
    assert rewrite_path("http://data/x", mounts) == "http://data/x"
    assert rewrite_path("memory://", mounts) == "memory://"
    assert rewrite_path("x /data", mounts) == "x /data"


def test_longest_mount_wins(tmp_path: Path) -> None:
    mounts = longest_first([("/var", tmp_path / "a"), ("/var/run/x", tmp_path / "b")])
    assert rewrite_path("/var/run/x/token", mounts) == f"{tmp_path}/b/token"
    assert rewrite_path("/var/lib", mounts) == f"{tmp_path}/a/lib"


POD = {
    "metadata": {
        "name": "web-0",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {"app": "web", "tier": "x"},
        "annotations": {"a/b": "c"},
    },
    "spec": {"nodeName": "e2e-node", "serviceAccountName": "sa"},
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("metadata.name", "web-0"),
        ("metadata.namespace", "ns"),
        ("metadata.uid", "u-1"),
        ("metadata.labels['app']", "web"),
        ("metadata.annotations['a/b']", "c"),
        ("metadata.labels['nope']", None),
        ("metadata.labels", 'app="web"\ntier="x"'),
        ("spec.nodeName", "e2e-node"),
        ("spec.serviceAccountName", "sa"),
        ("status.podIP", "10.1.2.3"),
        ("status.hostIP", "10.1.2.3"),
        ("status.podIPs", "10.1.2.3"),
    ],
)
def test_field_refs(path: str, expected: str | None) -> None:
    assert field_ref(POD, path, "10.1.2.3") == expected


def test_quantities_and_resource_fields() -> None:
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("128Mi") == 128 * 2**20
    assert parse_quantity("2") == 2
    container = {"resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}}}
    alloc = {"cpu": "2", "memory": "4Gi"}
    assert resource_field(container, {"resource": "limits.cpu"}, alloc) == "2"
    assert resource_field(container, {"resource": "requests.cpu"}, alloc) == "2"
    ref = {"resource": "limits.memory", "divisor": "1Mi"}
    assert resource_field(container, ref, alloc) == "1024"
    assert resource_field({}, {"resource": "limits.memory", "divisor": "1Gi"}, alloc) == "4"


def test_probe_ports_by_number_and_name() -> None:
    container = {"name": "c", "ports": [{"name": "health", "containerPort": 8080}]}
    assert probe_port(9092, container) == 9092
    assert probe_port("9092", container) == 9092
    assert probe_port("health", container) == 8080
    with pytest.raises(ValueError):
        probe_port("nope", container)


def test_exit_codes_and_kept_env() -> None:
    assert exit_code_of(0) == 0
    assert exit_code_of(3) == 3
    assert exit_code_of(-9) == 137
    assert exit_code_of(-15) == 143
    kept = kept_environment({"PATH": "/bin", "HOME": "/h", "PYTHONPATH": "x", "SECRET": "s"})
    assert kept == {"PATH": "/bin", "HOME": "/h", "PYTHONPATH": "x"}


def _pod(name: str) -> dict[str, Any]:
    spec = {"containers": [{"name": "c", "image": "i"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def test_the_pod_watch_relists_when_its_resource_version_expired() -> None:
    """A 410 Gone (the watch's resourceVersion expired) makes the watch list again and
    report what changed meanwhile, so the node agent's view of its pods stays complete."""
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        emulator.resources["v1/pods"] = kmock.ResourceInfo(
            kind="Pod", singular="pod", namespaced=True, verbs={"list", "watch", "create", "delete"}
        )
        expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        # The library sends watch=True (kube-apiserver takes it; kmock's emulator does not
        # see a watch in it, so the test serves the watch's answer itself).
        watching = emulator[lambda r: str(r.params.get("watch", "")).lower() == "true"]
        watching[:1] << {"type": "ERROR", "object": expired}
        kube = Kube(ApiClient(Configuration(host=str(server.url).rstrip("/"))))
        pods = "/api/v1/namespaces/ns/pods"
        try:
            for name in ("a", "b"):
                await kube.client.call_api(pods, "POST", body=_pod(name), auth_settings=[])
            events = watch_pods(kube, timeout_seconds=5)
            first = [await anext(events), await anext(events)]
            assert sorted((kind, p["metadata"]["name"]) for kind, p in first) == [
                ("ADDED", "a"),
                ("ADDED", "b"),
            ]
            # Meanwhile (before the watch starts): a goes, c comes.
            await kube.client.call_api(f"{pods}/a", "DELETE", auth_settings=[])
            await kube.client.call_api(pods, "POST", body=_pod("c"), auth_settings=[])
            after = [await anext(events), await anext(events)]
            assert sorted((kind, p["metadata"]["name"]) for kind, p in after) == [
                ("ADDED", "c"),
                ("DELETED", "a"),
            ]
            await events.aclose()
        finally:
            await kube.close()
