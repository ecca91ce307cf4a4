"""A small Kubernetes API adapter: the few calls the operator makes, over aiohttp.

Plain REST (list/get/create/delete pods, get/create member token Secrets, patch the
ConsumerGroup's status, post Events), so it behaves the same against a real API server and
kmock's emulator. Label selectors are sent to the server *and* applied to the answer: a
server that ignores them (an emulator) cannot hand the operator someone else's pods.

Every write is appended to `actions` (verb, kind, name, detail) for logs and tests.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiohttp

from staticfleet_operator.crd import GROUP, PLURAL, VERSION

if TYPE_CHECKING:
    from kopf import ConnectionInfo

log = logging.getLogger("staticfleet.operator.kube")

MERGE_PATCH = "application/merge-patch+json"


class KubeError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass(frozen=True, slots=True)
class Action:
    verb: str
    kind: str
    name: str
    detail: Mapping[str, str] = field(default_factory=dict)


def label_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


class KubeApi:
    def __init__(
        self,
        server: str,
        *,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | bool | None = None,
    ) -> None:
        self._server = server.rstrip("/")
        self._headers = dict(headers or {})
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None
        self.actions: list[Action] = []

    @classmethod
    def from_credentials(cls, info: ConnectionInfo) -> KubeApi:
        """From what Kopf's login handlers return (service account or kubeconfig)."""
        headers: dict[str, str] = {}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        context: ssl.SSLContext | bool | None = None
        if info.server.startswith("https"):
            if info.insecure:
                context = False
            else:
                context = ssl.create_default_context(cafile=_path(info.ca_path, info.ca_data))
                cert = _path(info.certificate_path, info.certificate_data)
                key = _path(info.private_key_path, info.private_key_data)
                if cert:
                    context.load_cert_chain(cert, key)
        return cls(info.server, headers=headers, ssl_context=context)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- pods ------------------------------------------------------------------------------

    async def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        body = await self._request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods",
            params={"labelSelector": label_selector(labels)},
        )
        items: list[dict[str, Any]] = body.get("items") or []
        return [
            pod
            for pod in items
            if _labels_match((pod.get("metadata") or {}).get("labels") or {}, labels)
            and (pod.get("metadata") or {}).get("namespace", namespace) == namespace
        ]

    async def create_pod(self, namespace: str, pod: Mapping[str, Any]) -> dict[str, Any]:
        name = str(pod["metadata"]["name"])
        annotations = pod["metadata"].get("annotations") or {}
        self.actions.append(
            Action("create", "Pod", name, {k: str(v) for k, v in annotations.items()})
        )
        return await self._request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete a pod; False when it was already gone. With `uid`, only that incarnation."""
        self.actions.append(Action("delete", "Pod", name))
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self._request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body)
        except KubeError as error:
            if error.status == 404:
                return False
            raise
        return True

    async def patch_pod(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch of a pod (its labels and annotations: a promoted standby)."""
        self.actions.append(Action("patch", "Pod", name))
        return await self._request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            body=dict(patch),
            content_type=MERGE_PATCH,
        )

    async def patch_pod_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self._request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body={"status": status},
            content_type=MERGE_PATCH,
        )

    # --- secrets (member tokens) -----------------------------------------------------------

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    async def create_secret(self, namespace: str, secret: Mapping[str, Any]) -> dict[str, Any]:
        """Create a Secret; raises KubeError(409) when it exists. The action log names it
        only (never its data)."""
        self.actions.append(Action("create", "Secret", str(secret["metadata"]["name"])))
        return await self._request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=secret)

    async def get_path(self, path: str) -> dict[str, Any] | None:
        """Any object by its API path (None when it does not exist)."""
        try:
            return await self._request("GET", path)
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    # --- consumer groups ---------------------------------------------------------------------

    def _group_path(self, namespace: str, name: str) -> str:
        return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"

    async def list_group_keys(self, namespaces: Sequence[str]) -> list[tuple[str, str]]:
        """(namespace, name) of every ConsumerGroup in `namespaces` (none: all of them)."""
        paths = [f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}" for ns in namespaces] or [
            f"/apis/{GROUP}/{VERSION}/{PLURAL}"
        ]
        keys: list[tuple[str, str]] = []
        for path in paths:
            body = await self._request("GET", path)
            for item in body.get("items") or []:
                metadata = item.get("metadata") or {}
                keys.append((str(metadata.get("namespace")), str(metadata.get("name"))))
        return keys

    async def get_group(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._request("GET", self._group_path(namespace, name))
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    async def patch_group_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self._request(
            "PATCH",
            self._group_path(namespace, name) + "/status",
            body={"status": status},
            content_type=MERGE_PATCH,
        )

    # --- events ------------------------------------------------------------------------------

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
        self.actions.append(Action("event", "Event", reason, {"message": message}))
        try:
            await self._request("POST", f"/api/v1/namespaces/{namespace}/events", body=event)
        except (KubeError, aiohttp.ClientError) as error:
            log.warning("could not post event %s: %s", reason, error)

    # --- plumbing ----------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers)
        headers = {"Content-Type": content_type} if body is not None else {}
        data = json.dumps(body) if body is not None else None
        async with self._session.request(
            method,
            self._server + path,
            params=params,
            data=data,
            headers=headers,
            ssl=self._ssl if self._ssl is not None else True,
        ) as response:
            text = await response.text()
            if response.status >= 400:
                raise KubeError(response.status, text[:500])
            if not text:
                return {}
            result = json.loads(text)
            return result if isinstance(result, dict) else {}


def _labels_match(have: Mapping[str, str], want: Mapping[str, str]) -> bool:
    return all(have.get(key) == value for key, value in want.items())


def _path(path: Any, data: Any) -> str | None:
    """A file path for a path-or-inline-data credential (ssl needs files)."""
    if path:
        return str(path)
    if not data:
        return None
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if not raw.lstrip().startswith(b"-----"):
        raw = base64.b64decode(raw)
    handle = tempfile.NamedTemporaryFile(delete=False, suffix=".pem")  # noqa: SIM115
    with handle:
        handle.write(raw)
    return handle.name
