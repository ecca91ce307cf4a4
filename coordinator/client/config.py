"""Member settings, named after the Kafka consumer settings they mirror."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import cast


class RebalanceProtocolSetting(StrEnum):
    """`rebalance.protocol` from KIP-429: what a member offers and how it behaves."""

    EAGER = "eager"
    """Offer the eager assignor only; revoke everything before every join."""

    COMPATIBLE = "compatible"
    """Offer the cooperative assignor first and the eager one second, but behave eagerly.

    This is the first bounce of the eager -> cooperative upgrade: every member can read the
    cooperative protocol, yet nobody relies on cooperative semantics until all of them do.
    """

    COOPERATIVE = "cooperative"
    """Offer the cooperative assignor only; keep owned partitions across rebalances."""

    CONSUMER = "consumer"
    """Kafka's consumer group protocol (KIP-848): no classic assignor is offered, the broker
    assigns (`group.remote.assignor`) and the member reconciles towards its target. Only on
    a Kafka cluster (kafka://); what the operator writes when a fleet migrates to it."""


@dataclass(frozen=True, slots=True)
class MemberConfig:
    group_id: str
    topics: tuple[str, ...]
    # None: a dynamic member; a string: a static member (KIP-345 group.instance.id).
    group_instance_id: str | None = None
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 30_000
    heartbeat_interval_ms: int = 3_000
    rebalance_protocol: RebalanceProtocolSetting = RebalanceProtocolSetting.EAGER
    eager_assignor: str = "range"
    cooperative_assignor: str = "cooperative-sticky"
    client_id: str = "staticfleet-member"
    client_host: str = ""
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    # None: Kafka's KIP-345 default, True for dynamic members and False for static ones
    # (a static member that leaves would make its restart a rebalance, the thing it avoids).
    leave_group_on_close: bool | None = None
    # How long GROUP_AUTHORIZATION_FAILED (HTTP 401/403) is retried before it is fatal: while
    # an operator restarts, its embedded coordinator refuses a group's token until the
    # group's first reconcile registers it again. 0: fatal at once.
    authorization_retry_ms: int = 120_000

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must not be empty")
        if isinstance(cast(object, self.topics), str):
            raise ValueError("topics must be a sequence of names, not one string")
        if not self.topics or any(not topic for topic in self.topics):
            raise ValueError("topics must name at least one topic, none of them empty")
        if self.group_instance_id == "":
            raise ValueError("group_instance_id must be None (dynamic) or a non-empty string")
        if self.session_timeout_ms <= 0 or self.rebalance_timeout_ms <= 0:
            raise ValueError("session_timeout_ms and rebalance_timeout_ms must be positive")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            # Kafka's rule: a heartbeat interval at or above the session timeout expires the
            # session between two heartbeats.
            raise ValueError("heartbeat_interval_ms must be positive and below session_timeout_ms")
        if self.authorization_retry_ms < 0:
            raise ValueError("authorization_retry_ms must be >= 0")
        if self.retry_backoff_ms <= 0 or self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ValueError("retry_backoff_ms must be positive and <= retry_backoff_max_ms")
        # Accept the plain strings a CLI or environment gives.
        object.__setattr__(
            self, "rebalance_protocol", RebalanceProtocolSetting(self.rebalance_protocol)
        )
        object.__setattr__(self, "topics", tuple(self.topics))

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def leave_on_close(self) -> bool:
        if self.leave_group_on_close is not None:
            return self.leave_group_on_close
        return not self.is_static

    @property
    def offered_assignors(self) -> tuple[str, ...]:
        """Protocol names for JoinGroup, most preferred first (KIP-429)."""
        if self.rebalance_protocol is RebalanceProtocolSetting.EAGER:
            return (self.eager_assignor,)
        if self.rebalance_protocol is RebalanceProtocolSetting.COOPERATIVE:
            return (self.cooperative_assignor,)
        if self.cooperative_assignor == self.eager_assignor:
            return (self.cooperative_assignor,)
        return (self.cooperative_assignor, self.eager_assignor)
