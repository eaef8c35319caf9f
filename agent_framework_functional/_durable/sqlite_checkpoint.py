"""SQLiteCheckpointStorage: core's ``CheckpointStorage`` in one SQLite file, each step result stored once.

The embedded durable default for the workers of one machine, beside :class:`SQLiteContinuationStore`
(one file may hold both). Whole bodies go through ``checkpoint_storage``'s :func:`encode_body` /
:func:`decode_body`; checkpoints of runs this package drives take the step-cache delta path the Redis and
PostgreSQL storages share (``DurableCheckpointStorage._store_delta``, ``_durable/checkpoint_delta.py``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._expiry import forget_retained
from .._store import PurgeSchedule, duration_seconds
from .checkpoint_delta import DeltaSave, StepCacheDeduper
from .checkpoint_seal import CheckpointSealer, chunk_context, open_chunk
from .checkpoint_storage import (
    DurableCheckpointStorage,
    check_allowed_types,
    check_sealer,
    encode_body,
)
from .sqlite_rows import (
    ADD_REFERENCE,
    INSERT_CHUNK,
    INSERT_WHOLE,
    LIVE,
    SCHEMA,
    UPSERT_SEGMENT,
    began_at_once,
    blob,
    close_all,
    drop,
    finish,
    gathered,
    id_key,
    id_text,
    purge_expired,
    segment_key,
    segment_text,
)
from .sqlite_store import connect_sqlite, setup

if TYPE_CHECKING:
    from .._step_cache import StepCacheOffer

_T = TypeVar("_T")
logger = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_TTL = timedelta(days=7)
"""How long a :class:`SQLiteCheckpointStorage` keeps a checkpoint after saving it, by default."""

PURGE_INTERVAL_SECONDS = 600.0
"""How often (at most) a storage object deletes expired checkpoints, on a save."""

WAL_CHECKPOINT_EVERY = 256
"""Saves committed on the event loop's thread between two WAL checkpoints (run in a worker thread)."""


class SQLiteCheckpointStorage(DurableCheckpointStorage):
    """Core's ``CheckpointStorage`` protocol in one SQLite file, for the workers of one machine.

    The embedded durable default: pair it with a :class:`SQLiteContinuationStore` (the same file may
    hold both) and any process of the machine can resume a pause another one saved. Bodies are core's
    own checkpoint encoding, decoded under core's allow-list plus ``allowed_checkpoint_types``; a
    checkpoint that would not decode is refused at :meth:`save`, and a stored one that does not decode
    makes :meth:`load` raise ``WorkflowCheckpointException`` and :meth:`list_checkpoints` skip it.

    Runs this package drives store each step result once (as on Redis and PostgreSQL): a checkpoint is
    one chunk (its head and the step results added since the run's previous save) appended to the run's
    segment; core used directly is stored whole. Tables are created when the storage opens the file
    (WAL mode). A save runs on the event loop's thread unless it must wait for a lock; reads and
    deletes run in a worker thread. Put the file on a local disk; for several machines use Redis or PostgreSQL.

    Security: core decodes with ``pickle`` under an allow-list, so without a ``sealer`` whoever can
    write the file can run code in your workers (the storage logs a warning once). With a
    :class:`CheckpointSealer` every stored piece is authenticated (and optionally encrypted) and
    refused before decoding when the check fails.

    Args:
        path: The database file; created (with its folders and tables) if missing.

    Keyword Args:
        allowed_checkpoint_types: Extra ``"module:QualName"`` types checkpoints may contain.
        ttl: How long a checkpoint is kept after its run's last save (seconds or ``timedelta``), default 7
            days; ``None`` keeps them until :meth:`delete`. Expired ones are never returned and are deleted
            by a later save (at most once per 10 minutes per object).
        busy_timeout: Seconds to wait for another process's write lock before failing.
        sealer: Seals every piece it saves and opens every piece it loads (README "Durable
            continuations"); None stores core's encoding as it is.

    Raises:
        ValueError: ``ttl`` or ``busy_timeout`` is not a positive duration of at most ten years.
        TypeError: A duration is neither a number nor a ``timedelta``, ``allowed_checkpoint_types`` is
            not a list of strings, or ``sealer`` is not a :class:`CheckpointSealer`.
        sqlite3.Error: The file cannot be opened or its tables created.

    Examples:
        .. code-block:: python

            async with (
                SQLiteCheckpointStorage("app.db", sealer=sealer) as storage,
                SQLiteContinuationStore("app.db") as store,
            ):
                wf = review.build(checkpoint_storage=storage, continuation_store=store)
    """

    logger = logger
    backend = "SQLite"
    unreadable = "Checkpoint {checkpoint_id} cannot be loaded: its stored parts do not decode ({error})."

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        allowed_checkpoint_types: list[str] | None = None,
        ttl: float | timedelta | None = DEFAULT_CHECKPOINT_TTL,
        busy_timeout: float = 30.0,
        sealer: CheckpointSealer | None = None,
    ) -> None:
        self.sealer = check_sealer("SQLiteCheckpointStorage", sealer)
        self._allowed_types = check_allowed_types(allowed_checkpoint_types)
        self._ttl = None if ttl is None else duration_seconds(ttl, "ttl")
        timeout = duration_seconds(busy_timeout, "busy_timeout")
        self._purges = PurgeSchedule(None if self._ttl is None else PURGE_INTERVAL_SECONDS)
        self._deduper = StepCacheDeduper(self._allowed_types, inline_heads=True)
        self.path = Path(path)
        self._lock = threading.Lock()
        conn = setup(self.path, timeout, SCHEMA)
        connections = [conn]
        try:
            now = connect_sqlite(self.path, timeout)  # the event loop's: never waits, never checkpoints the WAL
            connections.append(now)
            now.executescript("PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0; PRAGMA busy_timeout = 0;")
        except BaseException:
            close_all(*connections)
            raise
        self._conn, self._now = conn, now
        self._commits = 0
        self._finalizer = weakref.finalize(self, close_all, self._conn, self._now)

    async def save_with_offer(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """:meth:`save` (its errors), each new step result stored once when ``offer`` fits ``checkpoint``."""
        plan = self._deduper.prepare(checkpoint, offer)  # before any await: core's dicts may change later
        if plan is not None:
            await self._store_delta(checkpoint, plan)
            return checkpoint.checkpoint_id
        body = encode_body(checkpoint, self._allowed_types)
        if self.sealer is not None:
            body = self.sealer.seal(body, context=checkpoint.checkpoint_id.encode("utf-8"))
        row = (checkpoint.checkpoint_id, checkpoint.workflow_name, body)

        def write(conn: sqlite3.Connection, now: float) -> bool:
            drop(conn, checkpoint.checkpoint_id)
            conn.execute(INSERT_WHOLE, (*row[:2], now, self._expiry(now), row[2]))
            return True

        await self._write(write)
        return checkpoint.checkpoint_id

    async def _write_delta(
        self, checkpoint: WorkflowCheckpoint, plan: DeltaSave, head: bytes, chunk: bytes | None
    ) -> bool:
        """Append the checkpoint's chunk (its head inside) in one transaction; False: a segment lost chunks."""
        assert chunk is not None  # inline heads: every save appends one

        def write(conn: sqlite3.Connection, now: float) -> bool:
            drop(conn, checkpoint.checkpoint_id)  # what the id held (rolled back with a refusal)
            if not self._segments_hold(conn, plan, now):
                return False
            expires_at = self._expiry(now)
            conn.execute(
                INSERT_CHUNK, (segment_key(plan.segment), plan.chunk_index, id_key(checkpoint.checkpoint_id), chunk)
            )
            parents = json.dumps(plan.refs[:-1])
            segment = (segment_key(plan.segment), checkpoint.workflow_name, parents, plan.chunk_index + 1, now)
            conn.execute(UPSERT_SEGMENT, segment)
            conn.executemany(ADD_REFERENCE, [(expires_at, segment_key(name)) for name, _ in plan.refs])
            return True

        return await self._write(write)

    def _segments_hold(self, conn: sqlite3.Connection, plan: DeltaSave, now: float) -> bool:
        """Whether the run's segment holds exactly ``chunk_index`` chunks and every parent at least its count."""
        for segment, count in plan.refs:
            found = conn.execute(
                f"SELECT chunks FROM checkpoint_segments WHERE segment = ? AND {LIVE}", (segment_key(segment), now)
            ).fetchone()
            count_now = 0 if found is None else int(found[0])
            if (count_now != plan.chunk_index) if segment == plan.segment else (count_now < count):
                return False
        return True

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """Load a checkpoint by id.

        Args:
            checkpoint_id: The id :meth:`save` returned.

        Returns:
            A new ``WorkflowCheckpoint``.

        Raises:
            WorkflowCheckpointException: No live checkpoint has this id, or its stored parts cannot be
                read: refused by the sealer (or sealed while this storage has none), not UTF-8 JSON,
                nested too deeply, a type outside the allow-list, or a checkpoint of another id.
        """

        def read(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            now = time.time()
            sql = f"SELECT body FROM workflow_checkpoints WHERE checkpoint_id = ? AND {LIVE}"
            whole = conn.execute(sql, (checkpoint_id, now)).fetchone()
            if whole is not None:
                return (blob(whole[0]),)
            sql = (
                "SELECT c.segment, c.idx, s.parents FROM checkpoint_chunks c JOIN checkpoint_segments s "
                f"ON s.segment = c.segment WHERE c.checkpoint_id = ? AND {LIVE.replace('expires_at', 's.expires_at')}"
            )
            found = conn.execute(sql, (id_key(checkpoint_id), now)).fetchone()
            return None if found is None else gathered(conn, segment_text(found[0]), found[1], found[2])

        found = await self._run(read)
        if found is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        return self._whole(checkpoint_id, found[0]) if len(found) == 1 else self._inline(checkpoint_id, *found)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Return the workflow's live checkpoints that decode, oldest save first (others skipped with a warning).

        Checkpoints stored whole come first (by save time), then those of each run's segment, in save
        order, the segments by their last save.

        Keyword Args:
            workflow_name: The workflow's name.

        Returns:
            The decoded checkpoints.
        """

        def read(conn: sqlite3.Connection) -> list[tuple[str, Callable[[], Any]]]:
            now = time.time()
            sql = f"SELECT checkpoint_id, body FROM workflow_checkpoints WHERE workflow_name = ? AND {LIVE}"
            rows = conn.execute(sql + " ORDER BY saved_at", (workflow_name, now)).fetchall()
            loads = [(str(cid), functools.partial(self._whole, str(cid), blob(body))) for cid, body in rows]
            sql = f"SELECT segment, parents FROM checkpoint_segments WHERE workflow_name = ? AND {LIVE}"
            for segment, parents in conn.execute(sql + " ORDER BY saved_at", (workflow_name, now)).fetchall():
                ids = conn.execute(
                    "SELECT checkpoint_id, idx FROM checkpoint_chunks WHERE segment = ? AND checkpoint_id IS NOT NULL "
                    "AND typeof(idx) = 'integer' AND idx >= 0 ORDER BY idx",
                    (segment,),
                ).fetchall()
                if ids:
                    refs, chunks = gathered(conn, segment_text(segment), ids[-1][1], parents)
                    for key, idx in ids:
                        cid = id_text(key)
                        own = (*refs[-1][:1], idx + 1)
                        loads.append((str(cid), functools.partial(self._inline, str(cid), [*refs[:-1], own], chunks)))
            return loads

        loads = await self._run(read)
        return await self._listed(workflow_name, ((cid, functools.partial(_decoded, load)) for cid, load in loads))

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete a checkpoint by id (and the step results nothing references any more).

        Args:
            checkpoint_id: The checkpoint's id.

        Returns:
            True if this call deleted it; False if no checkpoint had this id.
        """
        return await self.delete_many([checkpoint_id]) == 1

    async def delete_many(self, checkpoint_ids: list[str]) -> int:
        """Delete several checkpoints in one transaction (a run chain's spent checkpoints).

        Args:
            checkpoint_ids: The checkpoints' ids.

        Returns:
            How many of them this call deleted.
        """
        ids = list(dict.fromkeys(checkpoint_ids))

        def delete(conn: sqlite3.Connection, _now: float) -> int:
            return sum(drop(conn, checkpoint_id) for checkpoint_id in ids)

        return await self._write(delete, at_once=False) if ids else 0

    def close(self) -> None:
        """Close the database connection (idempotent); the storage cannot be used afterwards."""
        forget_retained(self)
        with self._lock:
            if self._finalizer.detach() is not None:
                close_all(self._conn, self._now)

    async def aclose(self) -> None:
        """Close the database connection (idempotent) without blocking the event loop; see :meth:`close`."""
        await asyncio.to_thread(self.close)

    def _expiry(self, now: float) -> float | None:
        return None if self._ttl is None else now + self._ttl

    def _inline(
        self, checkpoint_id: str, refs: list[tuple[str, int]], chunks: list[list[bytes]] | None
    ) -> WorkflowCheckpoint:
        """The checkpoint whose head is the last of its own segment's chunks (each opened first); failures: core's."""
        if chunks is None or any(len(found) < count for found, (_, count) in zip(chunks, refs, strict=True)):
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id} lost part of its step cache in SQLite (expired or deleted)."
            )
        texts = [
            [self._chunk(checkpoint_id, segment, index, raw) for index, raw in enumerate(found[:count])]
            for found, (segment, count) in zip(chunks, refs, strict=True)
        ]
        return self._assembled_inline(checkpoint_id, refs, texts)

    def _chunk(self, checkpoint_id: str, segment: str, index: int, raw: bytes) -> str:
        """One chunk opened (bound to its segment and index; a sealed one refused without a sealer) as text."""
        return open_chunk(segment, index, self._unseal(checkpoint_id, raw, chunk_context(segment, index)), None)

    async def _write(self, operation: Callable[[sqlite3.Connection, float], _T], *, at_once: bool = True) -> _T:
        """Run ``operation`` in one immediate transaction; rolled back on an error or a False result.

        A save runs at once on the event loop's thread when nothing holds the storage or the file's write lock
        (a WAL commit with ``synchronous = NORMAL`` waits for no disk; every ``WAL_CHECKPOINT_EVERY`` such saves
        the WAL is checkpointed in the worker thread); else, for a due purge and for deletes, in that thread.
        """
        due = self._purges.interval is not None and self._purges.due(time.time())
        if at_once and not due and self._lock.acquire(blocking=False):
            try:
                began = began_at_once(self._now)
                result = finish(self._now, operation) if began else None
            finally:
                self._lock.release()
            if began:
                self._commits += 1
                if self._commits % WAL_CHECKPOINT_EVERY == 0:
                    await self._run(lambda conn: conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall())
                return cast("_T", result)

        def waiting(conn: sqlite3.Connection) -> _T:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            if at_once and self._purges.interval is not None and self._purges.due(now):
                self._purges.ran(now)
                purge_expired(conn, now)
            return finish(conn, operation)

        return await self._run(waiting)

    async def _run(self, operation: Callable[[sqlite3.Connection], _T]) -> _T:
        def locked() -> _T:
            with self._lock:
                return operation(self._conn)

        return await asyncio.to_thread(locked)


async def _decoded(load: Callable[[], WorkflowCheckpoint]) -> WorkflowCheckpoint:
    return load()
