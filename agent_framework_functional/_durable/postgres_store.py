"""PostgresContinuationStore: a continuation store for several machines on PostgreSQL (psycopg 3)."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .._store import (
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_TTL_SECONDS,
    RECORD_COLUMNS,
    ContinuationRecord,
    PurgeSchedule,
    TimedStore,
)
from .postgres_joint import PostgresJoint, joint
from .postgres_schema import DEFAULT_POOL_SIZE, DEFAULT_POOL_TIMEOUT_SECONDS, DEFAULT_SCHEMA, PostgresPool

if TYPE_CHECKING:
    from agent_framework import CheckpointStorage
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool


TABLES = """
CREATE TABLE IF NOT EXISTS {schema}.continuations (
    token_hash TEXT PRIMARY KEY,
    workflow_name TEXT NOT NULL,
    signature_hash TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    pending_request_ids TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('issued', 'claimed', 'abandoned')),
    updated_at DOUBLE PRECISION NOT NULL,
    response_types TEXT,
    claimed_by TEXT,
    conversation TEXT
);
CREATE INDEX IF NOT EXISTS continuations_checkpoint_id ON {schema}.continuations (checkpoint_id);
CREATE INDEX IF NOT EXISTS continuations_expires_at ON {schema}.continuations (expires_at);
CREATE INDEX IF NOT EXISTS continuations_updated_at ON {schema}.continuations (updated_at);
"""
"""The ``continuations`` table (schema version 1), created by :meth:`PostgresContinuationStore.setup`."""

_Claim = tuple[str, str | None, "asyncio.Future[bool]"]
_CLAIM_BATCH_MAX = 256
_STATEMENTS = {
    "insert": (
        f"INSERT INTO {{schema}}.continuations (token_hash, {', '.join(RECORD_COLUMNS)}, updated_at) "
        f"VALUES (%s, {', '.join(['%s'] * len(RECORD_COLUMNS))}, %s)"
    ),
    "get": f"SELECT {', '.join(RECORD_COLUMNS)} FROM {{schema}}.continuations WHERE token_hash = %s",
    "claim": (
        "UPDATE {schema}.continuations SET status = 'claimed', updated_at = %s, claimed_by = %s "
        "WHERE token_hash = %s AND status = 'issued' AND expires_at > %s"
    ),
    # Claims of one event-loop tick, distinct hashes: each returned hash is exactly one winner (row locks
    # and PostgreSQL's re-check of the WHERE clause keep it a compare-and-set across processes).
    "claim_many": (
        "UPDATE {schema}.continuations AS c SET status = 'claimed', updated_at = %(now)s, claimed_by = v.claimer "
        "FROM unnest(%(hashes)s::text[], %(claimers)s::text[]) AS v(token_hash, claimer) "
        "WHERE c.token_hash = v.token_hash AND c.status = 'issued' AND c.expires_at > %(now)s "
        "RETURNING c.token_hash"
    ),
    "release": (
        "UPDATE {schema}.continuations SET status = 'issued', updated_at = %s, claimed_by = NULL "
        "WHERE token_hash = %s AND status = 'claimed' AND claimed_by = %s"
    ),
    "abandon": (
        "UPDATE {schema}.continuations SET status = 'abandoned', updated_at = %s "
        "WHERE token_hash = %s AND status = 'issued' AND (%s OR expires_at > %s)"
    ),
    # Locks every live record of the checkpoint: a concurrent claim committed first (this waits for its
    # row lock, then sees 'claimed') or comes after (it sees 'abandoned').
    "supersede": (
        "UPDATE {schema}.continuations SET "
        "status = CASE WHEN status = 'issued' THEN 'abandoned' ELSE status END, "
        "updated_at = CASE WHEN status = 'issued' THEN %(now)s ELSE updated_at END "
        "WHERE checkpoint_id = %(checkpoint_id)s AND status IN ('issued', 'claimed') "
        "RETURNING status = 'claimed' AND updated_at >= %(since)s"
    ),
    "purge": (
        "DELETE FROM {schema}.continuations "
        "WHERE expires_at < %(cutoff)s OR (status <> 'issued' AND updated_at < %(cutoff)s)"
    ),
}

DEFAULT_PURGE_INTERVAL_SECONDS = 600.0
"""How often (at most) a store deletes records past retention, on a write."""


class PostgresContinuationStore(TimedStore):
    """A :class:`ContinuationStore` on PostgreSQL, for workers on several machines.

    One row per pause (table from :meth:`setup` or :func:`migrate_postgres`). Claim, release and abandon are
    each one conditional ``UPDATE``, so exactly one racing caller wins. A write returns once committed (keep
    ``fsync`` on). Expiry uses this process's clock: keep worker clocks in sync. Use it from one event loop.
    See README, Several machines on PostgreSQL.

    Args:
        conninfo: A libpq connection string or URL (the store owns its pool), or your ``AsyncConnectionPool``.

    Keyword Args:
        pool: Your ``AsyncConnectionPool`` instead of ``conninfo`` (you open and close it).
        ttl: How long a token is accepted after its pause (seconds or ``timedelta``); default 24 hours.
        retention: How long a record is kept after it expires, is claimed or abandoned; default 24 hours.
        schema: The PostgreSQL schema of the table (a plain lower-case identifier).
        purge_interval: Least time between two automatic purges (default 10 minutes); ``None``: none.
        clock: Seconds since the epoch; defaults to ``time.time``.
        max_size: With a connection string: connections at most in the pool (default 10).
        pool_timeout: How long an operation waits for a connection (default 10 s), then ``PostgresUnavailableError``.

    Raises:
        ImportError: psycopg 3 is not installed.
        ValueError: A duration is not positive or longer than ten years, ``schema`` is not a plain
            identifier, or ``max_size`` is not a positive integer.
        TypeError: A duration is neither a number nor a ``timedelta``.
    """

    def __init__(
        self,
        conninfo: str | AsyncConnectionPool | None = None,
        *,
        pool: AsyncConnectionPool | None = None,
        ttl: float | timedelta = DEFAULT_TTL_SECONDS,
        retention: float | timedelta = DEFAULT_RETENTION_SECONDS,
        schema: str = DEFAULT_SCHEMA,
        purge_interval: float | timedelta | None = DEFAULT_PURGE_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.time,
        max_size: int = DEFAULT_POOL_SIZE,
        pool_timeout: float | timedelta = DEFAULT_POOL_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(ttl, retention, clock)
        self._purges = PurgeSchedule(purge_interval)
        self._claims: list[_Claim] = []
        self._batches: set[asyncio.Task[None]] = set()
        self._db = PostgresPool(
            conninfo,
            pool=pool,
            owner="PostgresContinuationStore",
            schema=schema,
            tables=TABLES,
            max_size=max_size,
            pool_timeout=pool_timeout,
        )
        self._sql = self._db.statements(_STATEMENTS)

    async def setup(self) -> None:
        """Create the schema and the ``continuations`` table if missing (idempotent; safe from several workers).

        Raises:
            PostgresUnavailableError: PostgreSQL could not be reached.
            psycopg.errors.InsufficientPrivilege: This role may not create them (see :func:`migrate_postgres`).
        """
        await self._db.setup()

    @property
    def schema(self) -> str:
        """The PostgreSQL schema that holds the store's tables."""
        return self._db.schema

    @property
    def database(self) -> PostgresPool:
        """The store's pool (``postgres_joint``)."""
        return self._db

    def joint(self, storage: CheckpointStorage) -> PostgresJoint | None:
        """This store with ``storage`` as one database's pair (``_store.JointStore``; see ``postgres_joint``)."""
        return joint(self, storage) if type(self) is PostgresContinuationStore else None

    async def save(self, record: ContinuationRecord) -> None:
        """Insert a freshly issued record (committed before this returns); a duplicate hash: ``ValueError``."""
        from psycopg.errors import UniqueViolation

        row = record.row()
        try:
            await self.write("save", lambda conn: conn.execute(self._sql["insert"], row))
        except UniqueViolation as exc:
            raise ValueError("A continuation with this token hash is already recorded; issue a new token.") from exc

    async def get(self, token_hash: str) -> ContinuationRecord | None:
        """Return the record for ``token_hash`` (any status), or None; never mutates."""

        async def read(conn: AsyncConnection[Any]) -> tuple[Any, ...] | None:
            return await (await conn.execute(self._sql["get"], (token_hash,))).fetchone()

        row = await self._db.run("read", read)
        return None if row is None else ContinuationRecord.from_row(token_hash, row)

    async def claim(self, token_hash: str, *, claimer: str | None = None) -> bool:
        """Atomically move an ``issued``, unexpired record to ``claimed``; claims of one loop tick share a statement."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._claims.append((token_hash, claimer, future))
        if len(self._claims) == 1:  # the first claim of this tick sends the batch on the next one
            asyncio.get_running_loop().call_soon(self._send_claims)
        return await future

    def _send_claims(self) -> None:
        """Send this tick's claims in batches, each in a task from an empty context.

        Core cancels a run's tasks when it ends; a claim must not be cut off by another run's end.
        """
        pending, self._claims = [claim for claim in self._claims if not claim[2].done()], []
        loop = asyncio.get_running_loop()
        while pending:
            batch: dict[str, _Claim] = {}
            later: list[_Claim] = []
            for claim in pending:
                if claim[0] in batch or len(batch) >= _CLAIM_BATCH_MAX:
                    later.append(claim)
                else:
                    batch[claim[0]] = claim
            pending = later
            task = contextvars.Context().run(loop.create_task, self._claim_batch(list(batch.values())))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    async def _claim_batch(self, claims: list[_Claim]) -> None:
        """Claim ``claims`` (distinct hashes) in one statement and answer each future."""
        now = self.now()
        try:
            won = await self._claimed(claims, now)
        except asyncio.CancelledError:
            for _, _, future in claims:
                future.cancel()
            raise
        except Exception as exc:
            for _, _, future in claims:
                if not future.done():
                    future.set_exception(exc)
            return
        for token_hash, _, future in claims:
            if not future.done():
                future.set_result(token_hash in won)

    async def _claimed(self, claims: list[_Claim], now: float) -> set[str]:
        """The hashes among ``claims`` this statement claimed (one row: the plain claim)."""
        if len(claims) == 1:
            token_hash, claimer, _ = claims[0]
            return {token_hash} if await self._update("claim", (now, claimer, token_hash, now)) else set()
        params = {"now": now, "hashes": [c[0] for c in claims], "claimers": [c[1] for c in claims]}

        async def claim_many(conn: AsyncConnection[Any]) -> set[str]:
            rows = await (await conn.execute(self._sql["claim_many"], params)).fetchall()
            return {str(row[0]) for row in rows}

        return await self.write("claim", claim_many)

    async def release(self, token_hash: str, claimer: str) -> bool:
        """Atomically hand a claim back (``claimed`` -> ``issued``) for the run that claimed it."""
        return await self._update("release", (self.now(), token_hash, claimer))

    async def supersede(self, checkpoint_id: str, *, since: float) -> bool:
        """Atomically abandon the ``issued`` record of the pause saved in ``checkpoint_id`` (for its restore)."""
        params = {"now": self.now(), "checkpoint_id": checkpoint_id, "since": since}

        async def supersede(conn: AsyncConnection[Any]) -> bool:
            rows = await (await conn.execute(self._sql["supersede"], params)).fetchall()
            return not any(bool(row[0]) for row in rows)

        return await self.write("supersede", supersede)

    async def abandon(self, token_hash: str, *, force: bool = False) -> bool:
        """Atomically move an ``issued`` record to ``abandoned``."""
        now = self.now()
        return await self._update("abandon", (now, token_hash, force, now))

    async def purge_expired(self) -> int:
        """Delete the records past retention now; returns how many (writes purge once per ``purge_interval``)."""
        return await self._db.run("purge", self._purge)

    async def aclose(self) -> None:
        """Close the pool if the store created it; a pool passed in is left open."""
        await self._db.aclose()

    async def _purge(self, conn: AsyncConnection[Any]) -> int:
        now = self.now()
        self._purges.ran(now)  # also when it fails: the next one is due an interval later, not on every write
        cursor = await self._db.execute_custom_plan(conn, self._sql["purge"], {"cutoff": now - self._retention})
        return cursor.rowcount

    async def _update(self, name: str, params: tuple[Any, ...]) -> bool:
        async def update(conn: AsyncConnection[Any]) -> bool:
            return (await conn.execute(self._sql[name], params)).rowcount == 1

        return await self.write(name, update)

    async def write(
        self, what: str, operation: Callable[[AsyncConnection[Any]], Any], *, on: PostgresPool | None = None
    ) -> Any:
        """Run one write, after the purge when one is due (same connection); ``on``: a storage's pool (joint)."""

        async def write(conn: AsyncConnection[Any]) -> Any:
            if self._purges.interval is not None and self._purges.due(self.now()):
                await self._db.purge_quietly(self._purge(conn))  # housekeeping: its failure must not fail the write
            return await operation(conn)

        return await (on or self._db).run(what, write)
