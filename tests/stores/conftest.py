"""Fixtures of the store conformance suite: every continuation store and checkpoint storage, one contract.

``make_store`` / ``store`` run each test once per continuation store (SQLite, Redis, Postgres, and
yours when ``AFF_STORE_FACTORY`` names it); ``storage_backend`` / ``make_storage`` once per checkpoint
storage (core's in-memory and file storages as the reference, SQLite, Redis, Postgres, and yours when
``AFF_CHECKPOINT_STORAGE_FACTORY`` names it). See ``store_backends.py`` for the factory shape.
Redis and Postgres are real servers (``redis_server``, ``postgres_server`` in ``tests/conftest.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import CheckpointStorage
from store_backends import Clock, StorageBackend, custom_factory, open_storage_backend, open_store_backend

from agent_framework_functional import (
    ContinuationStore,
    PostgresCheckpointStorage,
    RedisCheckpointStorage,
    SQLiteCheckpointStorage,
)

STORE_KINDS = ["sqlite", "redis", "postgres"] + (["custom"] if custom_factory("AFF_STORE_FACTORY") else [])
STORAGE_KINDS = ["memory", "file", "sqlite", "redis", "postgres"] + (
    ["custom"] if custom_factory("AFF_CHECKPOINT_STORAGE_FACTORY") else []
)
SERVERS = {"redis": "redis_server", "postgres": "postgres_server"}


async def _close(opened: list[ContinuationStore] | list[CheckpointStorage]) -> None:
    for item in opened:
        if isinstance(
            item, (ContinuationStore, SQLiteCheckpointStorage, RedisCheckpointStorage, PostgresCheckpointStorage)
        ):
            await item.aclose()  # core's checkpoint storages hold nothing to close


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=STORE_KINDS)
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable[..., ContinuationStore]]:
    """Open store objects (``make_store(ttl=..., clock=...)``) on one fresh database; all closed afterwards."""
    kind: str = request.param
    if kind == "custom":
        factory = custom_factory("AFF_STORE_FACTORY")
        assert factory is not None
        opener = factory(tmp_path)
    else:
        server = request.getfixturevalue(SERVERS[kind]) if kind in SERVERS else None
        opener = open_store_backend(kind, tmp_path, server)
    opened: list[ContinuationStore] = []

    def make(**options: Any) -> ContinuationStore:
        store = opener(**options)
        opened.append(store)
        return store

    yield make
    await _close(opened)


@pytest.fixture
def store(make_store: Callable[..., ContinuationStore]) -> ContinuationStore:
    return make_store()


@pytest.fixture(params=STORAGE_KINDS)
def storage_backend(request: pytest.FixtureRequest, tmp_path: Path) -> StorageBackend:
    """The checkpoint storage under test, on fresh storage."""
    kind: str = request.param
    if kind == "custom":
        factory = custom_factory("AFF_CHECKPOINT_STORAGE_FACTORY")
        assert factory is not None
        return StorageBackend(factory(tmp_path), encodes=True)
    server = request.getfixturevalue(SERVERS[kind]) if kind in SERVERS else None
    return open_storage_backend(kind, tmp_path, server)


@pytest.fixture
async def make_storage(storage_backend: StorageBackend) -> AsyncIterator[Callable[[], CheckpointStorage]]:
    """Open checkpoint storage objects on the same storage; all closed afterwards."""
    opened: list[CheckpointStorage] = []

    def make() -> CheckpointStorage:
        storage = storage_backend.open()
        opened.append(storage)
        return storage

    yield make
    await _close(opened)


@pytest.fixture
def checkpoint_storage(make_storage: Callable[[], CheckpointStorage]) -> CheckpointStorage:
    return make_storage()
