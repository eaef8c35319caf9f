"""PostgresContinuationStore, and its joint pause with a PostgresCheckpointStorage on the same database.

Joint: a pause's record and checkpoint in one statement and commit before the token is issued (refused: the
checkpoint saved whole; failed: saved alone, then the failure raised); another worker reads both in one statement.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_framework import CheckpointStorage, WorkflowCheckpoint

from .._store import (
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_TTL_SECONDS,
    RECORD_COLUMNS,
    ContinuationRecord,
    PurgeSchedule,
    TimedStore,
)
from .postgres_checkpoint import PostgresCheckpointStorage
from .postgres_rows import chunk_map, row_key
from .postgres_rows_sql import HEAD_COLUMNS, STATEMENTS
from .postgres_schema import DEFAULT_POOL_SIZE, DEFAULT_POOL_TIMEOUT_SECONDS, DEFAULT_SCHEMA, PostgresPool

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

    from .._step_cache import StepCacheOffer
    from .checkpoint_delta import DeltaSave

logger = logging.getLogger(__name__)
_ALONE: set[asyncio.Task[None]] = set()  # pauses being saved alone (each task kept referenced)

PAUSE_HOLD_SECONDS = 0.5
"""How long a pause's checkpoint save waits for its record; then it is saved alone (a stream nobody reads on)."""

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

_RANDOM_UUID = "^[0-9a-f]{{8}}-[0-9a-f]{{4}}-4[0-9a-f]{{3}}-[89ab][0-9a-f]{{3}}-[0-9a-f]{{12}}$"
_KEY_OF_RECORD = (
    "(SELECT c.checkpoint_id::UUID FROM {store}.continuations AS c "
    f"WHERE c.token_hash = %(hash)s AND c.checkpoint_id ~ '{_RANDOM_UUID}')"
)
_LOAD_OF_RECORD = STATEMENTS["delta_load"].replace("%(key)s", _KEY_OF_RECORD)
_LOAD_COLUMNS = 1 + HEAD_COLUMNS + 3  # delta_load's row: is-head, the head's columns, a chunk's three
# The record's row (first column 0), then the checkpoint's delta_load rows (1), each side NULL in the other's.
_RECORD_AND_CHECKPOINT = (
    f"WITH l AS ({_LOAD_OF_RECORD}) "
    f"SELECT 0, {', '.join(RECORD_COLUMNS)}, {', '.join(['NULL'] * _LOAD_COLUMNS)} FROM {{store}}.continuations "
    "WHERE token_hash = %(hash)s UNION ALL "
    f"SELECT 1, {', '.join(['NULL'] * len(RECORD_COLUMNS))}, l.* FROM l"
)
# The record's insert runs whatever the save returns (a data-modifying WITH always runs).
_SAVE_WITH_RECORD = (
    f"WITH r AS (INSERT INTO {{store}}.continuations (token_hash, {', '.join(RECORD_COLUMNS)}, updated_at) "
    f"VALUES (%s, {', '.join(['%s'] * len(RECORD_COLUMNS))}, %s) RETURNING 1) "
    "SELECT {schema}.save_delta_checkpoint(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


@functools.lru_cache(maxsize=64)
def _statements(storage_schema: str, store_schema: str) -> tuple[bytes, bytes]:
    """The joint read and write with both schemas filled in, rendered once per pair."""
    from psycopg import sql

    names = {"schema": sql.Identifier(storage_schema), "store": sql.Identifier(store_schema)}
    read = sql.SQL(_RECORD_AND_CHECKPOINT).format(**names).as_bytes(None)  # pyright: ignore[reportArgumentType]
    write = sql.SQL(_SAVE_WITH_RECORD).format(**names).as_bytes(None)  # pyright: ignore[reportArgumentType]
    return read, write


class PostgresContinuationStore(TimedStore):
    """A :class:`ContinuationStore` on PostgreSQL, for workers on several machines.

    One row per pause (table from :meth:`setup` or :func:`migrate_postgres`). Claim, release and abandon are
    each one conditional ``UPDATE``, so exactly one racing caller wins. A write returns once committed (keep
    ``fsync`` on). Expiry uses this process's clock: keep worker clocks in sync. Use it from one event loop.
    See "PostgreSQL" in the docs.

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
        """The store's pool (the joint pause's)."""
        return self._db

    def joint(self, storage: CheckpointStorage) -> PostgresJoint | None:
        """This store and ``storage`` as one database's pair (``_store.JointStore``); exact classes only."""
        if type(self) is not PostgresContinuationStore or type(storage) is not PostgresCheckpointStorage:
            return None
        return PostgresJoint(self, storage) if storage.database.shares_database(self._db) else None

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
        """Send this tick's claims in batches, each in a task from an empty context (not cancelled with a run)."""
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


class PostgresJointPause:
    """A pause's checkpoint save kept for its record (``_store.JointPause``); saved alone past PAUSE_HOLD_SECONDS."""

    __slots__ = ("_alone", "_checkpoint", "_joint", "_params", "_plan", "_timer")

    def __init__(
        self, joint: PostgresJoint, checkpoint: WorkflowCheckpoint, plan: DeltaSave, params: tuple[Any, ...]
    ) -> None:
        self._joint = joint
        self._checkpoint = checkpoint
        self._plan = plan
        self._params = params
        self._alone: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            PAUSE_HOLD_SECONDS, self._release
        )

    def _release(self) -> None:
        """No record came in time: save the checkpoint alone, in a task of its own (core cancels the run's)."""
        self._timer = None
        self._alone = self._save_soon()

    def _save_soon(self) -> asyncio.Task[None]:
        task = contextvars.Context().run(asyncio.get_running_loop().create_task, self._save_alone())
        _ALONE.add(task)
        task.add_done_callback(_ALONE.discard)
        task.add_done_callback(self._logged)
        return task

    def _logged(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.warning("The checkpoint %s of a pause could not be saved: %s", self.checkpoint_id, task.exception())

    def _stop_timer(self) -> asyncio.Task[None] | None:
        """Stop the wait's timer; the save alone it started, if it fired."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return self._alone

    @property
    def checkpoint_id(self) -> str:
        """The kept checkpoint's id."""
        return self._checkpoint.checkpoint_id

    async def write(self, record: ContinuationRecord) -> None:
        """Insert ``record`` and save the checkpoint in one statement; on failure the checkpoint is saved alone."""
        from psycopg.errors import UniqueViolation

        store, storage = self._joint.store, self._joint.storage
        alone = self._stop_timer()
        if alone is not None:  # saved alone already: the record after it (a failed save issues no token)
            await asyncio.wait([alone])
            alone.result()
            await store.save(record)
            return
        params = (*record.row(), *self._params)
        statement = self._joint.save_with_record

        async def write(conn: AsyncConnection[Any]) -> tuple[Any, ...] | None:
            await storage.purge_when_due(conn, time.time())  # as the storage's own saves do
            return await (await conn.execute(statement, params)).fetchone()

        try:
            row = await store.write("pause save", write, on=storage.database)  # the storage's warm connection
        except UniqueViolation as exc:
            await self.write_alone()
            raise ValueError("A continuation with this token hash is already recorded; issue a new token.") from exc
        except Exception:
            await self.write_alone()
            raise
        except BaseException:  # cancelled: the restore point is saved in a task of its own
            self._save_soon()
            raise
        if row is not None and row[0]:
            storage.pause_written(self._plan, self.checkpoint_id)
            return
        await self._save_alone()  # whole (no offer here): the record names it

    async def write_alone(self) -> None:
        """Save the checkpoint on its own, whole; a failure is logged (the pause's restore point, best effort)."""
        alone = self._stop_timer()
        if alone is not None:  # saving alone already (its failure is logged)
            await asyncio.wait([alone])
            return
        try:
            await self._save_alone()
        except Exception as exc:
            logger.warning("The checkpoint %s of a pause could not be saved: %s", self.checkpoint_id, exc)

    async def _save_alone(self) -> None:
        storage = self._joint.storage
        storage.pause_refused(self._plan)
        await storage.save(self._checkpoint)


class PostgresJoint:
    """A store and a storage on one database (``_store.Joint``); built by ``PostgresContinuationStore.joint``."""

    __slots__ = ("_load", "save_with_record", "storage", "store")

    def __init__(self, store: PostgresContinuationStore, storage: PostgresCheckpointStorage) -> None:
        self.store = store
        self.storage = storage
        self._load, self.save_with_record = _statements(storage.schema, store.database.schema)

    async def plan_pause(
        self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None
    ) -> PostgresJointPause | None:
        """Plan a pause's checkpoint save for :meth:`PostgresJointPause.write` (None: save it the usual way)."""
        planned = await self.storage.plan_pause(checkpoint, offer)
        return None if planned is None else PostgresJointPause(self, checkpoint, *planned)

    async def read(self, token_hash: str) -> tuple[ContinuationRecord | None, Callable[[], WorkflowCheckpoint] | None]:
        """The record of ``token_hash`` (None: none), and what decodes its checkpoint (None: load it as usual)."""
        storage = self.storage
        params = {"hash": token_hash, "now": time.time()}

        async def read(conn: AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            return await (await conn.execute(self._load, params)).fetchall()

        found = await storage.database.run("read", read)  # the storage's connection: warm for its load
        width = len(RECORD_COLUMNS)
        row = next((got[1 : 1 + width] for got in found if got[0] == 0), None)
        rows = [got[1 + width :] for got in found if got[0] == 1]
        if row is None:
            return None, None
        record = ContinuationRecord.from_row(token_hash, row)
        head = next((found for found in rows if found[0]), None)
        if head is None or str(head[4]) != row_key(record.checkpoint_id) or storage.buffers(record.checkpoint_id):
            return record, None
        chunks = chunk_map([found[1 + HEAD_COLUMNS :] for found in rows if not found[0]])
        return record, functools.partial(storage.decode_row, record.checkpoint_id, head[1 : 1 + HEAD_COLUMNS], chunks)
