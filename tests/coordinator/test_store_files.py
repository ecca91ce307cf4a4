"""The SQLite store refuses a mistyped path and files that are not a staticfleet store."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator import SqliteStore, open_store
from coordinator.store import APPLICATION_ID, StoreError


async def test_missing_directory_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "nonexistent" / "dir" / "x.db")
    with pytest.raises(StoreError, match="does not exist"):
        await store.open()
    assert not (tmp_path / "nonexistent").exists()


async def test_create_dirs_creates_the_directories(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/new/dir/x.db", create_dirs=True)
    await store.open()
    await store.close()
    connection = sqlite3.connect(tmp_path / "new" / "dir" / "x.db")
    assert connection.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)


async def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database, but someone's notes\n" * 200)
    with pytest.raises(StoreError, match="not a staticfleet store"):
        await SqliteStore(path).open()
    assert path.read_text().startswith("not a database")


async def test_another_applications_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    connection.commit()
    connection.close()
    with pytest.raises(StoreError, match="not a staticfleet store"):
        await SqliteStore(path).open()
    tables = sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("users",)]  # none of ours written into it


async def test_a_store_from_before_the_application_id_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    await store.open()
    await store.close()
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA application_id=0")
    connection.execute("DROP TABLE meta")  # as an older version wrote it
    connection.commit()
    connection.close()
    await SqliteStore(path).open()
    assert sqlite3.connect(path).execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)


def test_serve_with_a_missing_directory_exits_2_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir" / "x.db"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "staticfleet.cli",
            "coordinator",
            "serve",
            "--insecure",
            "--port",
            "0",
            "--store",
            f"sqlite:///{missing}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not exist" in lines[0] and "--create" in lines[0]
    assert not (tmp_path / "nonexistent").exists()


def test_serve_on_another_applications_database_exits_1_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    connection.commit()
    connection.close()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "staticfleet.cli",
            "coordinator",
            "serve",
            "--insecure",
            "--port",
            "0",
            "--store",
            f"sqlite:///{path}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "not a staticfleet store" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
