"""The operator's Kubernetes client (kube.py): kubernetes_asyncio over Kopf's credentials.

A 401 makes Kopf log in again (the real Kopf, its login handlers run by its authenticator)
and the call is retried once with the new credentials, by the same `KubeApi` object; the
client of the refused credentials is closed. API errors are typed. Certificate data given
inline never stays on disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import kmock
import kopf
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kopf._cogs.structs.credentials import Vault
from kubernetes_asyncio.client import CoreV1Api

from staticfleet_operator.kube import (
    USER_AGENT,
    Conflict,
    KubeApi,
    KubeError,
    NotFound,
    Unauthorized,
    api_client,
)
from tests.operator.kube_harness import (
    GONE,
    NAMESPACE,
    declare_resources,
    kopf_watch,
    made_by,
    managed_spec,
    running_cluster,
)


@dataclass
class Login:
    """A login handler handing out a new token each time (as a rotated service-account
    token file would), and the tokens the emulator refuses for the operator's client."""

    url: str
    refused: set[str] = field(default_factory=set)
    tokens: list[str] = field(default_factory=list)

    def login(self, **_: Any) -> kopf.ConnectionInfo:
        self.tokens.append(f"token-{len(self.tokens) + 1}")
        return kopf.ConnectionInfo(server=self.url, token=self.tokens[-1])

    def refuses(self, request: kmock.Request) -> bool:
        headers = {key.lower(): value for key, value in request.headers.items()}
        token = str(headers.get("authorization", "")).removeprefix("Bearer ")
        return made_by(request, USER_AGENT) and token in self.refused


@contextlib.asynccontextmanager
async def kopf_logged_in() -> AsyncIterator[tuple[kmock.KubernetesEmulator, Login, Vault]]:
    """kmock's emulator, and Kopf running with only a login handler and the given vault."""
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        declare_resources(emulator)
        login = Login(str(server.url).rstrip("/"))
        emulator[login.refuses] << 401
        registry = kopf.OperatorRegistry()
        kopf.on.login(registry=registry)(login.login)
        settings = kopf.OperatorSettings()
        settings.posting.enabled = False
        settings.scanning.disabled = True
        vault = Vault()
        stop = asyncio.Event()
        task = asyncio.create_task(
            kopf.operator(
                registry=registry,
                settings=settings,
                standalone=True,
                namespaces=[NAMESPACE],
                vault=vault,
                stop_flag=stop,
            )
        )
        try:
            yield emulator, login, vault
        finally:
            stop.set()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, 10)


def _ours(emulator: kmock.KubernetesEmulator) -> list[str]:
    """The Authorization of each request the operator's client made."""
    return [
        {k.lower(): v for k, v in r.headers.items()}.get("authorization", "")
        for r in list(emulator)
        if made_by(r, USER_AGENT)
    ]


async def test_a_401_makes_kopf_log_in_again_and_the_call_is_retried_once() -> None:
    async with kopf_logged_in() as (emulator, login, vault):
        kube = KubeApi(vault)  # held across the re-login, as the handlers hold op.kube
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        await kube.create_pod(NAMESPACE, pod)
        [old] = list(kube._clients)
        login.refused.add("token-1")  # the token expires (rotated on disk, say)
        listed = await kube.list_pods(NAMESPACE, {})
        assert [p["metadata"]["name"] for p in listed] == ["p"]
        assert login.tokens == ["token-1", "token-2"]
        assert _ours(emulator) == ["Bearer token-1"] * 2 + ["Bearer token-2"]
        # The refused credentials' client was closed with them; later calls use the new.
        assert old.rest_client.pool_manager.closed
        assert await kube.get_secret(NAMESPACE, "absent") is None
        assert _ours(emulator)[3:] == ["Bearer token-2"]
        assert login.tokens == ["token-1", "token-2"]
        await kube.close()


async def test_the_operator_logs_in_again_and_replaces_a_pod_after_its_token_expired() -> None:
    """The whole operator: its passes hold `op.kube` across Kopf's re-login and go on.

    The re-login closes Kopf's watches (ConsumerGroups) with the old credentials' sessions,
    and Kopf resumes them from their resourceVersion. kmock cannot resume a watch: it would
    go on from now — a real API server replays what was in flight. The nearest kmock can play
    is a server that no longer holds that version: the first watch of each kind after the
    re-login is answered 410 Gone and Kopf lists again. The pods' watch is the operator's
    own informer's (one client per watch, not closed by the re-login): it goes on."""
    async with running_cluster(tokens=True) as cluster:
        await cluster.create_group("orders", managed_spec(replicas=2))
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        assert cluster.tokens == ["token-1"]
        refused = "Bearer token-1"

        def expired(request: kmock.Request) -> bool:
            headers = {k.lower(): v for k, v in request.headers.items()}
            return made_by(request, USER_AGENT) and headers.get("authorization") == refused

        resumed: dict[str, int] = {}  # each kind's path -> its first watch after the login

        def resumed_after_the_login(request: kmock.Request) -> bool:
            headers = {k.lower(): v for k, v in request.headers.items()}
            if not kopf_watch(request) or headers.get("authorization") == refused:
                return False
            # kmock may ask a criterion more than once for one request.
            return resumed.setdefault(request.url.path, request.id) == request.id

        cluster.emulator[expired] << 401
        cluster.emulator[resumed_after_the_login] << GONE
        [victim] = [p for p in await cluster.pods("orders") if p["metadata"]["name"] == "orders-1"]
        await cluster.kube.delete_pod(NAMESPACE, "orders-1")

        await cluster.eventually(
            lambda: cluster.replaced("orders", victim), timeout=20, what="orders-1 recreated"
        )
        assert cluster.tokens == ["token-1", "token-2"]
        assert _ours(cluster.emulator).count(refused) >= 1  # refused, then logged in again
        assert any(path.endswith("/consumergroups") for path in resumed)  # Kopf relisted


async def test_credentials_refused_again_after_the_re_login_raise_unauthorized() -> None:
    async with kopf_logged_in() as (emulator, login, vault):
        login.refused.update({"token-1", "token-2", "token-3"})
        kube = KubeApi(vault)
        with pytest.raises(Unauthorized) as refused:
            await kube.get_group(NAMESPACE, "orders")
        assert refused.value.status == 401 and isinstance(refused.value, KubeError)
        # One re-login and one retry, not a loop.
        assert login.tokens == ["token-1", "token-2"]
        assert _ours(emulator) == ["Bearer token-1", "Bearer token-2"]
        await kube.close()


async def test_api_errors_are_typed() -> None:
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        declare_resources(emulator)
        kube = KubeApi.connect(kopf.ConnectionInfo(server=str(server.url).rstrip("/")))
        try:
            secret = {"metadata": {"name": "s"}, "stringData": {"token": "x"}}
            await kube.create_secret(NAMESPACE, secret)
            with pytest.raises(Conflict) as exists:
                await kube.create_secret(NAMESPACE, secret)
            assert exists.value.status == 409
            with pytest.raises(NotFound):
                await kube.json(
                    lambda c: CoreV1Api(c).read_namespaced_pod(
                        "absent", NAMESPACE, _preload_content=False
                    )
                )
            # The helpers turn "absent" into None / False where that is an answer.
            assert await kube.get_secret(NAMESPACE, "absent") is None
            assert await kube.get_group(NAMESPACE, "absent") is None
            assert await kube.delete_pod(NAMESPACE, "absent") is False
            assert kube.writes == 3  # two Secret creations and a deletion were attempted
        finally:
            await kube.close()


async def test_a_hung_request_times_out() -> None:
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        declare_resources(emulator)
        info = kopf.ConnectionInfo(server=str(server.url).rstrip("/"))
        kube = KubeApi(Vault({"fixed": info}), relogin=False, timeout=0.2)
        try:
            with pytest.raises(TimeoutError):
                await kube.call(lambda client: asyncio.sleep(30))
            assert await kube.get_group(NAMESPACE, "absent") is None  # the next one works
        finally:
            await kube.close()


def _certificate() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


def _on_disk(paths: list[str | None]) -> list[str]:
    return [path for path in paths if path and os.path.exists(path)]


async def test_inline_certificates_are_not_left_on_disk() -> None:
    cert, key = _certificate()
    info = kopf.ConnectionInfo(
        server="https://127.0.0.1:6443",
        ca_data=cert.decode(),
        certificate_data=cert,
        private_key_data=key,
        token="t",
    )
    client = api_client(info)
    try:
        config = client.configuration
        written = [config.ssl_ca_cert, config.cert_file, config.key_file]
        assert all(written)  # the SSL context was built from them
        assert _on_disk(written) == []
        assert client.default_headers["Authorization"] == "Bearer t"
        assert client.default_headers["User-Agent"] == USER_AGENT
    finally:
        await client.close()
