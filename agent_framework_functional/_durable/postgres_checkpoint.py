"""PostgresCheckpointStorage: core's ``CheckpointStorage`` on PostgreSQL, for workers without a shared file system.

Each checkpoint is a row of ``delta_checkpoints`` (``postgres_rows.py``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Generator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._expiry import forget_retained
from .._store import PurgeSchedule, duration_seconds
from .checkpoint_delta import DeltaSave
from .checkpoint_seal import CheckpointSealer
from .checkpoint_storage import DurableCheckpointStorage
from .postgres_buffer import BufferedSave, StepBuffer, bufferable
from .postgres_rows import (
    check_storable,
    chunk_map,
    delta_params,
    execute_save,
    gather_row_chunks,
    row_head,
    row_key,
    row_references,
    segment_name,
    storable,
)
from .postgres_rows_sql import HEAD_COLUMNS, STATEMENTS, TABLES, save_many
from .postgres_schema import DEFAULT_POOL_SIZE, DEFAULT_POOL_TIMEOUT_SECONDS, DEFAULT_SCHEMA, PostgresPool

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

    from .._step_cache import StepCacheLog, StepCacheOffer

logger = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_TTL = timedelta(days=7)
"""How long a :class:`PostgresCheckpointStorage` keeps a checkpoint after saving it, by default."""

PURGE_INTERVAL_SECONDS = 600.0
"""How often (at most) a storage object deletes expired checkpoints, on a save."""

UNWRITTEN_KEPT = 4096
"""How many ids of buffered step saves a pause superseded (never written) are kept, so their delete sends nothing."""


class PostgresCheckpointStorage(DurableCheckpointStorage):
    """Core's ``CheckpointStorage`` protocol on PostgreSQL, so workers on several machines share checkpoints.

    Pair it with a :class:`PostgresContinuationStore` on the same database; tables come from :meth:`setup` or
    :func:`migrate_postgres`. A checkpoint that would not decode is refused at :meth:`save`; a stored one that
    does not decode makes :meth:`load` raise and :meth:`list_checkpoints` skip it. See "PostgreSQL" in the
    docs.

    Security: core decodes with ``pickle`` under an allow-list, so without a ``sealer`` whoever can write
    these tables can run code in your workers (a warning is logged once); see SECURITY.md.

    Args:
        conninfo: A libpq connection string or URL (the storage owns its pool), or your ``AsyncConnectionPool``.

    Keyword Args:
        pool: Your ``AsyncConnectionPool`` instead of ``conninfo`` (you open and close it).
        schema: The PostgreSQL schema of the tables (a plain lower-case identifier).
        allowed_checkpoint_types: Extra ``"module:QualName"`` types checkpoints may contain.
        ttl: How long a checkpoint is kept after its save (default 7 days; at least the store's ``ttl + retention``).
        max_size: With a connection string: connections at most in the pool (default 10).
        pool_timeout: How long an operation waits for a connection (default 10 s).
        sealer: Seals every body saved and opens every body loaded; None stores core's encoding as it is.
        synchronous_steps: True: every save waits for the server's disk. False (default): only a pause's does;
            a server crash can lose the last step checkpoints, which a restore then runs again. Step
            checkpoints are also buffered in the worker for up to 0.2 s (:meth:`flush`).

    Raises:
        ImportError: psycopg 3 is not installed.
        ValueError: ``schema`` is not a plain identifier, a duration is not positive, or ``max_size`` is not
            a positive integer.
        TypeError: ``allowed_checkpoint_types`` is not a list of strings, a duration is not a number or
            ``timedelta``, ``sealer`` is not a :class:`CheckpointSealer`, or ``synchronous_steps`` is not a bool.
    """

    logger = logger
    backend = "PostgreSQL"
    unreadable = "Checkpoint {checkpoint_id} cannot be loaded: its stored parts do not decode ({error})."

    def __init__(
        self,
        conninfo: str | AsyncConnectionPool | None = None,
        *,
        pool: AsyncConnectionPool | None = None,
        schema: str = DEFAULT_SCHEMA,
        allowed_checkpoint_types: list[str] | None = None,
        ttl: float | timedelta | None = DEFAULT_CHECKPOINT_TTL,
        max_size: int = DEFAULT_POOL_SIZE,
        pool_timeout: float | timedelta = DEFAULT_POOL_TIMEOUT_SECONDS,
        sealer: CheckpointSealer | None = None,
        synchronous_steps: bool = False,
    ) -> None:
        self._configure("PostgresCheckpointStorage", sealer, allowed_checkpoint_types, inline_heads=False)
        if not isinstance(synchronous_steps, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"synchronous_steps must be True or False, not {synchronous_steps!r}.")
        self._synchronous_steps = synchronous_steps
        self._ttl = None if ttl is None else duration_seconds(ttl, "ttl")
        self._purges = PurgeSchedule(None if self._ttl is None else PURGE_INTERVAL_SECONDS)
        self._db = PostgresPool(
            conninfo,
            pool=pool,
            owner="PostgresCheckpointStorage",
            schema=schema,
            tables=TABLES,
            max_size=max_size,
            pool_timeout=pool_timeout,
        )
        self._sql = self._db.statements(STATEMENTS)
        self._buffer = StepBuffer(self._write_buffered)
        self._unwritten: OrderedDict[str, None] = OrderedDict()  # buffered step saves a pause superseded
        self._many: dict[tuple[int, bool], bytes] = {}
        self._unsent: set[str] = set()  # pauses that superseded buffered rows, their statement not sent yet

    async def setup(self) -> None:
        """Create the schema and the checkpoint tables and functions if missing (idempotent; safe from several workers).

        Raises:
            PostgresUnavailableError: PostgreSQL could not be reached.
            psycopg.errors.InsufficientPrivilege: This role may not create them (see :func:`migrate_postgres`).
        """
        await self._db.setup()

    @property
    def schema(self) -> str:
        """The PostgreSQL schema that holds the tables."""
        return self._db.schema

    @property
    def database(self) -> PostgresPool:
        """The storage's pool (a store on the same database writes a pause with it: ``postgres_store``)."""
        return self._db

    async def save_with_offer(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """:meth:`save` (its errors; also ``psycopg.OperationalError``), each step result stored once with ``offer``."""
        return await self._save(checkpoint, offer, buffered=False)

    async def save_buffered(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """:meth:`save_with_offer`; a step's checkpoint waits for its run's next save or end (``StepSaveBuffer``)."""
        return await self._save(checkpoint, offer, buffered=True)

    async def _save(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None, *, buffered: bool) -> str:
        check_storable(checkpoint)
        with self._superseding(checkpoint, offer):  # before any await: core's dicts may change later
            plan = self._deduper.prepare(checkpoint, offer)
            if not (buffered and plan.log is not None and self._buffer_step(checkpoint, plan)):
                await self._store_delta(checkpoint, plan)
        return checkpoint.checkpoint_id

    async def purge_when_due(self, conn: AsyncConnection[Any], now: float) -> None:
        """Delete expired checkpoints on ``conn`` when due (first on every write)."""
        if self._purges.due(now):
            self._purges.ran(now)
            await self._db.purge_quietly(self._db.execute_custom_plan(conn, self._sql["purge"], (now,)))

    async def _write_delta(self, checkpoint: WorkflowCheckpoint, plan: DeltaSave) -> bool:
        """``save_delta_checkpoint`` after the run's buffered saves, in one statement; False: a segment lost chunks."""
        times = self._times()
        params = delta_params(checkpoint, plan, self.sealer, times)
        buffered = self._buffer.take(plan.log)
        await self._buffer.written_by(plan.log)  # a write of this run's earlier rows in flight goes first
        self._unsent.discard(checkpoint.checkpoint_id)
        statement = self._statement(len(buffered) + 1, self._waits_for_disk(checkpoint))
        params = (*(param for row in buffered for param in row.params), *params)
        return await self._db.run("checkpoint save", functools.partial(self._save_delta, times[0], statement, params))

    def _waits_for_disk(self, checkpoint: WorkflowCheckpoint) -> bool:
        """Whether this save's commit waits for the server's disk: always, or for a pause (pending requests)."""
        return self._synchronous_steps or bool(checkpoint.pending_request_info_events)

    async def _save_delta(
        self, now: float, statement: bytes, params: tuple[Any, ...], conn: AsyncConnection[Any]
    ) -> bool:
        await self.purge_when_due(conn, now)
        row = await (await execute_save(conn, str(params[1]), statement, params)).fetchone()
        return bool(row is not None and row[-1])

    @contextlib.contextmanager
    def _superseding(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> Generator[None, None, None]:
        """A pause: forget its run's buffered step saves unwritten (its row holds their step results).

        Enter before the save's first ``await``. Failed before its statement is sent: they are written after all;
        once sent, a failure may hide a pause that landed, which they must not follow: they are lost.
        """
        pause = offer is not None and bool(checkpoint.pending_request_info_events) and offer.take(checkpoint.state)
        log = offer.log if offer is not None and pause else None
        discarded = None if log is None else self._buffer.withdraw(log)
        if log is None or discarded is None:
            yield
            return
        rows, before = discarded
        self._deduper.rewind(log, before)
        self._unsent.add(checkpoint.checkpoint_id)
        try:
            yield
        except BaseException:
            if checkpoint.checkpoint_id in self._unsent:  # refused or cancelled before its statement was sent
                self._deduper.rewind(log, None)  # its next save (if any) starts a segment of its own
                self._buffer.write_soon(log, rows)
            raise
        finally:
            self._unsent.discard(checkpoint.checkpoint_id)
        for row in rows:
            self._unwritten[row.checkpoint_id] = None
        while len(self._unwritten) > UNWRITTEN_KEPT:
            self._unwritten.popitem(last=False)

    def _buffer_step(self, checkpoint: WorkflowCheckpoint, plan: DeltaSave) -> bool:
        """Buffer a step's save (``save_buffered``); False: write it now."""
        if not bufferable(checkpoint) or self._waits_for_disk(checkpoint):
            return False
        params = delta_params(checkpoint, plan, self.sealer, self._times())
        before = self._deduper.snapshot(plan.log)
        self._deduper.saved(plan, checkpoint.checkpoint_id)  # its run's next save appends after it
        self._buffer.add(plan.log, BufferedSave(checkpoint.checkpoint_id, params), before)
        return True

    def buffers(self, checkpoint_id: str) -> bool:
        """Whether this object buffers ``checkpoint_id`` unwritten (a read elsewhere would not find it)."""
        return self._buffer.has([checkpoint_id])

    def pause_written(self, plan: DeltaSave, checkpoint_id: str) -> None:
        """A pause :meth:`plan_pause` planned was written (by the store's statement): its run's saves continue it."""
        self._deduper.saved(plan, checkpoint_id)

    def pause_refused(self, plan: DeltaSave) -> None:
        """A pause :meth:`plan_pause` planned was not written as planned: its run's next save starts a segment."""
        self._deduper.forget(plan)

    async def plan_pause(
        self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None
    ) -> tuple[DeltaSave, tuple[Any, ...]] | None:
        """Plan a pause's save for a statement that writes its record too (``postgres_store``); None: save it.

        The caller then calls :meth:`pause_written` or :meth:`pause_refused`.
        """
        check_storable(checkpoint)
        if not bufferable(checkpoint):
            return None
        with self._superseding(checkpoint, offer):
            plan = self._deduper.prepare(checkpoint, offer)
            if plan.log is None:
                return None  # saved whole by the caller's save
            await self._buffer.written_by(plan.log)
            self._unsent.discard(checkpoint.checkpoint_id)
            return plan, delta_params(checkpoint, plan, self.sealer, self._times())

    async def _unbuffered(self, checkpoint_ids: list[str]) -> tuple[list[str], int]:
        """Before a delete: the ids still to delete on the server, and how many were buffered or never written.

        A run the delete names only in part is written first, so the delete finds its rows.
        """
        ids = list(dict.fromkeys(checkpoint_ids))
        dropped, runs = self._buffer.drop(set(ids))  # a finished run's buffered step saves: never written
        for run, before in runs:  # a running run's next save appends to what is stored, not to them
            self._deduper.rewind(cast("StepCacheLog", run), before)
        for checkpoint_id in [checkpoint_id for checkpoint_id in ids if checkpoint_id in self._unwritten]:
            del self._unwritten[checkpoint_id]  # superseded by its run's pause before it was written
            dropped.add(checkpoint_id)
        ids = [checkpoint_id for checkpoint_id in ids if checkpoint_id not in dropped]
        if ids:
            await self._buffer.flush_now(ids)
        return ids, len(dropped)

    def _times(self) -> tuple[float, float | None]:
        """(saved at, expires at) for a save now."""
        now = time.time()
        return now, None if self._ttl is None else now + self._ttl

    def _statement(self, saves: int, waits: bool) -> bytes:
        """The statement of ``saves`` ``save_delta_checkpoint`` calls in order, committed waiting or not."""
        if (statement := self._many.get((saves, waits))) is None:
            statement = self._many[saves, waits] = self._db.statements({"many": save_many(saves, waits)})["many"]
        return statement

    async def _write_buffered(self, run: Any, rows: list[BufferedSave]) -> None:
        """Write a run's buffered step saves in one statement; failed or refused, its next save starts a segment."""
        params = tuple(param for row in rows for param in row.params)
        save = functools.partial(self._save_delta, time.time(), self._statement(len(rows), False), params)
        written = False
        try:
            written = await self._db.run("checkpoint save", save)
        finally:
            if not written:
                self._deduper.rewind(run, None)
        if not written:
            raise RuntimeError("a step checkpoint they continue was never written")

    async def flush(self) -> None:
        """Write every step checkpoint this object buffers now (reads, deletes and ``aclose`` do it first)."""
        await self._buffer.flush_now()

    async def write_buffered(self, checkpoint_ids: list[str]) -> None:
        """Write the runs whose buffered step saves include one of ``checkpoint_ids`` (a run ended); failures logged."""
        await self._buffer.flush_now(checkpoint_ids)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """Load a checkpoint by id.

        Raises:
            WorkflowCheckpointException: No live checkpoint has this id, or its body does not decode.
        """
        if not storable(checkpoint_id):  # PostgreSQL text cannot hold it, so no checkpoint has it
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id!r}")
        await self._buffer.flush_now([checkpoint_id])
        key = row_key(checkpoint_id)

        async def load(conn: AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            return await (await conn.execute(self._sql["delta_load"], {"key": key, "now": time.time()})).fetchall()

        rows = await self._db.run("checkpoint load", load)  # the head and its chunks in one round trip
        head = next((found for found in rows if found[0]), None)
        if head is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        chunks = chunk_map([found[1 + HEAD_COLUMNS :] for found in rows if not found[0]])
        return self.decode_row(checkpoint_id, head[1 : 1 + HEAD_COLUMNS], chunks)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Return the workflow's live checkpoints that decode, oldest save first (others skipped with a warning)."""
        if not storable(workflow_name):  # PostgreSQL text cannot hold it, so no checkpoint has it
            return []
        await self._buffer.flush_now()

        async def rows(conn: AsyncConnection[Any]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
            names = {"name": workflow_name, "now": time.time()}
            deltas = await (await self._db.execute_custom_plan(conn, self._sql["delta_list"], names)).fetchall()
            return deltas, await self._delta_chunks(conn, deltas)

        deltas, chunk_rows = await self._db.run("checkpoint list", rows)
        chunks = chunk_map(chunk_rows)
        deltas.sort(key=lambda row: (float(row[1]), str(row[3])))
        loads = [(str(row[3]), functools.partial(self.decode_row, None, row, chunks)) for row in deltas]
        return self._listed(workflow_name, loads)

    async def _delta_chunks(self, conn: AsyncConnection[Any], rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The chunk rows of every segment the delta ``rows`` reference (a NULL id: that row refuses to load)."""
        found = (segment for row in rows for segment in (row[0], *(row[8] or ())))
        segments = sorted({int(segment) for segment in found if segment is not None})
        if not segments:
            return []
        return await (await conn.execute(self._sql["delta_chunks"], (segments,))).fetchall()

    def decode_row(
        self, checkpoint_id: str | None, row: tuple[Any, ...], chunks: dict[tuple[int, int], bytes]
    ) -> WorkflowCheckpoint:
        """Decode a row's head columns over its segments' chunks, each opened first (``load``, ``postgres_store``).

        ``checkpoint_id``: the id asked for (None: the row's). Every failure raises core's exception.
        """
        sealed = self.sealer is not None
        try:
            found_id, head = row_head(row, self._unseal, sealed)
            references = row_references(row)
            texts = gather_row_chunks(references, chunks, self._unseal, sealed)
        except WorkflowCheckpointException:
            raise
        except (ValueError, TypeError, IndexError, KeyError, OverflowError, RecursionError) as exc:
            raise WorkflowCheckpointException(
                self.unreadable.format(checkpoint_id=checkpoint_id or str(row[3]), error=type(exc).__name__)
            ) from exc
        checkpoint_id = checkpoint_id or found_id
        if texts is None:
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id} lost part of its step cache in PostgreSQL (expired or deleted)."
            )
        refs = [[segment_name(segment), count] for segment, count in references]
        return self._decoded(checkpoint_id, lambda: self._deduper.assemble(checkpoint_id, head, refs, texts))

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete a checkpoint by id; True if this call deleted it (without waiting for the disk: see ``ttl``)."""
        return await self.delete_many([checkpoint_id]) == 1

    async def delete_many(self, checkpoint_ids: list[str]) -> int:
        """Delete several checkpoints in one statement (a run's spent chain); returns how many this call deleted."""
        ids, dropped = await self._unbuffered([name for name in checkpoint_ids if storable(name)])
        if not ids:
            return dropped

        async def delete(conn: AsyncConnection[Any]) -> int:
            row = await (await conn.execute(self._sql["delete"], ([row_key(i) for i in ids],))).fetchone()
            return 0 if row is None else int(row[0] or 0)

        return dropped + await self._db.run("checkpoint delete", delete)

    async def aclose(self) -> None:
        """Write the buffered step checkpoints, then close the pool if the storage created it (not a pool passed in)."""
        await self._buffer.flush_now()
        forget_retained(self)
        await self._db.aclose()
