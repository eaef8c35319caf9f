"""SQLiteCheckpointStorage: core's ``CheckpointStorage`` in one SQLite file, each step result stored once.

A checkpoint is one ``checkpoint_chunks`` row (a run's new step results and its head, ``checkpoint_delta.py``,
or a checkpoint saved without a run's offer whole, alone in its segment); ``checkpoint_segments`` counts each
segment's referencing checkpoints, so a delete frees it once nothing needs it. Uuids are stored as 16 bytes,
segment ids as int64.
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
import uuid
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._expiry import forget_retained
from .._store import PurgeSchedule, duration_seconds
from .checkpoint_delta import DeltaSave
from .checkpoint_seal import CheckpointSealer, chunk_context, open_chunk
from .checkpoint_storage import DurableCheckpointStorage
from .sqlite_store import connect_sqlite, finish, setup

_T = TypeVar("_T")
logger = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_TTL = timedelta(days=7)
PURGE_INTERVAL_SECONDS = 600.0  # how often (at most) a storage object deletes expired checkpoints, on a save
WAL_CHECKPOINT_EVERY = 256  # saves committed on the event loop's thread between two WAL checkpoints

# The tables (version 1), created if missing on open. No index by workflow name: a listing reads every
# segment (one per run, or per checkpoint saved without a run's offer), never the chunks.
SCHEMA = (
    # refs: the checkpoints that reference the segment (its own and its children's)
    "CREATE TABLE IF NOT EXISTS checkpoint_segments (segment PRIMARY KEY, workflow_name TEXT NOT NULL, "
    "parents TEXT NOT NULL, chunks INTEGER NOT NULL, refs INTEGER NOT NULL, saved_at REAL NOT NULL, "
    "expires_at REAL) WITHOUT ROWID",
    # one chunk per checkpoint; a NULL checkpoint_id: deleted, kept for the later ones
    "CREATE TABLE IF NOT EXISTS checkpoint_chunks (segment NOT NULL, idx INTEGER NOT NULL, "
    "checkpoint_id, body BLOB NOT NULL, PRIMARY KEY (segment, idx)) WITHOUT ROWID",
    "CREATE UNIQUE INDEX IF NOT EXISTS checkpoint_chunks_id ON checkpoint_chunks (checkpoint_id) "
    "WHERE checkpoint_id IS NOT NULL",
)
LIVE = "(expires_at IS NULL OR expires_at > ?)"
_UPSERT_SEGMENT = (
    "INSERT INTO checkpoint_segments VALUES (?, ?, ?, ?, 0, ?, NULL) "
    "ON CONFLICT (segment) DO UPDATE SET chunks = excluded.chunks, saved_at = excluded.saved_at"
)


class SQLiteCheckpointStorage(DurableCheckpointStorage):
    """Core's ``CheckpointStorage`` protocol in one SQLite file, for the workers of one machine.

    Pair it with a :class:`SQLiteContinuationStore` (the same file may hold both). Bodies are core's
    checkpoint encoding under core's allow-list plus ``allowed_checkpoint_types``: one that would not
    decode is refused at :meth:`save`; a stored one that does not fails :meth:`load` and is skipped by
    :meth:`list_checkpoints`. Core decodes with ``pickle``: without a ``sealer`` whoever can write the
    file can run code in your workers (logged once). See "SQLite" in the docs.

    Args:
        path: The database file; created (with its folders and tables) if missing.

    Keyword Args:
        allowed_checkpoint_types: Extra ``"module:QualName"`` types checkpoints may contain.
        ttl: How long a checkpoint is kept after its run's last save, default 7 days; ``None``: until
            :meth:`delete`. Expired ones are never returned.
        busy_timeout: Seconds to wait for another process's write lock before failing.
        sealer: Seals every piece it saves and opens every piece it loads; None stores core's encoding as it is.

    Raises:
        ValueError: ``ttl`` or ``busy_timeout`` is not a positive duration of at most ten years.
        TypeError: A duration is neither a number nor a ``timedelta``, ``allowed_checkpoint_types`` is
            not a list of strings, or ``sealer`` is not a :class:`CheckpointSealer`.
        sqlite3.Error: The file cannot be opened or its tables created.
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
        self._configure("SQLiteCheckpointStorage", sealer, allowed_checkpoint_types)
        self._ttl = None if ttl is None else duration_seconds(ttl, "ttl")
        timeout = duration_seconds(busy_timeout, "busy_timeout")
        self._purges = PurgeSchedule(None if self._ttl is None else PURGE_INTERVAL_SECONDS)
        self.path = Path(path)
        self._lock = threading.Lock()
        conn = setup(self.path, timeout, SCHEMA)
        connections = [conn]
        try:
            now = connect_sqlite(self.path, timeout)  # the event loop's: never waits, never checkpoints the WAL
            connections.append(now)
            now.executescript("PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0; PRAGMA busy_timeout = 0;")
        except BaseException:
            _close_all(*connections)
            raise
        self._conn, self._now = conn, now
        self._commits = 0
        self._finalizer = weakref.finalize(self, _close_all, self._conn, self._now)

    async def _write_delta(self, checkpoint: WorkflowCheckpoint, plan: DeltaSave) -> bool:
        """Append the checkpoint's chunk (its head inside) in one transaction; False: a segment lost chunks."""
        chunk = self._sealed_chunk(plan)
        own = _segment_key(plan.segment)

        def write(conn: sqlite3.Connection, now: float) -> bool:
            _drop(conn, checkpoint.checkpoint_id)  # what the id stored before (rolled back with a refusal)
            for segment, count in plan.refs:  # the run's segment holds exactly chunk_index, each parent its count
                sql = f"SELECT chunks FROM checkpoint_segments WHERE segment = ? AND {LIVE}"
                found = conn.execute(sql, (_segment_key(segment), now)).fetchone()
                count_now = 0 if found is None else int(found[0])
                if (count_now != plan.chunk_index) if segment == plan.segment else (count_now < count):
                    return False
            conn.execute(
                "INSERT INTO checkpoint_chunks VALUES (?, ?, ?, ?)",
                (own, plan.chunk_index, _id_key(checkpoint.checkpoint_id), chunk),
            )
            parents = json.dumps(plan.refs[:-1])
            conn.execute(_UPSERT_SEGMENT, (own, checkpoint.workflow_name, parents, plan.chunk_index + 1, now))
            conn.executemany(
                "UPDATE checkpoint_segments SET refs = refs + 1, expires_at = ? WHERE segment = ?",
                [(self._expiry(now), _segment_key(name)) for name, _ in plan.refs],
            )
            return True

        return await self._write(write)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """Load a checkpoint by id.

        Raises:
            WorkflowCheckpointException: No live checkpoint has this id, or it cannot be read (refused
                by the sealer, not a checkpoint, a type outside the allow-list, or another id's).
        """

        def read(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            sql = (
                "SELECT c.segment, c.idx, s.parents FROM checkpoint_chunks c JOIN checkpoint_segments s "
                f"ON s.segment = c.segment WHERE c.checkpoint_id = ? AND {LIVE.replace('expires_at', 's.expires_at')}"
            )
            found = conn.execute(sql, (_id_key(checkpoint_id), time.time())).fetchone()
            return None if found is None else _gathered(conn, _segment_text(found[0]), found[1], found[2])

        found = await self._run(read)
        if found is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        return self._inline(checkpoint_id, *found)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Return the workflow's live checkpoints that decode (others skipped with a warning).

        Each segment's in save order, the segments by their last save.
        """

        def read(conn: sqlite3.Connection) -> list[tuple[str, Callable[[], Any]]]:
            loads: list[tuple[str, Callable[[], Any]]] = []
            sql = (
                f"SELECT segment, parents FROM checkpoint_segments WHERE workflow_name = ? AND {LIVE} ORDER BY saved_at"
            )
            for segment, parents in conn.execute(sql, (workflow_name, time.time())).fetchall():
                ids = conn.execute(
                    "SELECT checkpoint_id, idx FROM checkpoint_chunks WHERE segment = ? AND checkpoint_id IS NOT NULL "
                    "AND typeof(idx) = 'integer' AND idx >= 0 ORDER BY idx",
                    (segment,),
                ).fetchall()
                if ids:
                    refs, chunks = _gathered(conn, _segment_text(segment), ids[-1][1], parents)
                    for key, idx in ids:
                        if isinstance(key, bytes):  # a uuid as its 16 bytes (another length: no id of ours)
                            key = str(uuid.UUID(bytes=key)) if len(key) == 16 else key.hex()
                        own = (*refs[-1][:1], idx + 1)
                        loads.append((str(key), functools.partial(self._inline, str(key), [*refs[:-1], own], chunks)))
            return loads

        return self._listed(workflow_name, await self._run(read))

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete a checkpoint by id (and step results nothing references any more); True if this call did."""
        return await self.delete_many([checkpoint_id]) == 1

    async def delete_many(self, checkpoint_ids: list[str]) -> int:
        """Delete several checkpoints in one transaction; return how many this call deleted."""
        ids = list(dict.fromkeys(checkpoint_ids))

        def delete(conn: sqlite3.Connection, _now: float) -> int:
            return sum(_drop(conn, checkpoint_id) for checkpoint_id in ids)

        return await self._write(delete, at_once=False) if ids else 0

    def close(self) -> None:
        """Close the database connection (idempotent); the storage cannot be used afterwards."""
        forget_retained(self)
        with self._lock:
            if self._finalizer.detach() is not None:
                _close_all(self._conn, self._now)

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
            [
                open_chunk(segment, index, self._unseal(checkpoint_id, raw, chunk_context(segment, index)), None)
                for index, raw in enumerate(found[:count])
            ]
            for found, (segment, count) in zip(chunks, refs, strict=True)
        ]
        return self._decoded(checkpoint_id, lambda: self._deduper.assemble_inline(checkpoint_id, refs, texts))

    async def _write(self, operation: Callable[[sqlite3.Connection, float], _T], *, at_once: bool = True) -> _T:
        """Run ``operation`` in one immediate transaction; rolled back on an error or a False result.

        A save runs on the event loop's thread when neither the storage nor the file's write lock is held
        (a ``synchronous = NORMAL`` WAL commit waits for no disk; the WAL is checkpointed in the worker
        thread every ``WAL_CHECKPOINT_EVERY``); a due purge and deletes run in that thread.
        """
        due = self._purges.interval is not None and self._purges.due(time.time())
        if at_once and not due and self._lock.acquire(blocking=False):
            try:
                try:
                    self._now.execute("BEGIN IMMEDIATE")
                    began = True
                except sqlite3.OperationalError:  # busy (or failing): the worker thread's connection waits, or raises
                    began = False
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
                expired = conn.execute("SELECT segment FROM checkpoint_segments WHERE expires_at <= ?", (now,))
                _free_segments(conn, [segment for (segment,) in expired.fetchall()])
            return finish(conn, operation)

        return await self._run(waiting)

    async def _run(self, operation: Callable[[sqlite3.Connection], _T]) -> _T:
        def locked() -> _T:
            with self._lock:
                return operation(self._conn)

        return await asyncio.to_thread(locked)


def _drop(conn: sqlite3.Connection, checkpoint_id: str) -> bool:
    """Delete one checkpoint; a chunk stays for the checkpoints after it, a segment nothing references goes."""
    found = conn.execute(
        "SELECT c.segment, s.parents FROM checkpoint_chunks c LEFT JOIN checkpoint_segments s "
        "ON s.segment = c.segment WHERE c.checkpoint_id = ?",
        (_id_key(checkpoint_id),),
    ).fetchone()
    if found is None:
        return False
    conn.execute("UPDATE checkpoint_chunks SET checkpoint_id = NULL WHERE checkpoint_id = ?", (_id_key(checkpoint_id),))
    segments = [found[0], *(_segment_key(segment) for segment, _ in _references(found[1] or "[]"))]
    conn.executemany("UPDATE checkpoint_segments SET refs = refs - 1 WHERE segment = ?", [(s,) for s in segments])
    for segment in segments:
        left = conn.execute("SELECT refs FROM checkpoint_segments WHERE segment = ?", (segment,)).fetchone()
        if left is None or int(left[0]) <= 0:
            _free_segments(conn, [segment])
    return True


def _references(refs: str) -> list[tuple[str, int]]:
    """Stored parents as ``(segment, count)`` pairs; malformed ones read as none (the load's check refuses them)."""
    try:
        return [(str(segment), int(count)) for segment, count in cast("Sequence[Any]", json.loads(refs))]
    except (ValueError, TypeError, RecursionError):
        return []


def _gathered(
    conn: sqlite3.Connection, segment: str, index: int, parents: str
) -> tuple[list[tuple[str, int]], list[list[bytes]]]:
    """A checkpoint's references (its parents, then its own segment up to chunk ``index``) and their chunks."""
    refs = [*_references(parents), (segment, index + 1 if isinstance(index, int) and index >= 0 else 0)]
    sql = "SELECT body FROM checkpoint_chunks WHERE segment = ? AND idx < ? ORDER BY idx"
    chunks = [[_blob(body) for (body,) in conn.execute(sql, (_segment_key(name), count))] for name, count in refs]
    return refs, chunks


def _free_segments(conn: sqlite3.Connection, segments: list[Any]) -> None:
    """Delete segments (by their stored keys) and their chunks."""
    conn.executemany("DELETE FROM checkpoint_chunks WHERE segment = ?", [(segment,) for segment in segments])
    conn.executemany("DELETE FROM checkpoint_segments WHERE segment = ?", [(segment,) for segment in segments])


def _id_key(checkpoint_id: str) -> bytes | str:
    """A chunk's checkpoint id as stored: a canonical uuid (core's ids) as its 16 bytes, any other id as text."""
    try:
        parsed = uuid.UUID(checkpoint_id)
    except ValueError:
        return checkpoint_id
    return parsed.bytes if str(parsed) == checkpoint_id else checkpoint_id


def _blob(value: Any) -> bytes:
    """A stored body as bytes (one written as text or a number, which this storage never writes, as its text)."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")


def _segment_key(segment: str) -> int | str:
    """A segment id as stored: 16 hex digits (the deduper's ids) as a signed 64-bit integer, any other as text."""
    if len(segment) == 16 and all(c in "0123456789abcdef" for c in segment):
        return int(segment, 16) - (1 << 63)
    return segment


def _segment_text(key: Any) -> str:
    """A stored segment id as the deduper's text (:func:`_segment_key` undone)."""
    return f"{key + (1 << 63):016x}" if isinstance(key, int) else str(key)


def _close_all(*connections: sqlite3.Connection) -> None:
    for conn in connections:
        conn.close()
