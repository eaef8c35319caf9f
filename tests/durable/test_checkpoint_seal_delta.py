"""Sealed step-cache checkpoints of the earlier Redis layout: every head and chunk authenticated before decoding.

Earlier versions stored the checkpoints of a run this package drives on ``RedisCheckpointStorage``
as a head (``body`` plus ``segments`` references, a hash per checkpoint) over chunks in
``<namespace>:segment:<id>`` lists; ``redis_earlier_layout.EarlierLayoutStorage`` still writes them
so, and today's storage reads, lists and deletes them (``test_checkpoint_seal_segments.py`` attacks
today's layout). With a
``CheckpointSealer`` the head is sealed under its checkpoint id and references and each chunk under
its segment id and index. The attacks are those of ``test_checkpoint_seal.py``, aimed at those
pieces by someone who can write the keys but holds no key: a planted chunk (a pickle core's decoder
would run), an altered chunk, a chunk moved to another segment, two chunks swapped, a chunk
removed, altered references, a head moved to another id. Each is refused before core's decoder
sees anything; the damaged checkpoint is skipped by ``list_checkpoints``. Without a sealer, malformed
references and chunks give the same clean ``WorkflowCheckpointException``, and a checkpoint whose
references were altered can still be deleted.
"""

from __future__ import annotations

import copy
import json
import secrets
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from agent_framework import RunContext, WorkflowCheckpoint, WorkflowCheckpointException, step
from agent_framework._workflows._checkpoint_encoding import encode_checkpoint_value
from redis_earlier_layout import EarlierLayoutStorage
from test_checkpoint_seal import _from_dict_hijack_pickle, _pickled, _posix_path_pickle

from agent_framework_functional import CheckpointSealer, RedisCheckpointStorage, workflow
from agent_framework_functional._durable.checkpoint_seal import is_sealed
from agent_framework_functional._durable.redis_delta import chunk_context

KEY = secrets.token_bytes(32)
DOCS = [f"doc-{index:02d}" for index in range(8)]


@step
async def review(doc: str) -> dict[str, Any]:
    return {"id": doc, "flagged": doc.endswith("7")}


async def batch(docs: list[str], ctx: RunContext) -> int:
    flagged = sum([(await review(doc))["flagged"] for doc in docs])
    answer = await ctx.request_info({"flagged": flagged}, response_type=str)
    for doc in docs[:3]:
        await review(f"{doc}:{answer}")
    return flagged


@pytest.fixture
def namespace() -> str:
    return f"aff-sealdelta:{uuid.uuid4().hex}"


class Run:
    """A finished run (paused, then resumed) on a storage, and where its pieces are in Redis."""

    def __init__(self, storage: RedisCheckpointStorage, raw: aioredis.Redis, namespace: str) -> None:
        self.storage, self.raw, self.namespace = storage, raw, namespace
        self.last = ""
        self.refs: list[list[Any]] = []

    async def go(self) -> Run:
        wf = workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=self.storage)
        paused = await wf.run(DOCS)
        await wf.run(
            responses=dict.fromkeys(wf.pending_request_ids, "ok"), continuation_token=paused.continuation_token
        )
        latest = await self.storage.get_latest(workflow_name="batch")
        assert latest is not None
        self.last = latest.checkpoint_id
        self.refs = json.loads(await self.raw.hget(self.key(self.last), "segments"))
        assert len(self.refs) == 2  # the resume's segment continues the pause's
        return self

    def key(self, checkpoint_id: str) -> str:
        return f"{self.namespace}:checkpoint:{checkpoint_id}"

    def segment(self, position: int) -> str:
        return f"{self.namespace}:segment:{self.refs[position][0]}"


def _planted_chunk(value: dict[str, str]) -> bytes:
    return json.dumps({"c": [[0, "planted", {"x": value}]]}).encode("utf-8")


async def _plant_chunk(run: Run) -> None:
    await run.raw.lset(run.segment(0), 1, _planted_chunk(_pickled(_posix_path_pickle(), "pathlib:PosixPath")))


async def _plant_build_chunk(run: Run) -> None:
    type_key = "agent_framework._workflows._checkpoint:WorkflowCheckpoint"
    await run.raw.lset(run.segment(0), 0, _planted_chunk(_pickled(_from_dict_hijack_pickle(), type_key)))


async def _alter_chunk(run: Run) -> None:
    chunk = await run.raw.lindex(run.segment(0), 1)
    assert chunk is not None
    await run.raw.lset(run.segment(0), 1, chunk.replace(b"doc-0", b"doc-9", 1))


async def _move_chunk_between_segments(run: Run) -> None:
    chunk = await run.raw.lindex(run.segment(0), 0)
    assert chunk is not None
    await run.raw.lset(run.segment(1), 0, chunk)


async def _swap_chunks(run: Run) -> None:
    first, second = await run.raw.lrange(run.segment(0), 0, 1)
    await run.raw.lset(run.segment(0), 0, second)
    await run.raw.lset(run.segment(0), 1, first)


async def _drop_chunk(run: Run) -> None:
    await run.raw.rpop(run.segment(1))


async def _alter_references(run: Run) -> None:
    refs = [[run.refs[0][0], run.refs[0][1] - 1], run.refs[1]]  # a shorter history, every chunk genuine
    await run.raw.hset(run.key(run.last), "segments", json.dumps(refs))


async def _move_head(run: Run) -> None:
    fields = await run.raw.hgetall(run.key(run.last))
    await run.raw.hset(run.key("other"), mapping=fields)
    await run.raw.zadd(f"{run.namespace}:workflow:batch", {"other": 1.0})
    run.last = "other"


ATTACKS: dict[str, Callable[[Run], Awaitable[None]]] = {
    "planted_chunk": _plant_chunk,
    "planted_build_chunk": _plant_build_chunk,
    "altered_chunk": _alter_chunk,
    "chunk_moved_between_segments": _move_chunk_between_segments,
    "chunks_swapped": _swap_chunks,
    "chunk_missing": _drop_chunk,
    "references_altered": _alter_references,
    "head_moved_to_another_id": _move_head,
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_with_a_sealer_every_attack_on_a_delta_checkpoint_is_refused_before_decoding(
    attack: str,
    redis_server: str,
    namespace: str,
    raw: aioredis.Redis,
    decodes: list[object],
    restore_from_dict: None,
) -> None:
    storage = EarlierLayoutStorage(redis_server, namespace=namespace, sealer=CheckpointSealer({"k1": KEY}))
    try:
        run = await Run(storage, raw, namespace).go()
        assert (await storage.load(run.last)).state["_step_cache"]  # genuine: loads
        await ATTACKS[attack](run)
        decodes.clear()
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(run.last)
        assert decodes == []  # refused before core's decoder saw anything
        assert WorkflowCheckpoint.__dict__["from_dict"] is not int  # a planted BUILD step never ran
        assert run.last not in await storage.list_checkpoint_ids(workflow_name="batch")
    finally:
        await storage.aclose()


async def test_with_a_sealer_each_result_is_stored_once_sealed_and_reads_back_as_core_saved(
    redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    sealer = CheckpointSealer({"k1": KEY}, encrypt=True)
    storage = EarlierLayoutStorage(redis_server, namespace=namespace, sealer=sealer)
    saved: list[WorkflowCheckpoint] = []
    original = storage.save

    async def keeping(checkpoint: WorkflowCheckpoint) -> str:
        saved.append(copy.deepcopy(checkpoint))
        return await original(checkpoint)

    storage.save = keeping  # type: ignore[method-assign]
    try:
        run = await Run(storage, raw, namespace).go()
        entries = 0
        for position in range(2):
            segment = run.refs[position][0]
            for index, chunk in enumerate(await raw.lrange(run.segment(position), 0, -1)):
                assert is_sealed(chunk)
                assert b"doc-0" not in chunk  # encrypted
                entries += len(json.loads(sealer.open(chunk, context=chunk_context(segment, index))).get("c", []))
        assert entries == len(DOCS) + 3  # each step result once, across both segments
        assert len([key async for key in raw.scan_iter(f"{namespace}:segment:*")]) == 2
        assert len(saved) == len(DOCS) + 1 + 3 + 1
        for checkpoint in saved:
            assert is_sealed(await raw.hget(run.key(checkpoint.checkpoint_id), "body"))
            loaded = await storage.load(checkpoint.checkpoint_id)
            assert encode_checkpoint_value(loaded.to_dict()) == encode_checkpoint_value(checkpoint.to_dict())
    finally:
        await storage.aclose()


MALFORMED: dict[str, Callable[[Run], Awaitable[None]]] = {
    "references_not_json": lambda run: run.raw.hset(run.key(run.last), "segments", b"\xff["),
    "references_not_pairs": lambda run: run.raw.hset(run.key(run.last), "segments", b'{"a": 1}'),
    "reference_count_not_int": lambda run: run.raw.hset(run.key(run.last), "segments", b'[["x", "a"]]'),
    "reference_count_negative": lambda run: run.raw.hset(run.key(run.last), "segments", b'[["x", -1]]'),
    "head_not_utf8": lambda run: run.raw.hset(run.key(run.last), "body", b'["\xff"]'),
    "head_not_a_head": lambda run: run.raw.hset(run.key(run.last), "body", b'{"a": 1}'),
    "chunk_not_utf8": lambda run: run.raw.lset(run.segment(0), 0, b'{"c": "\xff\xfe"}'),
    "chunk_deep": lambda run: run.raw.lset(run.segment(0), 0, b"[" * 200_000 + b"]" * 200_000),
    "chunk_wrong_shape": lambda run: run.raw.lset(run.segment(0), 0, b'{"c": [[0, 1]], "h": 3}'),
    "head_moved_to_another_id": _move_head,
}


@pytest.mark.parametrize("damage", sorted(MALFORMED))
async def test_without_a_sealer_malformed_delta_pieces_give_clean_errors_and_are_skipped(
    damage: str, redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    storage = EarlierLayoutStorage(redis_server, namespace=namespace)
    try:
        run = await Run(storage, raw, namespace).go()
        await MALFORMED[damage](run)
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(run.last)
        assert run.last not in await storage.list_checkpoint_ids(workflow_name="batch")
    finally:
        await storage.aclose()


@pytest.mark.parametrize("references", [b"\xff[", b'{"a": 1}', b'[[1, 2], ["x"], 3]'])
async def test_a_checkpoint_with_altered_references_is_still_deleted_and_saved_over(
    references: bytes, redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    storage = EarlierLayoutStorage(redis_server, namespace=namespace, sealer=CheckpointSealer({"k1": KEY}))
    try:
        run = await Run(storage, raw, namespace).go()
        ids = await storage.list_checkpoint_ids(workflow_name="batch")
        await raw.hset(run.key(ids[0]), "segments", references)
        assert await storage.delete(ids[0])  # the script frees what it can read and never fails
        assert not await raw.exists(run.key(ids[0]))
        await raw.hset(run.key(ids[1]), "segments", references)
        checkpoint = await storage.load(ids[-1])
        checkpoint.checkpoint_id = ids[1]
        assert await storage.save(checkpoint) == ids[1]  # a save over it replaces it
        assert (await storage.load(ids[1])).state["_step_cache"] == checkpoint.state["_step_cache"]
    finally:
        await storage.aclose()
