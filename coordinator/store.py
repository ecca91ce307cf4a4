"""Where the coordinator keeps its state: `MemoryStore` for tests, `SqliteStore` by default.

The interface is async and batch-shaped (one `StoreBatch` = one transaction) so a networked
database can implement it later without changing the coordinator.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from coordinator.journal import JournalEvent
from coordinator.records import GroupRecord, OffsetRecord, StoreBatch, StoreSnapshot

T = TypeVar("T")


class StoreError(RuntimeError):
    """The store could not read or write; the coordinator answers with a retriable error."""


class Store(ABC):
    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def load(self) -> StoreSnapshot: ...

    @abstractmethod
    async def write(self, batch: StoreBatch) -> None:
        """Apply the whole batch atomically, durably, before returning."""

    @abstractmethod
    async def journal_rows(
        self, group_id: str | None = None, since_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]: ...


class MemoryStore(Store):
    """Keeps everything in this process; what a restart on it loses is what tests want lost."""

    def __init__(self) -> None:
        self._groups: dict[str, GroupRecord] = {}
        self._offsets: dict[str, dict[tuple[str, int], OffsetRecord]] = {}
        self._journal: list[JournalEvent] = []
        self._topics: dict[str, int] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def load(self) -> StoreSnapshot:
        return StoreSnapshot(
            groups=list(self._groups.values()),
            offsets={group: dict(offsets) for group, offsets in self._offsets.items()},
            topics=dict(self._topics),
            last_journal_seq=self._journal[-1].seq if self._journal else 0,
        )

    async def write(self, batch: StoreBatch) -> None:
        for group_id in batch.deleted_groups:
            self._groups.pop(group_id, None)
            self._offsets.pop(group_id, None)
        for record in batch.groups:
            self._groups[record.group_id] = record
        for group_id, offset in batch.offsets:
            self._offsets.setdefault(group_id, {})[(offset.topic, offset.partition)] = offset
        self._journal.extend(batch.journal)
        if batch.topics is not None:
            self._topics = dict(batch.topics)

    async def journal_rows(
        self, group_id: str | None = None, since_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        rows = [
            event
            for event in self._journal
            if event.seq > since_seq and (group_id is None or event.group_id == group_id)
        ]
        return rows[:limit] if limit is not None else rows


_SCHEMA = """
CREATE TABLE IF NOT EXISTS groups (
    group_id TEXT PRIMARY KEY,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS offsets (
    group_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    committed_offset INTEGER NOT NULL,
    metadata TEXT,
    commit_ts_ms INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    ts_ms INTEGER NOT NULL,
    group_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    generation_id INTEGER NOT NULL,
    member_id TEXT,
    group_instance_id TEXT,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_by_group ON journal (group_id, seq);
CREATE TABLE IF NOT EXISTS topics (
    topic TEXT PRIMARY KEY,
    partitions INTEGER NOT NULL
);
"""


class SqliteStore(Store):
    """One SQLite file in WAL mode; every batch is one transaction, written before we answer.

    All SQLite calls run on one dedicated thread, in order, so the event loop never blocks
    on disk and writes keep the order the coordinator issued them in.
    """

    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        self.path = Path(path)
        # FULL survives power loss; NORMAL (WAL) survives process crashes only.
        self._synchronous = synchronous
        self._connection: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    async def _run(self, func: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None or self._connection is None:
            raise StoreError(f"store {self.path} is not open")
        connection = self._connection

        def call() -> T:
            with self._lock:
                return func(connection)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except sqlite3.Error as error:
            raise StoreError(f"SQLite store {self.path}: {error}") from error

    async def open(self) -> None:
        if self._connection is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")

        def connect() -> sqlite3.Connection:
            connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(f"PRAGMA synchronous={self._synchronous}")
            connection.execute("PRAGMA busy_timeout=5000")
            connection.executescript(_SCHEMA)
            return connection

        try:
            self._connection = await asyncio.get_running_loop().run_in_executor(
                self._executor, connect
            )
        except sqlite3.Error as error:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise StoreError(f"cannot open SQLite store {self.path}: {error}") from error

    async def close(self) -> None:
        if self._connection is None or self._executor is None:
            return
        connection, executor = self._connection, self._executor
        await asyncio.get_running_loop().run_in_executor(executor, connection.close)
        executor.shutdown(wait=True)
        self._connection = None
        self._executor = None

    async def load(self) -> StoreSnapshot:
        def read(connection: sqlite3.Connection) -> StoreSnapshot:
            groups = [
                GroupRecord.from_json(json.loads(record))
                for (record,) in connection.execute("SELECT record FROM groups ORDER BY group_id")
            ]
            offsets: dict[str, dict[tuple[str, int], OffsetRecord]] = {}
            for group_id, topic, partition, offset, metadata, ts in connection.execute(
                "SELECT group_id, topic, partition, committed_offset, metadata, commit_ts_ms "
                "FROM offsets"
            ):
                offsets.setdefault(group_id, {})[(topic, partition)] = OffsetRecord(
                    topic, partition, offset, metadata, ts
                )
            topics = dict(connection.execute("SELECT topic, partitions FROM topics"))
            (last_seq,) = connection.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()
            return StoreSnapshot(groups, offsets, topics, int(last_seq))

        return await self._run(read)

    async def write(self, batch: StoreBatch) -> None:
        if batch.is_empty():
            return

        def apply(connection: sqlite3.Connection) -> None:
            connection.execute("BEGIN IMMEDIATE")
            try:
                for group_id in batch.deleted_groups:
                    connection.execute("DELETE FROM groups WHERE group_id = ?", (group_id,))
                    connection.execute("DELETE FROM offsets WHERE group_id = ?", (group_id,))
                connection.executemany(
                    "INSERT OR REPLACE INTO groups (group_id, record) VALUES (?, ?)",
                    [
                        (record.group_id, json.dumps(record.to_json(), separators=(",", ":")))
                        for record in batch.groups
                    ],
                )
                connection.executemany(
                    "INSERT OR REPLACE INTO offsets (group_id, topic, partition, "
                    "committed_offset, metadata, commit_ts_ms) VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (
                            group_id,
                            offset.topic,
                            offset.partition,
                            offset.committed_offset,
                            offset.metadata,
                            offset.commit_ts_ms,
                        )
                        for group_id, offset in batch.offsets
                    ],
                )
                connection.executemany(
                    "INSERT INTO journal (seq, ts_ms, group_id, kind, generation_id, member_id, "
                    "group_instance_id, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            event.seq,
                            event.ts_ms,
                            event.group_id,
                            event.kind,
                            event.generation_id,
                            event.member_id,
                            event.group_instance_id,
                            json.dumps(event.detail, separators=(",", ":"), sort_keys=True),
                        )
                        for event in batch.journal
                    ],
                )
                if batch.topics is not None:
                    connection.execute("DELETE FROM topics")
                    connection.executemany(
                        "INSERT INTO topics (topic, partitions) VALUES (?, ?)",
                        sorted(batch.topics.items()),
                    )
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise

        await self._run(apply)

    async def journal_rows(
        self, group_id: str | None = None, since_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        query = (
            "SELECT seq, ts_ms, group_id, kind, generation_id, member_id, group_instance_id, "
            "detail FROM journal WHERE seq > ?"
        )
        params: list[object] = [since_seq]
        if group_id is not None:
            query += " AND group_id = ?"
            params.append(group_id)
        query += " ORDER BY seq"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)

        def read(connection: sqlite3.Connection) -> list[JournalEvent]:
            return [
                JournalEvent(seq, ts, group, kind, generation, member, instance, json.loads(detail))
                for seq, ts, group, kind, generation, member, instance, detail in (
                    connection.execute(query, params)
                )
            ]

        return await self._run(read)


def open_store(url: str) -> Store:
    """A store from a URL: `memory://`, `sqlite:///abs/path.db` or `sqlite://relative.db`."""
    if url == "memory://" or url == "memory":
        return MemoryStore()
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        if not path:
            raise ValueError("sqlite store URL needs a path: sqlite:///var/lib/staticfleet/db")
        return SqliteStore(path)
    raise ValueError(f"unknown store URL {url!r}: use memory:// or sqlite:///path/to/file.db")
