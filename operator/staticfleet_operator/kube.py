"""The operator's Kubernetes API calls: JSON over Kopf's own authenticated HTTP session.

Kopf talks to the API server through an aiohttp session per credentials (`APIContext`,
kept in its vault, filled by the `@kopf.on.login` handlers). The operator's calls go through
the same session: one connection pool for Kopf's watches and patches and the operator's
reads and writes, TLS set up from the credentials by Kopf (inline certificate data is
written to a temporary file only while the SSL context is built). What this module adds:

- Paths and query parameters of the few endpoints the operator calls (`path`). A generated
  client (kubernetes_asyncio) did this before; importing it loads every API and model class
  of Kubernetes, 35 MiB of the operator's resident memory (with compiled bytecode) for some
  twenty calls whose bodies the operator sends and reads as plain JSON anyway
  (docs/performance.md, "What the operator's memory held").
- Re-login on a 401: the credentials are invalidated in the vault, which makes Kopf run the
  login handlers again, and the call is retried once with the new ones. Nothing holds a
  session across a re-login: `KubeApi` asks the vault on every call.
- One exception hierarchy: `KubeError` and its kinds (`NotFound`, `Conflict`, ...), from the
  answer's status and its Status body.
- A bound on every call (`REQUEST_TIMEOUT_SECONDS`), the answer read included.
- Label selectors are sent to the server *and* applied to the answer: a server that ignores
  them (an emulator) cannot hand the operator someone else's pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp
import kopf
import msgspec
from kopf._cogs.clients.auth import APIContext
from kopf._cogs.structs.credentials import Vault

from staticfleet_operator.crd import GROUP, PLURAL, VERSION

log = logging.getLogger("staticfleet.operator.kube")

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
# Who the API server's audit log says made a request (Kopf's own requests say "kopf/…").
USER_AGENT = "staticfleet-operator"
# A request's bound, answer read included: a hung request must fail the pass that made it
# (which is then retried), not hold its group's lock for ever.
REQUEST_TIMEOUT_SECONDS = 60.0
# Kopf's vault caches one `APIContext` per credentials under this purpose; Kopf's own
# requests use the same one (kopf._cogs.clients.auth.authenticated).
CONTEXTS = "contexts"
RELOGIN = "the API server refused the credentials (401): logging in again"

# The API groups the operator calls.
CORE = "api/v1"
POLICY = "apis/policy/v1"
AUTHENTICATION = "apis/authentication.k8s.io/v1"
GROUPS = f"apis/{GROUP}/{VERSION}"

JsonObject = dict[str, Any]
# What a caller keeps of an answer or a watch event, decoded straight from its bytes: the
# members of a TypedDict shape and nothing else (msgspec skips the rest without building it).
Shape = msgspec.json.Decoder[Any]


def path(
    api: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The URL path of a collection (`name` None) or an object, namespaced or not:
    `/api/v1/namespaces/ns/pods/p/status`."""
    parts = [api]
    if namespace is not None:
        parts += ["namespaces", _segment(namespace)]
    parts.append(plural)
    if name is not None:
        parts.append(_segment(name))
    if subresource is not None:
        parts.append(subresource)
    return "/" + "/".join(parts)


def _segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


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


def error_of(status: int, reason: str = "", body: bytes | str = b"") -> KubeError:
    """The typed error for a refused request (the message from the API's Status body)."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    status_body: Any = None
    with contextlib.suppress(ValueError):
        status_body = json.loads(text)
    if not isinstance(status_body, Mapping):
        status_body = {}
    return _status_error(status, reason, status_body, text[:500])


def _status_error(
    code: int, reason: str, status_body: Mapping[str, Any], fallback: str = ""
) -> KubeError:
    """The typed error for a Status object (a refusal's body, a watch's ERROR event): its
    message, and a kind from the code and the causes."""
    message = str(status_body.get("message") or fallback)
    causes: list[str] = []
    with contextlib.suppress(TypeError, AttributeError):
        # A StatusCause's type is serialized as `reason`.
        causes = [
            str(c.get("reason")) for c in (status_body.get("details") or {}).get("causes") or ()
        ]
    kind = _KINDS.get(code, KubeError)
    if code == 403 and "NamespaceTerminating" in causes:
        kind = NamespaceTerminating
    return kind(code, reason, message)


async def read_json(response: aiohttp.ClientResponse, shape: Shape | None = None) -> JsonObject:
    """An answer's JSON object (only `shape`'s members, if given); a refusal raises its typed
    error."""
    try:
        raw = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        raise error_of(response.status, str(response.reason or ""), raw)
    body = decoded(raw, shape) if raw else {}
    return body if isinstance(body, dict) else {}


def decoded(raw: bytes, shape: Shape | None) -> Any:
    """`raw` decoded whole, or as `shape` (whole where the shape does not fit: it only ever
    saves memory, never refuses an answer)."""
    if shape is not None:
        try:
            return shape.decode(raw)
        except msgspec.ValidationError:
            pass
    return json.loads(raw)


# --- calls over Kopf's credentials -----------------------------------------------------------


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

    async def close(self) -> None:
        """Close the sessions of a vault of its own (Kopf closes its vault when it stops)."""
        if self._owns_vault:
            await self._vault.close()

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"User-Agent": self._user_agent, "Accept": JSON}
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    async def call(
        self,
        method: str,
        url_path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        shape: Shape | None = None,
    ) -> JsonObject:
        """One request on the current credentials, its answer's JSON object (only `shape`'s
        members, if given). A 401 makes Kopf log in again (the vault is shared with Kopf's
        watches) and the request is tried once more. Raises `TimeoutError` when it takes
        longer than the API's timeout."""
        data = None if body is None else json.dumps(body).encode()
        headers = self._headers(None if body is None else content_type)
        retried = False
        async for key, info, context in self._vault.extended(APIContext, CONTEXTS):
            url = context.server.rstrip("/") + url_path
            try:
                async with asyncio.timeout(self._timeout):
                    response = await context.session.request(
                        method, url, params=params, data=data, headers=headers
                    )
                    return await read_json(response, shape)
            except Unauthorized as refused:
                if retried or not self._relogin:
                    raise
                retried = True
                log.warning(RELOGIN)
                try:
                    await self._vault.invalidate(key, info, exc=refused)
                except kopf.LoginError as failed:
                    raise refused from failed
        raise Unauthorized(401, "Unauthorized", "no credentials")  # the vault ran dry

    async def watch(
        self,
        url_path: str,
        *,
        resource_version: str | None,
        timeout_seconds: int,
        shape: Shape | None = None,
        **params: str,
    ) -> AsyncIterator[JsonObject]:
        """The events (`{"type", "object"}`, dicts, only `shape`'s members if given) of a
        watch of the collection at `url_path`, on the current credentials, until the API
        server ends the stream after `timeout_seconds`. Not bounded by the API's timeout (a
        watch is long), but dropped when nothing arrives for longer than the server's own
        timeout. A 410 Gone (the resourceVersion expired, answered at once or as an ERROR
        event) raises `KubeError` with status 410; a 401 makes Kopf log in again, as for
        `call`, and the watch is opened once more.

        Each watch has a session of its own, closed with it: a re-login closes the shared
        sessions, and a watch on credentials since replaced runs on to its timeout rather
        than end early (the informer would resume it at once either way)."""
        retried = False
        quiet = aiohttp.ClientTimeout(sock_connect=30, sock_read=timeout_seconds + 30)
        query = {
            **params,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if resource_version is not None:
            query["resourceVersion"] = resource_version
        async for key, info in self._vault:
            context = APIContext(info)
            try:
                response = await context.session.get(
                    context.server.rstrip("/") + url_path,
                    params=query,
                    headers=self._headers(None),
                    timeout=quiet,
                )
                try:
                    if response.status == 401 and not retried and self._relogin:
                        retried = True
                        log.warning(RELOGIN)
                        refused = error_of(401, str(response.reason or ""))
                        try:
                            await self._vault.invalidate(key, info, exc=refused)
                        except kopf.LoginError as failed:
                            raise refused from failed
                        continue
                    if not 200 <= response.status <= 299:
                        await read_json(response)  # raises the typed error
                    async for line in response.content:
                        if not line.strip():
                            continue
                        event = decoded(line, shape)
                        if event.get("type") == "ERROR":
                            # The Status, whole: a shape keeps none of its fields.
                            status = json.loads(line).get("object") or {}
                            raise _status_error(
                                int(status.get("code") or 0),
                                str(status.get("reason") or ""),
                                status,
                            )
                        yield event
                    return
                finally:
                    response.release()
            finally:
                await context.close()
        raise Unauthorized(401, "Unauthorized", "no credentials")  # the vault ran dry

    async def list_objects(
        self, url_path: str, shape: Shape | None = None, **params: str
    ) -> JsonObject:
        """The answer (items and the list's resourceVersion; only `shape`'s members, if
        given) of a LIST of the collection at `url_path`, with the query `params`."""
        return await self.call("GET", url_path, params=params, shape=shape)

    async def _get_or_none(self, url_path: str) -> JsonObject | None:
        try:
            return await self.call("GET", url_path)
        except NotFound:
            return None

    async def _write(
        self, method: str, url_path: str, body: Mapping[str, Any], content_type: str = JSON
    ) -> JsonObject:
        self.writes += 1
        return await self.call(method, url_path, body=body, content_type=content_type)

    # --- pods ---------------------------------------------------------------------------------

    async def list_pods(self, namespace: str, labels: Labels) -> list[JsonObject]:
        body = await self.list_objects(
            path(CORE, "pods", namespace), labelSelector=label_selector(labels)
        )
        items: list[JsonObject] = body.get("items") or []
        return [
            pod
            for pod in items
            if _labels_match((pod.get("metadata") or {}).get("labels") or {}, labels)
            and (pod.get("metadata") or {}).get("namespace", namespace) == namespace
        ]

    async def create_pod(self, namespace: str, pod: Mapping[str, Any]) -> JsonObject:
        return await self._write("POST", path(CORE, "pods", namespace), pod)

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete a pod; False when it was already gone. With `uid`, only that incarnation."""
        options: JsonObject = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            await self._write("DELETE", path(CORE, "pods", namespace, name), options)
        except NotFound:
            return False
        return True

    async def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JsonObject:
        """A JSON merge patch of a pod (its labels and annotations: a promoted standby)."""
        return await self._write("PATCH", path(CORE, "pods", namespace, name), patch, MERGE_PATCH)

    async def patch_pod_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> JsonObject:
        return await self.call(
            "PATCH",
            path(CORE, "pods", namespace, name, "status"),
            body={"status": dict(status)},
            content_type=MERGE_PATCH,
        )

    # --- secrets (member tokens) --------------------------------------------------------------

    async def get_secret(self, namespace: str, name: str) -> JsonObject | None:
        return await self._get_or_none(path(CORE, "secrets", namespace, name))

    async def list_opaque_secrets(self, namespace: str) -> list[JsonObject]:
        """The namespace's Opaque Secrets (the kind that holds member tokens)."""
        body = await self.list_objects(
            path(CORE, "secrets", namespace), fieldSelector="type=Opaque"
        )
        items: list[JsonObject] = body.get("items") or []
        return [secret for secret in items if secret.get("type", "Opaque") == "Opaque"]

    async def create_secret(self, namespace: str, secret: Mapping[str, Any]) -> JsonObject:
        """Create a Secret; raises `Conflict` when it exists."""
        return await self._write("POST", path(CORE, "secrets", namespace), secret)

    async def patch_secret(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JsonObject:
        """Merge-patch a Secret the operator made (a group's Kafka client configuration)."""
        return await self._write(
            "PATCH", path(CORE, "secrets", namespace, name), patch, MERGE_PATCH
        )

    # --- pod disruption budgets (a managed group's members) ------------------------------------

    async def get_pod_disruption_budget(self, namespace: str, name: str) -> JsonObject | None:
        return await self._get_or_none(path(POLICY, "poddisruptionbudgets", namespace, name))

    async def create_pod_disruption_budget(
        self, namespace: str, budget: Mapping[str, Any]
    ) -> JsonObject:
        """Create a PodDisruptionBudget; raises `Conflict` when it exists."""
        return await self._write("POST", path(POLICY, "poddisruptionbudgets", namespace), budget)

    async def patch_pod_disruption_budget(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> JsonObject:
        """Merge-patch a PodDisruptionBudget the operator made."""
        return await self._write(
            "PATCH", path(POLICY, "poddisruptionbudgets", namespace, name), patch, MERGE_PATCH
        )

    # --- custom objects -----------------------------------------------------------------------

    async def get_custom_object(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> JsonObject | None:
        """A custom object (a ConsumerGroup, Kopf's peering object); None when absent."""
        return await self._get_or_none(path(f"apis/{group}/{version}", plural, namespace, name))

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
            return await self.call(
                "PATCH",
                path(f"apis/{group}/{version}", plural, namespace, name),
                body=patch,
                content_type=MERGE_PATCH,
            )
        except NotFound:
            return None

    # --- consumer groups ----------------------------------------------------------------------

    async def list_groups(self, namespaces: Sequence[str]) -> list[JsonObject]:
        """Every ConsumerGroup in `namespaces` (none: all of them)."""
        scopes: list[str | None] = [*namespaces] or [None]
        listings = [await self.list_objects(path(GROUPS, PLURAL, scope)) for scope in scopes]
        return [item for listed in listings for item in listed.get("items") or []]

    async def get_group(self, namespace: str, name: str) -> JsonObject | None:
        return await self.get_custom_object(GROUP, VERSION, PLURAL, name, namespace)

    async def patch_group_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> JsonObject:
        return await self.call(
            "PATCH",
            path(GROUPS, PLURAL, namespace, name, "status"),
            body={"status": dict(status)},
            content_type=MERGE_PATCH,
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
        try:
            await self._write("POST", path(CORE, "events", namespace), event)
        except (KubeError, aiohttp.ClientError) as error:
            log.warning("could not post event %s: %s", reason, error)


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
    "AUTHENTICATION",
    "CORE",
    "GROUPS",
    "POLICY",
    "Conflict",
    "Forbidden",
    "Invalid",
    "KubeApi",
    "KubeError",
    "NotFound",
    "Shape",
    "Unauthorized",
    "decoded",
    "error_of",
    "path",
    "read_json",
]
