"""Version-3 Postgres rows changed in the database: every load is core's exception, every listing skips them.

Attacks from someone with write access to the tables, or a careless operator, on a real PostgreSQL
cluster: a sealed storage returns exactly what core saved or refuses; an unsealed one cannot tell a
changed row from a saved one, but must never fail with anything but ``WorkflowCheckpointException``.
"""

from __future__ import annotations

import secrets
import uuid

import psycopg
import pytest
from agent_framework import RunContext, WorkflowCheckpoint, WorkflowCheckpointException, step

from agent_framework_functional import PostgresCheckpointStorage, workflow

pytestmark = pytest.mark.slow


@step
async def review(doc: str) -> str:
    return f"document {doc} reviewed"


async def batch(docs: list[str], ctx: RunContext) -> int:
    return len([await review(doc) for doc in docs])


@pytest.mark.parametrize("micros", [9223372036854775807, -9223372036854775807])
async def test_an_unsealed_row_with_a_timestamp_out_of_range_is_refused_and_skipped(
    postgres_server: str, micros: int
) -> None:
    schema = f"t_{uuid.uuid4().hex}"
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    try:
        await workflow(keep_checkpoints=True)(batch).build(checkpoint_storage=storage).run(["a", "b"])
        ids = await storage.list_checkpoint_ids(workflow_name="batch")
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f'UPDATE "{schema}".delta_checkpoints SET ts = %s WHERE checkpoint_id = %s', (micros, ids[0]))
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(ids[0])
        assert await storage.list_checkpoint_ids(workflow_name="batch") == ids[1:]
    finally:
        await storage.aclose()


@pytest.mark.parametrize("odd", ["a\x00b", "\ud800x"])
async def test_ids_and_names_postgresql_text_cannot_hold_are_core_refusals(postgres_server: str, odd: str) -> None:
    storage = PostgresCheckpointStorage(postgres_server, schema=f"t_{uuid.uuid4().hex}")
    checkpoint = WorkflowCheckpoint(workflow_name="batch", graph_signature_hash="h", checkpoint_id=odd)
    named = WorkflowCheckpoint(workflow_name=odd, graph_signature_hash="h")
    try:
        for refused in (checkpoint, named):
            with pytest.raises(WorkflowCheckpointException):
                await storage.save(refused)
        with pytest.raises(WorkflowCheckpointException, match="No checkpoint found"):
            await storage.load(odd)
        assert await storage.delete(odd) is False
        assert await storage.delete_many([odd, odd, "unknown"]) == 0
        assert await storage.list_checkpoints(workflow_name=odd) == []
    finally:
        await storage.aclose()


async def test_a_whole_row_changed_to_name_version_2_segments_after_their_tables_went_is_refused(
    postgres_server: str,
) -> None:
    schema = f"t_{uuid.uuid4().hex}"
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    checkpoint = WorkflowCheckpoint(workflow_name="batch", graph_signature_hash="h")
    try:
        await storage.save(checkpoint)  # a whole row; migration 3 dropped the empty version-2 tables
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f"UPDATE \"{schema}\".checkpoints SET segments = '[[\"x\",1]]', segment_ids = ARRAY['x']")
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(checkpoint.checkpoint_id)
        assert await storage.list_checkpoints(workflow_name="batch") == []
    finally:
        await storage.aclose()


async def test_an_id_or_workflow_name_too_long_for_an_index_is_core_refusal_not_an_outage(postgres_server: str) -> None:
    storage = PostgresCheckpointStorage(postgres_server, schema=f"t_{uuid.uuid4().hex}")
    long_name = secrets.token_hex(5000)  # incompressible: larger than a PostgreSQL index entry may be
    try:
        for refused in (
            WorkflowCheckpoint(workflow_name="batch", graph_signature_hash="h", checkpoint_id=secrets.token_hex(2000)),
            WorkflowCheckpoint(workflow_name=long_name, graph_signature_hash="h"),
        ):
            with pytest.raises(WorkflowCheckpointException, match="too long"):
                await storage.save(refused)
        with pytest.raises(WorkflowCheckpointException, match="too long"):  # a run we drive: version-3 rows
            await workflow(name=long_name)(batch).build(checkpoint_storage=storage).run(["a"])
    finally:
        await storage.aclose()
