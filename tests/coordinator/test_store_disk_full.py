"""The store's disk full: a real SQLite file on a tiny tmpfs (mounted by the test; the
suite runs as root here), filled by the soak's own filler (staticfleet/soak/disk.py).

The coordinator answers a commit it cannot persist with an error (not a crash, and the
store's reason in its log), keeps every commit it acknowledged, and commits again once the
space is back (the soak's disk_full kind, docs/soak.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator import (
    ErrorCode,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SqliteStore,
)
from staticfleet.soak.disk import StoreDisk
from tests.coordinator.harness import GROUP, SESSION_MS, Harness


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[StoreDisk]:
    disk = StoreDisk(tmp_path / "store", size_mb=2)
    disk.mount()
    try:
        yield disk
    finally:
        disk.unmount(keep=tmp_path)


def commit(member_id: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        GROUP, 1, member_id, "i-0", [OffsetCommitPartition("t", 0, offset, "")]
    )


async def committed(harness: Harness) -> int:
    fetched = await harness.coordinator.fetch_offsets(OffsetFetchRequest(GROUP, [("t", 0)]))
    return fetched.partitions[0].committed_offset


async def test_a_full_disk_refuses_commits_clearly_keeps_acknowledged_ones_and_recovers(
    disk: StoreDisk, caplog: pytest.LogCaptureFixture
) -> None:
    path = disk.path / "coordinator.db"
    harness = await Harness(store=SqliteStore(path)).start()
    (member,) = await harness.form_group(["i-0"])
    acked = await harness.coordinator.commit_offsets(commit(member.member_id, 100))
    assert acked.partitions[0].error_code is ErrorCode.NONE

    assert disk.fill() > 0
    assert disk.free_bytes() == 0
    with caplog.at_level(logging.WARNING, logger="coordinator"):
        for offset in (200, 201, 202, 203):
            refused = await harness.coordinator.commit_offsets(commit(member.member_id, offset))
            assert refused.partitions[0].error_code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        # The store's error names the cause (SQLite's SQLITE_FULL), not a consequence of
        # it, once: the members keep committing, and a traceback each would fill the logs.
        (record,) = [r for r in caplog.records if r.exc_info]
        assert record.exc_info is not None
        assert "database or disk is full" in str(record.exc_info[1])
        assert await committed(harness) == 100

        disk.free()
        again = await harness.coordinator.commit_offsets(commit(member.member_id, 300))
        assert again.partitions[0].error_code is ErrorCode.NONE
        recovered = caplog.records[-1]
        assert recovered.levelno == logging.WARNING
        assert "succeed again after 0.0 s and 4 failed request(s)" in recovered.getMessage()

        # A write a timer makes (the member's session expiring) fails the same way: logged
        # and counted, not an exception out of the timer's task.
        caplog.clear()
        assert disk.fill() > 0
        await harness.clock.advance(SESSION_MS + 1)
        (expiry,) = [r for r in caplog.records if r.exc_info]
        assert "database or disk is full" in str(expiry.exc_info[1])  # type: ignore[index]
        disk.free()
    await harness.coordinator.close()

    reopened = await Harness(store=SqliteStore(path)).start()
    assert await committed(reopened) == 300
    await reopened.coordinator.close()
