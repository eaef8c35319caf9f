"""The SQLite store closes its connection: ``close()``, ``aclose()``, ``async with``, or (with a warning) when dropped.

A long-running server that leaked one database connection (three file descriptors in WAL mode) per
store would run out of them; Python 3.13 also reports every unclosed ``sqlite3`` connection.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import warnings
from pathlib import Path

import pytest
from durable_support import new_record

from agent_framework_functional import SQLiteContinuationStore, SQLiteSessionStore

DROPPED = "was dropped without being closed"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _ours(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, ResourceWarning) and DROPPED in str(w.message)]


async def test_async_with_closes_the_connection_and_a_closed_store_refuses_work(tmp_path: Path) -> None:
    async with SQLiteContinuationStore(tmp_path / "store.db") as store:
        record = new_record(store)
        await store.save(record)
        assert await store.get(record.token_hash) == record
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        await store.get(record.token_hash)
    await store.aclose()  # idempotent
    store.close()


async def test_close_and_aclose_are_idempotent_and_release_the_files(tmp_path: Path) -> None:
    before = _open_fds()
    first, second = SQLiteContinuationStore(tmp_path / "a.db"), SQLiteContinuationStore(tmp_path / "b.db")
    await first.save(new_record(first))  # WAL: the database, its -wal and its -shm file are open
    assert _open_fds() > before
    first.close()
    first.close()
    await second.aclose()
    await second.aclose()
    gc.collect()
    assert _open_fds() == before


def test_a_dropped_store_warns_once_in_its_own_words_and_closes_its_connection(tmp_path: Path) -> None:
    store = SQLiteContinuationStore(tmp_path / "store.db")
    connection = store._conn  # pyright: ignore[reportPrivateUsage]  # to see it closed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del store
        gc.collect()
    ours = _ours(caught)
    assert len(ours) == 1 and len(caught) == 1, [str(w.message) for w in caught]
    message = str(ours[0].message)
    assert "SQLiteContinuationStore(" in message and "store.db" in message and "await store.aclose()" in message
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        connection.execute("SELECT 1")


def test_a_closed_store_does_not_warn_when_dropped(tmp_path: Path) -> None:
    store = SQLiteContinuationStore(tmp_path / "store.db")
    store.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del store
        gc.collect()
    assert caught == []


def test_a_thousand_dropped_stores_leave_no_file_descriptor_open(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    SQLiteContinuationStore(path).close()  # the file and its table exist before counting
    gc.collect()
    before = _open_fds()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(1000):
            store = SQLiteContinuationStore(path)
            assert _open_fds() > before  # the store holds its connection while referenced
            del store  # dropped without close(): its finalizer closes the connection
        gc.collect()
    assert _open_fds() == before
    assert len(_ours(caught)) == 1000 and len(caught) == 1000  # once per store, and nothing else


def test_a_thousand_closed_stores_leave_no_file_descriptor_open_and_warn_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    SQLiteContinuationStore(path).close()
    gc.collect()
    before = _open_fds()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(1000):
            SQLiteContinuationStore(path).close()
        gc.collect()
    assert _open_fds() == before and caught == []


async def test_both_sqlite_stores_create_the_missing_folders_of_their_file(tmp_path: Path) -> None:
    # sqlite3 alone fails with "unable to open database file", naming no path; core's
    # FileCheckpointStorage creates its folder, and so do the SQLite stores.
    async with SQLiteContinuationStore(tmp_path / "srv" / "app" / "continuations.db") as store:
        record = new_record(store)
        await store.save(record)
        assert await store.get(record.token_hash) == record
    sessions = SQLiteSessionStore(tmp_path / "other" / "sessions.db")
    try:
        assert (tmp_path / "other" / "sessions.db").exists()
    finally:
        await sessions.aclose()
