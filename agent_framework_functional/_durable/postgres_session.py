"""PostgresSessionStore: bounded sessions (and AG-UI thread snapshots) on PostgreSQL, for several machines."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .._store import DEFAULT_TTL_SECONDS
from .postgres_schema import DEFAULT_POOL_SIZE, DEFAULT_POOL_TIMEOUT_SECONDS, DEFAULT_SCHEMA, PostgresPool
from .session_store import (
    DEFAULT_MAX_STORED_SESSIONS,
    DEFAULT_SESSION_PURGE_INTERVAL_SECONDS,
    DurableSessionStore,
    LimitedRecords,
    SessionLimits,
    group_key,
    record_key,
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

TABLES = """
CREATE TABLE IF NOT EXISTS {schema}.session_records (
    key TEXT PRIMARY KEY,
    grp TEXT NOT NULL,
    body TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS session_records_expires_at ON {schema}.session_records (expires_at);
CREATE INDEX IF NOT EXISTS session_records_grp ON {schema}.session_records (grp);
"""
"""The ``session_records`` table (schema version 1), created by :meth:`PostgresSessionStore.setup`."""

_STATEMENTS = {
    "read": "SELECT body FROM {schema}.session_records WHERE key = %s AND expires_at > %s",
    "write": (
        "INSERT INTO {schema}.session_records (key, grp, body, expires_at) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (key) DO UPDATE SET grp = EXCLUDED.grp, body = EXCLUDED.body, expires_at = EXCLUDED.expires_at"
    ),
    "remove": "DELETE FROM {schema}.session_records WHERE key = %s",
    "remove_group": "DELETE FROM {schema}.session_records WHERE grp = %s",
    "count": "SELECT count(*) FROM {schema}.session_records",
    "expire": "DELETE FROM {schema}.session_records WHERE expires_at <= %s",
    "trim": (
        "DELETE FROM {schema}.session_records WHERE key IN "
        "(SELECT key FROM {schema}.session_records ORDER BY expires_at DESC OFFSET %s)"
    ),
}

_PLANNED_FOR_VALUES = frozenset({"expire", "trim", "remove_group"})  # how many rows match decides their plan


class PostgresRecords(LimitedRecords):
    """The ``<schema>.session_records`` table, through the package's Postgres pool."""

    def __init__(self, db: PostgresPool, limits: SessionLimits) -> None:
        super().__init__(limits)
        self.db = db
        self._sql = db.statements(_STATEMENTS)

    async def _execute(self, what: str, name: str, params: tuple[Any, ...]) -> Any:
        async def operation(conn: AsyncConnection[Any]) -> Any:
            if name in _PLANNED_FOR_VALUES:
                cursor = await self.db.execute_custom_plan(conn, self._sql[name], params)
            else:
                cursor = await conn.execute(self._sql[name], params)
            return await cursor.fetchone() if cursor.description is not None else cursor.rowcount

        return await self.db.run(what, operation)

    async def read(self, group: str, key: str) -> str | None:
        row = await self._execute("session read", "read", (record_key(group, key), self.now()))
        return None if row is None else str(row[0])

    async def write(self, group: str, key: str, text: str) -> None:
        now = self.now()
        params = (record_key(group, key), group_key(group), text, now + self.ttl)
        await self._execute("session write", "write", params)
        if self.purges.due(now):  # housekeeping after the write: its failure is logged, the write stands
            await self.db.purge_quietly(self.purge())

    async def remove(self, group: str, key: str) -> bool:
        return int(await self._execute("session delete", "remove", (record_key(group, key),))) == 1

    async def remove_group(self, group: str) -> int:
        return int(await self._execute("session delete", "remove_group", (group_key(group),)))

    async def count(self) -> int:
        """Rows held now (expired ones not yet purged included)."""
        row = await self._execute("session count", "count", ())
        return int(row[0])

    async def purge(self) -> int:
        now = self.now()
        self.purges.ran(now)
        expired = int(await self._execute("session purge", "expire", (now,)))
        return expired + int(await self._execute("session purge", "trim", (self.max_entries,)))


class PostgresSessionStore(DurableSessionStore[PostgresRecords]):
    """Core's ``SessionStore`` on PostgreSQL: sessions shared by workers on several machines, kept across restarts.

    Each session is one row of JSON (never pickle: it holds a paused conversation's token); last writer wins.
    A session expires ``ttl`` after its last write; past ``max_entries`` those that expire first are purged.
    AG-UI snapshots may share it (``hosting.ThreadSnapshotStore``). Needs psycopg 3 (extra ``postgres``).

    Args:
        conninfo: A libpq connection string or URL (the store owns its pool), or your ``AsyncConnectionPool``.

    Keyword Args:
        pool: Your ``AsyncConnectionPool`` instead of ``conninfo`` (you open and close it).
        ttl: How long a session is kept after its last write (default 24 hours: keep it at least the token's).
        max_entries: Sessions (and snapshots) kept at most (default 1,000,000).
        schema: The PostgreSQL schema of the table (a plain lower-case identifier).
        purge_interval: Least time between two automatic purges (default 60 s); ``None`` turns them off.
        clock: Seconds since the epoch; defaults to ``time.time``.
        max_size: With a connection string: connections at most in the pool (default 10).
        pool_timeout: How long an operation waits for a connection (default 10 s).

    Raises:
        ImportError: psycopg 3 is not installed.
        ValueError: A duration is not positive (at most ten years), ``max_entries`` or ``max_size`` is not
            a positive integer, or ``schema`` is not a plain identifier.
    """

    def __init__(
        self,
        conninfo: str | AsyncConnectionPool | None = None,
        *,
        pool: AsyncConnectionPool | None = None,
        ttl: float | timedelta = DEFAULT_TTL_SECONDS,
        max_entries: int = DEFAULT_MAX_STORED_SESSIONS,
        schema: str = DEFAULT_SCHEMA,
        purge_interval: float | timedelta | None = DEFAULT_SESSION_PURGE_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.time,
        max_size: int = DEFAULT_POOL_SIZE,
        pool_timeout: float | timedelta = DEFAULT_POOL_TIMEOUT_SECONDS,
    ) -> None:
        limits = SessionLimits.checked(ttl, max_entries, purge_interval, clock)
        db = PostgresPool(
            conninfo,
            pool=pool,
            owner="PostgresSessionStore",
            schema=schema,
            tables=TABLES,
            max_size=max_size,
            pool_timeout=pool_timeout,
        )
        super().__init__(PostgresRecords(db, limits))

    async def setup(self) -> None:
        """Create the schema and its ``session_records`` table if missing (idempotent; safe from several workers).

        Raises:
            PostgresUnavailableError: PostgreSQL could not be reached.
            psycopg.errors.InsufficientPrivilege: This role may not create them (see :func:`migrate_postgres`).
        """
        await self.records.db.setup()

    @property
    def schema(self) -> str:
        """The PostgreSQL schema that holds the store's table."""
        return self.records.db.schema

    async def aclose(self) -> None:
        """Close the pool if the store created it; a pool passed in is left open."""
        await self.records.db.aclose()
