"""SQLiteSessionStore: bounded sessions (and AG-UI thread snapshots) in one SQLite file, for workers on one machine."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

from .._store import DEFAULT_TTL_SECONDS, duration_seconds
from .session_store import (
    DEFAULT_MAX_STORED_SESSIONS,
    DEFAULT_SESSION_PURGE_INTERVAL_SECONDS,
    DurableSessionStore,
    LimitedRecords,
    SessionLimits,
    group_key,
    record_key,
)
from .sqlite_store import setup

_T = TypeVar("_T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS session_records ("
    "key TEXT PRIMARY KEY, grp TEXT NOT NULL, body TEXT NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS session_records_expires_at ON session_records (expires_at)",
    "CREATE INDEX IF NOT EXISTS session_records_grp ON session_records (grp)",
)
_WRITE = (
    "INSERT INTO session_records (key, grp, body, expires_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET grp = excluded.grp, body = excluded.body, expires_at = excluded.expires_at"
)
_EXPIRE = "DELETE FROM session_records WHERE expires_at <= ?"
_TRIM = (
    "DELETE FROM session_records WHERE key IN "
    "(SELECT key FROM session_records ORDER BY expires_at DESC LIMIT -1 OFFSET ?)"
)


class SQLiteRecords(LimitedRecords):
    """The ``session_records`` table of one SQLite file, used from a worker thread under a lock."""

    def __init__(self, path: Path, *, limits: SessionLimits, busy_timeout: float) -> None:
        super().__init__(limits)
        self._lock = threading.Lock()
        self._conn = setup(path, busy_timeout, _SCHEMA)
        self._finalizer = weakref.finalize(self, self._conn.close)

    async def read(self, group: str, key: str) -> str | None:
        sql = "SELECT body FROM session_records WHERE key = ? AND expires_at > ?"
        params = (record_key(group, key), self.now())
        row = await self._run(lambda c: cast("tuple[Any, ...] | None", c.execute(sql, params).fetchone()))
        return None if row is None else str(row[0])

    async def write(self, group: str, key: str, text: str) -> None:
        params = (record_key(group, key), group_key(group), text, self.now() + self.ttl)
        await self._run(lambda c: c.execute(_WRITE, params), write=True)

    async def remove(self, group: str, key: str) -> bool:
        sql = "DELETE FROM session_records WHERE key = ?"
        return await self._run(lambda c: c.execute(sql, (record_key(group, key),)).rowcount == 1)

    async def remove_group(self, group: str) -> int:
        sql = "DELETE FROM session_records WHERE grp = ?"
        return await self._run(lambda c: c.execute(sql, (group_key(group),)).rowcount)

    async def count(self) -> int:
        row = await self._run(lambda c: c.execute("SELECT count(*) FROM session_records").fetchone())
        return int(row[0])

    async def purge(self) -> int:
        return await self._run(lambda c: self._purge(c, self.now()))

    def close(self) -> None:
        with self._lock:
            if self._finalizer.detach() is not None:
                self._conn.close()

    def _purge(self, conn: sqlite3.Connection, now: float) -> int:
        deleted = conn.execute(_EXPIRE, (now,)).rowcount + conn.execute(_TRIM, (self.max_entries,)).rowcount
        self.purges.ran(now)
        return deleted

    async def _run(self, operation: Callable[[sqlite3.Connection], _T], *, write: bool = False) -> _T:
        def locked() -> _T:
            with self._lock:
                result = operation(self._conn)
                if write and self.purges.interval is not None and self.purges.due(now := self.now()):
                    self._purge(self._conn, now)
                return result

        return await asyncio.to_thread(locked)


class SQLiteSessionStore(DurableSessionStore[SQLiteRecords]):
    """Core's ``SessionStore`` in one SQLite file: sessions shared by the workers of one machine, kept across restarts.

    One row of JSON per session; writes are last-writer-wins. Expired rows and those past ``max_entries``
    are deleted at most once per ``purge_interval``. Put the file on a local disk; close the store with
    :meth:`aclose` (or ``async with``). See "Run it in production" in the docs.

    Args:
        path: The database file; created (with its folders and table) if missing. It may be the
            :class:`SQLiteContinuationStore`'s file (separate tables).

    Keyword Args:
        ttl: How long a session is kept after its last write; default 24 hours. Keep it at least the token's.
        max_entries: Sessions (and snapshots) kept at most (default 1,000,000).
        purge_interval: Least time between two automatic purges (default 60 s); ``None``: none.
        busy_timeout: Seconds to wait for another process's write lock before failing.
        clock: Seconds since the epoch; defaults to ``time.time``.

    Raises:
        ValueError: A duration is not positive (at most ten years) or ``max_entries`` not a positive integer.
        TypeError: A duration is neither a number nor a ``timedelta``.
        sqlite3.Error: The file cannot be opened or initialised.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ttl: float | timedelta = DEFAULT_TTL_SECONDS,
        max_entries: int = DEFAULT_MAX_STORED_SESSIONS,
        purge_interval: float | timedelta | None = DEFAULT_SESSION_PURGE_INTERVAL_SECONDS,
        busy_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        limits = SessionLimits.checked(ttl, max_entries, purge_interval, clock)
        timeout = duration_seconds(busy_timeout, "busy_timeout")
        super().__init__(SQLiteRecords(self.path, limits=limits, busy_timeout=timeout))

    def close(self) -> None:
        """Close the database connection (idempotent); the store cannot be used afterwards."""
        self.records.close()

    async def aclose(self) -> None:
        """Close the database connection without blocking the event loop; see :meth:`close`."""
        await asyncio.to_thread(self.records.close)
