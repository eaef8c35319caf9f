"""A long-running RedisContinuationStore across a SIGKILL and restart of its redis-server.

* Same persistence after the restart: every pooled connection the server dropped is retried once on a
  fresh connection, so the operations right after the restart succeed (none fails with
  ``ConnectionError``).
* Persistence set with ``CONFIG SET`` only (no ``CONFIG REWRITE``): the restarted server runs on its
  snapshot-only defaults, and the store, which checks persistence on every new connection, refuses
  it with ``ContinuationStoreDurabilityError`` instead of accepting a spent token again.
* The same with ``CONFIG REWRITE`` (what "Redis" in the docs shows): the setting survives
  the restart and the store keeps working.
* A claim retried after its first attempt took effect wins again (same claimer), so the retry
  cannot lose a resume; another claimer still loses.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from durable_support import REDIS_DURABLE_OPTIONS, RedisServer, free_port, new_record, ping
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_framework_functional import ContinuationStoreDurabilityError, RedisContinuationStore

pytestmark = pytest.mark.slow

OPERATIONS = 120  # more than the pool's 50 connections: every pooled connection is in use before the kill


class ConfiguredRedis:
    """A redis-server started from a config file (so ``CONFIG REWRITE`` has somewhere to write)."""

    def __init__(self, binary: str, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.binary, self.port = binary, free_port()
        self.config = directory / "redis.conf"
        self.config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {directory}\nlogfile {directory / 'redis.log'}\n", encoding="utf-8"
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> ConfiguredRedis:
        self.process = subprocess.Popen(
            [self.binary, str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while not ping(self.port):
            assert self.process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None


@pytest.fixture
def configured_redis(redis_binary: str, tmp_path: Path) -> Iterator[ConfiguredRedis]:
    server = ConfiguredRedis(redis_binary, tmp_path / "redis-conf")
    yield server.start()
    server.stop()


async def _make_durable_at_runtime(url: str, *, rewrite: bool) -> None:
    admin = aioredis.Redis.from_url(url)
    try:
        await admin.config_set("appendonly", "yes")
        await admin.config_set("appendfsync", "always")
        if rewrite:
            await admin.execute_command("CONFIG", "REWRITE")
        # Turning the AOF on at runtime starts a rewrite; until it ends there is no AOF to load after a kill (on a
        # loaded machine the test's writes and kill raced it and the records were lost).
        for _ in range(200):
            info = await admin.info("persistence")
            if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("Redis did not finish the AOF rewrite that CONFIG SET appendonly yes started")
    finally:
        await admin.aclose()


async def test_after_a_restart_with_the_same_config_the_next_operations_all_succeed(
    redis_servers: Callable[..., RedisServer],
) -> None:
    server = redis_servers(*REDIS_DURABLE_OPTIONS)
    store = RedisContinuationStore(server.url, namespace=f"aff-test:{uuid.uuid4().hex}")
    try:
        records = [new_record(store) for _ in range(OPERATIONS)]
        await asyncio.gather(*(store.save(record) for record in records))  # fills the pool
        server.kill()
        server.start()  # same port, same folder, same options: the AOF brings every record back
        claims = await asyncio.gather(*(store.claim(record.token_hash) for record in records), return_exceptions=True)
        assert [claim for claim in claims if isinstance(claim, BaseException)] == []
        assert claims == [True] * OPERATIONS
        stored = await asyncio.gather(*(store.get(record.token_hash) for record in records))
        assert {got.status if got is not None else None for got in stored} == {"claimed"}
    finally:
        await store.aclose()


async def test_a_restart_that_reverts_config_set_persistence_is_refused(configured_redis: ConfiguredRedis) -> None:
    await _make_durable_at_runtime(configured_redis.url, rewrite=False)
    store = RedisContinuationStore(configured_redis.url, namespace=f"aff-test:{uuid.uuid4().hex}")
    try:
        assert await store.check_durability() == "appendfsync_always"
        records = [new_record(store) for _ in range(OPERATIONS)]
        await asyncio.gather(*(store.save(record) for record in records))
        configured_redis.kill()
        configured_redis.start()  # the config file never learnt appendonly: snapshot-only again
        outcomes = await asyncio.gather(*(store.claim(record.token_hash) for record in records), return_exceptions=True)
        assert all(isinstance(outcome, ContinuationStoreDurabilityError) for outcome in outcomes), outcomes[:3]
        assert "appendonly" in str(outcomes[0])
        with pytest.raises(ContinuationStoreDurabilityError):
            await store.get(records[0].token_hash)
    finally:
        await store.aclose()


async def test_with_config_rewrite_the_persistence_survives_the_restart(configured_redis: ConfiguredRedis) -> None:
    await _make_durable_at_runtime(configured_redis.url, rewrite=True)
    store = RedisContinuationStore(configured_redis.url, namespace=f"aff-test:{uuid.uuid4().hex}")
    try:
        records = [new_record(store) for _ in range(OPERATIONS)]
        await asyncio.gather(*(store.save(record) for record in records))
        await store.claim(records[0].token_hash)
        configured_redis.kill()
        configured_redis.start()
        assert "appendfsync always" in configured_redis.config.read_text(encoding="utf-8")
        claims = await asyncio.gather(*(store.claim(record.token_hash) for record in records), return_exceptions=True)
        assert claims == [False] + [True] * (OPERATIONS - 1)  # the claim before the kill survived it
    finally:
        await store.aclose()


async def test_a_client_passed_in_gets_the_check_on_its_new_connections(configured_redis: ConfiguredRedis) -> None:
    await _make_durable_at_runtime(configured_redis.url, rewrite=False)
    client = aioredis.Redis.from_url(configured_redis.url)
    store = RedisContinuationStore(client, namespace=f"aff-test:{uuid.uuid4().hex}")
    try:
        record = new_record(store)
        await store.save(record)
        configured_redis.kill()
        configured_redis.start()
        with pytest.raises(ContinuationStoreDurabilityError):
            for _ in range(2):  # the caller's client keeps its own retry policy: at most one ConnectionError
                try:
                    await store.claim(record.token_hash)
                except RedisConnectionError:
                    continue
    finally:
        await client.aclose()


async def test_a_retried_claim_recognises_its_own_claim(redis_server: str) -> None:
    store = RedisContinuationStore(redis_server, namespace=f"aff-test:{uuid.uuid4().hex}")
    try:
        record = new_record(store)
        await store.save(record)
        assert await store.claim(record.token_hash, claimer="run-a") is True
        assert await store.claim(record.token_hash, claimer="run-a") is True  # what a retry after a lost reply sees
        assert await store.claim(record.token_hash, claimer="run-b") is False
        assert await store.claim(record.token_hash) is False
    finally:
        await store.aclose()
