"""A joint pause cancelled at any moment: every record it left names a checkpoint that loads.

Against a real PostgreSQL cluster (``postgres_server``), store and storage on one database. A pausing
run is cancelled after 0.2, 0.4, ... ms until one finishes. After each, a record the cancelled run may
have committed names a checkpoint another worker loads (so restoring it by id works); the run that
finished resumes elsewhere.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from postgres_server import new_schema

from agent_framework_functional import (
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RunContext,
    step,
    workflow,
)
from agent_framework_functional._durable import postgres_store

pytestmark = pytest.mark.slow

STEP_SECONDS = 0.0002


async def _cancel_after(run: Any, seconds: float) -> bool:
    """Run ``run()`` as a task and cancel it after ``seconds``; True when it finished first."""
    task = asyncio.ensure_future(run())
    await asyncio.sleep(seconds)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return False
    return True


@step
async def _draft(topic: str) -> str:
    return f"draft about {topic}"


@workflow(name="joint_sweep")
async def _review(topic: str, ctx: RunContext) -> str:
    text = await _draft(topic)
    answer = await ctx.request_info({"draft": text}, response_type=str)
    return f"{text}: {answer}"


async def test_a_joint_pause_cancelled_anywhere_leaves_only_records_whose_checkpoint_loads(
    postgres_server: str,
) -> None:
    schema = new_schema(postgres_server, "s")
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    store = PostgresContinuationStore(postgres_server, schema=schema)
    other = PostgresCheckpointStorage(postgres_server, schema=schema)
    other_store = PostgresContinuationStore(postgres_server, schema=schema)
    finished: Any = None
    try:
        await storage.list_checkpoints(workflow_name="joint_sweep")
        await other.list_checkpoints(workflow_name="joint_sweep")
        await store.purge_expired()
        cancelled = 0
        results: list[Any] = []
        for k in range(1, 2000):

            async def pause(k: int = k) -> None:
                built = _review.build(checkpoint_storage=storage, continuation_store=store)
                results.append(await built.run(f"t{k}"))

            if await _cancel_after(pause, k * STEP_SECONDS):
                finished = results[0]
                break
            cancelled += 1
            await asyncio.gather(*postgres_store._ALONE, return_exceptions=True)  # the saves alone it started
            async with await psycopg.AsyncConnection.connect(postgres_server, autocommit=True) as conn:
                rows = await (await conn.execute(f'SELECT checkpoint_id FROM "{schema}".continuations')).fetchall()
            for (checkpoint_id,) in rows:
                assert (await other.load(checkpoint_id)).pending_request_info_events, (k, checkpoint_id)
        assert cancelled > 3 and finished is not None, cancelled
        request = finished.get_request_info_events()[0].request_id
        done = await _review.build(checkpoint_storage=other, continuation_store=other_store).run(
            responses={request: "ok"}, continuation_token=finished.continuation_token
        )
        assert done.get_outputs() == [f"draft about t{cancelled + 1}: ok"]
    finally:
        for closable in (store, storage, other_store, other):
            await closable.aclose()
