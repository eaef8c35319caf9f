"""No call hangs while PostgreSQL terminates the stores' connections, or while it is down.

A private PostgreSQL cluster (``postgres_servers``) holds a ``PostgresContinuationStore`` and a
``PostgresCheckpointStorage`` (one database: the joint pause), at their default ``pool_timeout``. A
background task terminates every other backend of the database at random 20-200 ms intervals while an
agent runs 40 pause/answer cycles, each call retried as "PostgreSQL" in the docs advises
(the same call again after a ``psycopg.OperationalError``; a restore by checkpoint id when a claim whose
reply was lost spent the token). Asserted, for three seeds: every cycle's side effect ran exactly once,
every cycle completed, and no call took 30 s (each is bounded by ``asyncio.wait_for``, and each seed's
cycles by a deadline, so a hang fails the test instead of stalling it). With the server stopped, a
pause and an answer each fail within the docs' bound: twice ``pool_timeout``; a run whose steps keep
saving fails within its steps' time and three ``pool_timeout``s (its step checkpoints' writes do not
each wait one after another); after a longer outage, the first call once the server is back succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
import pytest
from agent_framework import AgentResponse, Message
from postgres_server import PostgresServer, new_schema

from agent_framework_functional import (
    ContinuationAuthorityError,
    DurableStoreError,
    FunctionalWorkflow,
    FunctionalWorkflowAgent,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RunContext,
    continuation_token_hash,
    step,
    workflow,
)

pytestmark = pytest.mark.slow

_T = TypeVar("_T")
CYCLES = 40
CALL_LIMIT_SECONDS = 30.0
SEED_DEADLINE_SECONDS = 180.0  # about 10 s on a quiet machine; a hang guard (a pool that stays unusable fails here),
# not a timing goal: under load a few calls wait their pool_timeout (10 s), still far below CALL_LIMIT_SECONDS
TRIES = 100
EFFECTS: list[str] = []


@step
async def _draft(cycle: str) -> str:
    await asyncio.sleep(0.1)  # a cycle lasts a few kills
    return f"draft {cycle}"


@step
async def _effect(cycle: str, approved: bool) -> str:
    EFFECTS.append(cycle)
    await asyncio.sleep(0.05)
    return f"{cycle}:{approved}"


@workflow(name="killed_connections")
async def _cycle(cycle: str, ctx: RunContext) -> str:
    text = await _draft(cycle)
    approved = await ctx.request_info({"draft": text}, response_type=bool)
    return await _effect(cycle, approved)


async def _terminate(url: str, stop: asyncio.Event, rng: random.Random, kills: list[int]) -> None:
    """Terminate every other backend of the database at random 20-200 ms intervals until ``stop``."""
    statement = (
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE pid <> pg_backend_pid() AND datname = current_database()"
    )
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        while not stop.is_set():
            row = await (await admin.execute(statement)).fetchone()
            kills.append(int(row[0]) if row else 0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), rng.uniform(0.02, 0.2))


class _Calls:
    """Runs each call under ``asyncio.wait_for`` and keeps its duration, retrying after an outage error."""

    def __init__(self) -> None:
        self.durations: list[tuple[float, str]] = []
        self.failures = 0

    async def once(self, what: str, call: Callable[[], Awaitable[_T]]) -> _T:
        started = time.monotonic()
        try:
            return await asyncio.wait_for(call(), CALL_LIMIT_SECONDS + 5)
        finally:
            self.durations.append((time.monotonic() - started, what))

    async def retried(self, what: str, call: Callable[[], Awaitable[_T]]) -> _T:
        """The same call again after each ``psycopg.OperationalError`` (the docs' advice), at most ``TRIES`` times."""
        for _ in range(TRIES):
            try:
                return await self.once(what, call)
            except psycopg.OperationalError:
                self.failures += 1
                await asyncio.sleep(0.05)
        raise AssertionError(f"the {what} failed {TRIES} times in a row")


async def _one_cycle(
    agent: FunctionalWorkflowAgent,
    build: Callable[[], FunctionalWorkflow],
    store: PostgresContinuationStore,
    cycle: str,
    calls: _Calls,
) -> bool:
    """Pause, then answer, until the cycle's run finished; True when a lost claim made it restore the pause."""
    session = agent.create_session()
    paused: AgentResponse = await calls.retried("pause", lambda: agent.run(cycle, session=session))
    token = paused.continuation_token
    assert token is not None, cycle
    answer = Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=True)])
    try:
        done: AgentResponse = await calls.retried("answer", lambda: agent.run(answer, session=session))
    except ContinuationAuthorityError:  # a claim whose reply was lost spent the token: restore the pause
        record = await calls.retried("read", lambda: store.get(continuation_token_hash(token)))
        assert record is not None and record.status == "claimed", cycle
        responses = {record.pending_request_ids[0]: True}
        restored = await calls.retried(
            "restore", lambda: build().run(checkpoint_id=record.checkpoint_id, responses=responses)
        )
        assert restored.get_outputs() == [f"{cycle}:True"]
        return True
    assert done.text == f"{cycle}:True", done.text
    return False


@step
async def _slow_step(index: int) -> int:
    await asyncio.sleep(0.25)
    return index


@workflow(name="killed_connections_steps")
async def _many_steps(topic: str, ctx: RunContext) -> str:
    for index in range(12):
        await _slow_step(index)
    return str(await ctx.request_info({"topic": topic}, response_type=bool))


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_no_call_hangs_while_connections_are_terminated(
    postgres_servers: Callable[[], PostgresServer], seed: int
) -> None:
    EFFECTS.clear()
    server = postgres_servers()
    schema = new_schema(server.url, "kill")
    storage = PostgresCheckpointStorage(server.url, schema=schema)
    store = PostgresContinuationStore(server.url, schema=schema)
    calls, stop, kills = _Calls(), asyncio.Event(), []
    try:
        await storage.list_checkpoint_ids(workflow_name="killed_connections")  # the tables, before the storm
        await store.purge_expired()

        def build() -> FunctionalWorkflow:
            return _cycle.build(checkpoint_storage=storage, continuation_store=store)

        agent = build().as_agent()

        async def cycles() -> int:
            return sum([await _one_cycle(agent, build, store, f"{seed}-{index}", calls) for index in range(CYCLES)])

        killer = asyncio.create_task(_terminate(server.url, stop, random.Random(seed), kills))
        started = time.monotonic()
        try:
            restores = await asyncio.wait_for(cycles(), SEED_DEADLINE_SECONDS)
        except asyncio.TimeoutError:
            slowest = sorted(calls.durations, reverse=True)[:3]
            raise AssertionError(
                f"{CYCLES} cycles not done in {SEED_DEADLINE_SECONDS:g} s; slowest calls {slowest}"
            ) from None
        finally:
            stop.set()
            await killer
        elapsed = time.monotonic() - started
    finally:
        await store.aclose()
        await storage.aclose()
    slowest = max(calls.durations)
    print(
        f"seed {seed}: {CYCLES} cycles in {elapsed:.1f} s, {len(calls.durations)} calls ({calls.failures} failed, "
        f"{restores} restores), {sum(kills)} backends terminated, slowest call {slowest[0]:.2f} s ({slowest[1]})"
    )
    assert sorted(EFFECTS) == sorted(f"{seed}-{index}" for index in range(CYCLES))  # once each, none lost
    assert sum(kills) > CYCLES  # the storm did hit the stores
    assert slowest[0] < CALL_LIMIT_SECONDS, slowest


async def test_a_call_fails_within_twice_pool_timeout_while_the_server_is_down(
    postgres_servers: Callable[[], PostgresServer],
) -> None:
    server = postgres_servers()
    schema = new_schema(server.url, "down")
    storage = PostgresCheckpointStorage(server.url, schema=schema, pool_timeout=1.0)
    store = PostgresContinuationStore(server.url, schema=schema, pool_timeout=1.0)
    try:
        agent = _cycle.build(checkpoint_storage=storage, continuation_store=store).as_agent()
        session = agent.create_session()
        paused = await agent.run("down", session=session)
        answer = Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=True)])
        server.kill()
        for what, call in (
            ("pause", lambda: agent.run("other", session=agent.create_session())),
            ("answer", lambda: agent.run(answer, session=session)),
        ):
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError) as raised:
                await asyncio.wait_for(call(), 30)
            assert isinstance(raised.value, DurableStoreError)
            assert time.monotonic() - started < 2 * 1.0 + 1.0, what  # two operations' pool_timeout, and slack
        server.start()  # the pools connect on their next operation, not at the end of a reconnection backoff
        done = await asyncio.wait_for(agent.run(answer, session=session), 30)
        assert done.text == "down:True"
    finally:
        await store.aclose()
        await storage.aclose()


async def test_a_run_whose_steps_keep_saving_fails_soon_while_the_server_is_down(
    postgres_servers: Callable[[], PostgresServer],
) -> None:
    server = postgres_servers()
    schema = new_schema(server.url, "down")
    storage = PostgresCheckpointStorage(server.url, schema=schema, pool_timeout=1.0)
    store = PostgresContinuationStore(server.url, schema=schema, pool_timeout=1.0)
    try:
        await storage.list_checkpoint_ids(workflow_name="killed_connections_steps")
        await store.purge_expired()
        wf = _many_steps.build(checkpoint_storage=storage, continuation_store=store)
        server.kill()
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):  # each step checkpoint's write waited 1 s, one after another
            await asyncio.wait_for(wf.run("down"), 60)
        assert time.monotonic() - started < 12 * 0.25 + 3 * 1.0 + 2.0  # the steps, three pool_timeouts, slack
    finally:
        await store.aclose()
        await storage.aclose()


async def test_the_first_call_after_an_outage_connects_at_once(postgres_servers: Callable[[], PostgresServer]) -> None:
    server = postgres_servers()
    schema = new_schema(server.url, "back")
    storage = PostgresCheckpointStorage(server.url, schema=schema, pool_timeout=1.0)
    store = PostgresContinuationStore(server.url, schema=schema, pool_timeout=1.0)
    try:
        agent = _cycle.build(checkpoint_storage=storage, continuation_store=store).as_agent()
        session = agent.create_session()
        paused = await agent.run("back", session=session)
        answer = Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=True)])
        server.kill()
        down = time.monotonic()
        while time.monotonic() - down < 10:  # psycopg's pool would now wait 8 s, then 16 s, between its tries
            with pytest.raises(psycopg.OperationalError):
                await asyncio.wait_for(agent.run(answer, session=session), 30)
        server.start()
        done = await asyncio.wait_for(agent.run(answer, session=session), 30)  # no retry needed
        assert done.text == "back:True"
    finally:
        await store.aclose()
        await storage.aclose()
