"""Per-group member tokens: where a ConsumerGroup's token lives and how the embedded
coordinator learns it.

A group's member token comes from `spec.tokenSecretRef` when set (a Secret the user manages;
the operator only reads it), else from the Secret `<group name>-member-token` (key `token`)
that the operator creates once — a random 32-byte urlsafe token, with an ownerReference to
the ConsumerGroup, so it goes when the group goes — and never regenerates while it exists.
Member pods reference the Secret (`valueFrom.secretKeyRef`), never the literal token.

The token's part of a pass (`pass_plan._member_token`) runs on every pass and at admission,
so the coordinator's table follows the Secret (a rotated user Secret is picked up on the
next pass) and a restarted operator, whose embedded server starts with no member tokens,
re-registers every group on its first pass.
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
from collections.abc import Mapping
from typing import Any, Final

from staticfleet_operator.crd import ConsumerGroupSpec
from staticfleet_operator.owned import group_secret

log = logging.getLogger("staticfleet.operator.tokens")

MANAGED_TOKEN_KEY: Final = "token"
MANAGED_TOKEN_SUFFIX: Final = "-member-token"
TOKEN_BYTES: Final = 32


def managed_secret_name(group_name: str) -> str:
    return f"{group_name}{MANAGED_TOKEN_SUFFIX}"


def token_secret_ref(spec: ConsumerGroupSpec, group_name: str) -> tuple[str, str]:
    """(Secret name, key) of the group's member token."""
    if spec.token_secret_ref is not None:
        return spec.token_secret_ref.name, spec.token_secret_ref.key
    return managed_secret_name(group_name), MANAGED_TOKEN_KEY


def needs_group_token(spec: ConsumerGroupSpec, pod_identity: bool) -> bool:
    """Whether the group's members need a group token (docs/operator.md, "Member tokens").
    Always without pod identity. With it, only a group whose members cannot all show a pod
    token for an instance id: one that names its own token Secret (`tokenSecretRef`: the
    way members outside Kubernetes are let in) or keeps hot standbys (a standby holds no
    instance id until promoted). Kafka-coordinated groups use no member token at all."""
    if not pod_identity:
        return True
    return spec.token_secret_ref is not None or spec.standbys > 0


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def managed_secret(namespace: str, group_name: str, owner_uid: str, token: str) -> dict[str, Any]:
    """The manifest of the operator-made member token Secret."""
    return group_secret(
        namespace,
        managed_secret_name(group_name),
        group_name,
        owner_uid,
        {MANAGED_TOKEN_KEY: token},
    )


def secret_value(secret: Mapping[str, Any], key: str) -> str | None:
    """The decoded value of `key` (from `data`, else `stringData`); None when absent/bad."""
    raw = (secret.get("data") or {}).get(key)
    if isinstance(raw, str):
        try:
            value = base64.b64decode(raw, validate=True).decode("utf-8").strip()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return value or None
    plain = (secret.get("stringData") or {}).get(key)
    return plain.strip() or None if isinstance(plain, str) else None
