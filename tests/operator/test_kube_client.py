"""The operator's Kubernetes client (kube.py): JSON over Kopf's own session and credentials.

A 401 makes Kopf log in again (the real Kopf, its login handlers run by its authenticator)
and the call is retried once with the new credentials, by the same `KubeApi` object; the
session of the refused credentials is closed. API errors are typed. A hung request times
out. TLS with certificate data given inline works, and the data never stays on disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import ssl
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import kmock
import kopf
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kopf._cogs.clients.auth import APIContext
from kopf._cogs.structs.credentials import Vault

from staticfleet_operator.kube import (
    CONTEXTS,
    CORE,
    USER_AGENT,
    Conflict,
    KubeApi,
    KubeError,
    NotFound,
    Unauthorized,
    path,
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


async def _context(vault: Vault) -> APIContext:
    """The session the vault holds for its current credentials (Kopf's, and the client's)."""
    async for _, _, context in vault.extended(APIContext, CONTEXTS):
        return context
    raise AssertionError("no credentials")


async def test_a_401_makes_kopf_log_in_again_and_the_call_is_retried_once() -> None:
    async with kopf_logged_in() as (emulator, login, vault):
        kube = KubeApi(vault)  # held across the re-login, as the handlers hold op.kube
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        await kube.create_pod(NAMESPACE, pod)
        old = await _context(vault)
        login.refused.add("token-1")  # the token expires (rotated on disk, say)
        listed = await kube.list_pods(NAMESPACE, {})
        assert [p["metadata"]["name"] for p in listed] == ["p"]
        assert login.tokens == ["token-1", "token-2"]
        assert _ours(emulator) == ["Bearer token-1"] * 2 + ["Bearer token-2"]
        # The refused credentials' session was closed with them; later calls use the new.
        assert old.session.closed
        assert not (await _context(vault)).session.closed
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
                await kube.call("GET", path(CORE, "pods", NAMESPACE, "absent"))
            # The helpers turn "absent" into None / False where that is an answer.
            assert await kube.get_secret(NAMESPACE, "absent") is None
            assert await kube.get_group(NAMESPACE, "absent") is None
            assert await kube.delete_pod(NAMESPACE, "absent") is False
            assert kube.writes == 3  # two Secret creations and a deletion were attempted
        finally:
            await kube.close()


@contextlib.asynccontextmanager
async def serving(
    handler: Any, context: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[str, list[web.Request]]]:
    """An HTTP(S) server on loopback answering every path with `handler`, and the requests
    it received."""
    seen: list[web.Request] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        response: web.StreamResponse = await handler(request)
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"{'https' if context else 'http'}://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_a_hung_request_times_out() -> None:
    released = asyncio.Event()

    async def hangs_on_slow(request: web.Request) -> web.Response:
        if request.path.endswith("/slow"):
            await released.wait()
        status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "absent"}
        return web.json_response(status, status=404)

    async with serving(hangs_on_slow) as (url, _):
        kube = KubeApi(
            Vault({"fixed": kopf.ConnectionInfo(server=url)}), relogin=False, timeout=0.2
        )
        try:
            with pytest.raises(TimeoutError):
                await kube.get_group(NAMESPACE, "slow")
            assert await kube.get_group(NAMESPACE, "absent") is None  # the next one works
        finally:
            await kube.close()
            # The server's cleanup waits for its handlers: the hung one ends here.
            released.set()


def _certificate() -> tuple[bytes, bytes]:
    """A self-signed certificate for 127.0.0.1 (the server's, the CA, the client's)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


async def test_mutual_tls_from_inline_certificates_leaves_nothing_on_disk(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = _certificate()
    (tmp_path / "server.pem").write_bytes(cert)
    (tmp_path / "server.key").write_bytes(key)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    server.load_verify_locations(cadata=cert.decode())
    server.verify_mode = ssl.CERT_REQUIRED  # the client's certificate is required

    async def secret(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Secret", "metadata": {"name": "s"}})

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    async with serving(secret, server) as (url, seen):
        info = kopf.ConnectionInfo(
            server=url,
            ca_data=cert.decode(),
            certificate_data=cert,
            private_key_data=key,
            token="t",
        )
        kube = KubeApi.connect(info)
        try:
            answer = await kube.get_secret(NAMESPACE, "s")
        finally:
            await kube.close()
    assert answer == {"kind": "Secret", "metadata": {"name": "s"}}
    [request] = seen
    assert request.path == f"/api/v1/namespaces/{NAMESPACE}/secrets/s"
    assert request.headers["Authorization"] == "Bearer t"
    assert request.headers["User-Agent"] == USER_AGENT
    assert list(scratch.iterdir()) == []  # the key was on disk only while the context was made


async def test_a_watch_reads_events_and_a_status_error_is_typed() -> None:
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": "p", "resourceVersion": "5"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
    ]

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for line in lines:
            await response.write(json.dumps(line).encode() + b"\n\n")
        return response

    async with serving(stream) as (url, seen):
        kube = KubeApi.connect(kopf.ConnectionInfo(server=url))
        events: list[dict[str, Any]] = []
        try:
            with pytest.raises(KubeError) as gone:
                async for event in kube.watch(
                    path(CORE, "pods", NAMESPACE),
                    resource_version="4",
                    timeout_seconds=7,
                    labelSelector="a",
                ):
                    events.append(event)
        finally:
            await kube.close()
    assert gone.value.status == 410
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert dict(seen[0].query) == {
        "labelSelector": "a",
        "watch": "true",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "7",
        "resourceVersion": "4",
    }
