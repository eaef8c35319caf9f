"""Odd values an attacker or a careless operator can write into the step-cache keys of Redis.

Every ``load`` then returns what core saved or raises ``WorkflowCheckpointException``, and
``list_checkpoints`` skips what it cannot read and never raises: a huge index or parent count (which
Lua would print as ``1e+20``, not an integer Redis accepts) and a key of the wrong type included.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from agent_framework import WorkflowCheckpointException
from test_checkpoint_seal_segments import Run

from agent_framework_functional import RedisCheckpointStorage


@pytest.fixture
def namespace() -> str:
    return f"aff-segattacks:{uuid.uuid4().hex}"


@pytest.fixture
async def raw(redis_server: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server)
    yield client
    await client.aclose()


async def _set_location(run: Run, value: str) -> None:
    key, field = await run.location(run.last)
    await run.raw.hset(key, field, value)  # type: ignore[misc]


async def _huge_parent_count(run: Run) -> None:
    refs = json.loads(await run.raw.hget(run.info(1), "r"))  # type: ignore[misc]
    refs[0][1] = 10**20
    await run.raw.hset(run.info(1), "r", json.dumps(refs))  # type: ignore[misc]


async def _retype(run: Run, key: str) -> None:
    await run.raw.delete(key)
    await run.raw.set(key, b"x")


DAMAGE: dict[str, Callable[[Run], Awaitable[Any]]] = {
    "location_index_huge": lambda run: _set_location(run, f"{run.segments[1]}:{10**20}:"),
    "location_index_2_63": lambda run: _set_location(run, f"{run.segments[1]}:{2**63}:"),
    "parent_count_huge": _huge_parent_count,
    "segment_not_a_list": lambda run: _retype(run, run.segment(1)),
    "parent_segment_not_a_list": lambda run: _retype(run, run.segment(0)),
    "seginfo_not_a_hash": lambda run: _retype(run, run.info(1)),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_odd_values_in_the_keys_give_clean_errors_and_are_skipped(
    damage: str, redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace)
    try:
        run = await Run(storage, raw, namespace).go()
        await DAMAGE[damage](run)
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(run.last)
        assert run.last not in await storage.list_checkpoint_ids(workflow_name="batch")
    finally:
        await storage.aclose()


async def test_a_location_bucket_of_the_wrong_type_is_no_checkpoint(
    redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace)
    try:
        run = await Run(storage, raw, namespace).go()
        key, _ = await run.location(run.last)
        await _retype(run, key)
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(run.last)
        assert run.last not in await storage.list_checkpoint_ids(workflow_name="batch")
    finally:
        await storage.aclose()


INDEXES: dict[str, Callable[[aioredis.Redis, str], Awaitable[Any]]] = {
    "segment_index_not_a_sorted_set": lambda raw, ns: _retype_key(raw, f"{ns}:wsegs:batch"),
}


async def _retype_key(raw: aioredis.Redis, key: str) -> None:
    await raw.delete(key)
    await raw.set(key, b"x")


@pytest.mark.parametrize("damage", sorted(INDEXES))
async def test_a_damaged_index_lists_what_the_others_hold(
    damage: str, redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace)
    try:
        run = await Run(storage, raw, namespace).go()
        before = await storage.list_checkpoint_ids(workflow_name="batch")
        await INDEXES[damage](raw, namespace)
        listed = await storage.list_checkpoint_ids(workflow_name="batch")
        assert listed == ([] if damage.startswith("segment_index") else before)
        assert (await storage.load(run.last)).checkpoint_id == run.last
    finally:
        await storage.aclose()
