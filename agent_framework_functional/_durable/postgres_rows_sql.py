"""The ``checkpoints`` component's tables, functions and statements (schema version 1).

A checkpoint is one row of ``delta_checkpoints`` (one saved without a run's offer: whole, alone in its
segment): its segment (the run's 64-bit id), the segment's chunk count it references, whether it holds the
last one, its head and ``body`` (``postgres_rows``); ``delta_segments`` counts each segment's live references,
children and chunks. ``save_delta_checkpoint`` writes nothing and returns false unless the segment holds
exactly what the save expects; ``release_delta_checkpoints`` leaves a deleted chunk holder as a tombstone
(``checkpoint_id`` NULL) until nothing needs its segment.
"""

from __future__ import annotations

_ROW_COLUMNS = (
    "segment_id, saved_at, expires_at, ts, checkpoint_id, previous_id, chunks, holds_chunk, workflow_name, body"
)
_ROW_VALUES = "p_segment, p_saved_at, p_expires_at, p_ts, p_key, p_previous, p_chunks, p_holds_chunk, p_name, p_body"

TABLES = (
    """
CREATE TABLE IF NOT EXISTS {schema}.delta_segments (
    segment_id BIGINT PRIMARY KEY,
    workflow_name TEXT NOT NULL,
    refs INTEGER NOT NULL,
    children INTEGER NOT NULL,
    chunks INTEGER NOT NULL,
    expires_at DOUBLE PRECISION,
    parent_ids BIGINT[],
    parent_counts INTEGER[]
);
CREATE TABLE IF NOT EXISTS {schema}.delta_checkpoints (
    segment_id BIGINT NOT NULL,
    saved_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,
    ts BIGINT,
    checkpoint_id UUID,
    previous_id UUID,
    chunks INTEGER NOT NULL,
    holds_chunk BOOLEAN NOT NULL,
    workflow_name TEXT NOT NULL,
    body BYTEA NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS delta_checkpoints_id ON {schema}.delta_checkpoints (checkpoint_id);
CREATE INDEX IF NOT EXISTS delta_checkpoints_segment ON {schema}.delta_checkpoints (workflow_name, segment_id);
CREATE OR REPLACE FUNCTION {schema}.free_delta_segments(p_ids BIGINT[], p_now DOUBLE PRECISION) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    parents BIGINT[];
BEGIN
    LOOP
        WITH dead AS (
            DELETE FROM {schema}.delta_segments WHERE segment_id = ANY(CASE WHEN p_now IS NULL THEN p_ids
                    ELSE ARRAY(SELECT segment_id FROM {schema}.delta_segments WHERE expires_at <= p_now) END)
                AND children <= 0 AND (p_now IS NOT NULL OR refs <= 0) AND (p_now IS NULL OR expires_at <= p_now)
                RETURNING workflow_name, segment_id, parent_ids[cardinality(parent_ids)] AS parent
        ), gone AS (
            DELETE FROM {schema}.delta_checkpoints
                WHERE (workflow_name, segment_id) IN (SELECT workflow_name, segment_id FROM dead)
        )
        SELECT array_agg(parent) FILTER (WHERE parent IS NOT NULL) INTO parents FROM dead;
        EXIT WHEN parents IS NULL;
        UPDATE {schema}.delta_segments AS s SET children = s.children - d.n
            FROM (SELECT id, count(*) AS n FROM unnest(parents) AS id GROUP BY id) AS d WHERE s.segment_id = d.id;
        p_ids := parents;
    END LOOP;
END $$;
CREATE OR REPLACE FUNCTION {schema}.release_delta_checkpoints(p_keys UUID[]) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    released INTEGER;
    held BIGINT[];
    names TEXT[];
BEGIN
    WITH gone AS (
        UPDATE {schema}.delta_checkpoints SET checkpoint_id = NULL WHERE checkpoint_id = ANY(p_keys)
            RETURNING workflow_name, segment_id
    )
    SELECT count(*), array_agg(segment_id), array_agg(workflow_name) INTO released, held, names FROM gone;
    IF released > 0 THEN
        DELETE FROM {schema}.delta_checkpoints WHERE workflow_name = ANY(names) AND segment_id = ANY(held)
            AND checkpoint_id IS NULL AND NOT holds_chunk;
        PERFORM 1 FROM {schema}.delta_segments WHERE segment_id = ANY(held) ORDER BY segment_id FOR UPDATE;
        UPDATE {schema}.delta_segments AS s SET refs = s.refs - d.n
            FROM (SELECT id, count(*) AS n FROM unnest(held) AS id GROUP BY id) AS d WHERE s.segment_id = d.id;
        PERFORM {schema}.free_delta_segments(held, NULL);
    END IF;
    RETURN released;
END $$;
CREATE OR REPLACE FUNCTION {schema}.save_delta_checkpoint(
    p_key UUID, p_id TEXT, p_previous UUID, p_ts BIGINT, p_name TEXT, p_saved_at DOUBLE PRECISION,
    p_expires_at DOUBLE PRECISION, p_body BYTEA, p_segment BIGINT, p_chunks INTEGER, p_holds_chunk BOOLEAN,
    p_parent_ids BIGINT[], p_parent_counts INTEGER[]
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
BEGIN
    IF p_chunks = 1 AND p_holds_chunk THEN
        IF p_parent_ids IS NOT NULL THEN
            PERFORM 1 FROM {schema}.delta_segments WHERE segment_id = ANY(p_parent_ids)
                ORDER BY segment_id FOR UPDATE;
            IF (SELECT count(*) FROM {schema}.delta_segments AS s
                    JOIN unnest(p_parent_ids, p_parent_counts) AS r(id, n) ON s.segment_id = r.id
                    WHERE s.chunks >= r.n) <> cardinality(p_parent_ids) THEN
                RETURN FALSE;
            END IF;
        END IF;
        INSERT INTO {schema}.delta_segments
                (segment_id, workflow_name, refs, children, chunks, expires_at, parent_ids, parent_counts)
            VALUES (p_segment, p_name, 1, 0, 1, p_expires_at, p_parent_ids, p_parent_counts)
            ON CONFLICT (segment_id) DO NOTHING;
        IF NOT FOUND THEN
            RETURN FALSE;
        END IF;
        IF p_parent_ids IS NOT NULL THEN
            UPDATE {schema}.delta_segments SET children = children + 1
                WHERE segment_id = p_parent_ids[cardinality(p_parent_ids)];
        END IF;
    ELSE
        UPDATE {schema}.delta_segments SET refs = refs + 1, chunks = p_chunks,
            expires_at = CASE WHEN p_expires_at IS NULL OR expires_at IS NULL THEN NULL
                              ELSE greatest(expires_at, p_expires_at) END
            WHERE segment_id = p_segment AND workflow_name = p_name AND chunks = p_chunks - p_holds_chunk::INTEGER;
        IF NOT FOUND THEN
            RETURN FALSE;
        END IF;
    END IF;
    LOOP  -- the id saved before (a concurrent save's, committed meanwhile, on the next turn) is released
        INSERT INTO {schema}.delta_checkpoints ("""
    + _ROW_COLUMNS
    + """) VALUES ("""
    + _ROW_VALUES
    + """)
            ON CONFLICT (checkpoint_id) DO NOTHING;
        EXIT WHEN FOUND;
        PERFORM {schema}.release_delta_checkpoints(ARRAY[p_key]);
    END LOOP;
    RETURN TRUE;
END $$;
CREATE OR REPLACE FUNCTION {schema}.delete_checkpoints(p_keys UUID[]) RETURNS INTEGER
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN {schema}.release_delta_checkpoints(p_keys);
END $$;
CREATE OR REPLACE FUNCTION {schema}.purge_checkpoints(p_now DOUBLE PRECISION) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {schema}.free_delta_segments(NULL, p_now);
END $$;
"""
)

"""The ``checkpoints`` component's tables and functions (schema version 1), created by ``setup()``."""

_LIVE = "(d.expires_at IS NULL OR d.expires_at > %(now)s)"
_HEAD_COLUMNS = (
    "d.segment_id, d.saved_at, d.ts, d.checkpoint_id, d.previous_id, d.chunks, d.holds_chunk, d.body, "
    "s.parent_ids, s.parent_counts"
)
HEAD_COLUMNS = 10
"""How many columns of a ``delta_load`` / ``delta_list`` row are the head's (``_HEAD_COLUMNS``)."""

_NO_WAIT = "set_config('synchronous_commit', 'off', true), "
_SAVE_DELTA = "{schema}.save_delta_checkpoint(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


def save_many(saves: int, waits: bool) -> str:
    """A statement of ``saves`` ``save_delta_checkpoint`` calls, evaluated in order in one transaction.

    Each result is a column, this save's the last; without ``waits`` the commit does not wait for the disk.
    """
    return f"SELECT {'' if waits else _NO_WAIT}{', '.join([_SAVE_DELTA] * saves)}"


STATEMENTS = {
    # A save's result is its row's last column. The ``nowait`` forms commit without waiting for the disk
    # (``PostgresCheckpointStorage``: checkpoints that hold no pending request).
    "save_delta": f"SELECT {_SAVE_DELTA}",
    "save_delta_nowait": f"SELECT {_NO_WAIT}{_SAVE_DELTA}",
    "delete": "SELECT {schema}.delete_checkpoints(%s::UUID[])",
    "purge": "SELECT {schema}.purge_checkpoints(%s)",
    # The head's row (first column TRUE), then a row per chunk of its segments (FALSE): one round trip, and
    # no value larger than one chunk (PostgreSQL caps a value at 1 GB).
    "delta_load": (
        f"WITH h AS (SELECT {_HEAD_COLUMNS} FROM {{schema}}.delta_checkpoints AS d "
        f"JOIN {{schema}}.delta_segments AS s USING (segment_id) WHERE d.checkpoint_id = %(key)s AND {_LIVE}) "
        "SELECT TRUE, h.*, NULL, NULL, NULL FROM h UNION ALL "
        f"SELECT FALSE, {', '.join(['NULL'] * HEAD_COLUMNS)}, x.segment_id, x.chunks, x.body FROM h "
        "JOIN {schema}.delta_segments AS ps "
        "ON ps.segment_id = ANY(array_prepend(h.segment_id, coalesce(h.parent_ids, '{{}}'::BIGINT[]))) "
        "JOIN {schema}.delta_checkpoints AS x ON x.workflow_name = ps.workflow_name AND x.segment_id = ps.segment_id "
        "WHERE x.holds_chunk"
    ),
    "delta_list": (
        f"SELECT {_HEAD_COLUMNS} FROM {{schema}}.delta_checkpoints AS d JOIN {{schema}}.delta_segments AS s "
        f"USING (segment_id) WHERE d.workflow_name = %(name)s AND d.checkpoint_id IS NOT NULL AND {_LIVE}"
    ),
    "delta_chunks": (
        "SELECT d.segment_id, d.chunks, d.body FROM {schema}.delta_segments AS s JOIN {schema}.delta_checkpoints AS d "
        "ON d.workflow_name = s.workflow_name AND d.segment_id = s.segment_id "
        "WHERE s.segment_id = ANY(%s) AND d.holds_chunk"
    ),
}
"""The statements ``PostgresCheckpointStorage`` runs (``{schema}`` to fill in)."""
