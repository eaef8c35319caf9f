"""Helpers shared by the joint-pause tests (``_durable/postgres_store.py``): a two-pause workflow and a worker.

A worker is a ``PostgresCheckpointStorage`` and a ``PostgresContinuationStore`` on one server; a resume
answers every earlier request of its chain again, so :func:`answer` takes the earlier answers too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from agent_framework_functional import (
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RunContext,
    step,
    workflow,
)


@step
async def draft(topic: str) -> str:
    return f"draft about {topic}"


@workflow(name="joint_pause", checkpoint_retention=0)  # a finish deletes its chain at once
async def twice(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    first = await ctx.request_info({"draft": text}, response_type=str)
    second = await ctx.request_info({"again": first}, response_type=str)
    return f"{text}: {first}, {second}"


class JointWorker:
    """A worker's storage and store (the joint applies when they reach one database)."""

    def __init__(self, storage: PostgresCheckpointStorage, store: PostgresContinuationStore) -> None:
        self.storage, self.store = storage, store

    @classmethod
    def on(cls, url: str, schema: str, store_schema: str | None = None, **options: Any) -> JointWorker:
        return cls(
            PostgresCheckpointStorage(url, schema=schema, **options),
            PostgresContinuationStore(url, schema=store_schema or schema),
        )

    def build(self) -> Any:
        return twice.build(checkpoint_storage=self.storage, continuation_store=self.store)

    async def ready(self) -> None:
        """Both components set up (their tables exist already: ``new_schema``)."""
        await self.storage.setup()
        await self.store.setup()

    async def aclose(self) -> None:
        await self.store.aclose()
        await self.storage.aclose()


def request(paused: Any) -> str:
    return paused.get_request_info_events()[0].request_id


async def answer(worker: JointWorker, paused: Any, text: str, earlier: dict[str, str] | None = None) -> Any:
    """Answer ``paused``'s request (``earlier``: the chain's earlier answers, given again)."""
    responses = {**(earlier or {}), request(paused): text}
    return await worker.build().run(responses=responses, continuation_token=paused.continuation_token)


async def count_rows(url: str, schema: str, table: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(f'SELECT count(*) FROM "{schema}".{table}')).fetchone()
    assert row is not None
    return int(row[0])


async def until_a_backend_waits(url: str, condition: str = "wait_event_type = 'Lock'") -> None:
    """Return once a server backend waits as ``condition`` says (a lock by default); fail after 10 s."""
    waiting = f"SELECT count(*) FROM pg_stat_activity WHERE {condition}"
    for _ in range(200):
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(waiting).fetchone()  # pyright: ignore[reportArgumentType]
        if row is not None and row[0] > 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no backend waited ({condition}) within 10 s")
