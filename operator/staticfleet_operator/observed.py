"""What the operator knows of the cluster without asking: its watches, plus its own writes.

Kopf indexes ConsumerGroups by (namespace, name) (`handlers.py`); the operator's own
informers (`informer.py`) keep member pods, by (namespace, group label), and Opaque Secrets,
by (namespace, name). A reconcile pass and the admission webhook read them instead of
GETting and LISTing, so a fleet where nothing changes costs the API server nothing beyond
the watches. Reads of pods and Secrets wait for their informer's first listing.

A watch lags the operator's own writes by a few milliseconds, and a pass that acted is
followed at once by the pass its own write's event triggers. So the operator's writes are
laid over the stores until the watch shows them ("read your writes", as controller-
runtime's expectations do): a created pod is listed before its ADDED event arrives, a
deleted one is listed as terminating, a patched ConsumerGroup is read as patched, a created
Secret is found. An overlay entry goes once the store shows the write, or after
`OVERLAY_SECONDS` (a write whose event was lost to a relist is visible by then).

The other way round, a pod or Secret deleted while a watch was down is dropped by the
informer when it lists again (a 410 Gone), which tells it as DELETED: its group gets a pass.

Without watches (a test driving `reconcile` directly) every read goes to the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.informer import OPAQUE_SECRETS, Informer, pod_kept, trimmed
from staticfleet_operator.kube import KubeApi
from staticfleet_operator.owned import GROUP_LABEL

Body = dict[str, Any]
# A Secret by (namespace, name); a group is a GroupRef.
SecretKey = tuple[str, str]
# How long a write of our own is laid over the stores at most.
OVERLAY_SECONDS = 30.0


def _metadata(body: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata: Mapping[str, Any] = body.get("metadata") or {}
    return metadata


def _version(body: Mapping[str, Any]) -> int | None:
    value = _metadata(body).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _first(index: Mapping[Any, Any] | None, key: GroupRef) -> Body | None:
    if index is None or key not in index:
        return None
    for value in index[key]:
        return dict(value)
    return None


@dataclass
class Observed:
    """Kopf's ConsumerGroup index, the pod and Secret informers, and the operator's writes
    not yet seen in them."""

    groups: Mapping[Any, Any] | None = None
    pods: Informer | None = None
    secrets: Informer | None = None
    clock: Callable[[], float] = time.monotonic
    _written_groups: dict[GroupRef, tuple[Body, float]] = field(default_factory=dict)
    _created_pods: dict[GroupRef, dict[str, tuple[Body, float]]] = field(default_factory=dict)
    _deleted_pods: dict[GroupRef, dict[str, float]] = field(default_factory=dict)
    _patched_pods: dict[GroupRef, dict[str, tuple[Body, float]]] = field(default_factory=dict)
    _created_secrets: dict[SecretKey, tuple[Body, float]] = field(default_factory=dict)

    @property
    def watching(self) -> bool:
        return self.groups is not None and self.pods is not None and self.secrets is not None

    def attach(self, groups: Any) -> None:
        """Kopf's ConsumerGroup index, as Kopf passes it to every handler (the same object
        each time)."""
        self.groups = groups

    def inform(self, pods: Informer, secrets: Informer | None) -> None:
        """The member pod and Opaque Secret informers (started by the handlers); no Secret
        informer: every Secret read is a GET (the operator without `list`/`watch` on them)."""
        self.pods, self.secrets = pods, secrets

    # --- reads ------------------------------------------------------------------------------

    def group_refs(self) -> list[GroupRef]:
        """Every ConsumerGroup in Kopf's index (none before it is attached)."""
        return [GroupRef(*key) for key in self.groups or {}]

    async def group(self, kube: KubeApi, namespace: str, name: str) -> Body | None:
        if self.groups is None:
            return await kube.get_group(namespace, name)
        key = GroupRef(namespace, name)
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
        await self.pods.wait_synced()
        key = GroupRef(namespace, group)
        listed = {pod_identity(pod): dict(pod) for pod in self.pods.group(key)}
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
        await self.secrets.wait_synced()
        key = (namespace, name)
        indexed = self.secrets.get(namespace, name)
        if indexed is not None:
            self._created_secrets.pop(key, None)
            return dict(indexed)
        created = self._created_secrets.get(key)
        if created is not None and self.clock() - created[1] <= OVERLAY_SECONDS:
            return created[0]
        self._created_secrets.pop(key, None)
        return None

    def pending(self, namespace: str, group: str) -> bool:
        """Writes of ours to the group's pods the watch has not shown yet."""
        key = GroupRef(namespace, group)
        return bool(
            self._created_pods.get(key)
            or self._deleted_pods.get(key)
            or self._patched_pods.get(key)
        )

    # --- writes -----------------------------------------------------------------------------

    def group_written(self, body: Mapping[str, Any]) -> None:
        metadata = _metadata(body)
        if self.groups is not None and metadata.get("name"):
            key = GroupRef.of(body)
            now = self.clock()
            # Kept as the index keeps it (no managedFields), oldest first: entries whose group
            # is not read again would otherwise stay until its next pass (the resync's, a
            # minute later), a whole ConsumerGroup each (docs/performance.md).
            self._written_groups.pop(key, None)
            while self._written_groups:
                oldest = next(iter(self._written_groups))
                if now - self._written_groups[oldest][1] <= OVERLAY_SECONDS:
                    break
                del self._written_groups[oldest]
            self._written_groups[key] = (trimmed(body), now)

    def pod_created(self, namespace: str, group: str, body: Mapping[str, Any]) -> None:
        # Kept as the informer keeps pods: the create's answer is the whole pod.
        if self.pods is not None:
            pods = self._created_pods.setdefault(GroupRef(namespace, group), {})
            pods[pod_identity(body)] = (pod_kept(body), self.clock())

    def pod_patched(self, namespace: str, group: str, body: Mapping[str, Any]) -> None:
        """A pod of ours patched (a standby relabelled into a slot): read as patched."""
        if self.pods is not None:
            pods = self._patched_pods.setdefault(GroupRef(namespace, group), {})
            pods[pod_identity(body)] = (pod_kept(body), self.clock())

    def pod_deleted(self, namespace: str, group: str, uids: Iterable[str]) -> None:
        if self.pods is not None:
            deleted = self._deleted_pods.setdefault(GroupRef(namespace, group), {})
            for uid in uids:
                deleted[uid] = self.clock()

    def secret_created(self, body: Mapping[str, Any]) -> None:
        metadata = _metadata(body)
        if self.secrets is not None and metadata.get("name"):
            key = (str(metadata.get("namespace")), str(metadata["name"]))
            # Kept as the informer keeps Secrets: the create's answer has managedFields.
            self._created_secrets[key] = (OPAQUE_SECRETS.kept(body), self.clock())


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
