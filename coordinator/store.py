"""Where the coordinator keeps its state: `MemoryStore` for tests, `SqliteStore` by default.

The interface is async and batch-shaped (one `StoreBatch` = one transaction) so a networked
database can implement it later without changing the coordinator.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from coordinator.expected_members import ExpectedMembers
from coordinator.journal import JournalEvent
from coordinator.records import GroupRecord, OffsetRecord, StoreBatch, StoreSnapshot
from coordinator.standby import StandbyPromotion

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
        """Apply the whole batch atomically, durably, before returning. Expected members
        and promotions are kept apart from the group records (a group may not exist yet
        when its members are expected, and deleting an empty group must not forget the fleet it is
        about to have), but written in the same transaction as the rest of the batch."""

    @abstractmethod
    async def journal_rows(
        self, group_id: str | None = None, since_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]: ...

    @abstractmethod
    async def instance_secret(self) -> bytes:
        """32 random bytes that belong to this store and outlive restarts when the store
        does (the HTTP server derives members' leave keys from it). Call after `open`."""

    @abstractmethod
    async def holder(self) -> str | None:
        """Who holds the store now, as the last `set_holder` said (None: nobody; a holder
        that died keeps its mark). Call after `open`."""

    @abstractmethod
    async def set_holder(self, holder: str | None) -> None:
        """Mark the store held by `holder`, or released (None). Operator replicas share one
        store and hand it over (docs/operator.md, "Replicas and the store")."""

    @abstractmethod
    async def expected_members(self) -> dict[str, ExpectedMembers]:
        """Every group's expected members, as last written."""

    @abstractmethod
    async def promotions(self) -> dict[str, dict[str, StandbyPromotion]]:
        """Every group's standby promotions (group id -> standby id -> record)."""

    @abstractmethod
    async def prune_journal(self, older_than_ts_ms: int | None, keep_rows: int | None) -> int:
        """Delete journal rows with `ts_ms < older_than_ts_ms` and all but the newest
        `keep_rows` (None: no bound of that kind); returns how many were deleted. Sequence
        numbers are never reused: the newest row always stays."""


class MemoryStore(Store):
    """Keeps everything in this process; what a restart on it loses is what tests want lost."""

    def __init__(self) -> None:
        self._groups: dict[str, GroupRecord] = {}
        self._offsets: dict[str, dict[tuple[str, int], OffsetRecord]] = {}
        self._journal: list[JournalEvent] = []
        self._topics: dict[str, int] = {}
        self._expected_members: dict[str, ExpectedMembers] = {}
        self._promotions: dict[str, dict[str, StandbyPromotion]] = {}
        self._secret = secrets.token_bytes(32)
        self._holder: str | None = None

    async def open(self) -> None:
        return None

    async def instance_secret(self) -> bytes:
        return self._secret

    async def holder(self) -> str | None:
        return self._holder

    async def set_holder(self, holder: str | None) -> None:
        self._holder = holder

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
        for group_id, expected in batch.expected_members:
            if expected is None:
                self._expected_members.pop(group_id, None)
            else:
                self._expected_members[group_id] = expected
        for group_id, standby_id, promotion in batch.promotions:
            records = self._promotions.setdefault(group_id, {})
            if promotion is None:
                records.pop(standby_id, None)
            else:
                records[standby_id] = promotion

    async def expected_members(self) -> dict[str, ExpectedMembers]:
        return dict(self._expected_members)

    async def promotions(self) -> dict[str, dict[str, StandbyPromotion]]:
        return {group_id: dict(records) for group_id, records in self._promotions.items()}

    async def journal_rows(
        self, group_id: str | None = None, since_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        rows = [
            event
            for event in self._journal
            if event.seq > since_seq and (group_id is None or event.group_id == group_id)
        ]
        return rows[:limit] if limit is not None else rows

    async def prune_journal(self, older_than_ts_ms: int | None, keep_rows: int | None) -> int:
        before = len(self._journal)
        kept = self._journal[-1:]
        if older_than_ts_ms is not None:
            self._journal = [e for e in self._journal[:-1] if e.ts_ms >= older_than_ts_ms] + kept
        if keep_rows is not None and len(self._journal) > keep_rows:
            self._journal = self._journal[-keep_rows:]
        return before - len(self._journal)


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
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
-- A group's expected members. The table keeps the name earlier releases gave it: a store
-- they wrote opens as it is, and an earlier coordinator opening this one still finds them.
CREATE TABLE IF NOT EXISTS expansions (
    group_id TEXT PRIMARY KEY,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS promotions (
    group_id TEXT NOT NULL,
    standby_id TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (group_id, standby_id)
);
"""


# SQLite's header field for "which application owns this file" ('SFLT'): a store refuses
# to open another program's database, or to write its tables into one.
APPLICATION_ID = 0x53464C54
# The tables of a store written before the application id (and the meta table) existed.
_LEGACY_TABLES = frozenset({"groups", "offsets", "journal", "topics"})
# Tables added since; a file without the application id may have them or not.
_LATER_TABLES = frozenset({"meta", "expansions", "promotions"})


# The JSON of stored records and journal details. json.dumps took half the CPU of the write
# of a 1,000-member group's assignment (its group record and 1,002 journal rows, issue 26);
# msgspec writes the same compact JSON (journal details with sorted keys, as before) about
# ten times faster. Text beyond ASCII is written as UTF-8 where json.dumps wrote \u escapes:
# json.loads reads both alike.
_JSON = msgspec.json.Encoder()
_SORTED_KEYS_JSON = msgspec.json.Encoder(order="sorted")


def _json_text(value: Any, *, sort_keys: bool = False) -> str:
    return (_SORTED_KEYS_JSON if sort_keys else _JSON).encode(value).decode()


def _claim_file(connection: sqlite3.Connection, path: Path) -> None:
    """Make sure `path` is (or becomes) a staticfleet store; raise StoreError otherwise."""
    (application_id,) = connection.execute("PRAGMA application_id").fetchone()
    if application_id == APPLICATION_ID:
        return
    tables = {
        name
        for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    # An empty database is new; a file with exactly our tables was written before the
    # application id existed. Anything else belongs to someone else.
    if application_id != 0 or (tables and tables - _LATER_TABLES != _LEGACY_TABLES):
        raise StoreError(
            f"{path} is not a staticfleet store (another application's SQLite database); "
            "give the path of a staticfleet store, or a new file"
        )
    connection.execute(f"PRAGMA application_id={APPLICATION_ID}")


class SqliteStore(Store):
    """One SQLite file in WAL mode; every batch is one transaction, written before we answer.

    All SQLite calls run on one dedicated thread, in order, so the event loop never blocks
    on disk and writes keep the order the coordinator issued them in.

    The file's directory must exist unless `create_dirs` is set: a mistyped path must fail
    loudly rather than start a new, empty coordinator. A file that is not a staticfleet
    store (not SQLite, or another application's database) is refused.
    """

    def __init__(
        self, path: str | Path, *, synchronous: str = "FULL", create_dirs: bool = False
    ) -> None:
        self.path = Path(path)
        self.create_dirs = create_dirs
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
        self.check_path()
        if self.create_dirs:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")

        def connect() -> sqlite3.Connection:
            connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            try:
                connection.execute("PRAGMA busy_timeout=5000")
                _claim_file(connection, self.path)
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute(f"PRAGMA synchronous={self._synchronous}")
                connection.executescript(_SCHEMA)
            except BaseException:
                connection.close()
                raise
            return connection

        try:
            self._connection = await asyncio.get_running_loop().run_in_executor(
                self._executor, connect
            )
        except (sqlite3.Error, StoreError) as error:
            self._executor.shutdown(wait=False)
            self._executor = None
            if isinstance(error, StoreError):
                raise
            if isinstance(error, sqlite3.DatabaseError) and "not a database" in str(error):
                raise StoreError(
                    f"{self.path} is not a staticfleet store (not a SQLite database)"
                ) from error
            raise StoreError(f"cannot open SQLite store {self.path}: {error}") from error

    def check_path(self) -> None:
        """Raise StoreError when the file's directory is missing and may not be created."""
        parent = self.path.parent
        if self.create_dirs or parent.is_dir():
            return
        raise StoreError(
            f"directory {parent} of the SQLite store does not exist; create it, fix the "
            "path, or pass --create to create it"
        )

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
                    [(record.group_id, _json_text(record.to_json())) for record in batch.groups],
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
                            _json_text(event.detail, sort_keys=True),
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
                for group_id, expected in batch.expected_members:
                    _write_expected_members(connection, group_id, expected)
                for group_id, standby_id, promotion in batch.promotions:
                    _write_promotion(connection, group_id, standby_id, promotion)
                connection.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled back already (a COMMIT that hit SQLITE_FULL does):
                # a second ROLLBACK would raise and hide the cause.
                if connection.in_transaction:
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

    async def prune_journal(self, older_than_ts_ms: int | None, keep_rows: int | None) -> int:
        def prune(connection: sqlite3.Connection) -> int:
            deleted = 0
            # The newest row stays whatever its age: load() numbers new rows after it.
            (newest,) = connection.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()
            if older_than_ts_ms is not None:
                deleted += connection.execute(
                    "DELETE FROM journal WHERE ts_ms < ? AND seq < ?", (older_than_ts_ms, newest)
                ).rowcount
            if keep_rows is not None:
                deleted += connection.execute(
                    "DELETE FROM journal WHERE seq <= ?", (newest - keep_rows,)
                ).rowcount
            return deleted

        return await self._run(prune)

    async def expected_members(self) -> dict[str, ExpectedMembers]:
        def read(connection: sqlite3.Connection) -> dict[str, ExpectedMembers]:
            return {
                group_id: ExpectedMembers.from_json(json.loads(record))
                for group_id, record in connection.execute(
                    "SELECT group_id, record FROM expansions"
                )
            }

        return await self._run(read)

    async def promotions(self) -> dict[str, dict[str, StandbyPromotion]]:
        def read(connection: sqlite3.Connection) -> dict[str, dict[str, StandbyPromotion]]:
            result: dict[str, dict[str, StandbyPromotion]] = {}
            for group_id, standby_id, record in connection.execute(
                "SELECT group_id, standby_id, record FROM promotions"
            ):
                result.setdefault(group_id, {})[standby_id] = StandbyPromotion.from_json(
                    json.loads(record)
                )
            return result

        return await self._run(read)

    async def holder(self) -> str | None:
        def read(connection: sqlite3.Connection) -> str | None:
            row = connection.execute("SELECT value FROM meta WHERE key = 'holder'").fetchone()
            return None if row is None else str(row[0])

        return await self._run(read)

    async def set_holder(self, holder: str | None) -> None:
        def write(connection: sqlite3.Connection) -> None:
            if holder is None:
                connection.execute("DELETE FROM meta WHERE key = 'holder'")
            else:
                connection.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('holder', ?)", (holder,)
                )

        await self._run(write)

    async def instance_secret(self) -> bytes:
        def read_or_create(connection: sqlite3.Connection) -> bytes:
            fresh = secrets.token_bytes(32)
            connection.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('instance_secret', ?)", (fresh,)
            )
            (value,) = connection.execute(
                "SELECT value FROM meta WHERE key = 'instance_secret'"
            ).fetchone()
            return bytes(value)

        return await self._run(read_or_create)


def _write_expected_members(
    connection: sqlite3.Connection, group_id: str, expected: ExpectedMembers | None
) -> None:
    if expected is None:
        connection.execute("DELETE FROM expansions WHERE group_id = ?", (group_id,))
    else:
        connection.execute(
            "INSERT OR REPLACE INTO expansions (group_id, record) VALUES (?, ?)",
            (group_id, _json_text(expected.to_json())),
        )


def _write_promotion(
    connection: sqlite3.Connection,
    group_id: str,
    standby_id: str,
    promotion: StandbyPromotion | None,
) -> None:
    if promotion is None:
        connection.execute(
            "DELETE FROM promotions WHERE group_id = ? AND standby_id = ?",
            (group_id, standby_id),
        )
    else:
        connection.execute(
            "INSERT OR REPLACE INTO promotions (group_id, standby_id, record) VALUES (?, ?, ?)",
            (group_id, standby_id, _json_text(promotion.to_json())),
        )


def open_store(url: str, *, create_dirs: bool = False) -> Store:
    """A store from a URL: `memory://`, `sqlite:///abs/path.db` or `sqlite://relative.db`.
    `create_dirs`: create the SQLite file's missing directories (otherwise refused)."""
    if url == "memory://" or url == "memory":
        return MemoryStore()
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        if not path:
            raise ValueError("sqlite store URL needs a path: sqlite:///var/lib/staticfleet/db")
        return SqliteStore(path, create_dirs=create_dirs)
    raise ValueError(f"unknown store URL {url!r}: use memory:// or sqlite:///path/to/file.db")
