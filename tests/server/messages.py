"""Request bodies for the tests, built from the real dataclasses through `coordinator.wire`."""

from __future__ import annotations

from typing import Any

from coordinator import JoinGroupProtocol, JoinGroupRequest
from coordinator.wire import to_json

SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 5_000


def join_body(
    group_id: str, instance_id: str | None, member_id: str = "", protocol: str = "range"
) -> dict[str, Any]:
    body: dict[str, Any] = to_json(
        JoinGroupRequest(
            group_id=group_id,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocols=[JoinGroupProtocol(protocol, b"\x00\x01subscription")],
            client_id=f"client-{instance_id}",
        )
    )
    return body
