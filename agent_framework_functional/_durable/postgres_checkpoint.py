"""PostgresCheckpointStorage: core's ``CheckpointStorage`` on PostgreSQL, for workers without a shared file system.

A whole body is written and read only through ``checkpoint_storage``'s :func:`encode_body` /
:func:`decode_body`, the one place that turns a checkpoint into stored bytes and back. Checkpoints of
runs this package drives are rows of ``delta_checkpoints`` (``_durable/postgres_rows_sql.py``, read and
written by ``_durable/postgres_rows.py``); whole checkpoints live in ``<schema>.checkpoints``.
"""

from __future__ import annotations

import functools
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._expiry import forget_retained
from .._store import PurgeSchedule, duration_seconds
from .checkpoint_delta import DeltaSave, StepCacheDeduper
from .checkpoint_seal import CheckpointSealer
from .checkpoint_storage import (
    DurableCheckpointStorage,
    check_allowed_types,
    check_sealer,
    decode_body,
    encode_body,
)
from .postgres_held import HeldStepSaves
from .postgres_rows import (
    check_storable,
    chunk_map,
    delta_params,
    execute_save,
    gather_row_chunks,
    references_text,
    row_head,
    row_key,
    row_references,
    storable,
)
from .postgres_rows_sql import HEAD_COLUMNS, MIGRATION, STATEMENTS
from .postgres_schema import DEFAULT_POOL_SIZE, DEFAULT_POOL_TIMEOUT_SECONDS, DEFAULT_SCHEMA, PostgresPool

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

    from .._step_cache import StepCacheOffer

logger = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_TTL = timedelta(days=7)
"""How long a :class:`PostgresCheckpointStorage` keeps a checkpoint after saving it, by default."""

PURGE_INTERVAL_SECONDS = 600.0
"""How often (at most) a storage object deletes expired checkpoints, on a save."""

MIGRATIONS = (MIGRATION,)
"""The ``checkpoints`` component's migrations, version 1 first (``_durable.postgres_schema`` applies them)."""


class PostgresCheckpointStorage(HeldStepSaves, DurableCheckpointStorage):
    """Core's ``CheckpointStorage`` protocol on PostgreSQL, so workers on several machines share checkpoints.

    A drop-in for ``FileCheckpointStorage`` when the workers share a database instead of a file
    system: pair it with a :class:`PostgresContinuationStore` on the same database, and any worker
    can resume a pause another one saved. One row per checkpoint: in ``<schema>.delta_checkpoints``
    (its head and the step results added since the run's previous checkpoint) for runs this package
    drives, in ``<schema>.checkpoints`` (whole) otherwise; created on first use, versioned like the
    store's table. Bodies are core's own checkpoint
    encoding, decoded under core's allow-list plus ``allowed_checkpoint_types``; a checkpoint that
    would not decode is refused at :meth:`save`, and a stored body that does not decode makes
    :meth:`load` raise ``WorkflowCheckpointException`` and :meth:`list_checkpoints` skip it.

    A checkpoint expires ``ttl`` after its last save; expired rows are never returned and are
    deleted by a later save (at most once per 10 minutes per object). Keep ``ttl`` at least the
    continuation store's ``ttl + retention``.

    Security: core decodes with ``pickle`` under an allow-list (a mitigation, not a boundary), so
    without a ``sealer`` whoever can write this table can run code in your workers (the storage logs
    a warning once). With a :class:`CheckpointSealer` every body is authenticated with the host's key
    (bound to its checkpoint id; optionally encrypted) and a body that fails the check is refused
    before anything decodes it. Either way grant write access to the workers' role only (SECURITY.md).

    Args:
        conninfo: A libpq connection string or URL (the storage owns its pool; close it with
            :meth:`aclose`), or a ``psycopg_pool.AsyncConnectionPool`` (the caller owns it).

    Keyword Args:
        pool: Your ``psycopg_pool.AsyncConnectionPool`` instead of ``conninfo`` (you open and close it;
            :meth:`aclose` leaves it open).
        schema: The PostgreSQL schema of the table (a plain lower-case identifier).
        allowed_checkpoint_types: Extra ``"module:QualName"`` types checkpoints may contain.
        ttl: How long a checkpoint is kept after it is saved (seconds or ``timedelta``), default 7
            days; ``None`` keeps checkpoints until :meth:`delete`.
        max_size: With a connection string: connections at most in the pool (default 10).
        pool_timeout: How long an operation waits for a connection (default 10 s).
        sealer: Seals every body it saves and opens every body it loads (README "Durable
            continuations"); None stores core's encoding as it is.
        synchronous_steps: True: every save waits for PostgreSQL's disk. False (default): only a pause's
            checkpoint (pending requests) waits, the others commit without waiting (as LangGraph's default
            ``durability="async"``). No pause is lost: its flush writes the server's log up to it, earlier
            saves included, before its token exists. A server crash can lose the last ~600 ms of step
            checkpoints; a restore then starts earlier and runs those steps again. A run's step checkpoints
            are also held in the worker until its next save, its end or 0.2 s (``flush()``), so a
            pause's statement carries them and a finished run never writes them.

    Raises:
        ImportError: psycopg 3 is not installed.
        ValueError: ``schema`` is not a plain identifier, a duration is not positive, or ``max_size``
            is not a positive integer.
        TypeError: ``allowed_checkpoint_types`` is not a list of strings, a duration is neither a
            number nor a ``timedelta``, ``sealer`` is not a :class:`CheckpointSealer`, or
            ``synchronous_steps`` is not a bool.

    Examples:
        .. code-block:: python

            dsn = "postgresql://app@db/app"
            wf = review.build(
                checkpoint_storage=PostgresCheckpointStorage(dsn, allowed_checkpoint_types=["my_app:Verdict"]),
                continuation_store=PostgresContinuationStore(dsn),
            )
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
        self.sealer = check_sealer("PostgresCheckpointStorage", sealer)
        if not isinstance(synchronous_steps, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"synchronous_steps must be True or False, not {synchronous_steps!r}.")
        self._synchronous_steps = synchronous_steps
        self._allowed_types = check_allowed_types(allowed_checkpoint_types)
        self._ttl = None if ttl is None else duration_seconds(ttl, "ttl")
        self._purges = PurgeSchedule(None if self._ttl is None else PURGE_INTERVAL_SECONDS)
        self._db = PostgresPool(
            conninfo,
            pool=pool,
            owner="PostgresCheckpointStorage",
            schema=schema,
            component="checkpoints",
            migrations=MIGRATIONS,
            max_size=max_size,
            pool_timeout=pool_timeout,
            keep_connection=True,
        )
        self._sql = self._db.statements(STATEMENTS)
        self._deduper = StepCacheDeduper(self._allowed_types)
        self._start_holding()

    async def setup(self) -> None:
        """Create this component's tables in its schema, or check that they are at this package's version.

        A deploy step runs it (or :func:`migrate_postgres`) with a role that may create tables; a worker
        whose tables exist needs only ``SELECT, INSERT, UPDATE, DELETE`` (its first operation checks them).

        Raises:
            RuntimeError: The tables are newer than this package, or missing and this role may not create them.
            PostgresUnavailableError: PostgreSQL could not be reached.
        """
        await self._db.prepare()

    @property
    def schema(self) -> str:
        """The PostgreSQL schema that holds the table."""
        return self._db.schema

    async def save_with_offer(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """:meth:`save` (its errors; also ``psycopg.OperationalError``), each step result stored once with ``offer``."""
        return await self._save(checkpoint, offer, buffered=False)

    async def save_buffered(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """:meth:`save_with_offer`, a step's checkpoint held until its run's next save or end (``StepSaveBuffer``)."""
        return await self._save(checkpoint, offer, buffered=True)

    async def _save(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None, *, buffered: bool) -> str:
        check_storable(checkpoint)
        with self._superseding(checkpoint, offer):  # before any await: core's dicts may change later
            plan = self._deduper.prepare(checkpoint, offer)
            if plan is not None and buffered and self._hold(checkpoint, plan):
                return checkpoint.checkpoint_id
            if plan is not None:
                await self._store_delta(checkpoint, plan)
                return checkpoint.checkpoint_id
        body = encode_body(checkpoint, self._allowed_types)
        if self.sealer is not None:
            body = self.sealer.seal(body, context=checkpoint.checkpoint_id.encode("utf-8"))
        now = time.time()
        expires_at = None if self._ttl is None else now + self._ttl
        key = row_key(checkpoint.checkpoint_id)
        row = (checkpoint.checkpoint_id, key, checkpoint.workflow_name, now, expires_at, body)

        statement = self._sql["save_whole" if self._waits_for_disk(checkpoint) else "save_whole_nowait"]

        async def save(conn: AsyncConnection[Any]) -> None:
            await self.purge_when_due(conn, now)
            await execute_save(conn, checkpoint.checkpoint_id, statement, row)

        await self._db.run("checkpoint save", save)
        return checkpoint.checkpoint_id

    def decode_row(
        self, checkpoint_id: str, head: tuple[Any, ...], chunks: dict[tuple[int, int], bytes]
    ) -> WorkflowCheckpoint:
        """Decode a delta row's head columns over its segments' chunks, as ``load`` does (``postgres_joint``'s read).

        Raises:
            WorkflowCheckpointException: A part does not open or decode.
        """
        return self._delta(checkpoint_id, head, chunks)

    async def purge_when_due(self, conn: AsyncConnection[Any], now: float) -> None:
        """Delete expired checkpoints on ``conn`` when due (first on every write)."""
        if self._purges.due(now):
            self._purges.ran(now)
            await self._db.purge_quietly(self._db.execute_custom_plan(conn, self._sql["purge"], (now,)))

    async def _write_delta(
        self, checkpoint: WorkflowCheckpoint, plan: DeltaSave, head: bytes, chunk: bytes | None
    ) -> bool:
        """Call ``save_delta_checkpoint`` once; False (nothing written) when a referenced segment lost chunks.

        The run's held step checkpoints go first, in the same statement (and commit).
        """
        times = self._times()
        statement, params = await self._with_held(checkpoint, plan, delta_params(checkpoint, plan, self.sealer, times))
        return await self._db.run("checkpoint save", functools.partial(self._save_delta, times[0], statement, params))

    def _waits_for_disk(self, checkpoint: WorkflowCheckpoint) -> bool:
        """Whether this save's commit waits for the server's disk: always, or for a pause (pending requests)."""
        return self._synchronous_steps or bool(checkpoint.pending_request_info_events)

    def _sealed_parts(self, checkpoint_id: str, plan: DeltaSave) -> tuple[bytes, bytes | None]:
        """Nothing: a version-3 row seals its head and chunk together (``_durable/postgres_rows.py``)."""
        return b"", None

    async def _save_delta(
        self, now: float, statement: bytes, params: tuple[Any, ...], conn: AsyncConnection[Any]
    ) -> bool:
        if self._purges.due(now):
            await self.purge_when_due(conn, now)
        row = await (await execute_save(conn, str(params[1]), statement, params)).fetchone()
        return bool(row is not None and row[-1])

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """Load a checkpoint by id.

        Args:
            checkpoint_id: The id :meth:`save` returned.

        Returns:
            A new ``WorkflowCheckpoint``.

        Raises:
            WorkflowCheckpointException: No live checkpoint has this id, or its body does not decode.
        """
        if not storable(checkpoint_id):  # PostgreSQL text cannot hold it, so no checkpoint has it
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id!r}")
        await self._held.flush_now([checkpoint_id])
        key = row_key(checkpoint_id)

        async def load(conn: AsyncConnection[Any]) -> tuple[bool, tuple[Any, ...] | None, list[tuple[Any, ...]]]:
            now = time.time()
            rows = await (await conn.execute(self._sql["delta_load"], {"key": key, "now": now})).fetchall()
            head = next((found for found in rows if found[0]), None)
            if head is not None:  # the head and its chunks in one round trip
                return True, head[1 : 1 + HEAD_COLUMNS], [found[1 + HEAD_COLUMNS :] for found in rows if not found[0]]
            row = await (await conn.execute(self._sql["load"], {"id": checkpoint_id, "now": now})).fetchone()
            return False, row, []

        delta, row, chunks = await self._db.run("checkpoint load", load)
        if row is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        if delta:
            return self._delta(checkpoint_id, row, chunk_map(chunks))
        return self._open(checkpoint_id, bytes(row[0]))

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Return the workflow's live checkpoints that decode, oldest save first (others skipped with a warning).

        Keyword Args:
            workflow_name: The workflow's name.

        Returns:
            The decoded checkpoints.
        """
        if not storable(workflow_name):  # PostgreSQL text cannot hold it, so no checkpoint has it
            return []
        await self._held.flush_now()

        async def rows(conn: AsyncConnection[Any]) -> tuple[list[tuple[Any, ...]], ...]:
            names = {"name": workflow_name, "now": time.time()}
            found = await (await self._db.execute_custom_plan(conn, self._sql["list"], names)).fetchall()
            deltas = await (await self._db.execute_custom_plan(conn, self._sql["delta_list"], names)).fetchall()
            return found, deltas, await self._delta_chunks(conn, deltas)

        found, deltas, delta_rows = await self._db.run("checkpoint list", rows)
        delta_chunks = chunk_map(delta_rows)

        async def load(checkpoint_id: str, body: Any) -> WorkflowCheckpoint:
            return self._open(checkpoint_id, bytes(body))

        async def load_delta(row: tuple[Any, ...]) -> WorkflowCheckpoint:
            return self._delta(None, row, delta_chunks)

        loads = [(float(at), str(cid), functools.partial(load, str(cid), body)) for cid, body, at in found]
        loads += [(float(row[1]), str(row[3]), functools.partial(load_delta, row)) for row in deltas]
        loads.sort(key=lambda item: item[:2])
        return await self._listed(workflow_name, ((cid, loader) for _, cid, loader in loads))

    async def _delta_chunks(self, conn: AsyncConnection[Any], rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The chunk rows of every segment the delta ``rows`` reference (a NULL id: that row refuses to load)."""
        found = (segment for row in rows for segment in (row[0], *(row[8] or ())))
        segments = sorted({int(segment) for segment in found if segment is not None})
        if not segments:
            return []
        return await (await conn.execute(self._sql["delta_chunks"], (segments,))).fetchall()

    def _delta(
        self, checkpoint_id: str | None, row: tuple[Any, ...], chunks: dict[tuple[int, int], bytes]
    ) -> WorkflowCheckpoint:
        """Decode a delta row over its segments' chunks (each opened first); every failure: core's exception."""
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
        return self._assembled(checkpoint_id or found_id, head, references_text(references).encode(), texts)

    def _open(self, checkpoint_id: str, body: bytes) -> WorkflowCheckpoint:
        """Open (with a sealer, before any decoding) and decode one whole body; every failure: core's exception."""
        body = self._unseal(checkpoint_id, body, checkpoint_id.encode("utf-8"))
        return decode_body(checkpoint_id, body, self._allowed_types)

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete a checkpoint by id.

        Args:
            checkpoint_id: The checkpoint's id.

        Returns:
            True if this call deleted it; False if no checkpoint had this id.

        The delete commits without waiting for the server's disk: one a crash undoes comes back and
        expires after ``ttl``.
        """
        return await self.delete_many([checkpoint_id]) == 1

    async def delete_many(self, checkpoint_ids: list[str]) -> int:
        """Delete several checkpoints in one statement (a run chain's spent checkpoints, in one round trip).

        Args:
            checkpoint_ids: The checkpoints' ids.

        Returns:
            How many of them this call deleted.

        As :meth:`delete`, the delete commits without waiting for the server's disk.
        """
        ids, dropped = await self._unheld([name for name in checkpoint_ids if storable(name)])
        if not ids:
            return dropped

        async def delete(conn: AsyncConnection[Any]) -> int:
            row = await (await conn.execute(self._sql["delete"], (ids, [row_key(i) for i in ids]))).fetchone()
            return 0 if row is None else int(row[0] or 0)

        return dropped + await self._db.run("checkpoint delete", delete)

    async def aclose(self) -> None:
        """Write the held step checkpoints, then close the connection pool if the storage created it.

        A pool passed in is left open.
        """
        await self._held.flush_now()
        forget_retained(self)
        await self._db.aclose()
