"""Coordinator settings, named after the broker settings they mirror."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    # None: unbounded, as Kafka's default (Integer.MAX_VALUE).
    group_max_size: int | None = None
    # How long a new member's JoinGroup may wait for the join phase before the member is
    # dropped (Kafka's NewMemberJoinTimeoutMs, 5 minutes, not a broker setting there).
    group_new_member_join_timeout_ms: int = 300_000

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms <= 0:
            raise ValueError("group_min_session_timeout_ms must be positive")
        if self.group_max_session_timeout_ms < self.group_min_session_timeout_ms:
            raise ValueError("group_max_session_timeout_ms must be >= the minimum")
        if self.group_initial_rebalance_delay_ms < 0:
            raise ValueError("group_initial_rebalance_delay_ms must be >= 0")
        if self.group_new_member_join_timeout_ms <= 0:
            raise ValueError("group_new_member_join_timeout_ms must be positive")
        if self.group_max_size is not None and self.group_max_size < 1:
            raise ValueError("group_max_size must be >= 1 (or None for unbounded)")
