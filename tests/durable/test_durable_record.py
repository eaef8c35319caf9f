"""What a continuation store records on a saved pause, and what it never records."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage, InMemoryCheckpointStorage, WorkflowCheckpoint, WorkflowRunState
from durable_support import StoreSpec
from durable_workflows import approval, finishes

from agent_framework_functional import (
    ContinuationAuthorityError,
    ContinuationRecord,
    ContinuationStore,
    PostgresContinuationStore,
    RedisContinuationStore,
    SQLiteContinuationStore,
    continuation_token_hash,
)
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE


async def test_saved_pause_is_recorded_by_hash_with_every_field(
    store: ContinuationStore, storage: FileCheckpointStorage
) -> None:
    wf = approval.build(checkpoint_storage=storage, continuation_store=store)
    before = store.now()
    paused = await wf.run("tea")
    token = paused.continuation_token
    assert token is not None
    assert set(token) == {"kind", "version", "token"}  # same shape as the in-memory token
    assert json.loads(json.dumps(token)) == token

    record = await store.get(continuation_token_hash(token))
    assert record is not None
    assert record.token_hash != token["token"] and len(record.token_hash) == 64
    assert record.workflow_name == "approval"
    assert record.pending_request_ids == tuple(wf.pending_request_ids)
    assert before <= record.created_at <= store.now()
    assert record.expires_at == pytest.approx(record.created_at + store.ttl_seconds)
    assert record.status == "issued"
    # The checkpoint is the pause's: the last one saved in the run, loadable, with the pending request.
    latest = await storage.get_latest(workflow_name="approval")
    assert latest is not None and record.checkpoint_id == latest.checkpoint_id
    checkpoint = await storage.load(record.checkpoint_id)
    assert set(checkpoint.pending_request_info_events) == set(record.pending_request_ids)


async def test_signature_hash_is_cores(store: ContinuationStore, storage: FileCheckpointStorage) -> None:
    wf = approval.build(checkpoint_storage=storage, continuation_store=store)
    paused = await wf.run("tea")
    assert paused.continuation_token is not None
    record = await store.get(continuation_token_hash(paused.continuation_token))
    checkpoint = await storage.load(record.checkpoint_id) if record else None
    assert record is not None and checkpoint is not None
    assert record.signature_hash == checkpoint.graph_signature_hash == wf._core.graph_signature_hash  # pyright: ignore[reportPrivateUsage]


async def test_the_store_never_holds_the_secret(
    store_spec: StoreSpec, store: ContinuationStore, storage: FileCheckpointStorage, redis_dump: Callable[[str], bytes]
) -> None:
    wf = approval.build(checkpoint_storage=storage, continuation_store=store)
    paused = await wf.run("tea")
    assert paused.continuation_token is not None
    secret = paused.continuation_token["token"].encode()
    if store_spec.kind == "redis":
        raw = redis_dump(store_spec.namespace)
    elif store_spec.kind == "postgres":
        raw = _postgres_bytes(store_spec)
    else:
        raw = _sqlite_bytes(Path(store_spec.location))
    assert raw  # the record is there ...
    assert continuation_token_hash(paused.continuation_token).encode() in raw
    assert secret not in raw  # ... but not the secret


def _sqlite_bytes(path: Path) -> bytes:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT * FROM continuations").fetchall()
    data = b"".join(str(row).encode() for row in rows)
    for suffix in ("", "-wal"):
        file = path.with_name(path.name + suffix)
        if file.exists():
            data += file.read_bytes()
    return data


def _postgres_bytes(spec: StoreSpec) -> bytes:
    """Every row of the store's schema as text (the whole table, not one record)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(spec.location) as conn:
        rows = conn.execute(sql.SQL("SELECT * FROM {}.continuations").format(sql.Identifier(spec.namespace))).fetchall()
    return b"".join(str(row).encode() for row in rows)


@pytest.fixture
def redis_dump(store_spec: StoreSpec) -> Callable[[str], bytes]:
    def dump(namespace: str) -> bytes:
        import redis

        client = redis.Redis.from_url(store_spec.location)
        try:
            data = b""
            for key in client.scan_iter(f"{namespace}:*"):
                if client.type(key) == b"string":  # the checkpoint index: checkpoint id -> token hash
                    data += key + (client.get(key) or b"")  # pyright: ignore[reportOperatorIssue]
                    continue
                data += key + b"".join(k + v for k, v in client.hgetall(key).items())  # pyright: ignore[reportUnknownVariableType]
            return data
        finally:
            client.close()

    return dump


async def test_finished_run_records_nothing_and_returns_no_token(
    store: ContinuationStore, storage: FileCheckpointStorage
) -> None:
    wf = finishes.build(checkpoint_storage=storage, continuation_store=store)
    result = await wf.run("tea")
    assert result.continuation_token is None
    assert result.get_outputs() == ["shipped: tea"]


def test_store_without_checkpoint_storage_is_rejected(store: ContinuationStore) -> None:
    with pytest.raises(ValueError, match="checkpoint_storage"):
        approval.build(continuation_store=store)


def test_object_that_is_not_a_store_is_rejected() -> None:
    with pytest.raises(TypeError, match="ContinuationStore"):
        approval.build(checkpoint_storage=InMemoryCheckpointStorage(), continuation_store=object())  # type: ignore[arg-type]


def test_every_store_implements_the_protocol(store: ContinuationStore) -> None:
    assert isinstance(store, ContinuationStore)
    assert isinstance(store, (SQLiteContinuationStore, RedisContinuationStore, PostgresContinuationStore))


async def test_per_run_storage_override_is_rejected_and_changes_nothing(
    store: ContinuationStore, storage: FileCheckpointStorage
) -> None:
    wf = approval.build(checkpoint_storage=storage, continuation_store=store)
    with pytest.raises(ValueError, match="checkpoint storage given to build"):
        wf.run("tea", checkpoint_storage=InMemoryCheckpointStorage())
    assert not wf.is_running and not wf.has_pending_continuation
    assert (await wf.run("tea", checkpoint_storage=storage)).continuation_token is not None  # same storage: fine


class _FailingSaveStore:
    """Wraps a real store; its save fails (a store outage at the moment of the pause)."""

    def __init__(self, inner: ContinuationStore) -> None:
        self.inner = inner

    @property
    def ttl_seconds(self) -> float:
        return self.inner.ttl_seconds

    def now(self) -> float:
        return self.inner.now()

    async def save(self, record: ContinuationRecord) -> None:
        raise ConnectionError("store unavailable")

    async def get(self, token_hash: str) -> ContinuationRecord | None:
        return await self.inner.get(token_hash)

    async def claim(self, token_hash: str, *, claimer: str | None = None) -> bool:
        return await self.inner.claim(token_hash, claimer=claimer)

    async def release(self, token_hash: str, claimer: str) -> bool:
        return await self.inner.release(token_hash, claimer)

    async def abandon(self, token_hash: str, *, force: bool = False) -> bool:
        return await self.inner.abandon(token_hash, force=force)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def supersede(self, checkpoint_id: str, *, since: float) -> bool:
        return await self.inner.supersede(checkpoint_id, since=since)


async def test_failed_record_gives_no_token_and_frees_the_instance(
    store: ContinuationStore, storage: FileCheckpointStorage
) -> None:
    wf = approval.build(checkpoint_storage=storage, continuation_store=_FailingSaveStore(store))
    with pytest.raises(ConnectionError):
        await wf.run("tea")
    assert not wf.is_running and not wf.has_pending_continuation
    # The pause's checkpoint was saved: the owner can still restore it.
    latest = await storage.get_latest(workflow_name="approval")
    assert latest is not None
    healthy = approval.build(checkpoint_storage=storage, continuation_store=store)
    done = await healthy.run(checkpoint_id=latest.checkpoint_id, responses={"auto::0": "ok"})
    assert done.get_outputs() == ["shipped: draft about tea (ok)"]


class _NoSaveStorage(InMemoryCheckpointStorage):
    """Reports a save without returning an id through the recorder (a storage that cannot save)."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> Any:
        raise OSError("disk full")


async def test_failed_checkpoint_save_gives_no_token_and_no_record(store: ContinuationStore) -> None:
    wf = approval.build(checkpoint_storage=_NoSaveStorage(), continuation_store=store)
    with pytest.raises(OSError, match="disk full"):
        await wf.run("tea")
    assert not wf.is_running and not wf.has_pending_continuation


@pytest.mark.parametrize(
    "bad", [None, {}, {"kind": "functional_workflow"}, "text", {"kind": 1, "version": "1", "token": "x"}]
)
def test_token_hash_of_a_malformed_token_is_the_authority_error(bad: Any) -> None:
    with pytest.raises(ContinuationAuthorityError) as info:
        continuation_token_hash(bad)
    assert str(info.value) == AUTHORITY_ERROR_MESSAGE


async def test_failed_record_streams_the_failure_surface_and_never_a_pause(
    store: ContinuationStore, storage: FileCheckpointStorage
) -> None:
    wf = approval.build(checkpoint_storage=storage, continuation_store=_FailingSaveStore(store))
    seen: list[Any] = []
    stream = wf.run("tea", stream=True)
    with pytest.raises(ConnectionError):
        async for event in stream:
            seen.append(event)
    states = [event.state for event in seen if event.type == "status"]
    assert WorkflowRunState.IDLE_WITH_PENDING_REQUESTS not in states  # no pause was announced
    assert states[-1] == WorkflowRunState.FAILED
    assert [event.type for event in seen].count("failed") == 1
    assert not wf.is_running and not wf.has_pending_continuation
