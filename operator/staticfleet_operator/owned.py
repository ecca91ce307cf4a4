"""What the operator creates for a ConsumerGroup carries the same marks: the group as its
controlling owner (Kubernetes' garbage collector deletes it with the group) and the labels
that say who made it and for which group. Pure."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Final

from staticfleet_operator.crd import API_VERSION, KIND

GROUP_LABEL: Final = "staticfleet.dev/group"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "staticfleet"


def group_owner(group_name: str, owner_uid: str) -> dict[str, Any]:
    """The ownerReference naming the ConsumerGroup as controller."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": group_name,
        "uid": owner_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def group_secret(
    namespace: str, name: str, group_name: str, owner_uid: str, files: Mapping[str, str]
) -> dict[str, Any]:
    """The manifest of an Opaque Secret the operator makes for a group (`files`: key -> text)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, GROUP_LABEL: group_name},
            "ownerReferences": [group_owner(group_name, owner_uid)],
        },
        "data": secret_data(files),
    }


def secret_data(files: Mapping[str, str]) -> dict[str, str]:
    """A Secret's `data`: each text base64-encoded."""
    return {name: base64.b64encode(text.encode()).decode() for name, text in files.items()}


def members_disruption_budget_name(group_name: str) -> str:
    return f"{group_name}-members"


def members_disruption_budget(
    namespace: str,
    group_name: str,
    owner_uid: str,
    budget_spec: Mapping[str, Any],
) -> dict[str, Any]:
    """The manifest of the PodDisruptionBudget over a managed group's member pods."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": members_disruption_budget_name(group_name),
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, GROUP_LABEL: group_name},
            "ownerReferences": [group_owner(group_name, owner_uid)],
        },
        "spec": dict(budget_spec),
    }
