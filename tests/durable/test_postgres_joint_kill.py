"""A joint pause (record and checkpoint in one statement) survives a server SIGKILL right after its token.

A private PostgreSQL cluster (``postgres_servers``) holds both the store and the storage, so the pause's
one statement is the only commit its token waits for; after a SIGKILL and a restart, another worker
resumes it by its token without running a step again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import psycopg
import pytest
from durable_support import wait_for
from postgres_server import PostgresServer, new_schema

from agent_framework_functional import (
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RunContext,
    step,
    workflow,
)

pytestmark = pytest.mark.slow

DRAFTS: list[str] = []


@step
async def _counted(part: str) -> str:
    DRAFTS.append(part)
    await asyncio.sleep(0.1)  # some step checkpoints are written (held 0.2 s), the last ones are not
    return part.upper()


@workflow(name="joint_kill")
async def _steps_then_review(topic: str, ctx: RunContext) -> str:
    parts = [await _counted(f"{topic} {index}") for index in range(4)]
    answer = await ctx.request_info({"parts": parts}, response_type=str)
    return f"{' '.join(parts)} ({answer})"


async def _ready(storage: PostgresCheckpointStorage, store: PostgresContinuationStore) -> None:
    deadline = time.monotonic() + 60
    while True:  # the restarted server may still be recovering (a hang guard, not a timing check)
        try:
            await storage.list_checkpoint_ids(workflow_name="joint_kill")
            await store.purge_expired()
            return
        except psycopg.OperationalError:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)


async def test_a_joint_pause_survives_a_sigkill_right_after_its_token(
    postgres_servers: Callable[[], PostgresServer],
) -> None:
    DRAFTS.clear()
    server = postgres_servers()
    schema = new_schema(server.url, "k")
    storage = PostgresCheckpointStorage(server.url, schema=schema, pool_timeout=1.0)
    store = PostgresContinuationStore(server.url, schema=schema, pool_timeout=1.0)
    try:
        assert store.joint(storage) is not None
        await _ready(storage, store)
        paused = await _steps_then_review.build(checkpoint_storage=storage, continuation_store=store).run("t")
        token, request_id = paused.continuation_token, paused.get_request_info_events()[0].request_id
        server.kill()  # right after the token: only what reached the disk survives
        assert token is not None and DRAFTS == ["t 0", "t 1", "t 2", "t 3"]
    finally:
        await store.aclose()
        await storage.aclose()
    server.start()
    wait_for(lambda: server.postmaster_pid() is not None, what="the restarted server")
    DRAFTS.clear()
    other = PostgresCheckpointStorage(server.url, schema=schema)
    other_store = PostgresContinuationStore(server.url, schema=schema)
    try:
        await _ready(other, other_store)
        done = await _steps_then_review.build(checkpoint_storage=other, continuation_store=other_store).run(
            responses={request_id: "ok"}, continuation_token=token
        )
        assert done.get_outputs() == ["T 0 T 1 T 2 T 3 (ok)"]
        assert DRAFTS == []  # every step result came back from the pause's checkpoint
    finally:
        await other_store.aclose()
        await other.aclose()
