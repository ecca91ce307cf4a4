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
    # Kafka bounds a member's rebalance timeout only by its INT32 field (24.8 days): one
    # token holder could hold its group in PreparingRebalance that long. Ours: a join with
    # a longer one is refused with INVALID_REQUEST.
    group_max_rebalance_timeout_ms: int = 1_800_000
    # Kafka's offset.metadata.max.bytes: longer commit metadata answers
    # OFFSET_METADATA_TOO_LARGE for that partition.
    offset_metadata_max_bytes: int = 4096
    # Bytes of protocol metadata one member may send in a JoinGroup (all protocols together);
    # Kafka bounds it only by its request size (message.max.bytes, about 1 MiB).
    group_max_member_metadata_bytes: int = 1024 * 1024
    # Journal retention, checked every journal_prune_interval_ms (as Kafka's
    # offsets.retention.check.interval.ms): rows older than journal_retention_ms, and all
    # but the newest journal_retention_rows, are deleted. None: keep for ever.
    journal_retention_ms: int | None = 7 * 24 * 3600 * 1000
    journal_retention_rows: int | None = 1_000_000
    journal_prune_interval_ms: int = 600_000
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
        if not 1 <= self.group_max_rebalance_timeout_ms <= 2**31 - 1:
            raise ValueError("group_max_rebalance_timeout_ms must be 1..2147483647")
        if self.offset_metadata_max_bytes < 0:
            raise ValueError("offset_metadata_max_bytes must be >= 0")
        if self.journal_retention_ms is not None and self.journal_retention_ms < 1:
            raise ValueError("journal_retention_ms must be >= 1 (or None to keep for ever)")
        if self.journal_retention_rows is not None and self.journal_retention_rows < 1:
            raise ValueError("journal_retention_rows must be >= 1 (or None to keep for ever)")
        if self.journal_prune_interval_ms < 1:
            raise ValueError("journal_prune_interval_ms must be >= 1")
        if self.group_max_member_metadata_bytes < 1:
            raise ValueError("group_max_member_metadata_bytes must be >= 1")
