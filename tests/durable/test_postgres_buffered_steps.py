"""``PostgresCheckpointStorage`` holds a run's step checkpoints back until its next save, its end, or a delay.

A run we drive that pauses writes only the pause's row (it holds the step results of the held step
checkpoints, which its run deletes next), and a run that finishes with ``checkpoint_retention=0`` deletes
its held step checkpoints unwritten. Nothing a worker or a restore needs is missed:
the storage's reads write what it holds first, a failed run's step checkpoints are written when it
ends, and a running run's are written after the delay. Every test runs against a real PostgreSQL
cluster (``postgres_server``); statements are counted on psycopg's own connection class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from agent_framework import WorkflowCheckpoint
from durable_support import buffered_storage, checkpoints_elsewhere, until
from postgres_server import new_schema

from agent_framework_functional import (
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RunContext,
    step,
    workflow,
)
from agent_framework_functional._step_cache import StepCacheOffer

pytestmark = pytest.mark.slow

GATE: dict[str, asyncio.Event] = {}


@step
async def _part(text: str) -> str:
    return text.upper()


@workflow(name="held_review", checkpoint_retention=0)  # a finish deletes its chain at once
async def _review(topic: str, ctx: RunContext) -> str:
    first = await _part(f"{topic} one")
    second = await _part(f"{topic} two")
    answer = await ctx.request_info({"draft": [first, second]}, response_type=str)
    return f"{first} {second} ({await _part(answer)})"


@workflow(name="held_waits", checkpoint_retention=0)
async def _waits(topic: str) -> str:
    first = await _part(topic)
    await GATE[topic].wait()  # the test reads the storage while the run is here
    if topic.startswith("fail"):
        raise RuntimeError("the run fails after its step")
    return first


@pytest.fixture
def saves() -> Iterator[list[str]]:
    """The checkpoint statements sent (psycopg's ``AsyncConnection.execute``): ``save xN`` (N rows), ``delete``."""
    counted: list[str] = []
    execute = psycopg.AsyncConnection.execute

    async def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query.decode() if isinstance(query, bytes) else str(query)
        sent = text.startswith(("SELECT", "WITH"))  # not the schema's CREATE FUNCTION; WITH: a pause with its record
        if sent and "save_delta_checkpoint" in text:
            counted.append(f"save x{text.count('save_delta_checkpoint(')}")
        elif text.startswith("SELECT") and "delete_checkpoints" in text:
            counted.append("delete")
        return await execute(self, query, *args, **kwargs)

    psycopg.AsyncConnection.execute = counting  # type: ignore[method-assign]
    try:
        yield counted
    finally:
        psycopg.AsyncConnection.execute = execute  # type: ignore[method-assign]


async def _ids_seen_by_another_worker(url: str, schema: str, name: str) -> list[str]:
    return [checkpoint.checkpoint_id for checkpoint in await checkpoints_elsewhere(url, schema, name)]


async def test_a_cycle_writes_no_step_checkpoint_only_the_pause_s_row_holding_their_results(
    postgres_server: str, saves: list[str]
) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema, delay=3600.0)
    store = PostgresContinuationStore(postgres_server, schema=schema)
    try:
        wf = _review.build(checkpoint_storage=storage, continuation_store=store)
        paused = await wf.run("post")
        assert saves == ["save x1"]  # the pause's row holds both steps' results; the steps' rows never existed
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            rows = conn.execute(f'SELECT count(*) FROM "{schema}".delta_checkpoints').fetchone()
        assert rows == (1,)
        request_id = paused.get_request_info_events()[0].request_id
        resumer = _review.build(checkpoint_storage=storage, continuation_store=store)
        done = await resumer.run(responses={request_id: "ok"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == ["POST ONE POST TWO (OK)"]
        assert saves == ["save x1", "delete"]  # the resumed run's step checkpoint was deleted unwritten
        assert await storage.list_checkpoint_ids(workflow_name="held_review") == []
        assert await _ids_seen_by_another_worker(postgres_server, schema, "held_review") == []
    finally:
        await store.aclose()
        await storage.aclose()


async def test_another_worker_restores_the_pause_and_its_step_results(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage, other = (
        buffered_storage(postgres_server, schema, delay=3600.0),
        buffered_storage(postgres_server, schema, delay=None),
    )
    store, other_store = (PostgresContinuationStore(postgres_server, schema=schema) for _ in range(2))
    try:
        paused = await _review.build(checkpoint_storage=storage, continuation_store=store).run("note")
        request_id = paused.get_request_info_events()[0].request_id
        resumer = _review.build(checkpoint_storage=other, continuation_store=other_store)
        done = await resumer.run(responses={request_id: "fine"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == ["NOTE ONE NOTE TWO (FINE)"]
    finally:
        for closable in (store, other_store, storage, other):
            await closable.aclose()


CALLS: list[str] = []


@step
async def _counted(text: str) -> str:
    CALLS.append(text)
    return text.upper()


@workflow(name="held_rounds", checkpoint_retention=0)
async def _rounds(topic: str, ctx: RunContext) -> str:
    first = await _counted(f"{topic} a")
    one = await ctx.request_info({"first": first}, response_type=str)
    second = await _counted(f"{topic} {one}")
    third = await _counted(f"{topic} b")
    two = await ctx.request_info({"second": second, "third": third}, response_type=str)
    return f"{first} {second} {third} {await _counted(two)}"


@pytest.mark.parametrize("workers", ["same", "other", "alternating"])
async def test_two_pauses_resumed_on_any_worker_run_each_step_once(postgres_server: str, workers: str) -> None:
    schema = new_schema(postgres_server)
    storages = [buffered_storage(postgres_server, schema, delay=3600.0) for _ in range(2)]
    stores = [PostgresContinuationStore(postgres_server, schema=schema) for _ in range(2)]
    order = {"same": [0, 0, 0], "other": [0, 1, 1], "alternating": [0, 1, 0]}[workers]
    CALLS.clear()
    try:

        def worker(index: int) -> Any:
            return _rounds.build(checkpoint_storage=storages[order[index]], continuation_store=stores[order[index]])

        wf = worker(0)
        result = await wf.run("t")
        answers: dict[str, str] = {}  # core replays every earlier request: each round answers all so far
        for round_index, answer in ((1, "x"), (2, "y")):
            answers[result.get_request_info_events()[0].request_id] = answer
            wf = wf if order[round_index] == order[round_index - 1] else worker(round_index)
            result = await wf.run(responses=dict(answers), continuation_token=result.continuation_token)
        assert result.get_outputs() == ["T A T X T B Y"]
        assert CALLS == ["t a", "t x", "t b", "y"]  # no step ran twice
        assert await storages[0].list_checkpoint_ids(workflow_name="held_rounds") == []
    finally:
        for closable in (*stores, *storages):
            await closable.aclose()


async def _run_to_gate(
    storage: PostgresCheckpointStorage, topic: str, saved: list[str] | None = None
) -> asyncio.Task[Any]:
    """Start ``_waits`` and return once its step checkpoint was saved (held, id added to ``saved``)."""
    GATE[topic] = asyncio.Event()
    saved = [] if saved is None else saved
    save = storage.save_buffered

    async def noting(checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        saved.append(await save(checkpoint, offer))
        return saved[-1]

    storage.save_buffered = noting  # type: ignore[method-assign]
    task = asyncio.ensure_future(_waits.build(checkpoint_storage=storage).run(topic))
    for _ in range(3000):
        if saved:
            return task
        await asyncio.sleep(0.01)
    raise AssertionError("the run saved no checkpoint")


async def test_a_running_run_s_step_checkpoint_is_written_after_the_delay(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema, delay=0.05)
    try:
        task = await _run_to_gate(storage, "slow")

        async def seen() -> bool:
            return len(await _ids_seen_by_another_worker(postgres_server, schema, "held_waits")) == 1

        await until(seen, "the held step checkpoint on the server")
        GATE["slow"].set()
        assert (await task).get_outputs() == ["SLOW"]
    finally:
        await storage.aclose()


async def test_a_failed_run_s_step_checkpoint_is_written_when_it_ends(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema, delay=3600.0)  # only the run's end can write it
    try:
        task = await _run_to_gate(storage, "fail early")
        assert await _ids_seen_by_another_worker(postgres_server, schema, "held_waits") == []  # held
        GATE["fail early"].set()
        with pytest.raises(Exception, match="fails after its step"):
            await task

        async def seen() -> bool:
            return len(await _ids_seen_by_another_worker(postgres_server, schema, "held_waits")) == 1

        await until(seen, "the failed run's step checkpoint on the server")
        [checkpoint] = await storage.list_checkpoints(workflow_name="held_waits")
        assert checkpoint.state["_step_cache"]  # the step's result, for a restore
    finally:
        await storage.aclose()


async def test_reads_and_close_write_what_the_storage_holds(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema, delay=3600.0)
    closed = buffered_storage(postgres_server, schema, delay=3600.0)
    try:
        task = await _run_to_gate(storage, "read")
        assert await _ids_seen_by_another_worker(postgres_server, schema, "held_waits") == []
        [held_id] = await storage.list_checkpoint_ids(workflow_name="held_waits")  # this object lists what it holds
        assert await _ids_seen_by_another_worker(postgres_server, schema, "held_waits") == [held_id]
        GATE["read"].set()
        await task

        closing = await _run_to_gate(closed, "closed")
        await closed.aclose()  # writes it before the pool closes
        assert len(await _ids_seen_by_another_worker(postgres_server, schema, "held_waits")) == 1
        GATE["closed"].set()
        await closing  # its end's delete fails on the closed pool and is ignored
    finally:
        await storage.aclose()


async def test_a_held_checkpoint_loads_by_id(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema, delay=3600.0)
    try:
        saved: list[str] = []
        task = await _run_to_gate(storage, "load", saved)
        loaded = await storage.load(saved[0])
        assert loaded.checkpoint_id == saved[0] and loaded.state["_step_cache"]
        GATE["load"].set()
        await task
        assert await storage.list_checkpoint_ids(workflow_name="held_waits") == []  # the finished run deleted it
    finally:
        await storage.aclose()
