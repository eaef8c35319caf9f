"""Long runs on ``RedisCheckpointStorage``: each step result stored once, every checkpoint read back as core wrote it.

A 1,000-step run that pauses, its response-only resume, and a restore from a checkpoint in the
middle, on a real redis-server: every checkpoint core saved loads back equal to what core handed to
``save`` (compared through core's encoding); the step cache entries stored across all segments are
exactly the run's step calls (each stored once, the resume's segment continuing the pause's); core
used directly on the same storage stores whole checkpoints, as before; deleting checkpoints frees
their segments once nothing references them (one in the middle of a segment no longer loads nor lists,
the ones after it still do); a segment lost meanwhile (expired) is rewritten whole; no key is kept per
checkpoint, and every key expires with ``ttl``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import agent_framework
import pytest
import redis.asyncio as aioredis
from agent_framework import RunContext, WorkflowCheckpoint, WorkflowCheckpointException, step
from agent_framework._workflows._checkpoint_encoding import encode_checkpoint_value
from durable_support import RedisServer

from agent_framework_functional import RedisCheckpointStorage, workflow
from agent_framework_functional._durable.redis_checkpoint import location_of
from agent_framework_functional._step_cache import StepCacheOffer

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

    def __init__(self, inner: RedisCheckpointStorage, keep: Callable[[int], bool]) -> None:
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


@pytest.fixture
def redis_url(redis_servers: Callable[..., RedisServer]) -> str:
    return redis_servers("--appendonly", "no", "--save", "").url


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    opened = aioredis.Redis.from_url(redis_url)
    yield opened
    await opened.aclose()


async def _stored_entries(client: aioredis.Redis, namespace: str) -> tuple[int, int]:
    """(step-cache entries in all segments, number of segments of runs) under ``namespace``."""
    entries = segments = 0
    async for key in client.scan_iter(f"{namespace}:segment:*"):
        chunks = [json.loads(chunk) for chunk in await client.lrange(key, 0, -1)]
        if chunks and "checkpoint_id" in chunks[0]:
            continue  # a checkpoint saved whole (without a run's offer), alone in its segment
        segments += 1
        entries += sum(len(chunk.get("c", [])) for chunk in chunks)
    return entries, segments


async def test_a_thousand_step_run_stores_each_result_once_and_reads_back_what_core_wrote(
    redis_url: str, client: aioredis.Redis
) -> None:
    namespace = f"long-{uuid.uuid4().hex}"
    storage = RedisCheckpointStorage(redis_url, namespace=namespace)
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
        entries, segments = await _stored_entries(client, namespace)
        assert (entries, segments) == (STEPS + 5, 2)  # each result once; the resume continues the pause's segment
        kinds = [key.split(b":")[1] async for key in client.scan_iter(f"{namespace}:*")]
        assert kinds.count(b"loc") <= 256 and len(kinds) - kinds.count(b"loc") == 2 * 2 + 1  # no key per checkpoint

        # Restore from a checkpoint in the middle on a fresh instance: core's replay, one more segment.
        middle = tee.ids[STEPS // 2]
        restored = (
            await workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage).run(checkpoint_id=middle)
        )
        assert restored.get_final_state().name == "IDLE_WITH_PENDING_REQUESTS"
        entries, segments = await _stored_entries(client, namespace)
        assert (entries, segments) == (STEPS + 5 + (STEPS - STEPS // 2 - 1), 3)
    finally:
        await storage.aclose()


async def test_core_used_directly_on_the_same_storage_stores_whole_checkpoints(
    redis_url: str, client: aioredis.Redis
) -> None:
    namespace = f"core-{uuid.uuid4().hex}"
    storage = RedisCheckpointStorage(redis_url, namespace=namespace)
    try:
        core = agent_framework.workflow(batch).build(checkpoint_storage=storage)
        await core.run([f"d{index}" for index in range(5)])
        ids = await storage.list_checkpoint_ids(workflow_name="batch")
        assert len(ids) == 6
        for checkpoint_id in ids:
            field, bucket = location_of(checkpoint_id)
            segment = (await client.hget(f"{namespace}:loc:{bucket}", field)).split(b":")[0].decode()  # type: ignore[misc]
            (body,) = await client.lrange(f"{namespace}:segment:{segment}", 0, -1)  # type: ignore[misc]
            assert len(json.loads(body)["state"]["_step_cache"]) <= 5  # whole, alone in its segment
        assert await _stored_entries(client, namespace) == (0, 0)
        last = (await storage.list_checkpoints(workflow_name="batch"))[-1]
        assert len(last.state["_step_cache"]) == 5
    finally:
        await storage.aclose()


async def test_deleting_checkpoints_frees_a_segment_once_nothing_references_it(
    redis_url: str, client: aioredis.Redis
) -> None:
    namespace = f"del-{uuid.uuid4().hex}"
    storage = RedisCheckpointStorage(redis_url, namespace=namespace)
    try:
        await (
            workflow(checkpoint_retention=None)(batch)
            .build(checkpoint_storage=storage)
            .run([f"d{index}" for index in range(4)])
        )
        ids = await storage.list_checkpoint_ids(workflow_name="batch")
        assert len(ids) == 5
        for checkpoint_id in ids[:-1]:
            assert await storage.delete(checkpoint_id)
        assert (await _stored_entries(client, namespace))[1] == 1
        last = await storage.load(ids[-1])
        assert len(last.state["_step_cache"]) == 4
        assert await storage.delete(ids[-1])
        assert not await storage.delete(ids[-1])
        assert [key async for key in client.scan_iter(f"{namespace}:seg*")] == []
    finally:
        await storage.aclose()


async def test_a_segment_lost_meanwhile_is_written_again_whole(redis_url: str, client: aioredis.Redis) -> None:
    namespace = f"lost-{uuid.uuid4().hex}"
    storage = RedisCheckpointStorage(redis_url, namespace=namespace)
    try:
        wf = workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage)
        paused = await wf.run([f"d{index}" for index in range(6)])
        [segment] = [key async for key in client.scan_iter(f"{namespace}:segment:*")]
        await client.delete(segment)  # as if it expired while the pause waited
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


async def test_a_finished_run_deletes_its_chain_with_delete_many(redis_url: str, client: aioredis.Redis) -> None:
    namespace = f"many-{uuid.uuid4().hex}"
    storage = RedisCheckpointStorage(redis_url, namespace=namespace)
    calls: list[int] = []
    delete_many = storage.delete_many

    async def counted(checkpoint_ids: list[str]) -> int:
        calls.append(len(checkpoint_ids))
        return await delete_many(checkpoint_ids)

    storage.delete_many = counted  # type: ignore[method-assign]
    try:
        done = await workflow(batch).build(checkpoint_storage=storage).run([f"d{index}" for index in range(6)])
        assert done.get_final_state().name == "IDLE_WITH_PENDING_REQUESTS"
        assert calls == [6]  # one call for the six step checkpoints; the pause's is kept
        assert (await _stored_entries(client, namespace))[1] == 1
        [kept] = await storage.list_checkpoint_ids(workflow_name="batch")
        assert await storage.delete_many([kept, kept, "missing"]) == 1
        assert [key async for key in client.scan_iter(f"{namespace}:*")] == []
    finally:
        await storage.aclose()


async def test_a_checkpoint_deleted_in_the_middle_of_a_segment_no_longer_loads_and_the_rest_still_do(
    redis_url: str,
) -> None:
    storage = RedisCheckpointStorage(redis_url, namespace=f"mid-{uuid.uuid4().hex}")
    try:
        await (
            workflow(checkpoint_retention=None)(batch)
            .build(checkpoint_storage=storage)
            .run([f"d{i}" for i in range(6)])
        )
        ids = await storage.list_checkpoint_ids(workflow_name="batch")
        assert len(ids) == 7
        assert await storage.delete(ids[3])
        with pytest.raises(WorkflowCheckpointException, match="No checkpoint found"):
            await storage.load(ids[3])
        assert await storage.list_checkpoint_ids(workflow_name="batch") == ids[:3] + ids[4:]
        before, after = [len((await storage.load(ids[k])).state["_step_cache"]) for k in (2, 4)]
        assert after == before + 2  # the deleted checkpoint's chunk still holds its step, for the ones after it
        assert await storage.delete_many(ids) == 6
        assert await storage.list_checkpoint_ids(workflow_name="batch") == []
    finally:
        await storage.aclose()


async def test_every_key_of_a_long_run_expires_with_ttl(redis_url: str, client: aioredis.Redis) -> None:
    namespace = f"ttl-{uuid.uuid4().hex}"
    storage = RedisCheckpointStorage(redis_url, namespace=namespace, ttl=0.4)
    try:
        await (
            workflow(checkpoint_retention=None)(batch)
            .build(checkpoint_storage=storage)
            .run([f"d{i}" for i in range(20)])
        )
        keys = [key async for key in client.scan_iter(f"{namespace}:*")]
        assert keys
        for key in keys:
            assert 0 < await client.pttl(key) <= 400
        assert len(await storage.list_checkpoint_ids(workflow_name="batch")) == 21
        await asyncio.sleep(0.5)
        assert [key async for key in client.scan_iter(f"{namespace}:*")] == []
    finally:
        await storage.aclose()


async def test_a_bucket_that_keeps_being_written_drops_its_expired_locations(
    redis_url: str, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_framework_functional._durable import redis_checkpoint

    location_of = redis_checkpoint.location_of

    def one_bucket(checkpoint_id: str) -> tuple[bytes, str]:
        return location_of(checkpoint_id)[0], "0"

    monkeypatch.setattr(redis_checkpoint, "location_of", one_bucket)
    namespace = f"prune-{uuid.uuid4().hex}"
    bucket = f"{namespace}:loc:0"
    expired = {f"old{index}".encode(): b"gone:0:1" for index in range(70)}  # expired long ago
    await client.hset(bucket, mapping=expired)  # type: ignore[arg-type]
    storage = RedisCheckpointStorage(redis_url, namespace=namespace)
    try:
        await (
            workflow(checkpoint_retention=None)(batch)
            .build(checkpoint_storage=storage)
            .run([f"d{i}" for i in range(3)])
        )
        fields = set(await client.hkeys(bucket))  # type: ignore[misc]
        assert not fields & set(expired)  # dropped by the first save that found the bucket past 64 entries
        assert len(fields - {b""}) == 4 and len(await storage.list_checkpoint_ids(workflow_name="batch")) == 4
        assert [key async for key in client.scan_iter(f"{namespace}:seginfo:gone")] == []
    finally:
        await storage.aclose()
