"""The SQLite layout of ``SQLiteCheckpointStorage``: its tables, stored keys, transactions, reads and deletes.

A checkpoint of a run we drive is one row of ``checkpoint_chunks`` (its new step results and its head,
``_durable/checkpoint_delta.py`` with ``inline_heads``) in its run's segment; ``checkpoint_segments`` counts
the checkpoints that reference each segment (its own and its children's), so a delete frees a segment once
nothing needs it. Core's ids (uuids) are stored as their 16 bytes and segment ids as 64-bit integers, which
keeps a long run's file at about LangGraph's size (``benchmarks/README.md``).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

_T = TypeVar("_T")

SCHEMA = (
    # Checkpoints stored whole (core used directly): one row each.
    "CREATE TABLE IF NOT EXISTS workflow_checkpoints (checkpoint_id TEXT PRIMARY KEY, workflow_name TEXT NOT NULL, "
    "saved_at REAL NOT NULL, expires_at REAL, body BLOB NOT NULL) WITHOUT ROWID",
    # A run's segment: its parents (the segments of the pause or checkpoint it continues), chunk count,
    # the checkpoints that reference it (its own and its children's), last save and expiry.
    "CREATE TABLE IF NOT EXISTS checkpoint_segments (segment PRIMARY KEY, workflow_name TEXT NOT NULL, "
    "parents TEXT NOT NULL, chunks INTEGER NOT NULL, refs INTEGER NOT NULL, saved_at REAL NOT NULL, "
    "expires_at REAL) WITHOUT ROWID",
    # One chunk per checkpoint of a run we drive (its new step results and its head); NULL id: deleted.
    "CREATE TABLE IF NOT EXISTS checkpoint_chunks (segment NOT NULL, idx INTEGER NOT NULL, "
    "checkpoint_id, body BLOB NOT NULL, PRIMARY KEY (segment, idx)) WITHOUT ROWID",
    "CREATE UNIQUE INDEX IF NOT EXISTS checkpoint_chunks_id ON checkpoint_chunks (checkpoint_id) "
    "WHERE checkpoint_id IS NOT NULL",
)
"""The tables (version 1), created if missing by ``sqlite_store.setup`` when a storage object opens the file.

A listing reads the whole-body rows and the segments (one per run) of every workflow, not the chunks, so
neither has an index by workflow name: each would cost a page in every file.
"""

LIVE = "(expires_at IS NULL OR expires_at > ?)"
INSERT_WHOLE = "INSERT INTO workflow_checkpoints VALUES (?, ?, ?, ?, ?)"
INSERT_CHUNK = "INSERT INTO checkpoint_chunks VALUES (?, ?, ?, ?)"
UPSERT_SEGMENT = (
    "INSERT INTO checkpoint_segments VALUES (?, ?, ?, ?, 0, ?, NULL) "
    "ON CONFLICT (segment) DO UPDATE SET chunks = excluded.chunks, saved_at = excluded.saved_at"
)
ADD_REFERENCE = "UPDATE checkpoint_segments SET refs = refs + 1, expires_at = ? WHERE segment = ?"


def drop(conn: sqlite3.Connection, checkpoint_id: str) -> bool:
    """Delete one checkpoint; a chunk stays for the checkpoints after it, a segment nothing references goes."""
    if conn.execute("DELETE FROM workflow_checkpoints WHERE checkpoint_id = ?", (checkpoint_id,)).rowcount:
        return True
    found = conn.execute(
        "SELECT c.segment, s.parents FROM checkpoint_chunks c LEFT JOIN checkpoint_segments s "
        "ON s.segment = c.segment WHERE c.checkpoint_id = ?",
        (id_key(checkpoint_id),),
    ).fetchone()
    if found is None:
        return False
    conn.execute("UPDATE checkpoint_chunks SET checkpoint_id = NULL WHERE checkpoint_id = ?", (id_key(checkpoint_id),))
    segments = [found[0], *(segment_key(segment) for segment, _ in references(found[1] or "[]"))]
    conn.executemany("UPDATE checkpoint_segments SET refs = refs - 1 WHERE segment = ?", [(s,) for s in segments])
    for segment in segments:
        left = conn.execute("SELECT refs FROM checkpoint_segments WHERE segment = ?", (segment,)).fetchone()
        if left is None or int(left[0]) <= 0:
            free_segments(conn, [segment])
    return True


def purge_expired(conn: sqlite3.Connection, now: float) -> None:
    """Delete expired whole checkpoints and expired segments (a segment's checkpoints expire with it)."""
    conn.execute("DELETE FROM workflow_checkpoints WHERE expires_at <= ?", (now,))
    segments = conn.execute("SELECT segment FROM checkpoint_segments WHERE expires_at <= ?", (now,)).fetchall()
    free_segments(conn, [segment for (segment,) in segments])


def references(refs: str) -> list[tuple[str, int]]:
    """Stored parents as ``(segment, count)`` pairs; malformed ones read as none (the load's check refuses them)."""
    try:
        return [(str(segment), int(count)) for segment, count in cast("Sequence[Any]", json.loads(refs))]
    except (ValueError, TypeError, RecursionError):
        return []


def gathered(
    conn: sqlite3.Connection, segment: str, index: int, parents: str
) -> tuple[list[tuple[str, int]], list[list[bytes]]]:
    """A checkpoint's references (its parents, then its own segment up to chunk ``index``) and their chunks."""
    refs = [*references(parents), (segment, index + 1 if isinstance(index, int) and index >= 0 else 0)]
    chunks = [
        [
            blob(body)
            for (body,) in conn.execute(
                "SELECT body FROM checkpoint_chunks WHERE segment = ? AND idx < ? ORDER BY idx",
                (segment_key(name), count),
            ).fetchall()
        ]
        for name, count in refs
    ]
    return refs, chunks


def free_segments(conn: sqlite3.Connection, segments: list[Any]) -> None:
    """Delete segments (by their keys, :func:`segment_key`) and their chunks."""
    conn.executemany("DELETE FROM checkpoint_chunks WHERE segment = ?", [(segment,) for segment in segments])
    conn.executemany("DELETE FROM checkpoint_segments WHERE segment = ?", [(segment,) for segment in segments])


def id_key(checkpoint_id: str) -> bytes | str:
    """A chunk's checkpoint id as stored: a canonical uuid (core's ids) as its 16 bytes, any other id as text."""
    try:
        parsed = uuid.UUID(checkpoint_id)
    except ValueError:
        return checkpoint_id
    return parsed.bytes if str(parsed) == checkpoint_id else checkpoint_id


def id_text(key: Any) -> str:
    """A stored checkpoint id as core's text (:func:`id_key` undone)."""
    if isinstance(key, bytes):
        return str(uuid.UUID(bytes=key)) if len(key) == 16 else key.hex()  # another length: no id of ours
    return str(key)


def blob(value: Any) -> bytes:
    """A stored body as bytes (one written as text or a number, which this storage never writes, as its text)."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")


def segment_key(segment: str) -> int | str:
    """A segment id as stored: 16 hex digits (the deduper's ids) as a signed 64-bit integer, any other as text."""
    if len(segment) == 16 and all(c in "0123456789abcdef" for c in segment):
        return int(segment, 16) - (1 << 63)
    return segment


def segment_text(key: Any) -> str:
    """A stored segment id as the deduper's text (:func:`segment_key` undone)."""
    return f"{key + (1 << 63):016x}" if isinstance(key, int) else str(key)


def began_at_once(conn: sqlite3.Connection) -> bool:
    """``BEGIN IMMEDIATE`` on a connection that never waits; False when another process holds the write lock."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:  # busy (or failing): the worker thread's connection waits, or raises
        return False
    return True


def finish(conn: sqlite3.Connection, operation: Callable[[sqlite3.Connection, float], _T]) -> _T:
    """Finish the transaction ``conn`` began: ``operation``, then commit (rolled back on an error or False)."""
    try:
        result = operation(conn, time.time())
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT" if result is not False else "ROLLBACK")
    return result


def close_all(*connections: sqlite3.Connection) -> None:
    """Close the storage's connections (also its weak finalizer's job when it is dropped open)."""
    for conn in connections:
        conn.close()
