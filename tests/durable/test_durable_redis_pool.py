"""A store built from a URL waits for a free connection instead of failing past its pool size."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from durable_support import new_record
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_framework_functional import RedisContinuationStore


async def test_300_concurrent_operations_all_succeed_on_a_url_store(redis_server: str) -> None:
    store = RedisContinuationStore(redis_server, namespace=f"aff-test:{uuid.uuid4().hex}")
    try:
        records = [new_record(store) for _ in range(300)]
        await asyncio.gather(*(store.save(record) for record in records))  # 300 at once, 50 connections
        claims = await asyncio.gather(*(store.claim(record.token_hash) for record in records))
        assert claims == [True] * 300
        gets = await asyncio.gather(*(store.get(record.token_hash) for record in records))
        assert all(got is not None and got.status == "claimed" for got in gets)
    finally:
        await store.aclose()


async def test_the_pool_is_bounded_and_a_wait_past_pool_timeout_fails(redis_server: str) -> None:
    # pool_timeout is long enough for 20 queued saves on a loaded machine, short enough to wait out below.
    store = RedisContinuationStore(
        redis_server, namespace=f"aff-test:{uuid.uuid4().hex}", max_connections=2, pool_timeout=2.0
    )
    blocker = aioredis.Redis.from_url(redis_server)
    try:
        await store.check_durability()
        saved = await asyncio.gather(*(store.save(new_record(store)) for _ in range(20)))  # waits, never fails
        assert saved == [None] * 20
        # Hold both pooled connections in a blocking command; the next operation waits pool_timeout, then fails.
        held = [asyncio.create_task(store._client.blpop([f"aff-test:never:{i}"], timeout=30)) for i in range(2)]  # pyright: ignore[reportPrivateUsage]
        while len(store._client.connection_pool._in_use_connections) < 2:  # pyright: ignore[reportPrivateUsage]  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        with pytest.raises(RedisConnectionError, match="No connection available"):
            await store.get("0" * 64)
        await blocker.lpush("aff-test:never:0", "x")
        await blocker.lpush("aff-test:never:1", "x")
        await asyncio.gather(*held)
        assert await store.get("0" * 64) is None  # a free connection again
    finally:
        await blocker.aclose()
        await store.aclose()


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_max_connections_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(ValueError, match="max_connections"):
        RedisContinuationStore("redis://127.0.0.1:1/0", max_connections=value)  # type: ignore[arg-type]


def test_pool_timeout_must_be_a_positive_duration() -> None:
    with pytest.raises(ValueError, match="pool_timeout"):
        RedisContinuationStore("redis://127.0.0.1:1/0", pool_timeout=0)
