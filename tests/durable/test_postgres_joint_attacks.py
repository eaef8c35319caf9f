"""Attacks on the joint pause of a Postgres store and storage on one database (``_durable/postgres_joint.py``).

Against a real PostgreSQL cluster (``postgres_server``). Asserted: two caller pools on different databases
are not taken for one; store and storage on different schemas of one database pause and resume across
workers; a sealed storage refuses a tampered row before anything decodes it; instances pausing at once on
one worker resume alternately on two; a restore then pauses again.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from agent_framework import WorkflowCheckpointException
from psycopg_pool import AsyncConnectionPool

from agent_framework_functional import (
    CheckpointSealer,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RunContext,
    continuation_token_hash,
    step,
    workflow,
)
from agent_framework_functional._durable.postgres_joint import joint

pytestmark = pytest.mark.slow

KEY = b"k" * 32


@step
async def _draft(topic: str) -> str:
    return f"draft about {topic}"


@workflow(name="joint_attack")
async def _twice(topic: str, ctx: RunContext) -> str:
    text = await _draft(topic)
    first = await ctx.request_info({"draft": text}, response_type=str)
    second = await ctx.request_info({"again": first}, response_type=str)
    return f"{text}: {first}, {second}"


def _schema() -> str:
    return f"a_{uuid.uuid4().hex}"


class _Worker:
    def __init__(self, storage: PostgresCheckpointStorage, store: PostgresContinuationStore) -> None:
        self.storage, self.store = storage, store

    @classmethod
    def on(cls, url: str, schema: str, store_schema: str | None = None, **options: Any) -> _Worker:
        return cls(
            PostgresCheckpointStorage(url, schema=schema, **options),
            PostgresContinuationStore(url, schema=store_schema or schema),
        )

    def build(self) -> Any:
        return _twice.build(checkpoint_storage=self.storage, continuation_store=self.store)

    async def ready(self) -> None:
        await self.storage.list_checkpoints(workflow_name="joint_attack")
        await self.store.purge_expired()

    async def aclose(self) -> None:
        await self.store.aclose()
        await self.storage.aclose()


def _request(paused: Any) -> str:
    return paused.get_request_info_events()[0].request_id


async def _answer(worker: _Worker, paused: Any, answer: str, earlier: dict[str, str] | None = None) -> Any:
    responses = {**(earlier or {}), _request(paused): answer}
    return await worker.build().run(responses=responses, continuation_token=paused.continuation_token)


async def _execute(url: str, *statements: str) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows: list[Any] = []
        for statement in statements:
            cursor = await conn.execute(statement)
            rows = await cursor.fetchall() if cursor.description else []
        return rows


async def test_two_caller_pools_on_different_databases_are_not_one(postgres_server: str) -> None:
    database = f"d_{uuid.uuid4().hex}"
    await _execute(postgres_server, f'CREATE DATABASE "{database}"')
    schema = _schema()
    elsewhere = AsyncConnectionPool(postgres_server, kwargs={"autocommit": True, "dbname": database}, open=False)
    here = AsyncConnectionPool(postgres_server, kwargs={"autocommit": True}, open=False)
    await elsewhere.open()
    await here.open()
    worker = _Worker(
        PostgresCheckpointStorage(elsewhere, schema=schema), PostgresContinuationStore(here, schema=schema)
    )
    try:
        assert joint(worker.store, worker.storage) is None  # one conninfo, but the pools' kwargs differ
        await worker.ready()
        paused = await worker.build().run("p")
        done = await _answer(worker, await _answer(worker, paused, "a"), "b", {_request(paused): "a"})
        assert done.get_outputs() == ["draft about p: a, b"]
    finally:
        await worker.aclose()
        await elsewhere.close()
        await here.close()


async def test_store_and_storage_on_two_schemas_of_one_database(postgres_server: str) -> None:
    schema, store_schema = _schema(), _schema()
    one = _Worker.on(postgres_server, schema, store_schema)
    two = _Worker.on(postgres_server, schema, store_schema)
    try:
        await one.ready()
        await two.ready()
        assert joint(one.store, one.storage) is not None
        paused = await one.build().run("s")
        again = await _answer(two, paused, "a")
        done = await _answer(one, again, "b", {_request(paused): "a"})
        assert done.get_outputs() == ["draft about s: a, b"]
        rows = await _execute(postgres_server, f'SELECT count(*) FROM "{schema}".delta_checkpoints')
        assert rows[0][0] == 0
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_sealed_storage_refuses_a_tampered_row_read_with_the_record(
    postgres_server: str, decodes: list[object]
) -> None:
    schema = _schema()
    one = _Worker.on(postgres_server, schema, sealer=CheckpointSealer({"k1": KEY}))
    two = _Worker.on(postgres_server, schema, sealer=CheckpointSealer({"k1": KEY}))
    try:
        await one.ready()
        await two.ready()
        paused = await one.build().run("t")
        await _execute(
            postgres_server,
            f"UPDATE \"{schema}\".delta_checkpoints SET body = overlay(body placing '\\xff'::bytea from 60 for 1) "
            "WHERE checkpoint_id IS NOT NULL",
        )
        decodes.clear()
        with pytest.raises(WorkflowCheckpointException):
            await _answer(two, paused, "a")
        assert decodes == []  # refused before core's decoder saw anything
    finally:
        await one.aclose()
        await two.aclose()


async def test_instances_pausing_at_once_resume_alternately_on_two_workers(postgres_server: str) -> None:
    schema = _schema()
    one, two = _Worker.on(postgres_server, schema), _Worker.on(postgres_server, schema)
    try:
        await one.ready()
        await two.ready()
        topics = [f"t{i}" for i in range(6)]
        paused = await asyncio.gather(*(one.build().run(topic) for topic in topics))
        again = await asyncio.gather(*(_answer(two, p, f"a{i}") for i, p in enumerate(paused)))
        done = await asyncio.gather(
            *(
                _answer(one, a, f"b{i}", {_request(p): f"a{i}"})
                for i, (p, a) in enumerate(zip(paused, again, strict=True))
            )
        )
        assert [d.get_outputs() for d in done] == [[f"draft about t{i}: a{i}, b{i}"] for i in range(6)]
        rows = await _execute(postgres_server, f'SELECT count(*) FROM "{schema}".delta_checkpoints')
        assert rows[0][0] == 0
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_restore_then_pauses_again(postgres_server: str) -> None:
    schema = _schema()
    one, two = _Worker.on(postgres_server, schema), _Worker.on(postgres_server, schema)
    try:
        await one.ready()
        await two.ready()
        paused = await one.build().run("r")
        record = await one.store.get(continuation_token_hash(paused.continuation_token))
        assert record is not None
        again = await two.build().run(checkpoint_id=record.checkpoint_id, responses={_request(paused): "a"})
        assert again.continuation_token is not None
        done = await _answer(one, again, "b", {_request(paused): "a"})
        assert done.get_outputs() == ["draft about r: a, b"]
    finally:
        await one.aclose()
        await two.aclose()
