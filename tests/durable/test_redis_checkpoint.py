"""``RedisCheckpointStorage``, core's ``CheckpointStorage`` on a real redis-server.

Unit behaviour of every protocol method, core's encoding (the stored body is what
``FileCheckpointStorage`` writes) and allow-list, bounded storage through ``ttl``, and two worker
processes that share nothing but Redis: one pauses, the other resumes with the token.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from agent_framework import CheckpointStorage, FileCheckpointStorage, WorkflowCheckpoint, WorkflowCheckpointException

# Pinned on purpose: RedisCheckpointStorage encodes with exactly these core helpers (see its module docstring).
from agent_framework._workflows._checkpoint_encoding import decode_checkpoint_value, encode_checkpoint_value
from durable_support import StoreSpec, close_store, effect_lines, finish, record_status, spawn_worker
from durable_workflows import CHECKPOINT_TYPES, Verdict, approval

from agent_framework_functional import FunctionalWorkflow, RedisCheckpointStorage, RedisContinuationStore
from agent_framework_functional._durable.redis_checkpoint import location_of
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE


def _checkpoint(workflow_name: str = "wf", *, when: datetime | None = None, **state: object) -> WorkflowCheckpoint:
    stamp = (when or datetime.now(timezone.utc)).isoformat()
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash="h" * 64,
        timestamp=stamp,
        state={"count": 3, "when": datetime(2026, 1, 2, tzinfo=timezone.utc), "pair": (1, "a"), **state},
        iteration_count=2,
        metadata={"superstep": 2},
    )


def _json_files(folder: Path) -> set[str]:
    return {path.name for path in folder.rglob("*.json")}


async def _segment_key(client: aioredis.Redis, namespace: str, checkpoint_id: str) -> str:
    """The key of the segment a checkpoint saved whole (without a run's offer) is alone in."""
    field, bucket = location_of(checkpoint_id)
    where = await client.hget(f"{namespace}:loc:{bucket}", field)  # type: ignore[misc]
    return f"{namespace}:segment:{(where.encode() if isinstance(where, str) else where).split(b':')[0].decode()}"


@pytest.fixture
def namespace() -> str:
    return f"aff-test:{uuid.uuid4().hex}"


@pytest.fixture
async def storage(redis_server: str, namespace: str) -> AsyncIterator[RedisCheckpointStorage]:
    opened = RedisCheckpointStorage(redis_server, namespace=namespace)
    yield opened
    await opened.aclose()


async def test_it_implements_cores_checkpoint_storage_protocol(storage: RedisCheckpointStorage) -> None:
    def accepts(value: CheckpointStorage) -> CheckpointStorage:
        return value

    assert accepts(storage) is storage
    for name in ("save", "load", "list_checkpoints", "delete", "get_latest", "list_checkpoint_ids"):
        assert asyncio.iscoroutinefunction(getattr(storage, name)), name


async def test_save_then_load_returns_an_equal_copy(storage: RedisCheckpointStorage) -> None:
    checkpoint = _checkpoint()
    assert await storage.save(checkpoint) == checkpoint.checkpoint_id
    loaded = await storage.load(checkpoint.checkpoint_id)
    assert loaded == checkpoint and loaded is not checkpoint
    assert loaded.state["pair"] == (1, "a")  # a pickled value, decoded under core's safe set


async def test_load_of_an_unknown_id_raises_cores_exception(storage: RedisCheckpointStorage) -> None:
    with pytest.raises(WorkflowCheckpointException, match="No checkpoint found"):
        await storage.load("missing")


async def test_list_latest_ids_and_delete(storage: RedisCheckpointStorage) -> None:
    now = datetime.now(timezone.utc)
    newest = _checkpoint(when=now)
    oldest = _checkpoint(when=now - timedelta(hours=2))
    middle = _checkpoint(when=now - timedelta(hours=1))
    other = _checkpoint("other-workflow", when=now + timedelta(hours=1))
    for checkpoint in (newest, oldest, middle, other):  # saved out of timestamp order
        await storage.save(checkpoint)

    listed = await storage.list_checkpoints(workflow_name="wf")
    assert [c.checkpoint_id for c in listed] == [newest.checkpoint_id, oldest.checkpoint_id, middle.checkpoint_id]
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [c.checkpoint_id for c in listed]
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None and latest.checkpoint_id == newest.checkpoint_id  # by timestamp, as core does
    assert await storage.list_checkpoint_ids(workflow_name="other-workflow") == [other.checkpoint_id]

    assert await storage.delete(newest.checkpoint_id) is True
    assert await storage.delete(newest.checkpoint_id) is False
    with pytest.raises(WorkflowCheckpointException):
        await storage.load(newest.checkpoint_id)
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None and latest.checkpoint_id == middle.checkpoint_id
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [oldest.checkpoint_id, middle.checkpoint_id]
    assert await storage.get_latest(workflow_name="nothing-saved") is None
    assert await storage.list_checkpoints(workflow_name="nothing-saved") == []


async def test_checkpoints_saved_in_one_millisecond_list_in_save_order(storage: RedisCheckpointStorage) -> None:
    """Each direct save is a segment of its own, indexed by its save's time: ties keep the save order."""
    saved = [_checkpoint() for _ in range(30)]
    for checkpoint in saved:
        await storage.save(checkpoint)
    listed = await storage.list_checkpoint_ids(workflow_name="wf")
    assert listed == [checkpoint.checkpoint_id for checkpoint in saved]
    await storage.save(saved[0])  # saved again: now the last saved
    listed = await storage.list_checkpoint_ids(workflow_name="wf")
    assert listed == [checkpoint.checkpoint_id for checkpoint in saved[1:]] + [saved[0].checkpoint_id]


async def test_saving_an_id_again_replaces_the_checkpoint(storage: RedisCheckpointStorage) -> None:
    checkpoint = _checkpoint()
    await storage.save(checkpoint)
    checkpoint.iteration_count = 9
    await storage.save(checkpoint)
    assert (await storage.load(checkpoint.checkpoint_id)).iteration_count == 9
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [checkpoint.checkpoint_id]


async def test_the_stored_body_is_cores_own_encoding(
    storage: RedisCheckpointStorage, redis_server: str, namespace: str, tmp_path: Path
) -> None:
    checkpoint = _checkpoint()
    await storage.save(checkpoint)
    await FileCheckpointStorage(tmp_path).save(checkpoint)
    file_body = json.loads((tmp_path / f"{checkpoint.checkpoint_id}.json").read_text(encoding="utf-8"))
    client = aioredis.Redis.from_url(redis_server, decode_responses=True)
    try:
        body = json.loads(await client.lindex(await _segment_key(client, namespace, checkpoint.checkpoint_id), 0))  # type: ignore[misc]
    finally:
        await client.aclose()
    assert body == file_body == encode_checkpoint_value(checkpoint.to_dict())
    assert WorkflowCheckpoint.from_dict(decode_checkpoint_value(body, allowed_types=frozenset())) == checkpoint


# ---------------------------------------------------------------- core's allow-list


async def test_a_type_outside_the_allow_list_is_refused_at_save(storage: RedisCheckpointStorage) -> None:
    checkpoint = _checkpoint(verdict=Verdict(approved=True, note="ok"))
    with pytest.raises(WorkflowCheckpointException, match="allowed"):
        await storage.save(checkpoint)
    with pytest.raises(WorkflowCheckpointException):
        await storage.load(checkpoint.checkpoint_id)  # nothing was written


async def test_allowed_checkpoint_types_admit_user_types_and_a_stricter_reader_refuses_them(
    redis_server: str, namespace: str
) -> None:
    permissive = RedisCheckpointStorage(redis_server, namespace=namespace, allowed_checkpoint_types=CHECKPOINT_TYPES)
    strict = RedisCheckpointStorage(redis_server, namespace=namespace)
    try:
        assert permissive.allowed_checkpoint_types == frozenset(CHECKPOINT_TYPES)
        checkpoint = _checkpoint(verdict=Verdict(approved=True, note="ok"))
        await permissive.save(checkpoint)
        assert (await permissive.load(checkpoint.checkpoint_id)).state["verdict"] == Verdict(approved=True, note="ok")
        with pytest.raises(WorkflowCheckpointException, match="blocked"):
            await strict.load(checkpoint.checkpoint_id)
        assert await strict.list_checkpoints(workflow_name="wf") == []  # skipped with a warning, as core does
        assert await strict.list_checkpoint_ids(workflow_name="wf") == []
        assert await permissive.list_checkpoint_ids(workflow_name="wf") == [checkpoint.checkpoint_id]
    finally:
        await permissive.aclose()
        await strict.aclose()


# ---------------------------------------------------------------- bounded storage


async def test_checkpoints_and_their_index_expire_after_ttl(redis_server: str, namespace: str) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace, ttl=0.5)
    client = aioredis.Redis.from_url(redis_server)
    try:
        first = _checkpoint()
        await storage.save(first)
        assert 0 < await client.pttl(await _segment_key(client, namespace, first.checkpoint_id)) <= 500
        assert 0 < await client.pttl(f"{namespace}:wsegs:wf") <= 500
        await asyncio.sleep(0.7)
        with pytest.raises(WorkflowCheckpointException, match="No checkpoint found"):
            await storage.load(first.checkpoint_id)
        assert await storage.list_checkpoints(workflow_name="wf") == []

        # An index that lives on (a workflow saving often) drops expired entries on each save.
        storage_long = RedisCheckpointStorage(client, namespace=namespace, ttl=timedelta(milliseconds=500))
        old = _checkpoint()
        await storage_long.save(old)
        await asyncio.sleep(0.7)
        fresh = _checkpoint()
        await storage_long.save(fresh)
        segments = [f"{namespace}:segment:{m.decode()}" for m in await client.zrange(f"{namespace}:wsegs:wf", 0, -1)]
        assert segments == [await _segment_key(client, namespace, fresh.checkpoint_id)]
        await storage_long.aclose()  # a client passed in stays open
        assert await client.ping()
    finally:
        await client.aclose()
        await storage.aclose()


async def test_ttl_none_keeps_checkpoints_until_deleted(redis_server: str, namespace: str) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace, ttl=None)
    client = aioredis.Redis.from_url(redis_server)
    try:
        checkpoint = _checkpoint()
        await storage.save(checkpoint)
        assert await client.pttl(await _segment_key(client, namespace, checkpoint.checkpoint_id)) == -1
        assert await storage.delete(checkpoint.checkpoint_id)
    finally:
        await client.aclose()
        await storage.aclose()


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="namespace"):
        RedisCheckpointStorage("redis://127.0.0.1:1/0", namespace="")
    with pytest.raises(ValueError, match="ttl"):
        RedisCheckpointStorage("redis://127.0.0.1:1/0", ttl=0)
    with pytest.raises(TypeError, match="allowed_checkpoint_types"):
        RedisCheckpointStorage("redis://127.0.0.1:1/0", allowed_checkpoint_types=[Verdict])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="max_connections"):
        RedisCheckpointStorage("redis://127.0.0.1:1/0", max_connections=0)


# ---------------------------------------------------------------- a workflow, in one process and across two


async def test_a_workflow_pauses_and_resumes_on_another_instance_through_redis_only(
    redis_server: str, namespace: str
) -> None:
    def build() -> tuple[RedisCheckpointStorage, RedisContinuationStore, FunctionalWorkflow]:
        checkpoints = RedisCheckpointStorage(redis_server, namespace=namespace)
        store = RedisContinuationStore(redis_server, namespace=f"{namespace}:continuation")
        return checkpoints, store, approval.build(checkpoint_storage=checkpoints, continuation_store=store)

    first_checkpoints, first_store, first = build()
    second_checkpoints, second_store, second = build()
    try:
        paused = await first.run("tea")
        request_id = paused.get_request_info_events()[0].request_id
        # The pause's checkpoint is in Redis (a finished chain then deletes its checkpoints: retention).
        assert await second_checkpoints.list_checkpoint_ids(workflow_name="approval")
        done = await second.run(responses={request_id: "approved"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == ["shipped: draft about tea (approved)"]
    finally:
        for opened in (first_checkpoints, first_store, second_checkpoints, second_store):
            await close_store(opened)


@pytest.mark.slow
async def test_two_worker_processes_that_share_only_redis(
    redis_server: str, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.txt"
    monkeypatch.setenv("AFF_DURABLE_EFFECTS", str(effects))
    spec = StoreSpec("redis", redis_server, namespace=f"{namespace}:continuation")
    checkpoints = f"{redis_server}#{namespace}"  # RedisCheckpointStorage in each worker; no shared folder
    pauser_state, resumer_state = tmp_path / "pauser.json", tmp_path / "resumer.json"

    assert finish([spawn_worker("pause", spec.to_json(), checkpoints, str(pauser_state))]) == [{"outcome": "paused"}]
    storage = RedisCheckpointStorage(redis_server, namespace=namespace)
    try:
        assert await storage.list_checkpoint_ids(workflow_name="approval")  # the pause's checkpoint is in Redis
    finally:
        await storage.aclose()
    handoff = json.loads(pauser_state.read_text(encoding="utf-8"))  # the token travels with the answer
    resumer_state.write_text(json.dumps(handoff), encoding="utf-8")

    outcome = finish([spawn_worker("resume", spec.to_json(), checkpoints, str(resumer_state))])
    assert outcome == [{"outcome": "resumed", "outputs": ["shipped: draft about tea (approved)"]}]
    pids = {line.split()[0] for line in effect_lines(effects)}
    assert len(effect_lines(effects)) == 1 and pids != {str(os.getpid())}  # resumed code ran once, in the worker
    assert await record_status(spec, handoff["token"]) == "claimed"
    again = finish([spawn_worker("resume", spec.to_json(), checkpoints, str(resumer_state))])
    assert again == [{"outcome": "rejected", "message": AUTHORITY_ERROR_MESSAGE}]

    # Everything the workers shared went through Redis: no checkpoint file anywhere (the pause's
    # checkpoint was in Redis, see above; the finished chain then deleted it: retention).
    assert _json_files(tmp_path) == {"pauser.json", "resumer.json"}  # the hand-off files, nothing else
