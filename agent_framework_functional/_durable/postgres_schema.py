"""The Postgres backends' shared plumbing: the connection pool, ``setup()``'s tables, and clear errors.

Tables are created only by ``setup()`` or ``migrate_postgres``; missing ones raise a :class:`DurableStoreError`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
import select
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import DurableStoreError
from .._store import duration_seconds

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

DEFAULT_SCHEMA = "agent_framework_functional"
"""The PostgreSQL schema (namespace) the Postgres backends keep their tables in, by default."""

DEFAULT_POOL_SIZE = 10
"""Connections at most in the pool of a Postgres backend built from a connection string."""

DEFAULT_POOL_TIMEOUT_SECONDS = 10.0
"""How long an operation waits for a pooled connection (also while the server is down) before failing."""


def import_psycopg(owner: str) -> None:
    """Import psycopg and psycopg_pool, or raise an ``ImportError`` that says how to install them."""
    try:
        import psycopg  # noqa: F401  # pyright: ignore[reportUnusedImport]
        import psycopg_pool  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"{owner} needs psycopg 3: pip install 'agent-framework-functional[postgres]'.") from exc


def check_schema_name(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case SQL identifier; raise ``ValueError`` otherwise."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
        raise ValueError(f"schema must be a plain lower-case SQL identifier (letters, digits, '_'), got {schema!r}.")
    if schema.startswith("pg_") or schema == "information_schema":
        raise ValueError(
            f"schema must not be a PostgreSQL system schema ('pg_*', 'information_schema'), got {schema!r}."
        )
    return schema


async def _check_open(conn: AsyncConnection[Any]) -> None:
    """Refuse a pooled connection the server closed (restart, idle timeout); a round trip only if it is readable."""
    from psycopg import OperationalError
    from psycopg_pool import AsyncConnectionPool

    if conn.closed:
        raise OperationalError("the server closed this pooled connection")
    if select.select([conn.fileno()], [], [], 0)[0]:  # end of file, a last FATAL, or stray bytes
        await AsyncConnectionPool.check_connection(conn)


async def _plan_once(conn: AsyncConnection[Any]) -> None:
    """Plan each statement once, PL/pgSQL functions' included (hot statements keep index scans generically)."""
    await conn.execute("SET plan_cache_mode = force_generic_plan", prepare=False)


@functools.lru_cache(maxsize=64)
def _same_conninfo(one: str, other: str) -> bool:
    """Whether two connection strings parse the same (once per pair: a workflow build asks)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(one) == conninfo_to_dict(other)
    except Exception:  # a connection string psycopg cannot parse: the pool's own error comes on first use
        return False


class PostgresPool:
    """One component's ``psycopg_pool.AsyncConnectionPool``, schema and tables, and its errors.

    Built from a connection string, it owns the pool (opened on first use, autocommit); a pool passed in is
    borrowed as it is. Outages raise ``PostgresUnavailableError``, missing tables a ``DurableStoreError``.
    """

    def __init__(
        self,
        target: str | AsyncConnectionPool | None,
        *,
        pool: AsyncConnectionPool | None = None,
        owner: str,
        schema: str,
        tables: str,
        max_size: int,
        pool_timeout: float | timedelta,
    ) -> None:
        import_psycopg(owner)
        from psycopg.rows import tuple_row
        from psycopg_pool import AsyncConnectionPool

        if (target is None) == (pool is None):
            raise TypeError(f"{owner} takes a connection string or pool=, exactly one of them.")
        target = pool if pool is not None else target
        if not isinstance(target, (str, AsyncConnectionPool)) or isinstance(pool, str):
            raise TypeError(
                f"{owner} takes a connection string (str) or a psycopg_pool.AsyncConnectionPool, got {type(target)!r}."
            )
        if not isinstance(target, str) and target.kwargs.get("row_factory") not in (None, tuple_row):
            raise TypeError(
                f"{owner} reads rows as tuples: pass a pool without a row_factory in its kwargs "
                "(set row factories per cursor in your own code)."
            )
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"max_size must be a positive integer, got {max_size!r}.")
        self.owner = owner
        self.schema = check_schema_name(schema)
        self._tables = tables
        self._timeout = duration_seconds(pool_timeout, "pool_timeout")
        self._closed = False
        self._owns_pool = isinstance(target, str)
        self._opened = not self._owns_pool
        self._opening: asyncio.Task[None] | None = None
        self._guard: asyncio.Task[None] | None = None
        if isinstance(target, str):
            target = AsyncConnectionPool(
                target,
                min_size=1,
                max_size=max_size,
                timeout=self._timeout,
                open=False,
                kwargs={"autocommit": True, "prepare_threshold": 0},
                configure=_plan_once,
                reconnect_timeout=self._timeout,
                name=owner,
            )
        assert target is not None
        self._pool: AsyncConnectionPool = target

    def shares_database(self, other: PostgresPool) -> bool:
        """Whether ``other`` is the same pool, or both own pools of connection strings that parse the same."""
        if self._pool is other._pool:
            return True
        mine, theirs = self._pool.conninfo, other._pool.conninfo
        if not (self._owns_pool and other._owns_pool and isinstance(mine, str) and isinstance(theirs, str)):
            return False
        return mine == theirs or _same_conninfo(mine, theirs)

    def statements(self, texts: Mapping[str, str]) -> dict[str, bytes]:
        """``texts`` with ``{schema}`` filled in, each rendered once to bytes (psycopg caches their parsing)."""
        from psycopg import sql

        identifier = sql.Identifier(self.schema)
        return {name: sql.SQL(text).format(schema=identifier).as_bytes(None) for name, text in texts.items()}  # pyright: ignore[reportArgumentType]

    async def run(self, what: str, operation: Callable[[AsyncConnection[Any]], Awaitable[_T]]) -> _T:
        """Run ``operation`` on a pooled connection.

        Raises:
            DurableStoreError: The tables do not exist (``setup()`` was not run).
            psycopg.OperationalError: PostgreSQL could not be reached, or the connection was lost; the
                message says whether the operation may have happened.
        """
        if self._closed:
            raise DurableStoreError(
                f"{self.owner} is closed (aclose() was called); the {what} did not happen. Make a new one."
            )
        if not self._opened:
            await self._open()
        try:
            if not self._owns_pool:
                async with self._pool.connection() as conn:
                    return await operation(conn)
            conn = await self._live_connection()
            try:  # autocommit: no commit to send; putconn rolls back a transaction left open
                return await operation(conn)
            finally:
                await self._pool.putconn(conn)
        except Exception as exc:
            translated = self._translated(what, exc)
            if translated is exc:
                raise
            raise translated from exc

    def _translated(self, what: str, exc: Exception) -> Exception:
        """Our error for missing tables or an outage; ``exc`` itself otherwise."""
        from psycopg import OperationalError
        from psycopg.errors import InvalidSchemaName, UndefinedFunction, UndefinedTable
        from psycopg_pool import PoolTimeout

        from .postgres_errors import PostgresUnavailableError

        if isinstance(exc, (UndefinedTable, UndefinedFunction, InvalidSchemaName)):
            return DurableStoreError(
                f"{self.owner}: a table it uses does not exist ({str(exc).splitlines()[0]}); the {what} did not "
                "happen. Create the tables once with each component's `await component.setup()` or "
                "`await migrate_postgres(url, schema=...)`."
            )
        if isinstance(exc, PoolTimeout):
            return PostgresUnavailableError(
                f"{self.owner}: no connection to PostgreSQL within {self._timeout:g} s ({exc}); the {what} did not "
                "happen. Check that the server is up and reachable, or raise pool_timeout / max_size."
            )
        if isinstance(exc, OperationalError):
            return PostgresUnavailableError(
                f"{self.owner}: the connection to PostgreSQL failed during a {what} ({exc}). A write whose reply was "
                "lost may have been applied: read the record before retrying (a claim that did happen spent the "
                "token; restore the pause's checkpoint to recover it)."
            )
        return exc

    async def _live_connection(self) -> AsyncConnection[Any]:
        """A pooled connection that passes :func:`_check_open`, within ``pool_timeout`` in all.

        A dead one goes back and the next is taken at once, not after psycopg's check backoff.
        """
        from psycopg_pool import PoolTimeout

        deadline = time.monotonic() + self._timeout
        tries = 0
        while True:
            conn = await self._pool.getconn(timeout=deadline - time.monotonic())
            try:
                await _check_open(conn)
                return conn
            except BaseException as exc:
                await self._pool.putconn(conn)
                if not isinstance(exc, Exception):
                    raise
            tries += 1
            delay = 0.0 if tries <= self._pool.max_size else min(0.01 * 2 ** (tries - self._pool.max_size - 1), 0.1)
            if time.monotonic() + delay >= deadline:
                raise PoolTimeout(f"no live connection within {self._timeout:g} s")
            await asyncio.sleep(delay)

    async def _open(self) -> None:
        """Open the owned pool once, in a task from an empty context: core cancels the tasks a run started."""
        if self._opening is None:
            loop = asyncio.get_running_loop()
            self._opening = contextvars.Context().run(loop.create_task, self._pool.open(wait=False))
            self._guard = contextvars.Context().run(loop.create_task, self._close_when_cancelled())
        await self._opening
        self._opened = True

    async def _close_when_cancelled(self) -> None:
        """Wait; cancelled (``asyncio.run`` cancels every task as it ends), close the pool a caller left open.

        psycopg_pool's worker swallows a cancellation that lands while it runs a maintenance task and waits on
        its queue again, so an open pool could hang ``asyncio.run``'s end; closing it stops the workers.
        """
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            if not self._closed:
                await self._pool.close()

    async def setup(self) -> None:
        """Create the schema and this component's tables if missing, under an advisory lock (workers start together)."""
        from psycopg import sql

        schema = sql.Identifier(self.schema)

        async def create(conn: AsyncConnection[Any]) -> None:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"aff:{self.schema}",))
                found = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,))
                if await found.fetchone() is None:  # IF NOT EXISTS needs CREATE on the database even when it exists
                    await conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
                await conn.execute(sql.SQL(self._tables).format(schema=schema), prepare=False)  # pyright: ignore[reportArgumentType]

        await self.run("setup", create)

    async def purge_quietly(self, purge: Awaitable[Any]) -> None:
        """Await an automatic purge; a database error (a lock or statement timeout) is logged, not raised."""
        from psycopg import Error

        try:
            await purge
        except Error as exc:
            logger.warning("%s: the purge of expired rows failed and was skipped: %s", self.owner, exc)

    @staticmethod
    async def execute_custom_plan(conn: AsyncConnection[Any], statement: Any, params: Any) -> Any:
        """Run ``statement`` planned for its parameters' values, in a transaction of its own; returns the cursor."""
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            return await conn.execute(statement, params)

    async def aclose(self) -> None:
        """Close the pool if this object created it (a pool passed in is left open); later calls are refused."""
        self._closed = True
        if self._owns_pool:
            await self._pool.close()
        if self._guard is not None:
            self._guard.cancel()
