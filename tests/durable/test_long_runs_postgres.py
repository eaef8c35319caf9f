"""Long runs on ``PostgresCheckpointStorage``: each step result stored once, each checkpoint read back as saved.

The same cases as ``test_long_runs_redis.py``, on a real PostgreSQL cluster: a 1,000-step run that
pauses, its response-only resume and a restore from a checkpoint in the middle read back every
checkpoint equal to what core handed to ``save``; the step-cache entries stored across all chunks
are exactly the run's step calls; core used directly stores whole checkpoints; deleting checkpoints
frees their segments once nothing references them; a segment lost meanwhile is rewritten whole; a
sealed storage refuses a chunk moved to another position.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from typing import Any

import agent_framework
import psycopg
import pytest
from agent_framework import RunContext, WorkflowCheckpoint, WorkflowCheckpointException, step
from agent_framework._workflows._checkpoint_encoding import encode_checkpoint_value
from postgres_server import new_schema

from agent_framework_functional import CheckpointSealer, PostgresCheckpointStorage, workflow
from agent_framework_functional._durable.postgres_rows import row_key
from agent_framework_functional._step_cache import StepCacheOffer

pytestmark = pytest.mark.slow

STEPS = 1000


@step
async def review(doc: str) -> dict[str, Any]:
    return {"id": doc, "flagged": doc.endswith("7"), "summary": f"document {doc} reviewed"}


async def batch(docs: list[str], ctx: RunContext) -> int:
    flagged = sum([(await review(doc))["flagged"] for doc in docs])
    answer = await ctx.request_info({"flagged": flagged}, response_type=str)
    for doc in docs[:5]:
        await review(f"{doc}:{answer}")
    return flagged


class Tee:
    """Keeps a deep copy of the checkpoints core saves at the chosen positions, then saves them."""

    def __init__(self, inner: PostgresCheckpointStorage, keep: Callable[[int], bool]) -> None:
        self.inner, self.keep, self.count = inner, keep, 0
        self.kept: list[WorkflowCheckpoint] = []
        self.ids: list[str] = []

    def note(self, checkpoint: WorkflowCheckpoint) -> None:
        if self.keep(self.count):
            self.kept.append(copy.deepcopy(checkpoint))
        self.count += 1
        self.ids.append(checkpoint.checkpoint_id)

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        self.note(checkpoint)
        return await self.inner.save(checkpoint)

    async def save_with_offer(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        self.note(checkpoint)
        return await self.inner.save_with_offer(checkpoint, offer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _canonical(checkpoint: WorkflowCheckpoint) -> str:
    return json.dumps(encode_checkpoint_value(checkpoint.to_dict()), sort_keys=True, default=str)


def _stored(url: str, schema: str) -> tuple[int, int]:
    """(step-cache entries in all chunks, number of segments of runs) in ``schema`` (unsealed rows)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(f'SELECT segment_id, body FROM "{schema}".delta_checkpoints WHERE holds_chunk').fetchall()
    chunks = [(segment, json.loads(bytes(body).rpartition(b"\n")[2])) for segment, body in rows]
    entries = sum(len(chunk.get("c", [])) for _, chunk in chunks)
    return entries, len({segment for segment, chunk in chunks if "checkpoint_id" not in chunk})  # whole: not a run's


async def test_a_thousand_step_run_stores_each_result_once_and_reads_back_what_core_wrote(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    tee = Tee(storage, keep=lambda index: index % 97 == 0 or index >= STEPS - 2)
    try:
        wf = workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=tee)  # type: ignore[arg-type]
        docs = [f"doc-{index:04d}" for index in range(STEPS)]
        paused = await wf.run(docs)
        assert wf.pending_request_ids
        done = await wf.run(
            responses=dict.fromkeys(wf.pending_request_ids, "ok"), continuation_token=paused.continuation_token
        )
        assert done.get_outputs() == [sum(doc.endswith("7") for doc in docs)]
        assert len(tee.ids) == STEPS + 1 + 5 + 1  # a checkpoint per step, the pause, and the end
        for saved in tee.kept:
            assert _canonical(await storage.load(saved.checkpoint_id)) == _canonical(saved)
        assert _stored(postgres_server, schema) == (STEPS + 5, 2)  # each result once; the resume continues

        middle = tee.ids[STEPS // 2]  # a restore on a fresh instance: core's replay, one more segment
        restored = (
            await workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage).run(checkpoint_id=middle)
        )
        assert restored.get_final_state().name == "IDLE_WITH_PENDING_REQUESTS"
        assert _stored(postgres_server, schema) == (STEPS + 5 + (STEPS - STEPS // 2 - 1), 3)
        listed = await storage.list_checkpoints(workflow_name="batch")
        assert len(listed) == len(tee.ids) + (STEPS - STEPS // 2 - 1) + 1
        assert await storage.delete(tee.ids[-1])  # the end: its head references two segments, one row deleted
        assert await storage.delete_many(tee.ids[-3:]) == 2
    finally:
        await storage.aclose()


async def test_core_used_directly_on_the_same_storage_stores_whole_checkpoints(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    try:
        core = agent_framework.workflow(batch).build(checkpoint_storage=storage)
        await core.run([f"d{index}" for index in range(5)])
        ids = await storage.list_checkpoint_ids(workflow_name="batch")
        assert len(ids) == 6
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            rows = conn.execute(f'SELECT body FROM "{schema}".delta_checkpoints').fetchall()
        assert len(rows) == 6  # whole, each alone in its segment
        assert max(len(json.loads(bytes(body))["state"]["_step_cache"]) for (body,) in rows) == 5
        assert _stored(postgres_server, schema) == (0, 0)
    finally:
        await storage.aclose()


async def test_deleting_checkpoints_frees_a_segment_once_nothing_references_it(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    try:
        await (
            workflow(checkpoint_retention=None)(batch)
            .build(checkpoint_storage=storage)
            .run([f"d{index}" for index in range(4)])
        )
        ids = await storage.list_checkpoint_ids(workflow_name="batch")
        assert len(ids) == 5
        assert await storage.delete_many(ids[:-1]) == 4
        assert _stored(postgres_server, schema)[1] == 1
        last = await storage.load(ids[-1])
        assert len(last.state["_step_cache"]) == 4
        assert await storage.delete(ids[-1])
        assert not await storage.delete(ids[-1])
        assert _stored(postgres_server, schema) == (0, 0)
    finally:
        await storage.aclose()


async def test_a_segment_lost_meanwhile_is_written_again_whole(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    try:
        wf = workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage)
        paused = await wf.run([f"d{index}" for index in range(6)])
        with psycopg.connect(postgres_server, autocommit=True) as conn:  # as if it expired while the pause waited
            conn.execute(f'DELETE FROM "{schema}".delta_segments')
        done = await wf.run(
            responses=dict.fromkeys(wf.pending_request_ids, "ok"), continuation_token=paused.continuation_token
        )
        assert done.get_final_state().name == "IDLE"
        latest = await storage.get_latest(workflow_name="batch")
        assert latest is not None
        assert len(latest.state["_step_cache"]) == 6 + 5
        assert latest.state["_original_message"] == [f"d{index}" for index in range(6)]
    finally:
        await storage.aclose()


async def test_a_sealed_chunk_moved_to_another_position_is_refused(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema, sealer=CheckpointSealer({"k1": b"k" * 32}))
    try:
        await workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage).run(["a1", "a2", "a3"])
        ids = await storage.list_checkpoint_ids(workflow_name="batch")
        assert len(ids) == 4
        with psycopg.connect(postgres_server, autocommit=True) as conn:  # swap the first two chunks
            conn.execute(
                f'UPDATE "{schema}".delta_checkpoints AS a SET body = b.body FROM "{schema}".delta_checkpoints AS b '
                "WHERE (a.chunks, b.chunks) IN ((1, 2), (2, 1)) AND a.holds_chunk AND b.holds_chunk"
            )
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(ids[-1])
        assert await storage.list_checkpoint_ids(workflow_name="batch") == []  # each one skipped
    finally:
        await storage.aclose()


async def test_corrupted_segment_references_are_refused_naming_postgresql(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    try:
        await workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage).run(["a1", "a2"])
        ids = await storage.list_checkpoint_ids(workflow_name="batch")
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f'UPDATE "{schema}".delta_segments SET parent_ids = ARRAY[1]::BIGINT[]')
        with pytest.raises(WorkflowCheckpointException, match=r"in PostgreSQL has corrupted segment references"):
            await storage.load(ids[-1])
    finally:
        await storage.aclose()


def _count(url: str, schema: str, table: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
    return int(row[0]) if row else 0


class _Renaming(Tee):
    """Saves each checkpoint under ids that are not uuids and a timestamp with another UTC offset."""

    def note(self, checkpoint: WorkflowCheckpoint) -> None:
        checkpoint.checkpoint_id = f"run/{checkpoint.checkpoint_id}"
        previous = checkpoint.previous_checkpoint_id
        if previous is not None and not previous.startswith("run/"):  # core may chain the id save returned
            checkpoint.previous_checkpoint_id = f"run/{previous}"
        checkpoint.timestamp = checkpoint.timestamp.replace("+00:00", "+02:00")
        super().note(checkpoint)


@pytest.mark.parametrize("sealed", [False, True])
async def test_ids_that_are_not_uuids_and_other_timestamps_read_back_as_saved(
    postgres_server: str, sealed: bool
) -> None:
    schema = new_schema(postgres_server)
    sealer = CheckpointSealer({"k1": b"k" * 32}) if sealed else None
    storage = PostgresCheckpointStorage(postgres_server, schema=schema, sealer=sealer)
    tee = _Renaming(storage, keep=lambda index: True)
    try:
        wf = workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=tee)  # type: ignore[arg-type]
        await wf.run([f"doc-{index}" for index in range(6)])
        assert all(checkpoint_id.startswith("run/") for checkpoint_id in tee.ids)
        for saved in tee.kept:
            assert _canonical(await storage.load(saved.checkpoint_id)) == _canonical(saved)
        assert await storage.list_checkpoint_ids(workflow_name="batch") == tee.ids
        if not sealed:  # each row holds its head line, then its chunk
            assert _stored(postgres_server, schema)[0] == 6
        assert await storage.delete_many(tee.ids[:3]) == 3
        assert await storage.list_checkpoint_ids(workflow_name="batch") == tee.ids[3:]
    finally:
        await storage.aclose()


def test_no_checkpoint_id_is_stored_under_the_row_key_of_another() -> None:
    made = str(uuid.uuid4())
    assert row_key(made) == made  # core's ids (random uuids) are their own key
    other = "run/" + made
    key = row_key(other)
    assert uuid.UUID(key).version == 5 and key != other
    # An id that is literally another id's name-based key is hashed again, so the two rows never meet.
    assert row_key(key) != key
    assert row_key(str(uuid.uuid1())) != row_key(other)


def test_only_the_canonical_text_of_a_random_uuid_is_its_own_row_key() -> None:
    made = str(uuid.uuid4())
    for form in (made.upper(), "{" + made + "}", made.replace("-", ""), "urn:uuid:" + made, made + "\n"):
        assert row_key(form) != form and uuid.UUID(row_key(form)).version == 5
    not_rfc_4122 = str(uuid.UUID(int=uuid.UUID(made).int & ~(0xC << 60)))  # variant bits 00: not a random uuid
    assert row_key(not_rfc_4122) != not_rfc_4122
