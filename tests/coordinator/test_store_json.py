"""The JSON SqliteStore writes (group records, journal details, expected members): what
json.dumps wrote for ASCII text, and read back equal whatever the text."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from coordinator.expected_members import ExpectedMembers
from coordinator.journal import JournalEvent
from coordinator.records import GroupRecord, MemberRecord, StoreBatch
from coordinator.store import SqliteStore


def _batch(text: str) -> StoreBatch:
    member = MemberRecord(
        f"m-{text}", f"i-{text}", f"client-{text}", "/127.0.0.1", 45_000, 60_000,
        (("range", b"\x00\x01meta"),), b"\x00\x00assignment",
    )  # fmt: skip
    group = GroupRecord(
        "g", "Stable", 3, "consumer", "range", member.member_id, (member,),
        {member.group_instance_id or "": b"last"}, {"orders": 12},
    )  # fmt: skip
    detail = {"reason": f"why {text}", "partitions": [["orders", 1]], "bytes": 12}
    event = JournalEvent(1, 1_700_000_000_000, "g", "assignment", 3, member.member_id, "i", detail)
    expected = ExpectedMembers(frozenset({f"i-{text}", "i-2"}), 30_000, 1_700_000_030_000)
    return StoreBatch(groups=[group], journal=[event], expected_members=[("g", expected)])


@pytest.mark.parametrize("text", ["plain", 'naïve \u2603 \U0001f600 "quoted" \\ \n\t\x01'])
async def test_records_read_back_equal(tmp_path: Path, text: str) -> None:
    batch = _batch(text)
    store = SqliteStore(tmp_path / "c.db")
    await store.open()
    try:
        await store.write(batch)
        snapshot = await store.load()
        assert snapshot.groups == batch.groups
        assert await store.journal_rows() == batch.journal
        assert await store.expected_members() == dict(batch.expected_members)
    finally:
        await store.close()


async def test_ascii_records_are_stored_as_json_dumps_wrote_them(tmp_path: Path) -> None:
    # Readers of the file (the PySpark analytics, an earlier release) see the same text.
    batch = _batch("plain")
    store = SqliteStore(tmp_path / "c.db")
    await store.open()
    await store.write(batch)
    await store.close()
    with sqlite3.connect(tmp_path / "c.db") as connection:
        (record,) = connection.execute("SELECT record FROM groups").fetchone()
        (detail,) = connection.execute("SELECT detail FROM journal").fetchone()
        (expected,) = connection.execute("SELECT record FROM expansions").fetchone()
    compact = (",", ":")
    ((_, members),) = batch.expected_members
    assert members is not None
    assert record == json.dumps(batch.groups[0].to_json(), separators=compact)
    assert detail == json.dumps(batch.journal[0].detail, separators=compact, sort_keys=True)
    assert expected == json.dumps(members.to_json(), separators=compact)
