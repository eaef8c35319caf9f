"""Without a sealer, a step-cache chunk whose pickle BUILDs onto a class is refused as a type outside the allow-list.

Someone who can write the database changes one value of a stored chunk (Redis: a segment's list; PostgreSQL:
a ``delta_checkpoints`` row) into a pickle that sets ``WorkflowCheckpoint.from_dict`` on the class itself.
The load is refused with the error of a planted type outside the allow-list, the class is untouched, and an
untouched checkpoint of the same storage still loads (``test_checkpoint_pickles.py`` has the opcodes; the
whole bodies are in ``tests/stores/test_checkpoint_storage_contract.py``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
import redis.asyncio as aioredis
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from postgres_server import new_schema
from test_checkpoint_seal import _from_dict_hijack_pickle, _pickled
from test_checkpoint_seal_segments import DOCS, batch

from agent_framework_functional import PostgresCheckpointStorage, RedisCheckpointStorage, workflow

pytestmark = pytest.mark.slow

BLOCKED = "Failed to decode pickled checkpoint data: Checkpoint deserialization blocked"
PLANTS = {
    "state on a class": _pickled(
        _from_dict_hijack_pickle(), "agent_framework._workflows._checkpoint:WorkflowCheckpoint"
    ),
    "a type outside the allow-list": _pickled(b"\x80\x02cpathlib\nPurePosixPath\n)R.", "pathlib:PurePosixPath"),
}

Storage = RedisCheckpointStorage | PostgresCheckpointStorage
Poison = Callable[[dict[str, str]], Awaitable[str]]  # changes the first chunk; returns its checkpoint's id


def _poisoned(chunk: bytes, value: dict[str, str]) -> bytes:
    """The chunk with its first cached step result's ``flagged`` replaced by ``value`` (a pickle envelope)."""
    parsed = json.loads(chunk)
    parsed["c"][0][2]["flagged"] = value
    return json.dumps(parsed).encode("utf-8")


@asynccontextmanager
async def _redis(server: str) -> AsyncIterator[tuple[Storage, Poison]]:
    namespace = f"aff-pickles:{uuid.uuid4().hex}"
    storage = RedisCheckpointStorage(server, namespace=namespace)
    raw = aioredis.Redis.from_url(server)

    async def poison(value: dict[str, str]) -> str:
        for segment in await raw.zrange(f"{namespace}:wsegs:batch", 0, -1):  # the run's (the other is whole)
            key = f"{namespace}:segment:{segment.decode()}"
            chunk = await raw.lindex(key, 0)  # type: ignore[misc]
            if "c" in json.loads(chunk):
                break
        await raw.lset(key, 0, _poisoned(chunk, value))  # type: ignore[misc]
        return json.loads(chunk)["i"]

    try:
        yield storage, poison
    finally:
        await storage.aclose()
        await raw.aclose()


@asynccontextmanager
async def _postgres(server: str) -> AsyncIterator[tuple[Storage, Poison]]:
    schema = new_schema(server)
    storage = PostgresCheckpointStorage(server, schema=schema)

    async def poison(value: dict[str, str]) -> str:
        with psycopg.connect(server, autocommit=True) as conn:
            row = conn.execute(
                f'SELECT checkpoint_id, body FROM "{schema}".delta_checkpoints WHERE holds_chunk ORDER BY saved_at'
            ).fetchone()
            assert row is not None
            conn.execute(
                f'UPDATE "{schema}".delta_checkpoints SET body = %s WHERE checkpoint_id = %s',
                (_poisoned(bytes(row[1]), value), row[0]),
            )
        return str(row[0])

    try:
        yield storage, poison
    finally:
        await storage.aclose()


BACKENDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "redis": ("redis_server", _redis),
    "postgres": ("postgres_server", _postgres),
}


async def _refusal(server: str, backend: str, plant: str) -> tuple[WorkflowCheckpointException, str]:
    """Plant one value in a fresh storage's first chunk; the load's refusal (the rest checked undisturbed)."""
    from_dict = WorkflowCheckpoint.__dict__["from_dict"]
    async with BACKENDS[backend][1](server) as (storage, poison):
        await workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage).run(DOCS)
        untouched = WorkflowCheckpoint(workflow_name="batch", graph_signature_hash="h", state={"count": 3})
        await storage.save(untouched)  # after the run's chunks: its row and segment are not the first
        checkpoint_id = await poison(PLANTS[plant])
        with pytest.raises(WorkflowCheckpointException) as refused:
            await storage.load(checkpoint_id)
        assert WorkflowCheckpoint.__dict__["from_dict"] is from_dict  # the class was not patched
        assert await storage.load(untouched.checkpoint_id) == untouched
        assert checkpoint_id not in await storage.list_checkpoint_ids(workflow_name="batch")
        return refused.value, checkpoint_id


def _chain(error: BaseException | None) -> list[str]:
    messages: list[str] = []
    while error is not None:
        messages.append(str(error))
        error = error.__cause__
    return messages


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_without_a_sealer_a_chunk_that_builds_onto_a_class_is_refused_as_a_type_outside_the_allow_list(
    backend: str, request: pytest.FixtureRequest, restore_from_dict: None
) -> None:
    server = request.getfixturevalue(BACKENDS[backend][0])
    shapes: list[tuple[type, str]] = []
    for plant in sorted(PLANTS):
        error, checkpoint_id = await _refusal(server, backend, plant)
        messages = _chain(error)
        core = next(message for message in messages if message.startswith(BLOCKED))  # core's refusal, or ours
        shapes.append((type(error), messages[0].replace(checkpoint_id, "<id>").replace(core, "<refusal>")))
    assert shapes[0] == shapes[1]  # the same exception, wrapped the same way
