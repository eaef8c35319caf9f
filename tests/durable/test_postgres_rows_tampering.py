"""Version-3 Postgres rows changed in the database: every load is core's exception, every listing skips them.

Attacks from someone with write access to the tables, or a careless operator, on a real PostgreSQL
cluster: a sealed storage returns exactly what core saved or refuses; an unsealed one cannot tell a
changed row from a saved one, but must never fail with anything but ``WorkflowCheckpointException``.
"""

from __future__ import annotations

import secrets

import psycopg
import pytest
from agent_framework import RunContext, WorkflowCheckpoint, WorkflowCheckpointException, step
from postgres_server import new_schema

from agent_framework_functional import CheckpointSealer, PostgresCheckpointStorage, get_run_context, workflow

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
    schema = new_schema(postgres_server)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    try:
        await workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage).run(["a", "b"])
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
    storage = PostgresCheckpointStorage(postgres_server, schema=new_schema(postgres_server))
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


async def test_an_id_or_workflow_name_too_long_for_an_index_is_core_refusal_not_an_outage(postgres_server: str) -> None:
    storage = PostgresCheckpointStorage(postgres_server, schema=new_schema(postgres_server))
    long_name = secrets.token_hex(5000)  # incompressible: larger than a PostgreSQL index entry may be
    try:
        with pytest.raises(WorkflowCheckpointException, match="too long") as refusal:
            await storage.save(WorkflowCheckpoint(workflow_name=long_name, graph_signature_hash="h"))
        assert type(refusal.value.__cause__).__name__ == "ProgramLimitExceeded"  # PostgreSQL's, passed on as it is
        long_id = secrets.token_hex(2000)  # no index holds an id (a name-based uuid does): stored
        await storage.save(WorkflowCheckpoint(workflow_name="batch", graph_signature_hash="h", checkpoint_id=long_id))
        assert (await storage.load(long_id)).checkpoint_id == long_id
        with pytest.raises(WorkflowCheckpointException, match="too long"):  # a run we drive: version-3 rows
            await workflow(name=long_name)(batch).build(checkpoint_storage=storage).run(["a"])
    finally:
        await storage.aclose()


@step
async def _ask(doc: str) -> str:  # a request inside a step: the resumed run continues the first run's segment
    return await get_run_context().request_info({"doc": doc}, response_type=str)


async def _two_rounds(docs: list[str], ctx: RunContext) -> int:
    first = [await review(doc) for doc in docs]
    answer = await _ask(first[-1])
    return len(first) + len([await review(f"{answer} {doc}") for doc in docs])


@pytest.mark.parametrize("sealed", [False, True])
async def test_a_null_parent_segment_id_is_refused_by_load_and_skipped_by_the_listing(
    postgres_server: str, sealed: bool
) -> None:
    # The listing reads its rows' segments in Python: a NULL inside ``parent_ids`` was a TypeError there.
    schema = new_schema(postgres_server)
    sealer = CheckpointSealer({"k1": secrets.token_bytes(32)}) if sealed else None
    storage = PostgresCheckpointStorage(postgres_server, schema=schema, sealer=sealer)
    try:
        instance = workflow(name="rounds", checkpoint_retention=None)(_two_rounds).build(checkpoint_storage=storage)
        paused = await instance.run(["a", "b"])
        request = paused.get_request_info_events()[0].request_id
        assert (
            await instance.run(responses={request: "ok"}, continuation_token=paused.continuation_token)
        ).get_outputs()
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            first = conn.execute(
                f'SELECT segment_id FROM "{schema}".delta_segments WHERE parent_ids IS NULL'
            ).fetchall()
            changed = conn.execute(
                f'UPDATE "{schema}".delta_segments SET parent_ids = ARRAY[NULL]::BIGINT[] '
                "WHERE parent_ids IS NOT NULL RETURNING segment_id"
            ).fetchall()
            kept = conn.execute(
                f'SELECT checkpoint_id::TEXT FROM "{schema}".delta_checkpoints WHERE checkpoint_id IS NOT NULL '
                "AND segment_id = ANY(%s) ORDER BY saved_at",
                ([row[0] for row in first],),
            ).fetchall()
            moved = conn.execute(
                f'SELECT checkpoint_id::TEXT FROM "{schema}".delta_checkpoints WHERE checkpoint_id IS NOT NULL '
                "AND segment_id = ANY(%s)",
                ([row[0] for row in changed],),
            ).fetchall()
        assert first and changed and moved  # the resume wrote a segment continuing the first run's
        for (checkpoint_id,) in moved:
            with pytest.raises(WorkflowCheckpointException):
                await storage.load(checkpoint_id)
        assert await storage.list_checkpoint_ids(workflow_name="rounds") == [row[0] for row in kept]
    finally:
        await storage.aclose()
