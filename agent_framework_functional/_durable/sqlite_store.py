"""SQLiteContinuationStore: the embedded continuation store (one file, several processes, one machine)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

from .._store import (
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_TTL_SECONDS,
    RECORD_COLUMNS,
    ContinuationRecord,
    PurgeSchedule,
    TimedStore,
    duration_seconds,
)

_T = TypeVar("_T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS continuations (token_hash TEXT PRIMARY KEY, workflow_name TEXT NOT NULL, "
    "signature_hash TEXT NOT NULL, checkpoint_id TEXT NOT NULL, pending_request_ids TEXT NOT NULL, "
    "created_at REAL NOT NULL, expires_at REAL NOT NULL, "
    "status TEXT NOT NULL CHECK (status IN ('issued', 'claimed', 'abandoned')), updated_at REAL NOT NULL, "
    "response_types TEXT, claimed_by TEXT, conversation TEXT) WITHOUT ROWID"
)

# Both purge conditions use an index (no scan under the write lock); supersede finds a pause by checkpoint id.
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS continuations_expires_at ON continuations (expires_at)",
    "CREATE INDEX IF NOT EXISTS continuations_updated_at ON continuations (updated_at)",
    "CREATE INDEX IF NOT EXISTS continuations_checkpoint_id ON continuations (checkpoint_id)",
)

# Past retention: expired more than `retention` ago (any status), or finished (claimed, abandoned) that long ago.
_PURGE = "DELETE FROM continuations WHERE expires_at < :cutoff OR (status != 'issued' AND updated_at < :cutoff)"

DEFAULT_PURGE_INTERVAL_SECONDS = 600.0


def _close_dropped(conn: sqlite3.Connection, path: Path) -> None:
    conn.close()
    warnings.warn(
        f"SQLiteContinuationStore({str(path)!r}) was dropped without being closed; its database connection "
        "is closed now. Call `await store.aclose()` (or `store.close()`, or use `async with store:`) when done.",
        ResourceWarning,
        stacklevel=2,
    )


def connect_sqlite(path: Path, timeout: float, statements: tuple[str, ...] = ()) -> sqlite3.Connection:
    """A WAL-mode connection to ``path`` (its missing folders created first), then ``statements`` run on it."""
    if str(path) != ":memory:":
        path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        for statement in (f"PRAGMA busy_timeout = {int(timeout * 1000)}", "PRAGMA journal_mode = WAL", *statements):
            conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


def setup(path: Path, timeout: float, schema: tuple[str, ...]) -> sqlite3.Connection:
    """Open ``path`` and create a component's tables and indexes (its one layout, version 1) if missing."""
    return connect_sqlite(path, timeout, ("PRAGMA synchronous = NORMAL", *schema))


def finish(conn: sqlite3.Connection, operation: Callable[[sqlite3.Connection, float], _T]) -> _T:
    """Finish the transaction ``conn`` began: ``operation``, then commit (rolled back on an error or False)."""
    try:
        result = operation(conn, time.time())
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT" if result is not False else "ROLLBACK")
    return result


class SQLiteContinuationStore(TimedStore):
    """A :class:`ContinuationStore` in one SQLite file (WAL mode), safe for several processes on one machine.

    A claim is one conditional ``UPDATE`` in an immediate transaction, checked by its row count, so
    exactly one process wins. Put the file on a local disk; build the store in each process (not across
    ``fork()``) and close it (a store collected open warns with ``ResourceWarning``). A write purges records
    expired, claimed or abandoned more than ``retention`` ago; a pending one never is. See "SQLite" in
    the docs.

    Args:
        path: The database file; created (with its folders and table) if missing.

    Keyword Args:
        ttl: How long a token is accepted after its pause; default 24 hours.
        retention: How long a record is kept for inspection once expired, claimed or abandoned; default 24 hours.
        busy_timeout: Seconds to wait for another process's write lock before failing.
        purge_interval: Least time between two automatic purges (default 10 minutes); ``None``: none
            (call :meth:`purge_expired`, or the file grows without bound).
        clock: Seconds since the epoch; defaults to ``time.time``.

    Raises:
        ValueError: ``ttl``, ``retention``, ``busy_timeout`` or ``purge_interval`` is not a positive
            duration of at most ten years.
        TypeError: One of them is neither a number nor a ``timedelta``.
        sqlite3.Error: The file cannot be opened or initialised.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ttl: float | timedelta = DEFAULT_TTL_SECONDS,
        retention: float | timedelta = DEFAULT_RETENTION_SECONDS,
        busy_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
        purge_interval: float | timedelta | None = DEFAULT_PURGE_INTERVAL_SECONDS,
    ) -> None:
        super().__init__(ttl, retention, clock)
        timeout = duration_seconds(busy_timeout, "busy_timeout")
        self._purges = PurgeSchedule(purge_interval)
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = setup(self.path, timeout, (_SCHEMA, *_INDEXES))
        self._finalizer = weakref.finalize(self, _close_dropped, self._conn, self.path)

    async def save(self, record: ContinuationRecord) -> None:
        """Insert a freshly issued record.

        Raises:
            sqlite3.IntegrityError: A record with this hash exists already.
        """
        row = record.row()
        sql = (
            f"INSERT INTO continuations (token_hash, {', '.join(RECORD_COLUMNS)}, updated_at) "
            f"VALUES ({', '.join('?' * (len(RECORD_COLUMNS) + 2))})"
        )
        await self._run(lambda c: c.execute(sql, row), write=True)

    async def get(self, token_hash: str) -> ContinuationRecord | None:
        """Return the record for ``token_hash`` (any status), or None; never mutates."""
        sql = f"SELECT {', '.join(RECORD_COLUMNS)} FROM continuations WHERE token_hash = ?"
        row = await self._run(lambda c: cast("tuple[Any, ...] | None", c.execute(sql, (token_hash,)).fetchone()))
        return None if row is None else ContinuationRecord.from_row(token_hash, row)

    async def claim(self, token_hash: str, *, claimer: str | None = None) -> bool:
        """Atomically move an ``issued``, unexpired record to ``claimed``."""
        now = self.now()
        sql = (
            "UPDATE continuations SET status = 'claimed', updated_at = ?, claimed_by = ? "
            "WHERE token_hash = ? AND status = 'issued' AND expires_at > ?"
        )
        return await self._transition(sql, (now, claimer, token_hash, now))

    async def release(self, token_hash: str, claimer: str) -> bool:
        """Atomically hand a claim back (``claimed`` -> ``issued``) for the run that claimed it."""
        sql = (
            "UPDATE continuations SET status = 'issued', updated_at = ?, claimed_by = NULL "
            "WHERE token_hash = ? AND status = 'claimed' AND claimed_by = ?"
        )
        return await self._transition(sql, (self.now(), token_hash, claimer))

    async def supersede(self, checkpoint_id: str, *, since: float) -> bool:
        """Atomically abandon the ``issued`` record of the pause saved in ``checkpoint_id`` (for its restore)."""
        now = self.now()

        def supersede(conn: sqlite3.Connection, _now: float) -> bool:
            lost = conn.execute(
                "SELECT 1 FROM continuations WHERE checkpoint_id = ? AND status = 'claimed' AND updated_at >= ?",
                (checkpoint_id, since),
            ).fetchone()
            if lost is None:
                conn.execute(
                    "UPDATE continuations SET status = 'abandoned', updated_at = ? "
                    "WHERE checkpoint_id = ? AND status = 'issued'",
                    (now, checkpoint_id),
                )
            return lost is None

        return await self._immediate(supersede)

    async def abandon(self, token_hash: str, *, force: bool = False) -> bool:
        """Atomically move an ``issued`` record to ``abandoned``."""
        now = self.now()
        horizon = float("-inf") if force else now
        sql = (
            "UPDATE continuations SET status = 'abandoned', updated_at = ? "
            "WHERE token_hash = ? AND status = 'issued' AND expires_at > ?"
        )
        return await self._transition(sql, (now, token_hash, horizon))

    async def purge_expired(self) -> int:
        """Delete the records past retention now (writes also do it); return how many."""
        return await self._run(lambda c: self._purge(c, self.now()))

    def close(self) -> None:
        """Close the database connection (idempotent; waits for an operation in progress, prefer :meth:`aclose`)."""
        with self._lock:
            if self._finalizer.detach() is not None:
                self._conn.close()

    async def aclose(self) -> None:
        """Close the database connection (idempotent) without blocking the event loop; see :meth:`close`."""
        await asyncio.to_thread(self.close)

    async def _transition(self, sql: str, params: tuple[Any, ...]) -> bool:
        return await self._immediate(lambda conn, _now: conn.execute(sql, params).rowcount == 1)

    async def _immediate(self, operation: Callable[[sqlite3.Connection, float], bool]) -> bool:

        def run(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            return finish(conn, operation)

        return await self._run(run, write=True)

    def _purge(self, conn: sqlite3.Connection, now: float) -> int:
        deleted = conn.execute(_PURGE, {"cutoff": now - self._retention}).rowcount
        self._purges.ran(now)
        return deleted

    async def _run(self, operation: Callable[[sqlite3.Connection], _T], *, write: bool = False) -> _T:
        def locked() -> _T:
            with self._lock:
                if write and self._purges.interval is not None and self._purges.due(now := self.now()):
                    self._purge(self._conn, now)
                return operation(self._conn)

        return await asyncio.to_thread(locked)
