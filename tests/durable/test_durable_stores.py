"""Item 4: the two stores behind one protocol, against the real SQLite file and the real Redis server."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from durable_support import FakeClock, StoreSpec

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


async def test_save_then_get_round_trips_every_field(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    assert await store.get(record.token_hash) == record
    assert await store.get(secrets.token_hex(32)) is None


async def test_a_hash_is_recorded_once(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    with pytest.raises((ValueError, sqlite3.IntegrityError)):
        await store.save(record)


async def test_claim_is_issued_to_claimed_once(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    assert await store.claim(record.token_hash) is True
    assert await store.claim(record.token_hash) is False
    assert await store.abandon(record.token_hash, force=True) is False  # claimed is final
    got = await store.get(record.token_hash)
    assert got is not None and got.status == "claimed"
    assert await store.claim(secrets.token_hex(32)) is False


async def test_abandon_is_issued_to_abandoned_once(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    assert await store.abandon(record.token_hash) is True
    assert await store.abandon(record.token_hash) is False
    assert await store.claim(record.token_hash) is False  # abandoned is final
    got = await store.get(record.token_hash)
    assert got is not None and got.status == "abandoned"


async def test_many_concurrent_claims_have_exactly_one_winner(make_store: Callable[..., ContinuationStore]) -> None:
    stores = [make_store() for _ in range(8)]  # eight connections / clients on one database
    record = _record(stores[0])
    await stores[0].save(record)
    results = await asyncio.gather(*(s.claim(record.token_hash) for s in stores for _ in range(8)))
    assert results.count(True) == 1 and len(results) == 64


async def test_claim_and_abandon_race_has_exactly_one_winner(make_store: Callable[..., ContinuationStore]) -> None:
    for _ in range(10):
        claimer, abandoner = make_store(), make_store()
        record = _record(claimer)
        await claimer.save(record)
        claimed, abandoned = await asyncio.gather(
            claimer.claim(record.token_hash), abandoner.abandon(record.token_hash)
        )
        assert claimed != abandoned


async def test_expired_records_are_not_claimed_or_abandoned_without_force(
    make_store: Callable[..., ContinuationStore], clock: FakeClock
) -> None:
    store = make_store(ttl=10.0, clock=clock)
    record = _record(store)
    await store.save(record)
    clock.advance(10.0)
    got = await store.get(record.token_hash)
    assert got is not None and got.status == "issued" and not got.is_claimable(store.now())
    assert await store.claim(record.token_hash) is False
    assert await store.abandon(record.token_hash) is False
    assert await store.abandon(record.token_hash, force=True) is True


@pytest.mark.parametrize("ttl", [timedelta(minutes=5), 300.0, 300])
def test_ttl_accepts_seconds_or_timedelta(store_spec: StoreSpec, ttl: float | timedelta) -> None:
    if store_spec.kind == "sqlite":
        store: ContinuationStore = SQLiteContinuationStore(store_spec.location, ttl=ttl)
    elif store_spec.kind == "postgres":
        store = PostgresContinuationStore(store_spec.location, ttl=ttl)
    else:
        store = RedisContinuationStore(store_spec.location, ttl=ttl)
    assert store.ttl_seconds == 300.0


@pytest.mark.parametrize("ttl", [0, -1.0, timedelta(0)])
def test_non_positive_ttl_is_rejected(store_spec: StoreSpec, ttl: float | timedelta) -> None:
    with pytest.raises(ValueError, match="ttl must be a positive"):
        if store_spec.kind == "sqlite":
            SQLiteContinuationStore(store_spec.location, ttl=ttl)
        elif store_spec.kind == "postgres":
            PostgresContinuationStore(store_spec.location, ttl=ttl)
        else:
            RedisContinuationStore(store_spec.location, ttl=ttl)


# ---------------------------------------------------------------- SQLite specifics


async def test_sqlite_uses_wal_and_one_file(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SQLiteContinuationStore(path)
    try:
        await store.save(_record(store))
        with sqlite3.connect(path) as conn:
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
        SQLiteContinuationStore(tmp_path / "missing-dir" / "store.db")


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


@pytest.mark.parametrize("store_type", [SQLiteContinuationStore, RedisContinuationStore])
@pytest.mark.parametrize("ttl", [0, -1, float("inf"), float("nan"), 1e20])
def test_stores_reject_a_ttl_outside_a_positive_finite_range(store_type: Any, ttl: float, tmp_path: Path) -> None:
    target = str(tmp_path / "c.db") if store_type is SQLiteContinuationStore else "redis://127.0.0.1:1/0"
    with pytest.raises(ValueError, match="ttl"):
        store_type(target, ttl=ttl)


@pytest.mark.parametrize("store_type", [SQLiteContinuationStore, RedisContinuationStore])
def test_stores_reject_a_ttl_that_is_not_a_duration(store_type: Any, tmp_path: Path) -> None:
    target = str(tmp_path / "c.db") if store_type is SQLiteContinuationStore else "redis://127.0.0.1:1/0"
    with pytest.raises(TypeError, match="ttl"):
        store_type(target, ttl="1h")
