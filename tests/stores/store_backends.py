"""The backends the store conformance suite runs against, and how to add your own (no fixtures here).

A continuation-store backend is a function ``open_backend(workdir: Path) -> opener``: given an empty
folder of its own, it prepares a fresh, empty database and returns ``opener(**options)``, which opens
one more store object on that same database each time it is called (``options`` may hold ``ttl=``
and ``clock=``, passed to the store). A checkpoint-storage backend is the same with
``opener()`` returning a ``CheckpointStorage``. Every store, and the checkpoint storages that hold connections
(this package's), are closed after each test.

To run the suite against your own store, name your function in an environment variable:

    AFF_STORE_FACTORY=my_pkg.testing:open_store pytest tests/stores -k custom
    AFF_CHECKPOINT_STORAGE_FACTORY=my_pkg.testing:open_storage pytest tests/stores -k custom
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_framework import CheckpointStorage, FileCheckpointStorage, InMemoryCheckpointStorage
from postgres_server import new_schema

from agent_framework_functional import (
    CheckpointSealer,
    ContinuationStore,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RedisCheckpointStorage,
    RedisContinuationStore,
    SQLiteCheckpointStorage,
    SQLiteContinuationStore,
)

StoreOpener = Callable[..., ContinuationStore]
DurableStorage = SQLiteCheckpointStorage | RedisCheckpointStorage | PostgresCheckpointStorage
"""This package's checkpoint storages (each takes ``sealer=`` and holds connections to close)."""
StorageOpener = Callable[[], CheckpointStorage]
Plant = Callable[[str, str, bytes], Any]
"""Write raw bytes as the stored body of checkpoint ``id`` of workflow ``name`` (an attacker with write access)."""


def custom_factory(variable: str) -> Callable[[Path], Any] | None:
    """The ``module:function`` named by environment ``variable``, imported; None when it is not set."""
    target = os.environ.get(variable)
    if not target:
        return None
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def open_store_backend(kind: str, workdir: Path, server: str | None) -> StoreOpener:
    """The opener of one of this package's stores on a fresh database (``server``: Redis or Postgres URL)."""
    if kind == "sqlite":
        path = workdir / "continuations.db"
        return lambda **options: SQLiteContinuationStore(path, **options)
    assert server is not None
    if kind == "redis":
        namespace = f"conformance:{uuid.uuid4().hex}"
        return lambda **options: RedisContinuationStore(server, namespace=namespace, **options)
    schema = new_schema(server, "c")
    return lambda **options: PostgresContinuationStore(server, schema=schema, **options)


@dataclass
class StorageBackend:
    """One checkpoint storage under test: its opener, whether it encodes bodies, and how to plant a raw one."""

    open: StorageOpener
    encodes: bool  # stores an encoded copy (refuses types outside its allow-list at save)
    plant: Plant | None = None
    # The same storage with a sealer (or none: a plain one with its own type).
    sealed: Callable[[CheckpointSealer | None], DurableStorage] | None = None


def open_storage_backend(kind: str, workdir: Path, server: str | None) -> StorageBackend:
    """One of the checkpoint storages: core's two (the reference) or this package's three, on fresh storage."""
    if kind == "memory":
        shared = InMemoryCheckpointStorage()
        return StorageBackend(lambda: shared, encodes=False)
    if kind == "file":
        folder = workdir / "checkpoints"

        def plant_file(checkpoint_id: str, workflow_name: str, body: bytes) -> None:
            folder.mkdir(exist_ok=True)
            (folder / f"{checkpoint_id}.json").write_bytes(body)

        return StorageBackend(lambda: FileCheckpointStorage(folder), encodes=True, plant=plant_file)
    if kind == "sqlite":
        return sqlite_storage_backend(workdir / "app.db")
    assert server is not None
    if kind == "redis":
        namespace = f"conformance:{uuid.uuid4().hex}"

        def plant_redis(checkpoint_id: str, workflow_name: str, body: bytes) -> None:
            import redis

            from agent_framework_functional._durable.redis_checkpoint import location_of

            client = redis.Redis.from_url(server)
            segment, (field, bucket) = f"planted-{checkpoint_id}", location_of(checkpoint_id)
            try:  # a whole body: alone in its segment
                client.delete(f"{namespace}:segment:{segment}")
                client.rpush(f"{namespace}:segment:{segment}", body)
                client.hset(f"{namespace}:seginfo:{segment}", mapping={"n": 1, "w": workflow_name, "r": "[]"})
                client.hset(f"{namespace}:loc:{bucket}", field, f"{segment}:0:")
                client.zadd(f"{namespace}:wsegs:{workflow_name}", {segment: 0})
            finally:
                client.close()

        return StorageBackend(
            lambda: RedisCheckpointStorage(server, namespace=namespace),
            encodes=True,
            plant=plant_redis,
            sealed=lambda sealer: RedisCheckpointStorage(server, namespace=namespace, sealer=sealer),
        )
    schema = new_schema(server, "c")

    def plant_postgres(checkpoint_id: str, workflow_name: str, body: bytes) -> None:
        import psycopg

        from agent_framework_functional._durable.postgres_rows import row_key, segment_number

        key, segment = row_key(checkpoint_id), segment_number(f"planted:{checkpoint_id}")
        with psycopg.connect(server) as conn:  # a whole body: alone in its segment
            conn.execute(f'DELETE FROM "{schema}".delta_checkpoints WHERE checkpoint_id = %s', (key,))  # pyright: ignore[reportArgumentType]
            conn.execute(
                f'INSERT INTO "{schema}".delta_segments VALUES (%s, %s, 1, 0, 1, NULL, NULL, NULL) '  # pyright: ignore[reportArgumentType]
                "ON CONFLICT DO NOTHING",
                (segment, workflow_name),
            )
            conn.execute(
                f'INSERT INTO "{schema}".delta_checkpoints VALUES (%s, 0, NULL, 0, %s, NULL, 1, TRUE, %s, %s)',  # pyright: ignore[reportArgumentType]
                (segment, key, workflow_name, body),
            )

    return StorageBackend(
        lambda: PostgresCheckpointStorage(server, schema=schema),
        encodes=True,
        plant=plant_postgres,
        sealed=lambda sealer: PostgresCheckpointStorage(server, schema=schema, sealer=sealer),
    )


def sqlite_storage_backend(path: Path) -> StorageBackend:
    """``SQLiteCheckpointStorage`` on the file ``path`` (which a continuation store may share)."""

    def plant_sqlite(checkpoint_id: str, workflow_name: str, body: bytes) -> None:
        from agent_framework_functional._durable.sqlite_checkpoint import _id_key  # pyright: ignore[reportPrivateUsage]

        segment = f"planted:{checkpoint_id}"
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:  # a whole body: alone in its segment
            conn.execute(
                "INSERT OR REPLACE INTO checkpoint_segments VALUES (?, ?, '[]', 1, 1, 0, NULL)",
                (segment, workflow_name),
            )
            conn.execute(
                "INSERT OR REPLACE INTO checkpoint_chunks VALUES (?, 0, ?, ?)", (segment, _id_key(checkpoint_id), body)
            )

    return StorageBackend(
        lambda: SQLiteCheckpointStorage(path),
        encodes=True,
        plant=plant_sqlite,
        sealed=lambda sealer: SQLiteCheckpointStorage(path, sealer=sealer),
    )


def deep_json(depth: int) -> bytes:
    """A JSON document nested ``depth`` lists deep (valid JSON, hostile to recursive decoders)."""
    return b"[" * depth + b"]" * depth


def not_a_checkpoint() -> bytes:
    """Valid JSON that is not a checkpoint."""
    return json.dumps({"hello": "world"}).encode()


class Clock:
    """A settable clock for expiry tests (stores take ``clock=``)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
