"""``PostgresCheckpointStorage`` waits for the disk only where a token depends on it.

A checkpoint that holds pending requests (a pause) commits synchronously; the others commit without
waiting for the server's disk (``synchronous_steps=False``, the default). Each test runs a private
PostgreSQL cluster (``postgres_servers``) that it may SIGKILL: only what reached the disk survives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from agent_framework import WorkflowCheckpoint, WorkflowEvent
from durable_support import wait_for
from postgres_server import PostgresServer, new_schema

from agent_framework_functional import (
    CheckpointSealer,
    PostgresCheckpointStorage,
    RunContext,
    SQLiteContinuationStore,
    get_run_context,
    step,
    workflow,
)

pytestmark = pytest.mark.slow

DRAFTS: list[str] = []


@step
async def _counted_draft(part: str) -> str:
    DRAFTS.append(part)
    return part.upper()


@workflow(name="steps_then_review")
async def _steps_then_review(topic: str, ctx: RunContext) -> str:
    parts = [await _counted_draft(f"{topic} {index}") for index in range(3)]
    answer = await ctx.request_info({"parts": parts}, response_type=str)
    return f"{' '.join(parts)} ({answer})"


def _wal_syncs(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
    assert row is not None
    return int(row[0])


async def _syncs_for_step_saves(url: str, *, synchronous_steps: bool, count: int) -> int:
    """WAL flushes while ``count`` checkpoints without pending requests are saved (statistics reported first)."""
    storage = PostgresCheckpointStorage(url, schema=new_schema(url), synchronous_steps=synchronous_steps)
    try:
        await storage.save(WorkflowCheckpoint(workflow_name="warm", graph_signature_hash="h" * 64))  # the schema
    finally:
        await storage.aclose()
    await asyncio.sleep(1.5)  # backends report their WAL statistics at most once a second, and when they exit
    before = _wal_syncs(url)
    storage = PostgresCheckpointStorage(url, schema=storage.schema, synchronous_steps=synchronous_steps)
    try:
        for index in range(count):
            await storage.save(
                WorkflowCheckpoint(workflow_name="steps", graph_signature_hash="h" * 64, state={"i": index})
            )
    finally:
        await storage.aclose()
    await asyncio.sleep(1.5)
    return _wal_syncs(url) - before


async def test_step_checkpoints_do_not_wait_for_the_disk_unless_asked(
    postgres_servers: Callable[[], PostgresServer],
) -> None:
    server = postgres_servers()
    count = 40
    waiting = await _syncs_for_step_saves(server.url, synchronous_steps=True, count=count)
    not_waiting = await _syncs_for_step_saves(server.url, synchronous_steps=False, count=count)
    assert waiting >= count  # each commit flushed the log itself
    assert not_waiting < count // 2, (not_waiting, waiting)  # the WAL writer's periodic flushes only


def test_synchronous_steps_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="synchronous_steps must be True or False"):
        PostgresCheckpointStorage("postgresql://127.0.0.1:1/x", synchronous_steps="yes")  # pyright: ignore[reportArgumentType]


async def test_a_pause_survives_a_server_sigkill_right_after_its_token_and_its_steps_do_not_run_again(
    postgres_servers: Callable[[], PostgresServer], tmp_path: Path
) -> None:
    # The store is not on this server (SQLite): nothing but the pause's own synchronous commit makes its
    # checkpoint, and the step checkpoints before it that hold the step results, durable.
    server = postgres_servers()
    schema = new_schema(server.url)
    store = SQLiteContinuationStore(tmp_path / "store.db")
    storage = PostgresCheckpointStorage(server.url, schema=schema, pool_timeout=1.0)
    try:
        paused = await _steps_then_review.build(checkpoint_storage=storage, continuation_store=store).run("topic")
        token = paused.continuation_token
        request_id = paused.get_request_info_events()[0].request_id
        server.kill()  # SIGKILL right after the token: no shutdown checkpoint, only what reached the disk
        assert token is not None and DRAFTS[-3:] == ["topic 0", "topic 1", "topic 2"]
    finally:
        await storage.aclose()
    server.start()
    wait_for(lambda: server.postmaster_pid() is not None, what="the restarted server")
    DRAFTS.clear()
    other = PostgresCheckpointStorage(server.url, schema=schema)  # another worker
    try:
        deadline = time.monotonic() + 60
        while True:  # the restarted server may still be recovering (a hang guard, not a timing check)
            try:
                await other.list_checkpoint_ids(workflow_name="steps_then_review")
                break
            except psycopg.OperationalError:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
        done = await _steps_then_review.build(checkpoint_storage=other, continuation_store=store).run(
            responses={request_id: "ok"}, continuation_token=token
        )
        assert done.get_outputs() == ["TOPIC 0 TOPIC 1 TOPIC 2 (ok)"]
        assert DRAFTS == []  # every step result came back from the pause's checkpoint
    finally:
        await other.aclose()
        store.close()


ROUNDS: list[str] = []


@step
async def _counted_round_draft(part: str) -> str:
    ROUNDS.append(part)
    return part.upper()


@workflow(name="two_reviews")
async def _two_reviews(topic: str, ctx: RunContext) -> str:
    first = [await _counted_round_draft(f"{topic} a{index}") for index in range(2)]
    answer = await _ask(first)
    second = [await _counted_round_draft(f"{answer} b{index}") for index in range(5)]
    verdict = await ctx.request_info({"second": second}, response_type=str)
    return f"{' '.join(second)} ({verdict})"


@step
async def _ask(parts: list[str]) -> str:  # a request inside a step: its answer is a cached step result
    return await get_run_context().request_info({"parts": parts}, response_type=str)


async def _reachable(storage: PostgresCheckpointStorage, name: str) -> None:
    deadline = time.monotonic() + 60
    while True:  # the restarted server may still be recovering (a hang guard, not a timing check)
        try:
            await storage.list_checkpoint_ids(workflow_name=name)
            return
        except psycopg.OperationalError:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)


async def test_a_second_round_pause_of_a_sealed_storage_survives_a_sigkill_and_restores_by_id(
    postgres_servers: Callable[[], PostgresServer], tmp_path: Path
) -> None:
    # Pause, resume on another worker (its steps commit without waiting), pause again, SIGKILL: the second
    # pause's checkpoint (sealed, its step results in the first run's segment and its own) loads by id
    # on a restarted server, and its token resumes it without running a step again.
    server = postgres_servers()
    schema = new_schema(server.url)
    sealer = CheckpointSealer({"k1": b"k" * 32})
    store = SQLiteContinuationStore(tmp_path / "store.db")
    first = PostgresCheckpointStorage(server.url, schema=schema, sealer=sealer)
    second = PostgresCheckpointStorage(server.url, schema=schema, sealer=sealer, pool_timeout=1.0)
    try:
        paused = await _two_reviews.build(checkpoint_storage=first, continuation_store=store).run("t")
        request = paused.get_request_info_events()[0].request_id
        again = await _two_reviews.build(checkpoint_storage=second, continuation_store=store).run(
            responses={request: "yes"}, continuation_token=paused.continuation_token
        )
        token = again.continuation_token
        events = again.get_request_info_events()
        server.kill()
        assert token is not None and ROUNDS[-5:] == [f"yes b{index}" for index in range(5)]
    finally:
        await first.aclose()
        await second.aclose()
    server.start()
    wait_for(lambda: server.postmaster_pid() is not None, what="the restarted server")
    ROUNDS.clear()
    other = PostgresCheckpointStorage(server.url, schema=schema, sealer=sealer)
    try:
        await _reachable(other, "two_reviews")
        pauses = [
            cp for cp in await other.list_checkpoints(workflow_name="two_reviews") if cp.pending_request_info_events
        ]
        latest = max(pauses, key=lambda cp: cp.timestamp)
        assert set(latest.pending_request_info_events) == {events[0].request_id}
        restored = await other.load(latest.checkpoint_id)  # a restore by id reads the same checkpoint
        assert restored.pending_request_info_events.keys() == latest.pending_request_info_events.keys()
        done = await _two_reviews.build(checkpoint_storage=other, continuation_store=store).run(
            responses={request: "yes", events[0].request_id: "ok"}, continuation_token=token
        )
        assert done.get_outputs() == ["YES B0 YES B1 YES B2 YES B3 YES B4 (ok)"]
        assert ROUNDS == []
    finally:
        await other.aclose()
        store.close()


async def test_a_whole_checkpoint_with_a_pending_request_survives_a_sigkill_right_after_its_save(
    postgres_servers: Callable[[], PostgresServer],
) -> None:
    # A checkpoint our step-cache path does not take (core's graph workflows, core used directly) is saved
    # whole: with a pending request its commit waits too; the step checkpoint saved just before it is
    # on disk with it (the pause's flush writes the log up to its own commit).
    server = postgres_servers()
    schema = new_schema(server.url)
    pending = WorkflowEvent.request_info("r1", "reviewer", {"doc": "a"}, str)
    step_saved = WorkflowCheckpoint(workflow_name="graph", graph_signature_hash="h" * 64, state={"i": 1})
    pause = WorkflowCheckpoint(
        workflow_name="graph",
        graph_signature_hash="h" * 64,
        previous_checkpoint_id=step_saved.checkpoint_id,
        pending_request_info_events={"r1": pending},
    )
    storage = PostgresCheckpointStorage(server.url, schema=schema, pool_timeout=1.0)
    try:
        await storage.save(step_saved)
        await storage.save(pause)
        server.kill()
    finally:
        await storage.aclose()
    server.start()
    wait_for(lambda: server.postmaster_pid() is not None, what="the restarted server")
    other = PostgresCheckpointStorage(server.url, schema=schema)
    try:
        await _reachable(other, "graph")
        assert (await other.load(pause.checkpoint_id)).pending_request_info_events.keys() == {"r1"}
        assert (await other.load(step_saved.checkpoint_id)).state == {"i": 1}
    finally:
        await other.aclose()
