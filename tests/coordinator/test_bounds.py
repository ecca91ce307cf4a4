"""What the coordinator refuses so that no caller can stall a group or grow its state
without bound: rebalance timeouts, member metadata, offset metadata, control characters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator import (
    CoordinatorConfig,
    ErrorCode,
    MemoryStore,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SqliteStore,
)
from tests.coordinator.harness import GROUP, INITIAL_DELAY_MS, Harness, join_request

CONFIG = CoordinatorConfig(
    group_initial_rebalance_delay_ms=INITIAL_DELAY_MS,
    group_max_rebalance_timeout_ms=60_000,
    offset_metadata_max_bytes=4096,
    group_max_member_metadata_bytes=1000,
)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = await Harness(config=CONFIG).start()
    yield h
    await h.coordinator.close()


async def test_rebalance_timeout_over_the_maximum_is_invalid_request(harness: Harness) -> None:
    too_long = await harness.coordinator.join_group(
        join_request(instance_id="i-0", rebalance_ms=60_001)
    )
    assert too_long.error_code == ErrorCode.INVALID_REQUEST
    assert harness.coordinator.group_state(GROUP) is None, "nothing was created"
    at_limit = harness.join(join_request(instance_id="i-0", rebalance_ms=60_000))
    (joined,) = await harness.finish_join([at_limit])
    assert joined.error_code == ErrorCode.NONE


def test_the_default_maximum_rebalance_timeout_is_bounded() -> None:
    assert CoordinatorConfig().group_max_rebalance_timeout_ms == 1_800_000
    with pytest.raises(ValueError):
        CoordinatorConfig(group_max_rebalance_timeout_ms=2**31)


async def test_member_metadata_over_the_limit_is_invalid_request(harness: Harness) -> None:
    response = await harness.coordinator.join_group(
        join_request(instance_id="i-0", metadata=b"x" * 1001)
    )
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert harness.coordinator.group_state(GROUP) is None


@pytest.mark.parametrize("group_id", ["orders\nINFO forged line", "nul\x00", "del\x7f", "c1\x85"])
async def test_group_ids_with_control_characters_are_invalid(
    harness: Harness, group_id: str
) -> None:
    joined = await harness.coordinator.join_group(join_request(group_id=group_id))
    assert joined.error_code == ErrorCode.INVALID_GROUP_ID
    committed = await harness.coordinator.commit_offsets(
        OffsetCommitRequest(group_id, -1, "", None, [OffsetCommitPartition("t", 0, 1)])
    )
    assert committed.partitions[0].error_code == ErrorCode.INVALID_GROUP_ID
    assert await harness.coordinator.list_groups() == []


async def test_instance_ids_with_control_characters_are_invalid(harness: Harness) -> None:
    response = await harness.coordinator.join_group(join_request(instance_id="i-0\nforged"))
    assert response.error_code == ErrorCode.INVALID_REQUEST
    unicode_ok = harness.join(join_request(instance_id="ĩ-0"))
    (joined,) = await harness.finish_join([unicode_ok])
    assert joined.error_code == ErrorCode.NONE


async def test_offset_metadata_over_the_limit_is_refused_per_partition(harness: Harness) -> None:
    response = await harness.coordinator.commit_offsets(
        OffsetCommitRequest(
            GROUP,
            -1,
            "",
            None,
            [
                OffsetCommitPartition("t", 0, 5, "m" * 4096),
                OffsetCommitPartition("t", 1, 6, "m" * 4097),
                OffsetCommitPartition("t", 2, 7, "é" * 2049),  # 4098 bytes in UTF-8
            ],
        )
    )
    assert [p.error_code for p in response.partitions] == [
        ErrorCode.NONE,
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
    ]
    assert int(ErrorCode.OFFSET_METADATA_TOO_LARGE) == 12
    fetched = await harness.coordinator.fetch_offsets(
        OffsetFetchRequest(GROUP, [("t", 0), ("t", 1)])
    )
    assert [p.committed_offset for p in fetched.partitions] == [5, -1]


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_journal_retention_by_age_and_rows(tmp_path: Path, store_kind: str) -> None:
    config = CoordinatorConfig(
        group_initial_rebalance_delay_ms=INITIAL_DELAY_MS,
        journal_retention_ms=100_000,
        journal_retention_rows=3,
        journal_prune_interval_ms=10_000,
    )
    store = MemoryStore() if store_kind == "memory" else SqliteStore(tmp_path / "j.db")
    h = await Harness(store=store, config=config).start()
    try:
        # Sessions outlive the test so that only the retention changes the journal.
        await h.form_group(["i-0", "i-1"], session_ms=600_000)
        written = await h.coordinator.journal_rows()
        assert len(written) > 3
        newest = written[-1].seq
        # The first check (at 10 s) keeps the newest 3 rows.
        await h.clock.advance(10_000)
        assert [e.seq for e in await h.coordinator.journal_rows()] == [
            newest - 2,
            newest - 1,
            newest,
        ]
        # Once past the age limit, all but the newest row (its seq numbers new rows) go.
        await h.clock.advance(100_000)
        assert [e.seq for e in await h.coordinator.journal_rows()] == [newest]
    finally:
        await h.coordinator.close()
    if store_kind == "sqlite":
        keep_all = CoordinatorConfig(
            group_initial_rebalance_delay_ms=INITIAL_DELAY_MS,
            journal_retention_ms=None,
            journal_retention_rows=None,
        )
        reopened = await Harness(store=SqliteStore(tmp_path / "j.db"), config=keep_all).start()
        await reopened.form_group(["i-9"], session_ms=600_000)
        rows = await reopened.coordinator.journal_rows()
        # The next row is numbered after the kept one.
        assert rows[0].seq == newest and rows[1].seq == newest + 1
        await reopened.coordinator.close()
