"""How a member reaches its coordinator: one interface, several carriers.

`GroupMember` speaks only to a `Transport`, so the member logic is the same in-process and
over HTTP. A transport returns Kafka protocol errors inside responses (as the coordinator
produced them); it raises `CoordinatorError` when the request itself was refused (bad
token, malformed request) and `TransportError` when the coordinator could not be reached,
which is the one failure a member retries without changing its state.
"""

from __future__ import annotations

from typing import Protocol

from coordinator.api import GroupApi
from coordinator.errors import CoordinatorError, ErrorCode


class TransportError(Exception):
    """The coordinator could not be reached or did not answer; retriable.

    The member keeps its member id, generation and partitions while its session could still
    be alive on the coordinator (a coordinator restart looks like this).
    """


class RequestTooLargeError(CoordinatorError):
    """The coordinator refused the request's size (HTTP 413). Not the member's fault and
    not fatal: the coordinator's body limit must be raised (docs/server.md), and until it
    is the member logs why and keeps retrying."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, detail)


class Transport(GroupApi, Protocol):
    """The member protocol (`GroupApi`) and what only a client needs."""

    async def close(self) -> None:
        """Release what the transport opened itself (connections); idempotent."""
        ...
