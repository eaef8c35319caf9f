"""What is particular to each store (SQLite's file, Redis's keys, argument checks).

The contract every store shares (round trip, compare-and-set, races, expiry) is the conformance suite
in ``tests/stores/``.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from durable_support import FakeClock

from agent_framework_functional import (
    ContinuationRecord,
    ContinuationStore,
    PostgresContinuationStore,
    RedisContinuationStore,
    SQLiteContinuationStore,
)


def _record(store: ContinuationStore, **changes: object) -> ContinuationRecord:
    now = store.now()
    fields: dict[str, object] = {
        "token_hash": secrets.token_hex(32),
        "workflow_name": "approval",
        "signature_hash": "s" * 64,
        "checkpoint_id": "checkpoint-1",
        "pending_request_ids": ("auto::0", "auto::1"),
        "created_at": now,
        "expires_at": now + store.ttl_seconds,
    }
    fields.update(changes)
    return ContinuationRecord(**fields)  # type: ignore[arg-type]


# ---------------------------------------------------------------- SQLite specifics


async def test_sqlite_uses_wal_and_one_file(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SQLiteContinuationStore(path)
    try:
        await store.save(_record(store))
        with contextlib.closing(sqlite3.connect(path)) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("SELECT count(*) FROM continuations").fetchone()[0] == 1
    finally:
        await store.aclose()


async def test_sqlite_purges_only_records_past_retention(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteContinuationStore(tmp_path / "store.db", ttl=10.0, retention=100.0, clock=clock)
    try:
        old = _record(store)
        await store.save(old)
        clock.advance(50.0)
        fresh = _record(store)
        await store.save(fresh)
        assert await store.purge_expired() == 0
        clock.advance(70.0)  # old expired 110 s ago (> retention), fresh 60 s ago
        assert await store.purge_expired() == 1
        assert await store.get(old.token_hash) is None
        assert await store.get(fresh.token_hash) is not None
    finally:
        await store.aclose()


def test_sqlite_reports_a_path_it_cannot_open(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        SQLiteContinuationStore(tmp_path)  # a folder, not a database file (missing folders are created)


# ---------------------------------------------------------------- Redis specifics


async def test_redis_keys_are_namespaced_and_expire(redis_server: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_server)
    try:
        one = RedisContinuationStore(client, namespace="app-one", ttl=60.0, retention=60.0)
        two = RedisContinuationStore(client, namespace="app-two", ttl=60.0, retention=60.0)
        record = _record(one)
        await one.save(record)
        assert await two.get(record.token_hash) is None  # another namespace sees nothing
        assert await two.claim(record.token_hash) is False
        ttl_ms = await client.pttl(f"app-one:{record.token_hash}")
        assert 0 < ttl_ms <= 120_000  # ttl + retention, so Redis deletes it by itself
        await one.aclose()  # a client passed in stays open
        assert await client.ping()
    finally:
        await client.aclose()


def test_redis_rejects_an_empty_namespace(redis_server: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        RedisContinuationStore(redis_server, namespace="")


@pytest.mark.parametrize("store_type", [SQLiteContinuationStore, RedisContinuationStore, PostgresContinuationStore])
def test_stores_reject_a_ttl_that_is_not_a_duration(store_type: Any, tmp_path: Path) -> None:
    targets = {SQLiteContinuationStore: str(tmp_path / "c.db"), RedisContinuationStore: "redis://127.0.0.1:1/0"}
    target = targets.get(store_type, "postgresql://127.0.0.1:1/x")
    with pytest.raises(TypeError, match="ttl"):
        store_type(target, ttl="1h")
