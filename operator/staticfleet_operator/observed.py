"""What the operator knows of the cluster without asking: Kopf's indices, plus its own writes.

Kopf keeps three indices from its watches (`handlers.py`): ConsumerGroups by (namespace,
name), member pods by (namespace, group label) and Opaque Secrets by (namespace, name). A
reconcile pass and the admission webhook read them instead of GETting and LISTing, so a
fleet where nothing changes costs the API server nothing beyond the watches.

A watch lags the operator's own writes by a few milliseconds, and a pass that acted is
followed at once by the pass its own write's event triggers. So the operator's writes are
laid over the indices until the watch shows them ("read your writes", as controller-
runtime's expectations do): a created pod is listed before its ADDED event arrives, a
deleted one is listed as terminating, a patched ConsumerGroup is read as patched, a created
Secret is found. An overlay entry goes once the index shows the write, or after
`OVERLAY_SECONDS` (a write whose event was lost to a relist is visible by then).

The other way round, an index can show a pod that is gone. Kopf lists again when a watch
cannot resume (410 Gone: its resourceVersion is older than the API server still holds), and it
indexes what the LIST returns, but it never drops an entry the LIST no longer shows: a DELETED
event it did not see stays lost for the life of the process (client-go's informers compare a
relist with their store; Kopf does not). A member pod deleted in that window would never be
replaced; a token Secret, never created again. So after a relist `stale_pods` (and
`stale_secrets`) LISTs once per namespace and hides the entries the API server no longer has
(`relists.py` sees the relist, `passes.py` runs the check).

Without indices (a test driving `reconcile` directly) every read goes to the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from staticfleet_operator.kube import KubeApi
from staticfleet_operator.owned import GROUP_LABEL

Body = dict[str, Any]
Key = tuple[str, str]
# How long a write of our own is laid over the indices at most.
OVERLAY_SECONDS = 30.0


def _metadata(body: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata: Mapping[str, Any] = body.get("metadata") or {}
    return metadata


def _version(body: Mapping[str, Any]) -> int | None:
    value = _metadata(body).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _first(index: Mapping[Any, Any] | None, key: Key) -> Body | None:
    if index is None or key not in index:
        return None
    for value in index[key]:
        return dict(value)
    return None


@dataclass
class Observed:
    """The indices Kopf hands the handlers, and the operator's writes not yet seen in them."""

    groups: Mapping[Any, Any] | None = None
    pods: Mapping[Any, Any] | None = None
    secrets: Mapping[Any, Any] | None = None
    clock: Callable[[], float] = time.monotonic
    _written_groups: dict[Key, tuple[Body, float]] = field(default_factory=dict)
    _created_pods: dict[Key, dict[str, tuple[Body, float]]] = field(default_factory=dict)
    _deleted_pods: dict[Key, dict[str, float]] = field(default_factory=dict)
    _patched_pods: dict[Key, dict[str, tuple[Body, float]]] = field(default_factory=dict)
    _created_secrets: dict[Key, tuple[Body, float]] = field(default_factory=dict)
    # Index entries a LIST showed gone (Kopf keeps them): hidden while Kopf shows them.
    _stale_pods: dict[Key, dict[str, Body]] = field(default_factory=dict)
    _stale_secrets: dict[Key, Body] = field(default_factory=dict)

    @property
    def watching(self) -> bool:
        return self.groups is not None and self.pods is not None and self.secrets is not None

    def attach(self, groups: Any, pods: Any, secrets: Any) -> None:
        """The indices, as Kopf passes them to every handler (the same objects each time)."""
        self.groups, self.pods, self.secrets = groups, pods, secrets

    # --- reads ------------------------------------------------------------------------------

    async def group(self, kube: KubeApi, namespace: str, name: str) -> Body | None:
        if self.groups is None:
            return await kube.get_group(namespace, name)
        key = (namespace, name)
        indexed = _first(self.groups, key)
        written = self._written_groups.get(key)
        if written is None:
            return indexed
        body, at = written
        seen = indexed is not None and _newer_or_same(indexed, body)
        if seen or self.clock() - at > OVERLAY_SECONDS:
            del self._written_groups[key]
            return indexed
        return body

    async def member_pods(self, kube: KubeApi, namespace: str, group: str) -> list[Body]:
        """The pods labelled with the group's name, as a LIST would answer now."""
        if self.pods is None:
            return await kube.list_pods(namespace, {GROUP_LABEL: group})
        key = (namespace, group)
        listed: dict[str, Body] = {}
        stale = self._stale_pods.get(key, {})
        shown_stale: set[str] = set()
        for pod in self.pods.get(key, ()):
            identity = pod_identity(pod)
            if stale.get(identity) == pod:
                shown_stale.add(identity)  # the same object the LIST no longer had
                continue
            listed[identity] = dict(pod)
        for identity in set(stale) - shown_stale:
            del stale[identity]  # Kopf dropped it, or it is another object now (a replacement)
        if not stale:
            self._stale_pods.pop(key, None)
        names = {str(_metadata(pod).get("name")) for pod in listed.values()}
        now = self.clock()
        created = self._created_pods.get(key, {})
        for uid, (body, at) in list(created.items()):
            seen = uid in listed or (uid.startswith("name:") and uid[5:] in names)
            if seen or now - at > OVERLAY_SECONDS:
                del created[uid]
            else:
                listed[uid] = body
        patched = self._patched_pods.get(key, {})
        for uid, (body, at) in list(patched.items()):
            pod = listed.get(uid)
            if pod is None or _newer_or_same_pod(pod, body) or now - at > OVERLAY_SECONDS:
                del patched[uid]  # the watch shows the patch (or the pod is gone)
            else:
                listed[uid] = body
        deleted = self._deleted_pods.get(key, {})
        for uid, at in list(deleted.items()):
            pod = listed.get(uid)
            if pod is None or _metadata(pod).get("deletionTimestamp") or now - at > OVERLAY_SECONDS:
                del deleted[uid]  # the watch shows the deletion (or we stop guessing)
            else:
                listed[uid] = _terminating(pod)
        if not created:
            self._created_pods.pop(key, None)
        if not deleted:
            self._deleted_pods.pop(key, None)
        if not patched:
            self._patched_pods.pop(key, None)
        return sorted(listed.values(), key=lambda pod: str(_metadata(pod).get("name")))

    async def secret(self, kube: KubeApi, namespace: str, name: str) -> Body | None:
        if self.secrets is None:
            return await kube.get_secret(namespace, name)
        key = (namespace, name)
        indexed = _first(self.secrets, key)
        stale = self._stale_secrets.get(key)
        if stale is not None:
            if indexed == stale:
                indexed = None  # the same object the LIST no longer had
            else:
                del self._stale_secrets[key]
        if indexed is not None:
            self._created_secrets.pop(key, None)
            return indexed
        created = self._created_secrets.get(key)
        if created is not None and self.clock() - created[1] <= OVERLAY_SECONDS:
            return created[0]
        self._created_secrets.pop(key, None)
        return None

    async def stale_pods(self, kube: KubeApi) -> set[Key]:
        """Member pods the index shows and a LIST does not: deleted while Kopf's watch was
        down. From now on `member_pods` leaves them out; their groups are returned (each
        wants a pass). One LIST per namespace with indexed pods.

        Only entries indexed before the LIST was sent count: a pod created since may be
        indexed already and missing from the answer, and it is not gone."""
        if self.pods is None:
            return set()
        before: dict[Key, dict[str, Body]] = {}
        for key in list(self.pods):
            pods = {pod_identity(pod): dict(pod) for pod in self.pods.get(key) or ()}
            if pods:
                before[key] = pods
        present: set[tuple[str, str]] = set()
        for namespace in sorted({namespace for namespace, _ in before}):
            for pod in await kube.list_pods(namespace, {GROUP_LABEL: None}):
                present.add((namespace, pod_identity(pod)))
        stale: set[Key] = set()
        for key, pods in before.items():
            for identity, body in pods.items():
                if (key[0], identity) not in present:
                    self._stale_pods.setdefault(key, {})[identity] = body
                    stale.add(key)
        return stale

    async def stale_secrets(self, kube: KubeApi) -> set[Key]:
        """Opaque Secrets the index shows and a LIST does not (as `stale_pods`): hidden from
        `secret` from now on; their (namespace, name) keys are returned."""
        if self.secrets is None:
            return set()
        before: dict[Key, Body] = {}
        for key in list(self.secrets):
            body = _first(self.secrets, key)
            if body is not None:
                before[key] = body
        present: set[Key] = set()
        for namespace in sorted({namespace for namespace, _ in before}):
            for secret in await kube.list_opaque_secrets(namespace):
                present.add((namespace, str(_metadata(secret).get("name"))))
        stale = set(before) - present
        for key in stale:
            self._stale_secrets[key] = before[key]
        return stale

    def pending(self, namespace: str, group: str) -> bool:
        """Writes of ours to the group's pods the watch has not shown yet."""
        key = (namespace, group)
        return bool(
            self._created_pods.get(key)
            or self._deleted_pods.get(key)
            or self._patched_pods.get(key)
        )

    # --- writes -----------------------------------------------------------------------------

    def group_written(self, body: Mapping[str, Any]) -> None:
        metadata = _metadata(body)
        if self.groups is not None and metadata.get("name"):
            key = (str(metadata.get("namespace")), str(metadata["name"]))
            self._written_groups[key] = (dict(body), self.clock())

    def pod_created(self, namespace: str, group: str, body: Mapping[str, Any]) -> None:
        if self.pods is not None:
            pods = self._created_pods.setdefault((namespace, group), {})
            pods[pod_identity(body)] = (dict(body), self.clock())

    def pod_patched(self, namespace: str, group: str, body: Mapping[str, Any]) -> None:
        """A pod of ours patched (a standby relabelled into a slot): read as patched."""
        if self.pods is not None:
            pods = self._patched_pods.setdefault((namespace, group), {})
            pods[pod_identity(body)] = (dict(body), self.clock())

    def pod_deleted(self, namespace: str, group: str, uids: Iterable[str]) -> None:
        if self.pods is not None:
            deleted = self._deleted_pods.setdefault((namespace, group), {})
            for uid in uids:
                deleted[uid] = self.clock()

    def secret_created(self, body: Mapping[str, Any]) -> None:
        metadata = _metadata(body)
        if self.secrets is not None and metadata.get("name"):
            key = (str(metadata.get("namespace")), str(metadata["name"]))
            self._created_secrets[key] = (dict(body), self.clock())


def _newer_or_same(indexed: Mapping[str, Any], written: Mapping[str, Any]) -> bool:
    """Whether the index has caught up with a status write: it shows what was written, or a
    later version (resourceVersions are etcd revisions in practice; not every emulator
    bumps them, so equal versions prove nothing)."""
    return indexed.get("status") == written.get("status") or _later_version(indexed, written)


def _newer_or_same_pod(indexed: Mapping[str, Any], written: Mapping[str, Any]) -> bool:
    """Whether the index has caught up with a pod patch: same labels and annotations, or a
    later version."""
    have, wrote = _metadata(indexed), _metadata(written)
    return (
        have.get("labels") == wrote.get("labels")
        and have.get("annotations") == wrote.get("annotations")
    ) or _later_version(indexed, written)


def _later_version(indexed: Mapping[str, Any], written: Mapping[str, Any]) -> bool:
    have, wrote = _version(indexed), _version(written)
    return have is not None and wrote is not None and have > wrote


def pod_identity(pod: Mapping[str, Any]) -> str:
    """A pod's uid (a replacement may reuse its predecessor's name); its name when it has
    none (an emulator that assigns no uid)."""
    metadata = _metadata(pod)
    return str(metadata.get("uid") or f"name:{metadata.get('name')}")


def _terminating(pod: Mapping[str, Any]) -> Body:
    metadata = dict(_metadata(pod))
    metadata["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {**pod, "metadata": metadata}
