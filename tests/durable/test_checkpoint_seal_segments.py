"""Sealed step-cache checkpoints in today's Redis layout: each chunk (which carries its head) opened before decoding.

``RedisCheckpointStorage`` stores a checkpoint of a run this package drives as its chunk in
``<namespace>:segment:<id>`` (its head inside), a location ``<segment id>:<index>`` in a
``loc:<bucket>`` hash, and the segment's parents in ``seginfo:<id>`` (the copy the load trusts
is the one sealed in the segment's first chunk). With a ``CheckpointSealer`` each chunk is sealed
under its segment id and index. The attacks of ``test_checkpoint_seal.py`` on a step-cache chunk
(planted, altered, moved, swapped and missing chunks), plus an altered location, altered parents and an id pointed at
another checkpoint's chunk, are each refused before core's decoder sees anything, and the damaged
checkpoint is not listed. Without a sealer, malformed pieces give a clean ``WorkflowCheckpointException``.
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
from test_checkpoint_seal import _from_dict_hijack_pickle, _pickled, _posix_path_pickle

from agent_framework_functional import CheckpointSealer, RedisCheckpointStorage, workflow
from agent_framework_functional._durable.checkpoint_seal import chunk_context, is_sealed
from agent_framework_functional._durable.redis_checkpoint import location_of
from agent_framework_functional._step_cache import StepCacheOffer

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


def _planted_chunk(value: dict[str, str]) -> bytes:
    return json.dumps({"c": [[0, "planted", {"x": value}]]}).encode("utf-8")


@pytest.fixture
def namespace() -> str:
    return f"aff-sealsegments:{uuid.uuid4().hex}"


class Run:
    """A finished run (paused, then resumed) on a storage, and where its pieces are in Redis."""

    def __init__(self, storage: RedisCheckpointStorage, raw: aioredis.Redis, namespace: str) -> None:
        self.storage, self.raw, self.namespace = storage, raw, namespace
        self.last = ""
        self.segments: list[str] = []

    async def go(self) -> Run:
        wf = workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=self.storage)
        paused = await wf.run(DOCS)
        await wf.run(
            responses=dict.fromkeys(wf.pending_request_ids, "ok"), continuation_token=paused.continuation_token
        )
        latest = await self.storage.get_latest(workflow_name="batch")
        assert latest is not None
        self.last = latest.checkpoint_id
        members = await self.raw.zrange(f"{self.namespace}:wsegs:batch", 0, -1)
        self.segments = [member.decode() for member in members]
        assert len(self.segments) == 2  # the resume's segment continues the pause's
        return self

    def segment(self, position: int) -> str:
        return f"{self.namespace}:segment:{self.segments[position]}"

    def info(self, position: int) -> str:
        return f"{self.namespace}:seginfo:{self.segments[position]}"

    async def location(self, checkpoint_id: str) -> tuple[str, bytes]:
        """The location hash that maps (or would map) ``checkpoint_id``, and the field."""
        field, bucket = location_of(checkpoint_id)
        return f"{self.namespace}:loc:{bucket}", field


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


async def _alter_parents(run: Run) -> None:
    refs = json.loads(await run.raw.hget(run.info(1), "r"))  # type: ignore[misc]
    refs[0][1] -= 1  # a shorter history, every chunk genuine
    await run.raw.hset(run.info(1), "r", json.dumps(refs))  # type: ignore[misc]


async def _alter_location(run: Run) -> None:
    key, field = await run.location(run.last)
    await run.raw.hset(key, field, f"{run.segments[1]}:0:")  # type: ignore[misc]  # another checkpoint's chunk


async def _point_another_id_at_it(run: Run) -> None:
    key, field = await run.location(run.last)
    value = await run.raw.hget(key, field)  # type: ignore[misc]
    other_key, other_field = await run.location("other")
    await run.raw.hset(other_key, other_field, value)  # type: ignore[misc]
    run.last = "other"


ATTACKS: dict[str, Callable[[Run], Awaitable[None]]] = {
    "planted_chunk": _plant_chunk,
    "planted_build_chunk": _plant_build_chunk,
    "altered_chunk": _alter_chunk,
    "chunk_moved_between_segments": _move_chunk_between_segments,
    "chunks_swapped": _swap_chunks,
    "chunk_missing": _drop_chunk,
    "parents_altered": _alter_parents,
    "location_altered": _alter_location,
    "another_id_pointed_at_its_chunk": _point_another_id_at_it,
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_with_a_sealer_every_attack_on_a_segment_checkpoint_is_refused_before_decoding(
    attack: str,
    redis_server: str,
    namespace: str,
    raw: aioredis.Redis,
    decodes: list[object],
    restore_from_dict: None,
) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace, sealer=CheckpointSealer({"k1": KEY}))
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


async def test_with_a_sealer_each_chunk_is_sealed_and_every_checkpoint_reads_back_as_core_saved(
    redis_server: str,
    namespace: str,
    raw: aioredis.Redis,
) -> None:
    sealer = CheckpointSealer({"k1": KEY}, encrypt=True)
    storage = RedisCheckpointStorage(redis_server, namespace=namespace, sealer=sealer)
    saved: list[WorkflowCheckpoint] = []
    original = storage.save_with_offer

    async def keeping(checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        saved.append(copy.deepcopy(checkpoint))
        return await original(checkpoint, offer)

    storage.save_with_offer = keeping  # type: ignore[method-assign]
    try:
        run = await Run(storage, raw, namespace).go()
        entries = heads = 0
        for position, segment in enumerate(run.segments):
            for index, chunk in enumerate(await raw.lrange(run.segment(position), 0, -1)):
                assert is_sealed(chunk)
                assert b"doc-0" not in chunk  # encrypted
                opened = json.loads(sealer.open(chunk, context=chunk_context(segment, index)))
                entries += len(opened.get("c", []))
                heads += 1
        assert entries == len(DOCS) + 3  # each step result once, across both segments
        assert heads == len(saved) == len(DOCS) + 1 + 3 + 1  # one chunk per checkpoint, its head inside
        for checkpoint in saved:
            loaded = await storage.load(checkpoint.checkpoint_id)
            assert encode_checkpoint_value(loaded.to_dict()) == encode_checkpoint_value(checkpoint.to_dict())
        assert await storage.list_checkpoint_ids(workflow_name="batch") == [c.checkpoint_id for c in saved]
    finally:
        await storage.aclose()


async def _set_location(run: Run, value: bytes) -> None:
    key, field = await run.location(run.last)
    await run.raw.hset(key, field, value)  # type: ignore[misc]


MALFORMED: dict[str, Callable[[Run], Awaitable[Any]]] = {
    "location_not_a_location": lambda run: _set_location(run, b"\xff"),
    "location_index_past_the_end": lambda run: _set_location(run, f"{run.segments[1]}:999:".encode()),
    "parents_not_json": lambda run: run.raw.hset(run.info(1), "r", b"\xff["),  # type: ignore[misc]
    "parents_not_pairs": lambda run: run.raw.hset(run.info(1), "r", b'{"a": 1}'),  # type: ignore[misc]
    "chunk_not_utf8": lambda run: run.raw.lset(run.segment(0), 0, b'{"c": "\xff\xfe"}'),
    "chunk_deep": lambda run: run.raw.lset(run.segment(0), 0, b"[" * 200_000 + b"]" * 200_000),
    "chunk_wrong_shape": lambda run: run.raw.lset(run.segment(0), 0, b'{"c": [[0, 1]], "h": 3}'),
    "head_not_a_head": lambda run: run.raw.rpush(run.segment(1), b'{"i": 5, "t": []}'),
    "own_head_wrong_shape": lambda run: _replace_last(run, {"i": None, "t": 7}),
}


async def _replace_last(run: Run, head: dict[str, Any]) -> None:
    chunk = json.loads(await run.raw.lindex(run.segment(1), -1))  # type: ignore[misc]
    await run.raw.lset(run.segment(1), -1, json.dumps({**chunk, **head}))


@pytest.mark.parametrize("damage", sorted(MALFORMED))
async def test_without_a_sealer_malformed_segment_pieces_give_clean_errors_and_are_skipped(
    damage: str,
    redis_server: str,
    namespace: str,
    raw: aioredis.Redis,
) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace)
    try:
        run = await Run(storage, raw, namespace).go()
        await MALFORMED[damage](run)
        if damage != "head_not_a_head":
            with pytest.raises(WorkflowCheckpointException):
                await storage.load(run.last)
        listed = await storage.list_checkpoint_ids(workflow_name="batch")
        assert run.last not in listed or damage == "head_not_a_head"
        deleted = await storage.delete(run.last)  # the scripts free what they can read and never fail
        assert deleted == (damage != "location_not_a_location")  # an unreadable location is no checkpoint
        key, field = await run.location(run.last)
        assert not await run.raw.hexists(key, field)  # type: ignore[misc]  # ... and is dropped all the same
    finally:
        await storage.aclose()
