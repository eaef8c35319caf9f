"""Long runs on ``SQLiteCheckpointStorage``: each step result stored once, every checkpoint read back as core wrote it.

The same step-cache delta path as Redis and PostgreSQL (``_durable/checkpoint_delta.py``): a run of N steps
stores N step results (counted in the chunks), so what a run stores grows linearly (200 steps store less
than 3x what 100 do; with the offer ignored every checkpoint would hold the whole cache, 4x); a pause, its
resume and a restore read back equal to what core handed to ``save``; core used directly is stored whole;
deleting checkpoints frees a segment once nothing references it; sealed chunks are refused when altered or
moved; a continuation store and the storage share one file; ``ttl`` expires checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import agent_framework
import pytest
from agent_framework import RunContext, WorkflowCheckpoint, WorkflowCheckpointException, step
from agent_framework._workflows._checkpoint_encoding import encode_checkpoint_value

from agent_framework_functional import CheckpointSealer, SQLiteCheckpointStorage, SQLiteContinuationStore, workflow
from agent_framework_functional._durable import checkpoint_delta, sqlite_checkpoint
from agent_framework_functional._step_cache import StepCacheOffer

STEPS = 300


@step
async def review(doc: str) -> dict[str, Any]:
    return {"id": doc, "flagged": doc.endswith("7"), "summary": f"document {doc} reviewed"}


async def plain(docs: list[str]) -> int:
    return sum([(await review(doc))["flagged"] for doc in docs])


async def batch(docs: list[str], ctx: RunContext) -> int:
    flagged = await plain(docs)
    answer = await ctx.request_info({"flagged": flagged}, response_type=str)
    for doc in docs[:5]:
        await review(f"{doc}:{answer}")
    return flagged


class Tee:
    """Keeps a deep copy of the checkpoints core saves at the chosen positions, then saves them."""

    def __init__(self, inner: SQLiteCheckpointStorage, every: int) -> None:
        self.inner, self.every = inner, every
        self.kept: list[WorkflowCheckpoint] = []
        self.ids: list[str] = []

    def note(self, checkpoint: WorkflowCheckpoint) -> None:
        if len(self.ids) % self.every == 0:
            self.kept.append(copy.deepcopy(checkpoint))
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


def _stored(path: Path) -> tuple[int, int, int]:
    """(step-cache entries in all chunks, segments of runs, bytes of every stored body) in the file."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = [(segment, bytes(body)) for segment, body in conn.execute("SELECT segment, body FROM checkpoint_chunks")]
    parsed = [(segment, json.loads(body)) for segment, body in rows]
    whole = [chunk for _, chunk in parsed if "checkpoint_id" in chunk]  # saved without a run's offer: alone
    entries = sum(len(chunk.get("c", [])) for _, chunk in parsed)
    entries += sum(len(chunk["state"]["_step_cache"]) for chunk in whole)
    segments = {segment for segment, chunk in parsed if "checkpoint_id" not in chunk}
    return entries, len(segments), sum(len(body) for _, body in rows)


async def _run_plain(path: Path, steps: int) -> tuple[int, int, int]:
    async with SQLiteCheckpointStorage(path) as storage:
        wf = workflow(checkpoint_retention=None)(plain).build(checkpoint_storage=storage)
        await wf.run([f"doc-{index:04d}" for index in range(steps)])
        assert len(await storage.list_checkpoint_ids(workflow_name="plain")) == steps + 1
    return _stored(path)


async def test_what_a_run_stores_grows_linearly_with_its_steps(tmp_path: Path) -> None:
    entries_100, segments, bytes_100 = await _run_plain(tmp_path / "100.db", 100)
    entries_200, _, bytes_200 = await _run_plain(tmp_path / "200.db", 200)
    assert (entries_100, entries_200, segments) == (100, 200, 1)  # each step result once, in one segment
    assert bytes_200 < 3 * bytes_100  # whole checkpoints (the offer ignored) would store about 4x


async def test_with_the_offer_ignored_the_storage_stores_whole_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the linear test guards against: without the offer each checkpoint holds the whole cache.
    monkeypatch.setattr(checkpoint_delta.StepCacheOffer, "take", lambda self, state: False)
    entries, segments, _ = await _run_plain(tmp_path / "whole.db", 20)
    assert segments == 0 and entries == sum(range(1, 21)) + 20  # each step save, then the final one


async def test_a_pause_its_resume_and_a_restore_read_back_what_core_wrote(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    async with SQLiteCheckpointStorage(path) as storage:
        tee = Tee(storage, every=37)
        wf = workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=tee)  # type: ignore[arg-type]
        docs = [f"doc-{index:04d}" for index in range(STEPS)]
        paused = await wf.run(docs)
        done = await wf.run(
            responses=dict.fromkeys(wf.pending_request_ids, "ok"), continuation_token=paused.continuation_token
        )
        assert done.get_outputs() == [sum(doc.endswith("7") for doc in docs)]
        assert len(tee.ids) == STEPS + 1 + 5 + 1  # a checkpoint per step, the pause, and the end
        for saved in tee.kept:
            assert _canonical(await storage.load(saved.checkpoint_id)) == _canonical(saved)
        assert _stored(path)[:2] == (STEPS + 5, 2)  # each result once; the resume continues the pause's segment

        middle = tee.ids[STEPS // 2]
        other = workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage)
        restored = await other.run(checkpoint_id=middle)
        assert restored.get_final_state().name == "IDLE_WITH_PENDING_REQUESTS"
        assert _stored(path)[:2] == (STEPS + 5 + (STEPS - STEPS // 2 - 1), 3)
        listed = await storage.list_checkpoint_ids(workflow_name="batch")
        assert set(tee.ids) <= set(listed)


async def test_core_used_directly_is_stored_whole(tmp_path: Path) -> None:
    path = tmp_path / "core.db"
    async with SQLiteCheckpointStorage(path) as storage:
        await agent_framework.workflow(plain).build(checkpoint_storage=storage).run([f"d{index}" for index in range(5)])
        ids = await storage.list_checkpoint_ids(workflow_name="plain")
        assert len(ids) == 6
        assert _stored(path)[1] == 0
        assert len((await storage.load(ids[-1])).state["_step_cache"]) == 5


async def test_deleting_checkpoints_frees_a_segment_once_nothing_references_it(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    async with SQLiteCheckpointStorage(path) as storage:
        wf = workflow(checkpoint_retention=None)(plain).build(checkpoint_storage=storage)
        await wf.run([f"d{index}" for index in range(4)])
        ids = await storage.list_checkpoint_ids(workflow_name="plain")
        assert len(ids) == 5
        assert await storage.delete(ids[1])
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(ids[1])
        assert await storage.list_checkpoint_ids(workflow_name="plain") == [ids[0], *ids[2:]]
        assert len((await storage.load(ids[-1])).state["_step_cache"]) == 4
        assert await storage.delete_many([ids[0], *ids[2:-1]]) == 3
        assert _stored(path)[1] == 1
        assert await storage.delete(ids[-1])
        assert not await storage.delete(ids[-1])
        assert _stored(path) == (0, 0, 0)


async def test_sealed_chunks_are_refused_when_altered_or_moved(tmp_path: Path) -> None:
    path = tmp_path / "sealed.db"
    sealer = CheckpointSealer({"k1": secrets.token_bytes(32)})
    async with SQLiteCheckpointStorage(path, sealer=sealer) as storage:
        await workflow(checkpoint_retention=None)(plain).build(checkpoint_storage=storage).run(["a", "b", "c"])
        ids = await storage.list_checkpoint_ids(workflow_name="plain")
        assert len((await storage.load(ids[-1])).state["_step_cache"]) == 3
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            rows = conn.execute("SELECT idx, body FROM checkpoint_chunks ORDER BY idx").fetchall()
            assert all(bytes(body).startswith(b"afs1:") for _, body in rows)
            conn.execute("UPDATE checkpoint_chunks SET body = ? WHERE idx = 1", (rows[2][1],))  # moved
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(ids[-1])
        assert await storage.list_checkpoint_ids(workflow_name="plain") == ids[:1]


async def test_the_continuation_store_and_the_storage_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    async with SQLiteCheckpointStorage(path) as storage, SQLiteContinuationStore(path) as store:
        wf = workflow(checkpoint_retention=0)(batch).build(checkpoint_storage=storage, continuation_store=store)
        paused = await wf.run(["d1", "d2"])
        async with SQLiteCheckpointStorage(path) as other_storage, SQLiteContinuationStore(path) as other_store:
            other = workflow(checkpoint_retention=0)(batch).build(
                checkpoint_storage=other_storage, continuation_store=other_store
            )
            request_id = paused.get_request_info_events()[0].request_id
            done = await other.run(responses={request_id: "ok"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == [0]
        assert _stored(path) == (0, 0, 0)  # a finished run with no retention deletes its chain


async def test_checkpoints_expire_after_ttl(tmp_path: Path) -> None:
    async with SQLiteCheckpointStorage(tmp_path / "ttl.db", ttl=0.2) as storage:
        await workflow(checkpoint_retention=None)(plain).build(checkpoint_storage=storage).run(["a", "b"])
        ids = await storage.list_checkpoint_ids(workflow_name="plain")
        assert len(ids) == 3
        await asyncio.sleep(0.3)
        assert await storage.list_checkpoint_ids(workflow_name="plain") == []
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(ids[-1])


def test_bad_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SQLiteCheckpointStorage(tmp_path / "x.db", ttl=0)
    with pytest.raises(TypeError):
        SQLiteCheckpointStorage(tmp_path / "x.db", allowed_checkpoint_types=[1])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        SQLiteCheckpointStorage(tmp_path / "x.db", sealer="key")  # type: ignore[arg-type]


async def test_a_save_waits_for_another_process_holding_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with SQLiteCheckpointStorage(path) as storage:
        wf = workflow(checkpoint_retention=None)(plain).build(checkpoint_storage=storage)
        await wf.run(["a"])
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another process's write
            run = asyncio.ensure_future(wf.run(["b", "c"]))
            await asyncio.sleep(0.2)
            assert not run.done()  # the save could not write at once: it waits in the worker thread
            other.execute("COMMIT")
            await run
        assert len(await storage.list_checkpoint_ids(workflow_name="plain")) == 2 + 3


async def test_the_wal_is_checkpointed_while_saves_run_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop's connection never checkpoints the WAL itself (a checkpoint waits for the disk).
    monkeypatch.setattr(sqlite_checkpoint, "WAL_CHECKPOINT_EVERY", 16)
    path = tmp_path / "wal.db"
    async with SQLiteCheckpointStorage(path) as storage:
        await (
            workflow(checkpoint_retention=None)(plain)
            .build(checkpoint_storage=storage)
            .run([str(i) for i in range(400)])
        )
        wal = path.with_name(path.name + "-wal").stat().st_size
    assert wal < 1 << 20  # about 5 MB when it is never checkpointed


@pytest.mark.parametrize(
    "chunk",
    [
        ("text body", 0, "not json"),  # a body written as text
        (b"\xff\xfe", 0, "[]"),  # not UTF-8
        (b"{}", "zero", "[]"),  # an index that is not a number
        (b"{}", 0, 7),  # parents that are not text
        (b"{}", 0, '[["segment", "many"]]'),  # malformed parents
    ],
)
async def test_planted_rows_of_any_type_fail_load_cleanly_and_are_skipped_by_list(
    tmp_path: Path, chunk: tuple[Any, Any, Any]
) -> None:
    path = tmp_path / "planted.db"
    async with SQLiteCheckpointStorage(path) as storage:
        await workflow(checkpoint_retention=None)(plain).build(checkpoint_storage=storage).run(["a"])
        good = await storage.list_checkpoint_ids(workflow_name="plain")
        body, index, parents = chunk
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("INSERT INTO checkpoint_segments VALUES (?, 'plain', ?, 1, 1, 0, NULL)", ("seg", parents))
            conn.execute("INSERT INTO checkpoint_chunks VALUES ('seg', ?, 'planted', ?)", (index, body))
        with pytest.raises(WorkflowCheckpointException):
            await storage.load("planted")
        assert await storage.list_checkpoint_ids(workflow_name="plain") == good
        assert await storage.delete("planted")
