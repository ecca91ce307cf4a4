"""The operator's own list/watch of member pods and token Secrets: a store a relist corrects.

An informer LISTs its kind (per watched namespace, or cluster-wide), keeps every object in a
store, then WATCHes from the listing's resourceVersion and applies each event; when the API
server ends the stream it resumes from the last resourceVersion seen (bookmarks included).
When that version has expired (410 Gone: the watch was down longer than the API server keeps
history) it LISTs again and compares the listing with its store, as client-go's informers do:
what the listing lacks was deleted meanwhile and is dropped, with a DELETED event. That last
step is what Kopf's indices never do (docs/operator.md, "Kopf: what the operator relies on"),
and why member pods and Secrets are not Kopf's to watch.

Each change calls `on_event(type, object)` (ADDED, MODIFIED, DELETED): the handlers turn it
into passes. `synced` is set once every scope has been listed: reads wait for it, so no pass
sees an empty store at start. Objects are kept without `metadata.managedFields`, member
pods only with the fields the operator reads (`pod_kept`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import msgspec

from coordinator.client import env
from staticfleet_operator.kube import CORE, KubeApi, KubeError, Shape, path
from staticfleet_operator.owned import GROUP_LABEL

log = logging.getLogger("staticfleet.operator.informer")

Body = dict[str, Any]
Name = tuple[str, str]  # (namespace, name)
Event = Callable[[str, Body], None]
# The API server ends a watch after this long (the informer resumes it): a stream that went
# quiet without the server noticing is dropped then at the latest.
WATCH_SECONDS = 300
BACKOFF_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 10.0


def trimmed(body: Mapping[str, Any]) -> Body:
    """All of an object but metadata.managedFields (the API server's field-ownership
    bookkeeping, which nothing here reads: with thousands of pods a large share of RSS)."""
    kept = dict(body)
    metadata = kept.get("metadata")
    if isinstance(metadata, Mapping) and "managedFields" in metadata:
        kept["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return kept


def _metadata(body: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata: Mapping[str, Any] = body.get("metadata") or {}
    return metadata


def name_of(body: Mapping[str, Any]) -> Name:
    metadata = _metadata(body)
    return str(metadata.get("namespace") or "default"), str(metadata.get("name"))


@dataclass(frozen=True, slots=True)
class Kind:
    """What an informer watches: a core/v1 collection (listed per namespace or
    cluster-wide), the selector sent to the server as query parameters, the same test
    applied to what it answers (an emulator may ignore selectors), what is kept of an
    object, and the key objects are grouped by (if any)."""

    plural: str
    selector: Mapping[str, str]
    wanted: Callable[[Mapping[str, Any]], bool]
    kept: Callable[[Mapping[str, Any]], Body] = trimmed
    grouped: Callable[[Mapping[str, Any]], Name | None] | None = None
    # What is decoded of a watch event and of a listing (None: all of it).
    event_shape: Shape | None = None
    listing_shape: Shape | None = None

    def collection(self, namespace: str | None) -> str:
        """The collection's path in `namespace` (None: in every namespace)."""
        return path(CORE, self.plural, namespace)


def _group_of(pod: Mapping[str, Any]) -> Name | None:
    labels = _metadata(pod).get("labels") or {}
    group = labels.get(GROUP_LABEL)
    return (name_of(pod)[0], str(group)) if group is not None else None


def _secret_kept(secret: Mapping[str, Any]) -> Body:
    """A Secret's metadata, type and data: what token lookups read."""
    return trimmed(
        {
            "metadata": secret.get("metadata") or {},
            "type": secret.get("type", "Opaque"),
            "data": secret.get("data") or {},
        }
    )


# What the operator reads of a member pod (members.member_pod, hot_standby.pod_health,
# adopted.rebuild_slots, pod_bindings.pod_binding, observed.py): the rest of a pod (its
# spec's volumes and most of its env, container statuses) is most of its size, and the
# store holds every member pod of every group (docs/performance.md, "One operator, many
# groups").
# Decoded straight into these shapes, a watch event or a listing of pods builds only what is
# kept: the rest of each pod (most of its bytes) is skipped, never made into objects that
# die at once among the kept ones (docs/performance.md, "What the operator's memory held").
class _PodMetadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    labels: Any
    annotations: Any
    creationTimestamp: Any
    deletionTimestamp: Any


class _Condition(TypedDict, total=False):
    type: Any
    status: Any


class _PodStatus(TypedDict, total=False):
    phase: Any
    reason: Any
    conditions: list[_Condition] | None


class _EnvVar(TypedDict, total=False):
    name: Any
    value: Any
    valueFrom: Any


class _Container(TypedDict, total=False):
    name: Any
    env: list[_EnvVar] | None


class _PodSpec(TypedDict, total=False):
    containers: list[_Container] | None


class _Pod(TypedDict, total=False):
    metadata: _PodMetadata
    spec: _PodSpec
    status: _PodStatus


class _PodEvent(TypedDict, total=False):
    type: Any
    object: _Pod


class _ListMetadata(TypedDict, total=False):
    resourceVersion: Any


class _PodList(TypedDict, total=False):
    metadata: _ListMetadata
    items: list[_Pod] | None


_POD_METADATA = frozenset(_PodMetadata.__annotations__)
_POD_STATUS = frozenset({"phase", "reason"})
_POD_ENV = frozenset({env.GROUP_ID})


def interned(value: Any) -> Any:
    """`value` with every string in it interned: each watch event is its own JSON document,
    so every kept object had its own copy of the same keys, label and annotation names, phases
    and condition types (measured in-process: 5,990 pods of 1,000 groups held 22.5 MiB, 13.6
    MiB interned; docs/performance.md). A unique string costs only its entry in the
    interpreter's table, which it leaves with the object."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, Mapping):
        return {sys.intern(str(k)): interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [interned(v) for v in value]
    return value


def pod_kept(pod: Mapping[str, Any]) -> Body:
    """The fields of a member pod the operator reads, and nothing else (strings interned)."""
    kept: Body = interned(_pod_fields(pod))
    return kept


def _pod_fields(pod: Mapping[str, Any]) -> Body:
    metadata = {k: v for k, v in _metadata(pod).items() if k in _POD_METADATA}
    status: Mapping[str, Any] = pod.get("status") or {}
    kept_status: Body = {k: v for k, v in status.items() if k in _POD_STATUS}
    conditions = [
        {"type": c.get("type"), "status": c.get("status")} for c in status.get("conditions") or ()
    ]
    if conditions:
        kept_status["conditions"] = conditions
    spec: Mapping[str, Any] = pod.get("spec") or {}
    containers = [
        {
            "name": container.get("name"),
            "env": [e for e in container.get("env") or () if e.get("name") in _POD_ENV],
        }
        for container in spec.get("containers") or ()
    ]
    return {"metadata": metadata, "spec": {"containers": containers}, "status": kept_status}


# Pods labelled with their group's name, grouped by (namespace, group label value).
MEMBER_PODS = Kind(
    "pods",
    selector={"labelSelector": GROUP_LABEL},
    wanted=lambda pod: _group_of(pod) is not None,
    kept=pod_kept,
    grouped=_group_of,
    event_shape=msgspec.json.Decoder(_PodEvent),
    listing_shape=msgspec.json.Decoder(_PodList),
)
# Opaque Secrets (the API server's default type) hold member tokens; service account
# tokens, TLS pairs and registry credentials are never kept. The API server accepts `type`
# as a field selector for Secrets.
OPAQUE_SECRETS = Kind(
    "secrets",
    selector={"fieldSelector": "type=Opaque"},
    wanted=lambda secret: secret.get("type", "Opaque") == "Opaque",
    kept=_secret_kept,
)


@dataclass
class Informer:
    """One kind's list/watch over `namespaces` (none: cluster-wide) and its store."""

    kube: Callable[[], KubeApi]
    kind: Kind
    namespaces: Sequence[str] = ()
    on_event: Event | None = None
    objects: dict[Name, Body] = field(default_factory=dict)
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    relists: int = 0  # listings after a 410 Gone (the first listing of each scope not counted)
    _groups: dict[Name, dict[Name, Body]] = field(default_factory=dict)
    _listed: set[str | None] = field(default_factory=set)
    # Per scope, the resourceVersion a watch resumes from (kept across stop and start).
    _versions: dict[str | None, str | None] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    # --- reads ------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Body | None:
        return self.objects.get((namespace, name))

    def group(self, key: Name) -> list[Body]:
        """The objects whose `kind.grouped` key is `key` (member pods of a group)."""
        return list(self._groups.get(key, {}).values())

    async def wait_synced(self) -> None:
        await self.synced.wait()

    # --- the store --------------------------------------------------------------------------

    def apply(self, kind: str, body: Mapping[str, Any]) -> None:
        """One watch event into the store; `on_event` hears of it."""
        key = name_of(body)
        if kind != "DELETED" and self.kind.wanted(body):
            kept = self.kind.kept(body)
            self._put(key, kept)
            self._tell(kind, kept)
            return
        # Deleted, or no longer matching (a label removed): it leaves the store either way.
        known = self._drop(key)
        if known is not None or self.kind.wanted(body):
            self._tell("DELETED", known if known is not None else self.kind.kept(body))

    def replace(self, scope: str | None, items: Iterable[Mapping[str, Any]]) -> int:
        """A listing of `scope` (a namespace, None: everything) replaces the store's objects
        of that scope: new and changed ones are told as ADDED/MODIFIED, and the ones the
        listing lacks are dropped and told as DELETED (they went while no watch ran).
        Returns how many were dropped."""
        fresh = {name_of(item): item for item in items if self.kind.wanted(item)}
        for key, item in fresh.items():
            before = self.objects.get(key)
            if before is None or _version(before) != _version(item) or not _version(item):
                kept = self.kind.kept(item)
                self._put(key, kept)
                self._tell("ADDED" if before is None else "MODIFIED", kept)
        gone = [key for key in self.objects if _in(scope, key) and key not in fresh]
        for key in gone:
            body = self._drop(key)
            if body is not None:
                self._tell("DELETED", body)
        return len(gone)

    def _put(self, key: Name, body: Body) -> None:
        before = self.objects.get(key)
        self.objects[key] = body
        if self.kind.grouped is None:
            return
        if before is not None:
            self._ungroup(key, before)
        group = self.kind.grouped(body)
        if group is not None:
            self._groups.setdefault(group, {})[key] = body

    def _drop(self, key: Name) -> Body | None:
        body = self.objects.pop(key, None)
        if body is not None and self.kind.grouped is not None:
            self._ungroup(key, body)
        return body

    def _ungroup(self, key: Name, body: Body) -> None:
        assert self.kind.grouped is not None
        group = self.kind.grouped(body)
        members = self._groups.get(group) if group is not None else None
        if members is not None:
            members.pop(key, None)
            if not members:
                del self._groups[group]  # type: ignore[arg-type]

    def _tell(self, kind: str, body: Body) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(kind, body)
        except Exception:  # a listener's bug must not end the watch
            log.exception("%s informer: the event listener failed", self.kind.plural)

    # --- running ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"informer {self.kind.plural}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        """List and watch every scope until cancelled."""
        scopes: list[str | None] = [*self.namespaces] or [None]
        async with asyncio.TaskGroup() as tasks:
            for scope in scopes:
                tasks.create_task(self._scope(scope), name=f"informer {self.kind.plural} {scope}")

    async def _scope(self, scope: str | None) -> None:
        collection = self.kind.collection(scope)
        # Started again after a stop: resume from the last version seen, as after a cut.
        listed = scope in self._versions  # False: list (again) before watching
        failures = 0  # in a row: each waits longer before the next try
        where = scope or "all namespaces"
        while True:
            try:
                if not listed:
                    self._versions[scope] = await self._list(scope, collection)
                    listed = True
                seen = False
                async for event in self.kube().watch(
                    collection,
                    resource_version=self._versions[scope],
                    timeout_seconds=WATCH_SECONDS,
                    shape=self.kind.event_shape,
                    **self.kind.selector,
                ):
                    seen, failures = True, 0
                    kind, body = event["type"], event["object"]
                    version = str(_metadata(body).get("resourceVersion") or "")
                    if version:
                        self._versions[scope] = version
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.apply(kind, body)
                if seen:
                    continue  # the server ended the stream: resume from the last version
                failures += 1  # it ended before any event: not at once again
            except asyncio.CancelledError:
                raise
            except KubeError as error:
                failures += 1
                if error.status == 410:
                    log.info(
                        "%s in %s: version %s expired, listing again",
                        self.kind.plural,
                        where,
                        self._versions.get(scope),
                    )
                    listed = False
                else:
                    log.warning("%s in %s: watch failed: %s", self.kind.plural, where, error)
            except Exception as error:  # connection lost, credentials closed, ...: resume
                failures += 1
                log.warning("%s in %s: watch interrupted: %r", self.kind.plural, where, error)
            await asyncio.sleep(min(BACKOFF_SECONDS * 2 ** (failures - 1), BACKOFF_MAX_SECONDS))

    async def _list(self, scope: str | None, collection: str) -> str | None:
        listing = await self.kube().list_objects(
            collection, shape=self.kind.listing_shape, **self.kind.selector
        )
        first = scope not in self._listed
        dropped = self.replace(scope, listing.get("items") or [])
        if first:
            self._listed.add(scope)
            if len(self._listed) == len([*self.namespaces] or [None]):
                self.synced.set()
        else:
            self.relists += 1
            if dropped:
                log.warning(
                    "%s: %d deleted while the watch was down, dropped on relisting %s",
                    self.kind.plural,
                    dropped,
                    scope or "all namespaces",
                )
        return str(_metadata(listing).get("resourceVersion") or "") or None  # None: from now


def _in(scope: str | None, key: Name) -> bool:
    return scope is None or key[0] == scope


def _version(body: Mapping[str, Any]) -> str:
    return str(_metadata(body).get("resourceVersion") or "")
