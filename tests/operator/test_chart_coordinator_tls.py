"""The chart's coordinator TLS: the generated certificate serves, and members trust it."""

from __future__ import annotations

import base64
import socket
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.abc import ResolveResult

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore
from coordinator.client.coordinator_tls import client_context
from coordinator.server import AuthConfig, create_app, start_server
from coordinator.server.tls import ReloadingTls
from staticfleet.cli import build_parser
from staticfleet.commands.operator_cmd import options_from_args
from staticfleet_operator.coordinator_cert import ServingCertIssuer
from tests.operator.test_chart import NAMESPACE, builds_helm, documents, helm, render, slow

__all__ = ["helm"]  # the fixture, used by name

pytestmark = [slow, builds_helm]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_plain_http_by_default(helm: Path) -> None:
    docs = documents(render(helm))
    container = operator_container(docs)
    assert not [a for a in container["args"] if a.startswith("--coordinator-tls")]
    assert any(a.startswith("--coordinator-url=http://") for a in container["args"])
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTP"


def test_a_cert_manager_secret_is_mounted_and_served(helm: Path) -> None:
    docs = documents(render(helm, "--set", "coordinator.tls.secretName=coordinator-cert"))
    container = operator_container(docs)
    assert (
        f"--coordinator-url=https://sf-staticfleet-coordinator.{NAMESPACE}.svc:9092"
        in (container["args"])
    )
    assert (
        "--coordinator-tls-cert-file=/etc/staticfleet/coordinator-tls/tls.crt"
        in (container["args"])
    )
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["coordinator-tls"]["secret"]["secretName"] == "coordinator-cert"
    assert not [d for d in docs if d["metadata"]["name"].endswith("coordinator-tls")]


async def test_the_operator_serves_a_certificate_from_the_generated_ca_and_members_trust_it(
    helm: Path, tmp_path: Path
) -> None:
    docs = documents(
        render(
            helm,
            "--set",
            "coordinator.tls.generate=true",
            "--set",
            "watchNamespaces={team-a,team-b}",
        )
    )
    [secret] = [
        d for d in docs if d["kind"] == "Secret" and "coordinator-tls" in d["metadata"]["name"]
    ]
    bundles = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "staticfleet-coordinator-ca"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bundles) == ["team-a", "team-b"]
    files = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    assert set(files) == {"ca.crt", "ca.key"}
    assert all(b["data"]["ca.crt"].strip() == files["ca.crt"].decode().strip() for b in bundles)
    for key, data in files.items():
        (tmp_path / key).write_bytes(data)

    # The operator's own arguments as rendered, with the Secret's directory here.
    container = operator_container(docs)
    args = [
        a.replace("/etc/staticfleet/coordinator-tls", str(tmp_path))
        for a in container["args"]
        if a.startswith("--coordinator")
    ]
    argv = ["operator", "run", *args, f"--coordinator-tls-work-dir={tmp_path / 'work'}"]
    issuer = options_from_args(build_parser().parse_args(argv)).coordinator_tls
    assert isinstance(issuer, ServingCertIssuer)

    coordinator = GroupCoordinator(config=CoordinatorConfig(), store=MemoryStore())
    running = await start_server(
        create_app(coordinator, AuthConfig(insecure=True)), tls=ReloadingTls(issuer.files)
    )
    try:
        # The name members dial (the advertised URL's), resolved here to the test server.
        host = f"sf-staticfleet-coordinator.{NAMESPACE}.svc"
        connector = aiohttp.TCPConnector(resolver=_Fixed(host, running.port))
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            http.get(
                f"https://{host}:{running.port}/readyz",
                ssl=client_context(tmp_path / "ca.crt"),
            ) as response,
        ):
            assert response.status == 200
    finally:
        await running.stop()


class _Fixed(aiohttp.abc.AbstractResolver):
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host != self.host:
            raise OSError(f"unexpected host {host}")
        return [
            {
                "hostname": host,
                "host": "127.0.0.1",
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": 0,
            }
        ]

    async def close(self) -> None:
        return None
