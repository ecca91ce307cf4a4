"""A ConsumerGroup's identity inside the operator: its namespace and name, one type.

Kopf's indices, the pass runner, the read-your-writes overlay, per-group memory, metrics and
logs all name a group; they do it with a `GroupRef`. It is a tuple, so it keys dicts and
sorts as (namespace, name), and it prints as `namespace/name` in logs and Events. The
group id (the Kafka-level `spec.groupId`) is a different thing and stays a plain `str`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class GroupRef(NamedTuple):
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> GroupRef:
        """The ref of a ConsumerGroup object (its metadata's namespace and name)."""
        metadata = body.get("metadata") or {}
        return cls(str(metadata.get("namespace")), str(metadata.get("name")))

    @classmethod
    def parse(cls, text: str) -> GroupRef:
        """`namespace/name` back into a ref (a readiness listing's keys, say)."""
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name:
            raise ValueError(f"not a namespace/name: {text!r}")
        return cls(namespace, name)
