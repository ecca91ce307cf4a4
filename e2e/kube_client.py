"""A small typed async Kubernetes REST client on aiohttp, for the end-to-end tests.

It talks to a real kube-apiserver with the credentials of a kubeconfig file and works on raw
API paths (``/api/v1/namespaces/default/pods``), so any resource, subresource or CRD is
reachable without generated models. Objects are plain JSON dicts.

    async with KubeClient.from_kubeconfig("build/e2e/kubeconfig") as kube:
        pod = await kube.get(pod_path("default", "web-0"))
        await kube.patch(pod_path("default", "web-0"), {"metadata": {"labels": {"a": "b"}}})
        async for kind, obj in kube.watch("/api/v1/pods"):
            ...

Every non-2xx answer raises `KubeError(status, reason, message)` with the API server's
`Status` body. Watches resume from the last seen resourceVersion across disconnects and
relist on 410 Gone, yielding synthetic events so the caller's view stays complete.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import yaml

log = logging.getLogger("e2e.kube_client")

JsonObject = dict[str, Any]
PatchType = Literal["merge", "strategic", "json", "apply"]
WatchEvent = tuple[str, JsonObject]
# Aliases: KubeClient.list shadows the builtin inside the class body.
JsonList = list[JsonObject]
EventList = list[WatchEvent]

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


class KubeError(Exception):
    """A non-2xx answer from the API server (or a watch ERROR event)."""

    def __init__(
        self, status: int, reason: str, message: str, body: JsonObject | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body: JsonObject = body or {}

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class KubeConfig:
    """The connection settings of one kubeconfig context."""

    server: str
    ca_pem: bytes | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None
    insecure_skip_tls_verify: bool = False

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], context: str | None = None) -> KubeConfig:
        """Read a kubeconfig. Relative file paths in it resolve against its directory."""
        path = Path(path)
        doc = yaml.safe_load(path.read_text()) or {}
        ctx_name = context or doc.get("current-context")
        ctx = _named(doc.get("contexts"), ctx_name, "context") if ctx_name else {}
        if not ctx and doc.get("contexts"):
            ctx = doc["contexts"][0].get("context") or {}
        cluster = _named(doc.get("clusters"), ctx.get("cluster"), "cluster")
        user = _named(doc.get("users"), ctx.get("user"), "user") if ctx.get("user") else {}
        base = path.parent
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = _resolve(base, user["tokenFile"]).read_text().strip()
        return cls(
            server=str(cluster["server"]).rstrip("/"),
            ca_pem=_data_or_file(cluster, "certificate-authority", base),
            client_cert_pem=_data_or_file(user, "client-certificate", base),
            client_key_pem=_data_or_file(user, "client-key", base),
            token=token or None,
            insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
        )

    def ssl_context(self) -> ssl.SSLContext | bool:
        """The TLS settings for aiohttp (True: system defaults; False: no verification)."""
        if not self.server.startswith("https://"):
            return True
        ctx = ssl.create_default_context()
        if self.insecure_skip_tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_pem:
            ctx.load_verify_locations(cadata=self.ca_pem.decode())
        if self.client_cert_pem and self.client_key_pem:
            _load_cert_chain(ctx, self.client_cert_pem, self.client_key_pem)
        return ctx


def _named(items: Any, name: str | None, key: str) -> JsonObject:
    for item in items or []:
        if item.get("name") == name:
            return dict(item.get(key) or {})
    raise ValueError(f"kubeconfig has no {key} named {name!r}")


def _resolve(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def _data_or_file(section: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"])
    if section.get(key):
        return _resolve(base, section[key]).read_bytes()
    return None


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    # The ssl module loads client certificates only from files: stage them briefly, privately.
    with tempfile.TemporaryDirectory(prefix="kube-client-") as tmp:
        cert_file, key_file = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert_file.write_bytes(cert)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        ctx.load_cert_chain(cert_file, key_file)


# --------------------------------------------------------------------------- paths


def resource_path(
    api_version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a resource collection, object or subresource.

    ``resource_path("apps/v1", "deployments", "ns", "web", "scale")`` →
    ``/apis/apps/v1/namespaces/ns/deployments/web/scale``; ``api_version="v1"`` is core.
    """
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [root]
    if namespace is not None:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
        if subresource:
            parts.append(subresource)
    return "/".join(parts)


def pod_path(namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    return resource_path("v1", "pods", namespace, name, sub)


def secret_path(namespace: str, name: str | None = None) -> str:
    return resource_path("v1", "secrets", namespace, name)


def config_map_path(namespace: str, name: str | None = None) -> str:
    return resource_path("v1", "configmaps", namespace, name)


def node_path(name: str | None = None, sub: str | None = None) -> str:
    return resource_path("v1", "nodes", None, name, sub)


def namespace_path(name: str | None = None) -> str:
    return resource_path("v1", "namespaces", None, name)


# --------------------------------------------------------------------------- client


class KubeClient:
    """An async client for one API server. Use as an async context manager (or `close()`)."""

    def __init__(self, config: KubeConfig, *, timeout: float = 30.0) -> None:
        self.config = config
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str], *, context: str | None = None, timeout: float = 30.0
    ) -> KubeClient:
        return cls(KubeConfig.from_file(path, context), timeout=timeout)

    @property
    def server(self) -> str:
        return self.config.server

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Accept": "application/json", "User-Agent": "staticfleet-e2e"}
            if self.config.token:
                headers["Authorization"] = f"Bearer {self.config.token}"
            connector = aiohttp.TCPConnector(ssl=self.config.ssl_context())
            self._session = aiohttp.ClientSession(connector=connector, headers=headers)
        return self._session

    # ----------------------------------------------------------------- plain requests

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        """One request; the decoded JSON answer (``{}`` for an empty body)."""
        text = await self.request_text(
            method, path, params=params, body=body, content_type=content_type
        )
        return json.loads(text) if text.strip() else {}

    async def request_text(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> str:
        """One request; the raw answer text (e.g. for ``/version`` or ``pods/log``)."""
        data = None if body is None else _encode(body, content_type)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self._http().request(
            method,
            self.server + path,
            params=_query(params),
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.timeout),
        ) as resp:
            text = await resp.text()
            if resp.status >= 300:
                raise _error(resp.status, text)
            return text

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> JsonObject:
        return await self.request("GET", path, params=params)

    async def get_or_none(self, path: str) -> JsonObject | None:
        """The object, or None when it does not exist."""
        try:
            return await self.get(path)
        except KubeError as e:
            if e.not_found:
                return None
            raise

    async def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> JsonObject:
        """A collection (a ``*List`` object with ``items`` and ``metadata.resourceVersion``)."""
        query = dict(params or {})
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        return await self.get(path, query)

    async def list_items(self, path: str, **kwargs: Any) -> JsonList:
        return list((await self.list(path, **kwargs)).get("items") or [])

    async def create(
        self, path: str, body: Mapping[str, Any], params: Mapping[str, Any] | None = None
    ) -> JsonObject:
        """POST to a collection (or a create-only subresource such as ``pods/x/binding``)."""
        return await self.request("POST", path, params=params, body=body)

    async def replace(self, path: str, body: Mapping[str, Any]) -> JsonObject:
        """PUT the whole object (include ``metadata.resourceVersion`` for optimistic locking)."""
        return await self.request("PUT", path, body=body)

    async def patch(
        self,
        path: str,
        body: Any,
        *,
        patch_type: PatchType = "merge",
        params: Mapping[str, Any] | None = None,
    ) -> JsonObject:
        """PATCH with a JSON merge patch (default), a strategic merge patch, a JSON patch
        (a list of operations) or a server-side apply (needs ``fieldManager`` in params)."""
        return await self.request(
            "PATCH", path, params=params, body=body, content_type=_PATCH_CONTENT_TYPES[patch_type]
        )

    async def delete(
        self,
        path: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        propagation_policy: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> JsonObject:
        """DELETE an object; ``uid`` adds a precondition so a same-named successor is safe."""
        options: JsonObject = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        return await self.request("DELETE", path, params=params, body=options)

    async def delete_if_exists(self, path: str, **kwargs: Any) -> JsonObject | None:
        try:
            return await self.delete(path, **kwargs)
        except KubeError as e:
            if e.not_found:
                return None
            raise

    # ----------------------------------------------------------------- watches

    async def watch(
        self,
        path: str,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        reconnect: bool = True,
    ) -> AsyncIterator[WatchEvent]:
        """Stream ``(type, object)`` for a collection, forever (until the caller stops).

        Without ``resource_version`` it lists first and yields every existing object as
        ``ADDED``. It resumes from the last seen resourceVersion after the server closes the
        stream or the connection fails (``reconnect``). On 410 Gone it relists and yields
        ``ADDED``/``MODIFIED``/``DELETED`` for what changed meanwhile. ``BOOKMARK`` events
        are consumed here. Other errors (403, 404, ...) raise `KubeError`.
        """
        selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}
        known: dict[str, JsonObject] = {}
        rv = resource_version
        if rv is None:
            rv, events = await self._relist(path, selectors, known)
            for event in events:
                yield event
        backoff = 0.5
        while True:
            try:
                async for kind, obj in self._watch_once(path, rv, selectors, timeout_seconds):
                    backoff = 0.5
                    rv = obj.get("metadata", {}).get("resourceVersion") or rv
                    if kind == "BOOKMARK":
                        continue
                    _remember(known, kind, obj)
                    yield kind, obj
            except KubeError as e:
                if not e.gone:
                    raise
                log.info("watch %s: resourceVersion %s expired, relisting", path, rv)
                rv, events = await self._relist(path, selectors, known)
                for event in events:
                    yield event
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as e:
                if not reconnect:
                    raise
                log.warning("watch %s interrupted (%s); resuming in %.1fs", path, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def _relist(
        self, path: str, selectors: Mapping[str, str | None], known: dict[str, JsonObject]
    ) -> tuple[str, EventList]:
        listing = await self.get(path, {k: v for k, v in selectors.items() if v})
        events: EventList = []
        fresh: dict[str, JsonObject] = {}
        for item in listing.get("items") or []:
            key = _key(item)
            fresh[key] = item
            before = known.get(key)
            if before is None:
                events.append(("ADDED", item))
            elif _rv(before) != _rv(item):
                events.append(("MODIFIED", item))
        events.extend(("DELETED", obj) for key, obj in known.items() if key not in fresh)
        known.clear()
        known.update(fresh)
        return str(listing.get("metadata", {}).get("resourceVersion", "")), events

    async def _watch_once(
        self,
        path: str,
        rv: str | None,
        selectors: Mapping[str, str | None],
        timeout_seconds: int,
    ) -> AsyncIterator[WatchEvent]:
        params: dict[str, Any] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        params.update({k: v for k, v in selectors.items() if v})
        if rv:
            params["resourceVersion"] = rv
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout, sock_read=timeout_seconds + 30
        )
        async with self._http().get(
            self.server + path, params=_query(params), timeout=timeout
        ) as resp:
            if resp.status >= 300:
                raise _error(resp.status, await resp.text())
            async for line in _lines(resp.content):
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise _status_error(obj)
                yield str(event.get("type")), obj

    async def wait_for(
        self,
        path: str,
        predicate: Callable[[JsonObject], bool],
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 - a polling deadline, not a call timeout
        interval: float = 0.5,
    ) -> JsonObject:
        """Poll one object until ``predicate(obj)`` holds; raise TimeoutError with its last
        state otherwise. A missing object counts as not yet there."""
        deadline = time.monotonic() + timeout
        last: JsonObject | None = None
        while True:
            last = await self.get_or_none(path)
            if last is not None and predicate(last):
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path}: condition not met in {timeout}s; last: {last}")
            await asyncio.sleep(interval)

    async def wait_gone(
        self,
        path: str,
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 - a polling deadline
        interval: float = 0.5,
    ) -> None:
        deadline = time.monotonic() + timeout
        while await self.get_or_none(path) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} still exists after {timeout}s")
            await asyncio.sleep(interval)

    # ----------------------------------------------------------------- core helpers

    async def get_pod(self, namespace: str, name: str) -> JsonObject:
        return await self.get(pod_path(namespace, name))

    async def list_pods(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> JsonList:
        return await self.list_items(pod_path(namespace), label_selector=label_selector)

    async def patch_pod_status(self, namespace: str, name: str, status: JsonObject) -> JsonObject:
        return await self.patch(pod_path(namespace, name, "status"), {"status": status})

    async def bind_pod(self, namespace: str, name: str, node: str, uid: str | None = None) -> None:
        """Assign a pending pod to a node, as a scheduler does."""
        meta: JsonObject = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.create(pod_path(namespace, name, "binding"), binding)

    async def get_secret(self, namespace: str, name: str) -> JsonObject:
        return await self.get(secret_path(namespace, name))

    async def get_config_map(self, namespace: str, name: str) -> JsonObject:
        return await self.get(config_map_path(namespace, name))

    async def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create a namespace; an existing one is fine."""
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            body["metadata"] = {"name": name, "labels": dict(labels)}
        try:
            await self.create(namespace_path(), body)
        except KubeError as e:
            if not e.conflict:
                raise

    async def request_token(
        self,
        namespace: str,
        service_account: str,
        *,
        audiences: Sequence[str] | None = None,
        expiration_seconds: int = 3600,
        bound_pod: Mapping[str, Any] | None = None,
    ) -> tuple[str, str]:
        """A ServiceAccount token from the TokenRequest API: ``(token, expirationTimestamp)``.
        ``bound_pod`` (a pod object) binds it so it dies with that pod."""
        spec: JsonObject = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = [*audiences]
        if bound_pod is not None:
            spec["boundObjectRef"] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": bound_pod["metadata"]["name"],
                "uid": bound_pod["metadata"]["uid"],
            }
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = resource_path("v1", "serviceaccounts", namespace, service_account, "token")
        answer = await self.create(path, body)
        status = answer.get("status") or {}
        return str(status["token"]), str(status.get("expirationTimestamp", ""))


# --------------------------------------------------------------------------- internals


def _query(params: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in (params or {}).items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def _encode(body: Any, content_type: str) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


def _error(status: int, text: str) -> KubeError:
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        return KubeError(status, str(doc.get("reason", "")), str(doc.get("message", "")), doc)
    return KubeError(status, "", text.strip()[:500])


def _status_error(obj: Mapping[str, Any]) -> KubeError:
    return KubeError(
        int(obj.get("code", 500)),
        str(obj.get("reason", "")),
        str(obj.get("message", "")),
        dict(obj),
    )


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    # Split by hand: aiohttp's readline refuses lines past its buffer limit (large objects).
    buffer = b""
    async for chunk in stream.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _remember(known: dict[str, JsonObject], kind: str, obj: JsonObject) -> None:
    if kind == "DELETED":
        known.pop(_key(obj), None)
    elif kind in ("ADDED", "MODIFIED"):
        known[_key(obj)] = obj


async def retrying(
    what: str,
    call: Callable[[], Awaitable[Any]],
    *,
    attempts: int | None = None,
    delay: float = 1.0,
    max_delay: float = 10.0,
) -> Any:
    """Run ``call`` until it succeeds (or ``attempts`` run out), logging each failure."""
    tries = 0
    while True:
        try:
            return await call()
        except (KubeError, aiohttp.ClientError, TimeoutError, OSError) as e:
            tries += 1
            if attempts is not None and tries >= attempts:
                raise
            log.warning("%s failed (%s); retrying in %.1fs", what, e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)


__all__ = [
    "EventList",
    "JsonList",
    "JsonObject",
    "KubeClient",
    "KubeConfig",
    "KubeError",
    "PatchType",
    "WatchEvent",
    "config_map_path",
    "namespace_path",
    "node_path",
    "pod_path",
    "resource_path",
    "retrying",
    "secret_path",
]
