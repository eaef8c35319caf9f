"""Fixtures of the durable-continuation tests: every store, private Redis servers, shared checkpoints.

``store_spec`` runs a test once per store (SQLite, Redis, Postgres). The session's ``redis_server`` and
``postgres_server`` are in ``tests/conftest.py``; ``redis_servers`` here starts private servers that a
test can SIGKILL and restart. All fail (never skip) when the binary is missing: run
``scripts/services/redis.sh`` / ``scripts/services/postgres.sh``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import durable_workflows
import pytest
import redis.asyncio as aioredis
from agent_framework import FileCheckpointStorage, WorkflowCheckpoint
from durable_support import FakeClock, RedisServer, StoreSpec, close_store, reap_workers
from postgres_server import new_schema

from agent_framework_functional import ContinuationStore


@pytest.fixture
async def raw(redis_server: str) -> AsyncIterator[aioredis.Redis]:
    """A client of the session's Redis, to read and alter what a storage wrote."""
    client = aioredis.Redis.from_url(redis_server)
    yield client
    await client.aclose()


@pytest.fixture
def restore_from_dict() -> Iterator[None]:
    """Puts back ``WorkflowCheckpoint.from_dict`` after a test whose planted body tries to replace it."""
    original = WorkflowCheckpoint.__dict__["from_dict"]
    yield
    type.__setattr__(WorkflowCheckpoint, "from_dict", original)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every call of core's checkpoint decoder (to show a refused piece never reached it)."""
    from agent_framework._workflows import _checkpoint_encoding

    calls: list[object] = []
    real = _checkpoint_encoding.decode_checkpoint_value

    def counting(value: Any, **options: Any) -> Any:
        calls.append(value)
        return real(value, **options)

    monkeypatch.setattr(_checkpoint_encoding, "decode_checkpoint_value", counting)
    return calls


@pytest.fixture
def redis_servers(redis_binary: str, tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start private redis-server processes (``make(*options)``); all are stopped after the test."""
    started: list[RedisServer] = []

    def make(*options: str, binary: str | None = None) -> RedisServer:
        server = RedisServer(binary or redis_binary, tmp_path / f"redis-{len(started)}", *options)
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.stop()


@pytest.fixture(autouse=True)
def _reap_workers() -> Iterator[None]:
    """After each test, kill and reap the worker processes it started and left running (see reap_workers)."""
    yield
    reap_workers()


@pytest.fixture(autouse=True)
def _reset_workflow_effects() -> Iterator[None]:
    durable_workflows.EFFECTS.clear()
    durable_workflows.HOOKS.clear()
    yield
    durable_workflows.EFFECTS.clear()
    durable_workflows.HOOKS.clear()


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    """How to open the store under test (each test runs once per store)."""
    if request.param == "sqlite":
        return StoreSpec("sqlite", str(tmp_path / "continuations.db"))
    if request.param == "postgres":
        return StoreSpec("postgres", url := request.getfixturevalue("postgres_server"), namespace=new_schema(url))
    url = request.getfixturevalue("redis_server")
    return StoreSpec("redis", url, namespace=f"aff-test:{uuid.uuid4().hex}")


@pytest.fixture
async def make_store(store_spec: StoreSpec) -> AsyncIterator[Callable[..., ContinuationStore]]:
    """Open (more) store objects on the same database; all are closed after the test."""
    opened: list[ContinuationStore] = []

    def make(**options: Any) -> ContinuationStore:
        store = store_spec.open(**options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await close_store(store)


@pytest.fixture
def store(make_store: Callable[..., ContinuationStore]) -> ContinuationStore:
    return make_store()


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints"


@pytest.fixture
def storage(checkpoint_dir: Path) -> FileCheckpointStorage:
    """A real FileCheckpointStorage in tmp_path, shared by every "process" of a test."""
    return FileCheckpointStorage(checkpoint_dir)


@pytest.fixture
def effects_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file that resumed user code (in any process) appends one line to per run: it counts the resumes."""
    path = tmp_path / "effects.txt"
    monkeypatch.setenv("AFF_DURABLE_EFFECTS", str(path))
    return path


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
