"""The table the embedded coordinator asks which instance id a reviewed pod token may act
as: (namespace, pod name) -> `Binding(group id, instance id, pod uid)`, read from the member
pods the operator's informer holds (the operator stamped both on each pod: the instance id
annotation and the STATICFLEET_GROUP_ID env). docs/server.md, "Members known by their pod".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from coordinator.client import env
from coordinator.server.pod_identity import Binding
from staticfleet_operator.informer import Informer
from staticfleet_operator.members import INSTANCE_ID_ANNOTATION

Key = tuple[str, str]


def pod_binding(pod: Mapping[str, Any]) -> Binding | None:
    """What `pod` may hold; None for a pod without an instance id (a standby not yet
    promoted, a dynamic member) or without the group id the operator sets. Pure."""
    metadata = pod.get("metadata") or {}
    instance_id = (metadata.get("annotations") or {}).get(INSTANCE_ID_ANNOTATION)
    uid = metadata.get("uid")
    if not instance_id or not uid:
        return None
    for container in (pod.get("spec") or {}).get("containers") or []:
        for entry in container.get("env") or []:
            if entry.get("name") == env.GROUP_ID and entry.get("value"):
                return Binding(str(entry["value"]), str(instance_id), str(uid))
    return None


class PodBindings(Mapping[Key, Binding]):
    """A live view (no copy): each lookup reads the informer's current pod."""

    def __init__(self, pods: Callable[[], Informer | None]) -> None:
        self._pods = pods  # the informer exists only once Kopf has started

    def ready(self) -> bool:
        """Whether the informer has listed every scope: before, every pod is unbound, and a
        restarted operator would answer its members 403 (a readiness gate waits for it)."""
        informer = self._pods()
        return informer is not None and informer.synced.is_set()

    def __getitem__(self, key: Key) -> Binding:
        informer = self._pods()
        pod = informer.get(*key) if informer is not None else None
        binding = pod_binding(pod) if pod is not None else None
        if binding is None:
            raise KeyError(key)
        return binding

    def __iter__(self) -> Iterator[Key]:
        informer = self._pods()
        objects = dict(informer.objects) if informer is not None else {}
        return iter([key for key, pod in objects.items() if pod_binding(pod) is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)
