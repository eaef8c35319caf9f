"""Schema version 2 of the Postgres checkpoints (released; its rows stay readable): heads over segment chunks.

Since version 3 (``_durable/postgres_rows_sql.py``) new saves write one row per checkpoint instead;
this module keeps migrations 1 and 2 (final once released), the queries of whole and version-2 rows
(:data:`WHOLE_STATEMENTS`) and :func:`gather_chunks` that reads the rows a version-2 worker wrote.
What follows describes version 2.

Schema version 2 of the ``checkpoints`` component (:data:`MIGRATION`): a checkpoint row gains
``segments`` (its references, JSON ``[[segment id, chunk count], ...]``, exactly the text its sealed
head is bound to) and ``segment_ids`` (the same ids as an array, for the functions); its ``body``
holds the head. ``checkpoint_segments`` has one row per segment (how many checkpoints reference it,
how many chunks it holds, when it expires) and ``checkpoint_chunks`` one row per chunk. Two PL/pgSQL
functions keep them consistent, each one statement and one round trip, as ``_durable/redis_segments.py``'s Lua
scripts do for Redis:

* ``save_checkpoint_delta``: locks the referenced segment rows (creating the run's own one), checks
  that the own segment holds exactly ``chunk_index`` chunks and every other at least its count
  (else it writes nothing and returns false, and the storage saves again with one segment holding
  everything), appends the chunk, counts one reference per segment, extends their expiry, and
  upserts the checkpoint row (dropping the references of an earlier save under the same id).
* ``delete_checkpoints``: deletes checkpoint rows, drops their references, and deletes a segment
  (and its chunks) once nothing references it; it commits without waiting for the disk, like every
  checkpoint delete (a delete a crash undoes leaves rows that expire).

Expired segments are deleted by the storage's purge, with its expired checkpoints. See
``_durable/checkpoint_delta.py`` for the layout of heads and chunks, and ``_durable/checkpoint_seal.py`` for the
sealing contexts (:func:`head_context`, :func:`chunk_context`), shared by both backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .checkpoint_seal import CheckpointSealer, open_chunk

if TYPE_CHECKING:
    from psycopg import AsyncConnection

MIGRATION_1 = """
    CREATE TABLE IF NOT EXISTS {schema}.checkpoints (
        checkpoint_id TEXT PRIMARY KEY,
        workflow_name TEXT NOT NULL,
        saved_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION,
        body BYTEA NOT NULL
    );
    CREATE INDEX IF NOT EXISTS checkpoints_workflow ON {schema}.checkpoints (workflow_name, saved_at);
    CREATE INDEX IF NOT EXISTS checkpoints_expires_at ON {schema}.checkpoints (expires_at);
    """
"""Migration 1 of the ``checkpoints`` component: whole checkpoints, one row each (where core's plain saves go)."""

MIGRATION = """
ALTER TABLE {schema}.checkpoints ADD COLUMN IF NOT EXISTS segments TEXT;
ALTER TABLE {schema}.checkpoints ADD COLUMN IF NOT EXISTS segment_ids TEXT[];
CREATE TABLE IF NOT EXISTS {schema}.checkpoint_segments (
    segment_id TEXT PRIMARY KEY,
    refs INTEGER NOT NULL,
    chunks INTEGER NOT NULL,
    expires_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS checkpoint_segments_expires_at ON {schema}.checkpoint_segments (expires_at);
CREATE TABLE IF NOT EXISTS {schema}.checkpoint_chunks (
    segment_id TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    body BYTEA NOT NULL,
    PRIMARY KEY (segment_id, chunk_index)
);
CREATE OR REPLACE FUNCTION {schema}.release_checkpoint_segments(p_ids TEXT[]) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM {schema}.checkpoint_segments WHERE segment_id = ANY(p_ids) ORDER BY segment_id FOR UPDATE;
    UPDATE {schema}.checkpoint_segments AS s SET refs = s.refs - d.n
        FROM (SELECT id, count(*) AS n FROM unnest(p_ids) AS id GROUP BY id) AS d WHERE s.segment_id = d.id;
    WITH dead AS (
        DELETE FROM {schema}.checkpoint_segments WHERE segment_id = ANY(p_ids) AND refs <= 0 RETURNING segment_id
    )
    DELETE FROM {schema}.checkpoint_chunks WHERE segment_id IN (SELECT segment_id FROM dead);
END $$;
CREATE OR REPLACE FUNCTION {schema}.save_checkpoint_delta(
    p_id TEXT, p_name TEXT, p_saved_at DOUBLE PRECISION, p_expires_at DOUBLE PRECISION, p_head BYTEA,
    p_references TEXT, p_ref_ids TEXT[], p_ref_counts INTEGER[], p_segment TEXT, p_chunk BYTEA,
    p_chunk_index INTEGER
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    held INTEGER;
    old_ids TEXT[];
BEGIN
    INSERT INTO {schema}.checkpoint_segments (segment_id, refs, chunks, expires_at)
        VALUES (p_segment, 0, 0, p_expires_at) ON CONFLICT (segment_id) DO NOTHING;
    PERFORM 1 FROM {schema}.checkpoint_segments WHERE segment_id = ANY(p_ref_ids) ORDER BY segment_id FOR UPDATE;
    FOR i IN 1 .. coalesce(array_length(p_ref_ids, 1), 0) LOOP
        SELECT chunks INTO held FROM {schema}.checkpoint_segments WHERE segment_id = p_ref_ids[i];
        IF held IS NULL OR (p_ref_ids[i] = p_segment AND held <> p_chunk_index)
                OR (p_ref_ids[i] <> p_segment AND held < p_ref_counts[i]) THEN
            DELETE FROM {schema}.checkpoint_segments WHERE segment_id = p_segment AND refs = 0 AND chunks = 0;
            RETURN FALSE;
        END IF;
    END LOOP;
    IF p_chunk IS NOT NULL THEN
        INSERT INTO {schema}.checkpoint_chunks (segment_id, chunk_index, body)
            VALUES (p_segment, p_chunk_index, p_chunk);
    END IF;
    UPDATE {schema}.checkpoint_segments SET
        refs = refs + 1,
        chunks = chunks + CASE WHEN segment_id = p_segment AND p_chunk IS NOT NULL THEN 1 ELSE 0 END,
        expires_at = CASE WHEN p_expires_at IS NULL OR expires_at IS NULL THEN NULL
                          ELSE greatest(expires_at, p_expires_at) END
        WHERE segment_id = ANY(p_ref_ids);
    SELECT segment_ids INTO old_ids FROM {schema}.checkpoints WHERE checkpoint_id = p_id FOR UPDATE;
    IF old_ids IS NOT NULL THEN
        PERFORM {schema}.release_checkpoint_segments(old_ids);
    END IF;
    INSERT INTO {schema}.checkpoints (checkpoint_id, workflow_name, saved_at, expires_at, body, segments, segment_ids)
        VALUES (p_id, p_name, p_saved_at, p_expires_at, p_head, p_references, p_ref_ids)
        ON CONFLICT (checkpoint_id) DO UPDATE SET workflow_name = EXCLUDED.workflow_name,
            saved_at = EXCLUDED.saved_at, expires_at = EXCLUDED.expires_at, body = EXCLUDED.body,
            segments = EXCLUDED.segments, segment_ids = EXCLUDED.segment_ids;
    RETURN TRUE;
END $$;
CREATE OR REPLACE FUNCTION {schema}.delete_checkpoints(p_ids TEXT[]) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    deleted INTEGER;
    freed TEXT[];
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    WITH gone AS (
        DELETE FROM {schema}.checkpoints WHERE checkpoint_id = ANY(p_ids) RETURNING checkpoint_id, segment_ids
    )
    SELECT count(DISTINCT gone.checkpoint_id), array_agg(ids.id) FILTER (WHERE ids.id IS NOT NULL)
        INTO deleted, freed
        FROM gone LEFT JOIN LATERAL unnest(gone.segment_ids) AS ids(id) ON TRUE;
    IF freed IS NOT NULL THEN
        PERFORM {schema}.release_checkpoint_segments(freed);
    END IF;
    RETURN deleted;
END $$;
"""
"""Migration 2 of the ``checkpoints`` component: segments, chunks and the functions that keep them."""

CHUNKS = (
    "SELECT segment_id, chunk_index, body FROM {schema}.checkpoint_chunks WHERE segment_id = ANY(%s) "
    "ORDER BY segment_id, chunk_index"
)


_LIVE = "(expires_at IS NULL OR expires_at > %(now)s)"
_LOAD = f"SELECT body, segments, segment_ids FROM {{schema}}.checkpoints WHERE checkpoint_id = %(id)s AND {_LIVE}"
_LIST = (
    f"SELECT checkpoint_id, body, segments, segment_ids, saved_at FROM {{schema}}.checkpoints "
    f"WHERE workflow_name = %(name)s AND {_LIVE}"
)
WHOLE_STATEMENTS = {"load": _LOAD, "list": _LIST, "chunks": CHUNKS}
"""The statements ``PostgresCheckpointStorage`` runs on whole and version-2 rows (``{schema}`` to fill in)."""


def gather_chunks(
    references: list[tuple[str, int]], rows: list[tuple[Any, ...]], sealer: CheckpointSealer | None
) -> list[list[str]] | None:
    """For each reference, its first ``count`` chunks in order (opened when sealed); None when one lost chunks.

    Args:
        references: ``(segment id, chunk count)`` pairs, oldest first.
        rows: ``(segment_id, chunk_index, body)`` rows of those segments (any order, maybe more chunks).
        sealer: Opens each chunk before anything parses it.

    Returns:
        The chunks' texts per reference, or None when a referenced chunk is missing.

    Raises:
        WorkflowCheckpointException: A chunk is refused by the sealer or is not UTF-8.
    """
    found: dict[tuple[str, int], bytes] = {(str(row[0]), int(row[1])): bytes(row[2]) for row in rows}
    opened: list[list[str]] = []
    for segment, count in references:
        texts: list[str] = []
        for index in range(count):
            raw = found.get((segment, index))
            if raw is None:
                return None
            texts.append(open_chunk(segment, index, raw, sealer))
        opened.append(texts)
    return opened


async def version_2_chunks(conn: AsyncConnection[Any], statement: bytes, segments: list[str]) -> list[tuple[Any, ...]]:
    """The version-2 chunks of ``segments`` (``statement``: ``chunks``); none once migration 3 dropped those tables."""
    from psycopg.errors import UndefinedTable

    try:
        async with conn.transaction():  # a savepoint: the missing table must not abort the operation
            return await (await conn.execute(statement, (segments,))).fetchall()
    except UndefinedTable:  # only a row changed in the database names version-2 segments then
        return []
