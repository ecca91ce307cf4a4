"""The operator's Kubernetes API calls: typed helpers over kubernetes_asyncio.

kubernetes_asyncio (the async sibling of the `kubernetes` package, generated from the API's
OpenAPI document) builds every request: paths, query parameters, headers, TLS. What this
module adds is only what the library does not do for an operator run by Kopf:

- Credentials from Kopf. Every call takes the client for the current credentials from
  Kopf's vault (the store Kopf's own watches use, filled by the `@kopf.on.login` handlers);
  the vault keeps one `ApiClient` per credentials and closes it when they are replaced. A
  401 invalidates the credentials, which makes Kopf run the login handlers again, and the
  call is retried once with the new ones. Nothing holds a client across a re-login: there
  is no client to hold, only `KubeApi`, which asks the vault on every call.
- Credentials stay in memory; certificate data Python's `ssl` can only load from files is
  written to a private temporary directory for the moment the SSL context is built, and
  deleted with it (as Kopf's own `ConnectionInfo.as_ssl_context` does).
- One exception hierarchy: `KubeError` and its kinds (`NotFound`, `Conflict`, ...), raised
  instead of the library's `ApiException` with a status integer.
- Bodies are plain dicts, as Kopf hands them to the handlers: answers are read as JSON
  rather than deserialized into the library's models (and converted back).
- Label selectors are sent to the server *and* applied to the answer: a server that ignores
  them (an emulator) cannot hand the operator someone else's pods.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import logging
import os
import tempfile
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import kopf
from kopf._cogs.structs.credentials import KubeContext, Vault
from kubernetes_asyncio.client import (
    ApiClient,
    ApiException,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
)

from staticfleet_operator.crd import GROUP, PLURAL, VERSION

log = logging.getLogger("staticfleet.operator.kube")

MERGE_PATCH = "application/merge-patch+json"
# Who the API server's audit log says made a request (Kopf's own requests say "kopf/…").
USER_AGENT = "staticfleet-operator"
# A request's bound, answer read included (the library sets none): a hung request must fail
# the pass that made it (which is then retried), not hold its group's lock for ever.
REQUEST_TIMEOUT_SECONDS = 60.0

JsonObject = dict[str, Any]
T = TypeVar("T")


# --- errors -----------------------------------------------------------------------------------


class KubeError(Exception):
    """The API server refused a request (its HTTP status, reason and message)."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"HTTP {status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message


class Unauthorized(KubeError):
    """401: the credentials were refused (after one re-login)."""


class Forbidden(KubeError):
    """403: RBAC does not allow it."""


class NamespaceTerminating(Forbidden):
    """403 from the API server's NamespaceLifecycle admission: the namespace is being
    deleted, so nothing new can be made in it (its Status names the cause
    `NamespaceTerminating`)."""


class NotFound(KubeError):
    """404: no such object (or resource)."""


class Conflict(KubeError):
    """409: it exists already, or a precondition (uid, resourceVersion) failed."""


class Invalid(KubeError):
    """422: the object was refused by validation."""


_KINDS: dict[int, type[KubeError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: Invalid,
}


def error_of(error: ApiException) -> KubeError:
    """The typed error for a refused request (the message from the API's Status body)."""
    status = int(error.status or 0)
    message = str(error.body or "")[:500]
    causes: list[str] = []
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        body = json.loads(error.body)
        message = str(body.get("message") or message)
        # A StatusCause's type is serialized as `reason`.
        causes = [str(c.get("reason")) for c in (body.get("details") or {}).get("causes") or ()]
    kind = _KINDS.get(status, KubeError)
    if status == 403 and "NamespaceTerminating" in causes:
        kind = NamespaceTerminating
    return kind(status, str(error.reason or ""), message)


# --- clients from Kopf's credentials ----------------------------------------------------------


def api_client(info: KubeContext, *, user_agent: str = USER_AGENT) -> ApiClient:
    """A kubernetes_asyncio client for what a Kopf login handler returned."""
    if not isinstance(info, kopf.ConnectionInfo):
        raise TypeError(f"unsupported credentials for kubernetes_asyncio: {type(info).__name__}")
    config = Configuration(host=info.server.rstrip("/"))
    config.verify_ssl = not info.insecure
    config.proxy = info.proxy_url
    # The library builds its SSL context from files once, in ApiClient(); inline data is
    # written to a private directory for that moment only.
    with tempfile.TemporaryDirectory(prefix="staticfleet-kube-") as scratch:
        config.ssl_ca_cert = _file(scratch, "ca.pem", info.ca_path, info.ca_data)
        config.cert_file = _file(scratch, "cert.pem", info.certificate_path, info.certificate_data)
        config.key_file = _file(scratch, "key.pem", info.private_key_path, info.private_key_data)
        client = ApiClient(config)
    for name, value in info.as_http_headers().items():  # bearer token or basic auth
        client.set_default_header(name, value)
    client.user_agent = user_agent
    return client


def _file(scratch: str, name: str, path: Any, data: str | bytes | None) -> str | None:
    if path:
        return os.fsdecode(path)
    if not data:
        return None
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if not raw.lstrip().startswith(b"-----"):
        raw = base64.b64decode(raw)
    target = Path(scratch) / name
    target.write_bytes(raw)
    return str(target)


_instances = itertools.count()


class KubeApi:
    """The Kubernetes calls the operator makes, over the credentials in a Kopf vault."""

    def __init__(
        self,
        vault: Vault,
        *,
        user_agent: str = USER_AGENT,
        relogin: bool = True,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        self._vault = vault
        self._timeout = timeout
        self._relogin = relogin
        self._owns_vault = False
        # One client per credentials and per KubeApi (close() closes this one's only); the
        # vault drops (and closes) a client when its credentials are replaced.
        self._purpose = f"staticfleet-kube-{next(_instances)}"
        self._clients: weakref.WeakSet[ApiClient] = weakref.WeakSet()
        self._user_agent = user_agent
        # Writes made (pods created/deleted/patched, Secrets created, Events posted): whether
        # a pass acted. A count, not a log: it stays the same size however long it runs.
        self.writes = 0

    @classmethod
    def connect(cls, info: kopf.ConnectionInfo, *, user_agent: str = USER_AGENT) -> KubeApi:
        """A client with fixed credentials and no Kopf behind it (tools, tests): a 401 is
        not retried, there is nobody to log in again."""
        api = cls(Vault({"fixed": info}), user_agent=user_agent, relogin=False)
        api._owns_vault = True
        return api

    def _client(self, info: KubeContext) -> ApiClient:
        client = api_client(info, user_agent=self._user_agent)
        self._clients.add(client)
        return client

    async def close(self) -> None:
        """Close the connections this API opened (Kopf closes its vault when it stops)."""
        for client in list(self._clients):
            await client.close()
        if self._owns_vault:
            await self._vault.close()

    async def call(self, request: Callable[[ApiClient], Awaitable[T]]) -> T:
        """`request` with the client for the current credentials. A 401 makes Kopf log in
        again (the vault is shared with Kopf's watches) and the request is tried once more.
        Raises `TimeoutError` when it takes longer than the API's timeout."""
        retried = False
        async for key, info, client in self._vault.extended(self._client, self._purpose):
            try:
                async with asyncio.timeout(self._timeout):
                    return await request(client)
            except ApiException as error:
                if error.status != 401 or retried or not self._relogin:
                    raise error_of(error) from error
                retried = True
                log.warning("the API server refused the credentials (401): logging in again")
                try:
                    await self._vault.invalidate(key, info, exc=error)
                except kopf.LoginError as failed:
                    raise error_of(error) from failed
        raise Unauthorized(401, "Unauthorized", "no credentials")  # the vault ran dry

    async def json(self, request: Callable[[ApiClient], Awaitable[Any]]) -> JsonObject:
        """`call` for a request made with `_preload_content=False`: its JSON body."""

        async def read(client: ApiClient) -> JsonObject:
            return await read_json(await request(client))

        return await self.call(read)

    async def watch(
        self,
        request: Callable[[ApiClient], Callable[..., Awaitable[Any]]],
        *,
        resource_version: str | None,
        timeout_seconds: int,
        **params: Any,
    ) -> AsyncIterator[JsonObject]:
        """The events (`{"type", "object"}`, dicts) of a watch made with the LIST call
        `request(client)` returns, on the current credentials, until the API server ends the
        stream after `timeout_seconds`. Not bounded by the API's timeout (a watch is long),
        but dropped when nothing arrives for longer than the server's own timeout. A 410
        Gone (the resourceVersion expired, answered at once or as an ERROR event) raises
        `KubeError` with status 410; a 401 makes Kopf log in again, as for `call`, and the
        watch is opened once more.

        The stream is read here, not by the library's `Watch`: that one sends `watch=True`,
        which the API server takes but kmock's emulator does not (it wants "true"). Each
        watch has a client of its own, closed with it: Kopf closes the shared clients when
        it logs in again, and a stream read from a closed client's connection would hang
        rather than fail; a watch on credentials since replaced runs to its timeout."""
        retried = False
        quiet = aiohttp.ClientTimeout(sock_connect=30, sock_read=timeout_seconds + 30)
        async for key, info in self._vault:
            client = api_client(info, user_agent=self._user_agent)
            try:
                response = await request(client)(
                    watch="true",
                    allow_watch_bookmarks="true",
                    resource_version=resource_version,
                    timeout_seconds=timeout_seconds,
                    _preload_content=False,
                    _request_timeout=quiet,
                    **params,
                )
            except BaseException:
                await client.close()
                raise
            try:
                if response.status == 401 and not retried and self._relogin:
                    retried = True
                    log.warning("the API server refused the credentials (401): logging in again")
                    refused = ApiException(status=401, reason=response.reason)
                    try:
                        await self._vault.invalidate(key, info, exc=refused)
                    except kopf.LoginError as failed:
                        raise error_of(refused) from failed
                    continue
                if not 200 <= response.status <= 299:
                    await read_json(response)  # raises the typed error
                async for line in response.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise _KINDS.get(int(status.get("code") or 0), KubeError)(
                            int(status.get("code") or 0),
                            str(status.get("reason") or ""),
                            str(status.get("message") or ""),
                        )
                    yield event
                return
            except ApiException as error:
                raise error_of(error) from error
            finally:
                response.release()
                await client.close()
        raise Unauthorized(401, "Unauthorized", "no credentials")  # the vault ran dry

    async def list_objects(
        self, request: Callable[[ApiClient], Callable[..., Awaitable[Any]]], **params: Any
    ) -> JsonObject:
        """The answer (items and the list's resourceVersion) of the LIST call
        `request(client)` returns, made with `params`."""
        return await self.json(lambda c: request(c)(**params, _preload_content=False))

    # --- pods ---------------------------------------------------------------------------------

    async def list_pods(self, namespace: str, labels: Labels) -> list[JsonObject]:
        body = await self.json(
            lambda c: CoreV1Api(c).list_namespaced_pod(
                namespace, label_selector=label_selector(labels), _preload_content=False
            )
        )
        items: list[JsonObject] = body.get("items") or []
        return [
            pod
            for pod in items
            if _labels_match((pod.get("metadata") or {}).get("labels") or {}, labels)
            and (pod.get("metadata") or {}).get("namespace", namespace) == namespace
        ]

    async def create_pod(self, namespace: str, pod: Mapping[str, Any]) -> JsonObject:
        self.writes += 1
        return await self.json(
            lambda c: CoreV1Api(c).create_namespaced_pod(
                namespace, dict(pod), _preload_content=False
            )
        )

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete a pod; False when it was already gone. With `uid`, only that incarnation."""
        self.writes += 1
        options: JsonObject = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            await self.json(
                lambda c: CoreV1Api(c).delete_namespaced_pod(
                    name, namespace, body=options, _preload_content=False
                )
            )
        except NotFound:
            return False
        return True

    async def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JsonObject:
        """A JSON merge patch of a pod (its labels and annotations: a promoted standby)."""
        self.writes += 1
        return await self.json(
            lambda c: CoreV1Api(c).patch_namespaced_pod(
                name, namespace, dict(patch), _content_type=MERGE_PATCH, _preload_content=False
            )
        )

    async def patch_pod_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> JsonObject:
        return await self.json(
            lambda c: CoreV1Api(c).patch_namespaced_pod_status(
                name,
                namespace,
                {"status": dict(status)},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        )

    # --- secrets (member tokens) --------------------------------------------------------------

    async def get_secret(self, namespace: str, name: str) -> JsonObject | None:
        try:
            return await self.json(
                lambda c: CoreV1Api(c).read_namespaced_secret(
                    name, namespace, _preload_content=False
                )
            )
        except NotFound:
            return None

    async def list_opaque_secrets(self, namespace: str) -> list[JsonObject]:
        """The namespace's Opaque Secrets (the kind that holds member tokens)."""
        body = await self.json(
            lambda c: CoreV1Api(c).list_namespaced_secret(
                namespace, field_selector="type=Opaque", _preload_content=False
            )
        )
        items: list[JsonObject] = body.get("items") or []
        return [secret for secret in items if secret.get("type", "Opaque") == "Opaque"]

    async def create_secret(self, namespace: str, secret: Mapping[str, Any]) -> JsonObject:
        """Create a Secret; raises `Conflict` when it exists."""
        self.writes += 1
        return await self.json(
            lambda c: CoreV1Api(c).create_namespaced_secret(
                namespace, dict(secret), _preload_content=False
            )
        )

    async def patch_secret(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JsonObject:
        """Merge-patch a Secret the operator made (a group's Kafka client configuration)."""
        self.writes += 1
        return await self.json(
            lambda c: CoreV1Api(c).patch_namespaced_secret(
                name, namespace, dict(patch), _content_type=MERGE_PATCH, _preload_content=False
            )
        )

    # --- pod disruption budgets (a managed group's members) ------------------------------------

    async def get_pod_disruption_budget(self, namespace: str, name: str) -> JsonObject | None:
        try:
            return await self.json(
                lambda c: PolicyV1Api(c).read_namespaced_pod_disruption_budget(
                    name, namespace, _preload_content=False
                )
            )
        except NotFound:
            return None

    async def create_pod_disruption_budget(
        self, namespace: str, budget: Mapping[str, Any]
    ) -> JsonObject:
        """Create a PodDisruptionBudget; raises `Conflict` when it exists."""
        self.writes += 1
        return await self.json(
            lambda c: PolicyV1Api(c).create_namespaced_pod_disruption_budget(
                namespace, dict(budget), _preload_content=False
            )
        )

    async def patch_pod_disruption_budget(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> JsonObject:
        """Merge-patch a PodDisruptionBudget the operator made."""
        self.writes += 1
        return await self.json(
            lambda c: PolicyV1Api(c).patch_namespaced_pod_disruption_budget(
                name, namespace, dict(patch), _content_type=MERGE_PATCH, _preload_content=False
            )
        )

    # --- custom objects -----------------------------------------------------------------------

    async def get_custom_object(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> JsonObject | None:
        """A custom object (a ConsumerGroup, Kopf's peering object); None when absent."""
        try:
            if namespace is None:
                return await self.json(
                    lambda c: CustomObjectsApi(c).get_cluster_custom_object(
                        group, version, plural, name, _preload_content=False
                    )
                )
            return await self.json(
                lambda c: CustomObjectsApi(c).get_namespaced_custom_object(
                    group, version, namespace, plural, name, _preload_content=False
                )
            )
        except NotFound:
            return None

    async def patch_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
    ) -> JsonObject | None:
        """A merge patch of a custom object (Kopf's peering object); None when absent."""
        try:
            if namespace is None:
                return await self.json(
                    lambda c: CustomObjectsApi(c).patch_cluster_custom_object(
                        group,
                        version,
                        plural,
                        name,
                        dict(patch),
                        _content_type=MERGE_PATCH,
                        _preload_content=False,
                    )
                )
            return await self.json(
                lambda c: CustomObjectsApi(c).patch_namespaced_custom_object(
                    group,
                    version,
                    namespace,
                    plural,
                    name,
                    dict(patch),
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                )
            )
        except NotFound:
            return None

    # --- consumer groups ----------------------------------------------------------------------

    async def list_groups(self, namespaces: Sequence[str]) -> list[JsonObject]:
        """Every ConsumerGroup in `namespaces` (none: all of them)."""

        def listing(namespace: str | None) -> Callable[[ApiClient], Awaitable[Any]]:
            def request(client: ApiClient) -> Any:
                api = CustomObjectsApi(client)
                if namespace is None:
                    return api.list_cluster_custom_object(
                        GROUP, VERSION, PLURAL, _preload_content=False
                    )
                return api.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, _preload_content=False
                )

            return request

        scopes: list[str | None] = [*namespaces] or [None]
        listings = [await self.json(listing(scope)) for scope in scopes]
        return [item for listed in listings for item in listed.get("items") or []]

    async def get_group(self, namespace: str, name: str) -> JsonObject | None:
        return await self.get_custom_object(GROUP, VERSION, PLURAL, name, namespace)

    async def patch_group_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> JsonObject:
        return await self.json(
            lambda c: CustomObjectsApi(c).patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": dict(status)},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        )

    # --- events -------------------------------------------------------------------------------

    async def post_event(
        self, involved: Mapping[str, Any], reason: str, message: str, warning: bool = False
    ) -> None:
        """A core/v1 Event on `involved` (a ConsumerGroup body). Never raises: an Event is
        a courtesy, not something to fail a reconcile over."""
        metadata = involved.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata.get('name', 'staticfleet')}.{uuid.uuid4().hex[:12]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": metadata.get("name"),
                "namespace": namespace,
                "uid": metadata.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": "staticfleet-operator"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.writes += 1
        try:
            await self.json(
                lambda c: CoreV1Api(c).create_namespaced_event(
                    namespace, event, _preload_content=False
                )
            )
        except (KubeError, aiohttp.ClientError) as error:
            log.warning("could not post event %s: %s", reason, error)


async def read_json(response: Any) -> JsonObject:
    """The JSON body of an answer to a `_preload_content=False` call. The library checks
    the status only of answers it reads itself: a refusal raises its `ApiException` here."""
    try:
        if not 200 <= response.status <= 299:
            refused = ApiException(status=response.status, reason=response.reason)
            refused.body = (await response.read()).decode(errors="replace")
            raise refused
        body = await response.json(content_type=None)
    finally:
        response.release()
    return body if isinstance(body, dict) else {}


# A label wanted with this value: the object has the label, whatever its value.
Labels = Mapping[str, str | None]


def label_selector(labels: Labels) -> str:
    """`key=value` for each label; `key` alone (exists) for a label wanted with None."""
    return ",".join(
        key if value is None else f"{key}={value}" for key, value in sorted(labels.items())
    )


def _labels_match(have: Mapping[str, str], want: Labels) -> bool:
    return all(
        key in have if value is None else have.get(key) == value for key, value in want.items()
    )


__all__ = [
    "Conflict",
    "Forbidden",
    "Invalid",
    "KubeApi",
    "KubeError",
    "NotFound",
    "Unauthorized",
    "api_client",
    "error_of",
    "read_json",
]
