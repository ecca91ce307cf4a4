"""The e2e harness's Kubernetes access: kubernetes_asyncio, from the control plane's kubeconfig.

The operator benchmark (bench/operator_scale.py, which binds and watches pods as a node
would) calls kubernetes_asyncio's typed APIs (`CoreV1Api`, `CustomObjectsApi`) and reads the
answers as plain JSON dicts, as its code (and the operator's) works on dicts. Errors are the
operator's one hierarchy (`staticfleet_operator.kube`: `KubeError`, `NotFound`, `Conflict`,
...).

    async with await Kube.connect("build/e2e/kubeconfig") as kube:
        pod = await answer(kube.core.read_namespaced_pod("web-0", "default", **RAW))
        async for kind, pod in watch_pods(kube):
            ...

Hand-written here is only what the library does not do: answers as dicts with typed errors,
and a pod watch that lists first, resumes from the last resourceVersion when the stream
ends, and lists again when that version has expired (410 Gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client import (
    ApiClient,
    ApiException,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
)
from kubernetes_asyncio.config import load_kube_config
from kubernetes_asyncio.watch import Watch

from staticfleet_operator.kube import Conflict, KubeError, error_of, read_json

log = logging.getLogger("e2e.kube_api")

JsonObject = dict[str, Any]
WatchEvent = tuple[str, JsonObject]
# Keyword arguments for a call whose answer `answer()` reads (not the library's models).
RAW: dict[str, Any] = {"_preload_content": False}
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
# A request's bound (the library sets none); generous: the benchmark's bursts load the server.
TIMEOUT_SECONDS = 120.0


class Kube:
    """A kubernetes_asyncio client for one API server, with the API groups the e2e uses."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self.core = CoreV1Api(client)
        self.custom = CustomObjectsApi(client)

    @classmethod
    async def connect(cls, kubeconfig: str | os.PathLike[str]) -> Kube:
        """From a kubeconfig file (the library's loader; the e2e's embed their certificates,
        which the loader stages in temporary files it removes at exit)."""
        config = Configuration()
        await load_kube_config(str(kubeconfig), client_configuration=config, persist_config=False)
        client = ApiClient(config)
        client.user_agent = "staticfleet-e2e"
        return cls(client)

    @property
    def server(self) -> str:
        return str(self.client.configuration.host)

    def ca_pem(self) -> bytes | None:
        path = self.client.configuration.ssl_ca_cert
        return Path(path).read_bytes() if path else None

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def answer(request: Awaitable[Any]) -> JsonObject:
    """The JSON answer of a call made with `**RAW`; a refusal raises a typed `KubeError`."""
    try:
        async with asyncio.timeout(TIMEOUT_SECONDS):
            return await read_json(await request)
    except ApiException as error:
        raise refused(error) from error


def refused(error: ApiException) -> KubeError:
    """The operator's typed error for the library's refusal."""
    return error_of(int(error.status or 0), str(error.reason or ""), error.body or b"")


async def text(kube: Kube, path: str) -> str:
    """A non-resource path's answer as text (`/metrics`, `/version`)."""
    response = await kube.client.call_api(
        path, "GET", auth_settings=["BearerToken"], _preload_content=False
    )
    try:
        if not 200 <= response.status <= 299:
            raise KubeError(response.status, str(response.reason), await response.text())
        return str(await response.text())
    finally:
        response.release()


async def items(request: Awaitable[Any]) -> list[JsonObject]:
    return list((await answer(request)).get("items") or [])


async def create_namespace(kube: Kube, name: str) -> None:
    """Create a namespace; an existing one is fine."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    with contextlib.suppress(Conflict):
        await answer(kube.core.create_namespace(body, **RAW))


async def bind_pod(kube: Kube, namespace: str, name: str, node: str, uid: str | None) -> None:
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
    await answer(kube.core.create_namespaced_pod_binding(name, namespace, binding, **RAW))


async def watch_pods(
    kube: Kube,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    timeout_seconds: int = 300,
) -> AsyncGenerator[WatchEvent, None]:
    """``(type, pod)`` for every pod of `namespace` (None: all), forever: first the listed ones as
    ADDED, then the watch's events. The watch resumes from the last resourceVersion when the
    server ends the stream; on 410 Gone (that version expired) it lists again, and yields
    ADDED/MODIFIED/DELETED for what changed meanwhile, so the caller's view stays complete."""
    selectors: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
    lister: Callable[..., Awaitable[Any]] = (
        functools.partial(kube.core.list_namespaced_pod, namespace)
        if namespace is not None
        else kube.core.list_pod_for_all_namespaces
    )
    known: dict[str, JsonObject] = {}
    rv, events = await _relist(lister, selectors, known)
    for event in events:
        yield event
    backoff = 0.5
    while True:
        try:
            async with Watch(return_type="object") as watch:
                # The library finds the watched type from the lister's docstring (a partial
                # has none): "object" keeps the events as dicts anyway.
                stream = watch.stream(
                    lister,
                    resource_version=rv,
                    allow_watch_bookmarks=True,
                    timeout_seconds=timeout_seconds,
                    **selectors,
                )
                async for event in stream:
                    backoff = 0.5
                    kind, pod = str(event["type"]), event["raw_object"]
                    rv = (pod.get("metadata") or {}).get("resourceVersion") or rv
                    if kind == "BOOKMARK":
                        continue
                    _remember(known, kind, pod)
                    yield kind, pod
        except ApiException as error:
            if error.status != 410:
                raise refused(error) from error
            log.info("pod watch: resourceVersion %s expired, relisting", rv)
            rv, events = await _relist(lister, selectors, known)
            for event in events:
                yield event
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as error:
            log.warning("pod watch interrupted (%s); resuming in %.1fs", error, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)


async def _relist(
    lister: Callable[..., Awaitable[Any]],
    selectors: Mapping[str, Any],
    known: dict[str, JsonObject],
) -> tuple[str, list[WatchEvent]]:
    listing = await answer(lister(**selectors, **RAW))
    events: list[WatchEvent] = []
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
    return str((listing.get("metadata") or {}).get("resourceVersion", "")), events


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


__all__ = [
    "MERGE_PATCH",
    "RAW",
    "STRATEGIC_PATCH",
    "JsonObject",
    "Kube",
    "KubeError",
    "answer",
    "bind_pod",
    "create_namespace",
    "items",
    "text",
    "watch_pods",
]


def admission_review(
    pod: Mapping[str, Any], namespace: str, username: str = "e2e"
) -> dict[str, Any]:
    """The AdmissionReview the API server sends a mutating webhook for a pod CREATE (for
    callers that play the API server: kmock tests, the webhook's own timing in bench)."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": namespace,
            "name": pod["metadata"]["name"],
            "userInfo": {"username": username},
            "object": dict(pod),
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
