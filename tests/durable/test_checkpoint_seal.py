"""Tamper-evident checkpoints: ``CheckpointSealer`` and ``RedisCheckpointStorage`` under planted bodies.

The attacks are those of someone who can write the storage's Redis keys but holds no key: a body
that decodes a type outside the allow-list (``pathlib.PosixPath``, reached through a framework
module that imports it), a pickle whose BUILD step replaces ``WorkflowCheckpoint.from_dict``
process-wide, non-UTF-8 bytes and a 200,000-deep body. With a sealer every one is refused before
anything decodes it; without one, the decode-level ones give ``WorkflowCheckpointException`` from
``load()`` and are skipped by ``list_checkpoints()``.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import struct
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
import redis.asyncio as aioredis
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from durable_support import close_store
from durable_workflows import approval

from agent_framework_functional import (
    CheckpointSealer,
    RedisCheckpointStorage,
    RedisContinuationStore,
)
from agent_framework_functional._durable import checkpoint_seal as _checkpoint_seal
from agent_framework_functional._durable.redis_checkpoint import location_of

KEY_A = secrets.token_bytes(32)
KEY_B = secrets.token_bytes(32)
CORE_MODULE = "agent_framework._workflows._checkpoint"  # imports pathlib.Path at module level


def _checkpoint(checkpoint_id: str | None = None, **state: object) -> WorkflowCheckpoint:
    checkpoint = WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="h" * 64,
        timestamp=datetime.now(timezone.utc).isoformat(),
        state={"count": 3, **state},
    )
    if checkpoint_id is not None:
        checkpoint.checkpoint_id = checkpoint_id
    return checkpoint


def _unicode(text: str) -> bytes:
    raw = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _pickled(value_pickle: bytes, type_key: str) -> dict[str, str]:
    return {"__pickled__": base64.b64encode(value_pickle).decode("ascii"), "__type__": type_key}


def _posix_path_pickle() -> bytes:
    """``Path('/etc/passwd')``, with ``Path`` looked up in a core module (a framework prefix core allows)."""
    return b"\x80\x02c" + CORE_MODULE.encode() + b"\nPath\n" + _unicode("/etc/passwd") + b"\x85R."


def _from_dict_hijack_pickle() -> bytes:
    """The ``WorkflowCheckpoint`` class with BUILD slot state ``{'from_dict': int}``: replaces it process-wide."""
    return (
        b"\x80\x02c" + CORE_MODULE.encode() + b"\nWorkflowCheckpoint\n"
        b"N}" + _unicode("from_dict") + b"cbuiltins\nint\ns\x86b."
    )


def _planted_body(checkpoint_id: str, value: dict[str, str]) -> bytes:
    body = _checkpoint(checkpoint_id).to_dict()
    body["state"] = {"count": 3, "planted": value}
    return json.dumps(body).encode("utf-8")


@pytest.fixture
def namespace() -> str:
    return f"aff-test:{uuid.uuid4().hex}"


async def _plant(client: aioredis.Redis, namespace: str, checkpoint_id: str, body: bytes) -> None:
    """``body`` alone in a segment of its own under ``checkpoint_id`` (as a save without a run's offer stores it)."""
    field, bucket = location_of(checkpoint_id)
    segment = f"planted-{checkpoint_id}"
    await client.rpush(f"{namespace}:segment:{segment}", body)  # type: ignore[misc]
    await client.hset(f"{namespace}:seginfo:{segment}", mapping={"n": 1, "w": "wf", "r": "[]"})  # type: ignore[misc]
    await client.hset(f"{namespace}:loc:{bucket}", field, f"{segment}:0:")  # type: ignore[misc]
    await client.zadd(f"{namespace}:wsegs:wf", {segment: 1.0})


async def _body(client: aioredis.Redis, namespace: str, checkpoint_id: str) -> bytes:
    """The stored body of a checkpoint saved without a run's offer (its segment's one chunk)."""
    field, bucket = location_of(checkpoint_id)
    where = await client.hget(f"{namespace}:loc:{bucket}", field)  # type: ignore[misc]
    return await client.lindex(f"{namespace}:segment:{where.split(b':')[0].decode()}", 0)  # type: ignore[misc]


ATTACKS = {
    "posix_path": lambda cid: _planted_body(cid, _pickled(_posix_path_pickle(), "pathlib:PosixPath")),
    "from_dict_build": lambda cid: _planted_body(
        cid, _pickled(_from_dict_hijack_pickle(), "agent_framework._workflows._checkpoint:WorkflowCheckpoint")
    ),
    "non_utf8": lambda cid: b'{"checkpoint_id": "\xff\xfe\xfd"}',
    "deep": lambda cid: b"[" * 200_000 + b"]" * 200_000,
}


# ---------------------------------------------------------------- the sealer alone


def test_a_sealed_body_opens_only_unchanged_under_its_context() -> None:
    sealer = CheckpointSealer({"k1": KEY_A})
    sealed = sealer.seal(b'{"a": 1}', context=b"cp-1")
    assert sealed.startswith(b"afs1:hs256:k1:")
    assert sealer.open(sealed, context=b"cp-1") == b'{"a": 1}'
    with pytest.raises(WorkflowCheckpointException, match="another id"):
        sealer.open(sealed, context=b"cp-2")
    tampered = sealed[:-2] + b"2}"
    with pytest.raises(WorkflowCheckpointException, match="does not match"):
        sealer.open(tampered, context=b"cp-1")
    with pytest.raises(WorkflowCheckpointException, match="not sealed"):
        sealer.open(b'{"a": 1}', context=b"cp-1")
    with pytest.raises(WorkflowCheckpointException, match="does not match"):
        CheckpointSealer({"k1": KEY_B}).open(sealed, context=b"cp-1")  # same id, other secret


def test_encryption_hides_the_body_and_is_authenticated() -> None:
    sealer = CheckpointSealer({"k1": KEY_A}, encrypt=True)
    sealed = sealer.seal(b"secret approval data", context=b"cp")
    assert b"secret" not in sealed and sealed.startswith(b"afs1:a256gcm:k1:")
    assert sealer.seal(b"secret approval data", context=b"cp") != sealed  # fresh nonce each time
    assert sealer.open(sealed, context=b"cp") == b"secret approval data"
    assert CheckpointSealer({"k1": KEY_A}).open(sealed, context=b"cp") == b"secret approval data"
    flipped = bytearray(sealed)
    flipped[-5] ^= 1
    with pytest.raises(WorkflowCheckpointException, match="does not match"):
        sealer.open(bytes(flipped), context=b"cp")


def test_keys_rotate_one_signs_every_one_verifies() -> None:
    old = CheckpointSealer({"2025": KEY_A})
    sealed_old = old.seal(b"old", context=b"c")
    rotated = CheckpointSealer({"2025": KEY_A, "2026": KEY_B}, signing_key_id="2026")
    assert rotated.open(sealed_old, context=b"c") == b"old"
    sealed_new = rotated.seal(b"new", context=b"c")
    assert sealed_new.startswith(b"afs1:hs256:2026:")
    assert rotated.key_ids == {"2025", "2026"} and rotated.signing_key_id == "2026"
    retired = CheckpointSealer({"2026": KEY_B})
    assert retired.open(sealed_new, context=b"c") == b"new"
    with pytest.raises(WorkflowCheckpointException, match="key id"):
        retired.open(sealed_old, context=b"c")


@pytest.mark.parametrize(
    ("keys", "options", "error", "match"),
    [
        ({}, {}, ValueError, "at least one key"),
        ({"k": b"short"}, {}, ValueError, "32 bytes"),
        ({"k": "text" * 10}, {}, TypeError, "bytes"),
        ([("k", KEY_A)], {}, TypeError, "mapping of key id"),
        ({"bad id": KEY_A}, {}, ValueError, "Key ids"),
        ({"a": KEY_A, "b": KEY_B}, {}, ValueError, "signing_key_id"),
        ({"a": KEY_A}, {"signing_key_id": "b"}, ValueError, "signing_key_id"),
    ],
)
def test_bad_keys_are_refused(keys: dict[str, Any], options: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        CheckpointSealer(keys, **options)


def test_a_storage_without_a_sealer_says_so_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_checkpoint_seal, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="agent_framework_functional"):
        RedisCheckpointStorage("redis://127.0.0.1:1/0")
        RedisCheckpointStorage("redis://127.0.0.1:1/0")
        RedisCheckpointStorage("redis://127.0.0.1:1/0", sealer=CheckpointSealer({"k": KEY_A}))
    warnings = [record for record in caplog.records if "no CheckpointSealer" in record.getMessage()]
    assert len(warnings) == 1
    assert "RedisCheckpointStorage" in warnings[0].getMessage()


# ---------------------------------------------------------------- planted bodies in a real Redis


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_with_a_sealer_every_planted_body_is_refused_before_decoding(
    attack: str,
    redis_server: str,
    namespace: str,
    raw: aioredis.Redis,
    decodes: list[object],
    restore_from_dict: None,
) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace, sealer=CheckpointSealer({"k1": KEY_A}))
    try:
        good = await storage.save(_checkpoint())
        decodes.clear()
        await _plant(raw, namespace, "planted", ATTACKS[attack]("planted"))
        with pytest.raises(WorkflowCheckpointException, match="not sealed"):
            await storage.load("planted")
        assert decodes == []  # refused before core's decoder saw anything
        assert WorkflowCheckpoint.__dict__["from_dict"] is not int  # the BUILD step never ran
        listed = await storage.list_checkpoint_ids(workflow_name="wf")
        assert listed == [good]
        assert (await storage.load(good)).state["count"] == 3
    finally:
        await storage.aclose()


async def test_with_a_sealer_a_genuine_body_moved_to_another_id_is_refused(
    redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace, sealer=CheckpointSealer({"k1": KEY_A}))
    try:
        first = await storage.save(_checkpoint(approved=False))
        body = await _body(raw, namespace, first)
        assert body is not None
        await _plant(raw, namespace, "other", body)
        with pytest.raises(WorkflowCheckpointException, match="another id"):
            await storage.load("other")
        without = RedisCheckpointStorage(redis_server, namespace=namespace)
        try:
            with pytest.raises(WorkflowCheckpointException, match="no sealer"):
                await without.load(first)  # a sealed body never reaches the decoder without the key
        finally:
            await without.aclose()
    finally:
        await storage.aclose()


@pytest.mark.parametrize("attack", ["non_utf8", "deep"])
async def test_without_a_sealer_unreadable_bodies_give_clean_errors_and_are_skipped(
    attack: str, redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace)
    try:
        good = await storage.save(_checkpoint())
        await _plant(raw, namespace, "planted", ATTACKS[attack]("planted"))
        with pytest.raises(WorkflowCheckpointException, match=r"cannot be loaded|too deeply|not loaded"):
            await storage.load("planted")
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [good]
        latest = await storage.get_latest(workflow_name="wf")
        assert latest is not None and latest.checkpoint_id == good
    finally:
        await storage.aclose()


async def test_without_a_sealer_a_body_of_another_id_is_refused(
    redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    storage = RedisCheckpointStorage(redis_server, namespace=namespace)
    try:
        first = await storage.save(_checkpoint())
        body = await _body(raw, namespace, first)
        assert body is not None
        await _plant(raw, namespace, "other", body)
        with pytest.raises(WorkflowCheckpointException, match="another checkpoint"):
            await storage.load("other")
    finally:
        await storage.aclose()


async def test_a_sealed_and_encrypted_workflow_pauses_and_resumes_on_another_instance(
    redis_server: str, namespace: str, raw: aioredis.Redis
) -> None:
    sealer = CheckpointSealer({"k1": KEY_A}, encrypt=True)

    def build() -> tuple[RedisCheckpointStorage, RedisContinuationStore, Any]:
        checkpoints = RedisCheckpointStorage(redis_server, namespace=namespace, sealer=sealer)
        store = RedisContinuationStore(redis_server, namespace=f"{namespace}:continuation")
        return checkpoints, store, approval.build(checkpoint_storage=checkpoints, continuation_store=store)

    first_checkpoints, first_store, first = build()
    second_checkpoints, second_store, second = build()
    try:
        paused = await first.run("tea")
        request_id = paused.get_request_info_events()[0].request_id
        ids = await second_checkpoints.list_checkpoint_ids(workflow_name="approval")
        assert ids
        [segment] = [key async for key in raw.scan_iter(f"{namespace}:segment:*")]  # heads live in their chunks
        chunks = await raw.lrange(segment, 0, -1)
        assert chunks and all(chunk.startswith(b"afs1:a256gcm:k1:") and b"tea" not in chunk for chunk in chunks)
        done = await second.run(responses={request_id: "approved"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == ["shipped: draft about tea (approved)"]
    finally:
        for opened in (first_checkpoints, first_store, second_checkpoints, second_store):
            await close_store(opened)
