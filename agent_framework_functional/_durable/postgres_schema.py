"""The Postgres backends' shared plumbing: the connection pool, the versioned schema, and clear outage errors.

A :class:`PostgresPool`'s first operation brings its component's tables to the package's version
(``_durable/postgres_versions.py``: numbered migrations under an advisory lock, recorded in
``<schema>.schema_version``). Hosts that forbid DDL at run time run ``migrate_postgres`` with a role
that may (README "Durable continuations").
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import select
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from .._store import duration_seconds
from .postgres_versions import Component, migrate

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

DEFAULT_SCHEMA = "agent_framework_functional"
"""The PostgreSQL schema (namespace) both Postgres backends create their tables in, by default."""

DEFAULT_POOL_SIZE = 10
"""Connections at most in the pool of a Postgres backend built from a connection string."""

DEFAULT_POOL_TIMEOUT_SECONDS = 10.0
"""How long an operation waits for a pooled connection (also while the server is down) before failing."""

_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE (libpq's PQTRANS_IDLE)

KEEP_SECONDS = 30.0
"""How long a :class:`PostgresPool` built with ``keep_connection`` keeps one connection out of its pool."""


def import_psycopg(owner: str) -> None:
    """Import psycopg and psycopg_pool, or raise an ``ImportError`` that says how to install them."""
    try:
        import psycopg  # noqa: F401  # pyright: ignore[reportUnusedImport]
        import psycopg_pool  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"{owner} needs psycopg 3: pip install 'agent-framework-functional[postgres]'.") from exc


def check_schema_name(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case SQL identifier; raise ``ValueError`` otherwise."""
    if not schema or not (schema[0].isalpha() or schema[0] == "_") or len(schema) > 63:
        raise ValueError(f"schema must be a plain SQL identifier (letters, digits, '_'), got {schema!r}.")
    if not all(ch.isascii() and (ch.isalnum() or ch == "_") and not ch.isupper() for ch in schema):
        raise ValueError(f"schema must be a plain lower-case SQL identifier (letters, digits, '_'), got {schema!r}.")
    if schema.startswith("pg_"):
        raise ValueError(f"schema must not start with 'pg_' (PostgreSQL keeps that prefix for itself), got {schema!r}.")
    return schema


async def _check_open(conn: AsyncConnection[Any]) -> None:
    """Refuse a pooled connection the server has closed (restart, idle timeout) before it is used.

    Usually no round trip: an idle connection has nothing to read unless its server went away (end of
    file, or a last ``FATAL`` message). Only when its socket is readable (that, or stray bytes such as
    a TLS session ticket) does psycopg's own check ask the server.
    """
    from psycopg import OperationalError
    from psycopg_pool import AsyncConnectionPool

    if conn.closed:
        raise OperationalError("the server closed this pooled connection")
    if select.select([conn.fileno()], [], [], 0)[0]:
        await AsyncConnectionPool.check_connection(conn)


async def _plan_once(conn: AsyncConnection[Any]) -> None:
    """Set a new pooled connection to plan each statement once: ``plan_cache_mode = force_generic_plan``.

    With ``prepare_threshold=0`` (as LangGraph's ``PostgresSaver`` connects) every statement is prepared
    on its first use, and with generic plans neither those nor the statements inside the PL/pgSQL
    functions are planned again: a new connection runs at its long-run speed from its second use on
    (PostgreSQL's default plans each of them anew five times first). Every hot statement keeps its index
    scans under generic plans (``tests/durable/test_postgres_plans.py``); the purges, whose best plan
    depends on how many rows are past their time, ask for custom plans
    (:meth:`PostgresPool.execute_custom_plan`).
    """
    await conn.execute("SET plan_cache_mode = force_generic_plan", prepare=False)


def _idle(conn: AsyncConnection[Any]) -> bool:
    """Whether ``conn`` is open and outside a transaction (libpq's status, without building ``conn.info``)."""
    return not conn.closed and conn.pgconn.transaction_status == _IDLE


def _quiet(conn: AsyncConnection[Any]) -> bool:
    """Whether an open connection's socket has nothing to read (the usual case: no check needed, :func:`_usable`)."""
    return not select.select([conn.fileno()], [], [], 0)[0]


async def _usable(conn: AsyncConnection[Any]) -> bool:
    """Whether a kept connection may run the next operation: open, idle, and passing :func:`_check_open`."""
    from psycopg.pq import TransactionStatus

    try:
        await _check_open(conn)
    except Exception:  # closed, or the check failed: the pool replaces it
        return False
    return conn.info.transaction_status == TransactionStatus.IDLE


@functools.lru_cache(maxsize=64)
def _same_conninfo(one: str, other: str) -> bool:
    """Whether two connection strings parse the same (once per pair: a workflow build asks)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(one) == conninfo_to_dict(other)
    except Exception:  # a connection string psycopg cannot parse: the pool's own error comes on first use
        return False


class PostgresPool:
    """One backend's access to PostgreSQL: a lazily opened pool, its schema, and outage errors.

    Built from a connection string, it owns an ``AsyncConnectionPool`` (autocommit connections that prepare
    each statement on first use and plan it once, see :func:`_plan_once`; each checked before use, usually
    without a round trip, so connections a server restart closed are replaced instead of failing an
    operation; it stops retrying a connection in the background after ``pool_timeout``, so the first
    operation once the server is back connects at once); built from a pool, it borrows it (the caller
    opens and closes it, and sets it up). Any
    ``psycopg.OperationalError`` (server down, connection lost, no connection within the timeout)
    is re-raised as a ``PostgresUnavailableError`` (an ``OperationalError`` and a ``DurableStoreError``)
    that names the backend and the operation.

    With ``keep_connection`` (and a pool it owns), the last idle connection stays out of the pool
    for the next operation, checked as a pooled one before each use: back-to-back operations such
    as a run's checkpoint saves skip the pool's checkout and return (~80 µs of CPU each). It goes
    back to the pool after an error, after :data:`KEEP_SECONDS`, and on :meth:`aclose`.
    """

    def __init__(
        self,
        target: str | AsyncConnectionPool | None,
        *,
        pool: AsyncConnectionPool | None = None,
        owner: str,
        schema: str,
        component: str,
        migrations: Sequence[str],
        max_size: int,
        pool_timeout: float | timedelta,
        keep_connection: bool = False,
    ) -> None:
        import_psycopg(owner)
        from psycopg_pool import AsyncConnectionPool

        if (target is None) == (pool is None):
            raise TypeError(f"{owner} takes a connection string or pool=, exactly one of them.")
        target = pool if pool is not None else target
        assert target is not None

        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"max_size must be a positive integer, got {max_size!r}.")
        self.owner = owner
        self.schema = check_schema_name(schema)
        self._component = Component(owner, self.schema, component, tuple(migrations))
        self._timeout = duration_seconds(pool_timeout, "pool_timeout")
        if isinstance(target, str):
            self._pool: AsyncConnectionPool = AsyncConnectionPool(
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
            self._owns_pool = True
        else:
            self._pool = target
            self._owns_pool = False
        self._keeps = keep_connection and self._owns_pool
        self._kept: tuple[AsyncConnection[Any], float] | None = None
        self._ready = False
        self._ready_lock = asyncio.Lock()

    @property
    def ready(self) -> bool:
        """Whether the pool is open and the schema was checked (the first operation does both)."""
        return self._ready

    def shares_database(self, other: PostgresPool) -> bool:
        """Whether ``other`` reaches the same database as the same user: the same pool, or equal connection strings.

        Compared parsed (``conninfo_to_dict``), so the order of the parameters does not matter. Two pools
        the caller passed are not compared: their ``kwargs`` or ``configure`` may reach another database.
        """
        if self._pool is other._pool:
            return True
        if not (self._owns_pool and other._owns_pool):
            return False
        mine, theirs = self._pool.conninfo, other._pool.conninfo
        if not isinstance(mine, str) or not isinstance(theirs, str):  # a callable conninfo: nothing to compare
            return False
        return mine == theirs or _same_conninfo(mine, theirs)

    def statements(self, texts: Mapping[str, str]) -> dict[str, bytes]:
        """``texts`` with ``{schema}`` filled in, each rendered once to bytes.

        psycopg then caches their parsing (a ``Composed`` would be rendered again on every execute).
        """
        from psycopg import sql

        identifier = sql.Identifier(self.schema)
        return {name: sql.SQL(text).format(schema=identifier).as_bytes(None) for name, text in texts.items()}  # pyright: ignore[reportArgumentType]

    async def run(self, what: str, operation: Callable[[AsyncConnection[Any]], Awaitable[_T]]) -> _T:
        """Run ``operation`` on a pooled connection (one transaction), after making sure the schema exists.

        Args:
            what: The operation's name, for error messages.
            operation: What to do with the connection.

        Returns:
            What ``operation`` returned.

        Raises:
            psycopg.OperationalError: PostgreSQL could not be reached, or the connection was lost; the
                message says whether the operation may have happened.
        """
        if not self._ready:
            await self._prepare()
        return await self._on_connection(what, operation)

    async def _on_connection(self, what: str, operation: Callable[[AsyncConnection[Any]], Awaitable[_T]]) -> _T:
        """``operation`` on the kept connection (no context manager: saves come back to back) or a pooled one."""
        try:
            if not self._keeps:
                if not self._owns_pool:
                    async with self._pool.connection() as conn:
                        return await operation(conn)
                conn = await self._live_connection()
                try:
                    async with conn:
                        return await operation(conn)
                finally:
                    await self._pool.putconn(conn)
            conn, since = await self._take_kept()
            try:
                result = await operation(conn)
            except BaseException:
                await self._pool.putconn(conn)  # the pool resets or replaces it
                raise
            if self._kept is None and _idle(conn) and time.monotonic() - since < KEEP_SECONDS:
                self._kept = (conn, since)
            else:
                await self._pool.putconn(conn)
            return result
        except Exception as exc:
            outage = self._unavailable(what, exc)
            if outage is None:
                raise
            raise outage from exc

    def _unavailable(self, what: str, exc: Exception) -> Exception | None:
        """A ``PostgresUnavailableError`` when ``exc`` is an outage (no connection, or a lost one); else None."""
        from psycopg import OperationalError
        from psycopg_pool import PoolTimeout

        from .postgres_errors import PostgresUnavailableError

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
        return None

    async def _live_connection(self) -> AsyncConnection[Any]:
        """A connection of the owned pool that passes :func:`_check_open`, within ``pool_timeout`` in all.

        A dead one goes back (the pool replaces it) and the next is taken at once: when the server has
        closed the idle ones (a restart, terminated backends), they are all passed over without a wait
        and the first new connection is used as soon as it is made. psycopg's own check loop waits 1 s,
        2 s, 4 s... between tries instead, so while connections keep dying it never returns a live one.
        Past ``max_size`` dead ones in a row, the tries are spaced 10 ms, doubling up to 0.1 s.
        """
        from psycopg_pool import PoolTimeout

        deadline = time.monotonic() + self._timeout
        tries = 0
        while True:
            conn = await self._pool.getconn(timeout=deadline - time.monotonic())
            try:
                await _check_open(conn)
            except Exception:  # closed: returned, the pool replaces it
                await self._pool.putconn(conn)
            except BaseException:
                await self._pool.putconn(conn)
                raise
            else:
                return conn
            tries += 1
            delay = 0.0 if tries <= self._pool.max_size else min(0.01 * 2 ** (tries - self._pool.max_size - 1), 0.1)
            if time.monotonic() + delay >= deadline:
                raise PoolTimeout(f"no live connection within {self._timeout:g} s")
            await asyncio.sleep(delay)

    async def _take_kept(self) -> tuple[AsyncConnection[Any], float]:
        """The kept connection when it is still usable (else it goes back to the pool), or a live pooled one."""
        kept, self._kept = self._kept, None
        if kept is not None and not (_idle(kept[0]) and _quiet(kept[0])) and not await _usable(kept[0]):
            await self._pool.putconn(kept[0])
            kept = None
        return kept if kept is not None else (await self._live_connection(), time.monotonic())

    async def prepare(self) -> None:
        """Open the pool and check the schema now (the first :meth:`run` does it otherwise)."""
        if not self._ready:
            await self._prepare()

    async def _prepare(self) -> None:
        async with self._ready_lock:
            if self._ready:
                return
            # Core's engine cancels the tasks started inside a workflow run when the run ends, and the
            # first use often happens there (a pause's checkpoint save). The pool's worker tasks must
            # outlive the run, so the pool opens in a task started from an empty context.
            await contextvars.Context().run(asyncio.get_running_loop().create_task, self._open())
            self._ready = True

    async def _open(self) -> None:
        if self._owns_pool:
            await self._pool.open(wait=False)
        await self._on_connection("schema check", functools.partial(migrate, component=self._component))

    async def purge_quietly(self, purge: Awaitable[Any]) -> None:
        """Await an automatic purge (before a save or claim, after a session write); a database error is logged.

        A purge is housekeeping: a lock it cannot get (``lock_timeout``) or a ``statement_timeout`` must not
        fail the write it goes with (its transaction is rolled back; the next purge is due an interval later).
        A lost connection fails that write's own statement next, as it would have anyway.
        """
        from psycopg import Error

        try:
            await purge
        except Error as exc:
            logger.warning("%s: the purge of expired rows failed and was skipped: %s", self.owner, exc)

    @staticmethod
    async def execute_custom_plan(conn: AsyncConnection[Any], statement: Any, params: Any) -> Any:
        """Run ``statement`` planned for its parameters' values (a purge: an index scan when few rows are due).

        The pools this class builds plan generically (:func:`_plan_once`); a purge's best plan depends on
        how many rows are past their time, a listing's on how many rows its workflow has, so each is
        planned anew, in a transaction of its own.

        Returns:
            psycopg's cursor (its ``rowcount`` counts the rows deleted).
        """
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            return await conn.execute(statement, params)

    async def aclose(self) -> None:
        """Close the pool if this object created it; a pool passed in is left open."""
        kept, self._kept = self._kept, None
        if kept is not None:
            await self._pool.putconn(kept[0])
        if self._owns_pool:
            await self._pool.close()
