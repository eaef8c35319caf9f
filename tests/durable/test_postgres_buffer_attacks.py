"""Attacks on the step checkpoints ``PostgresCheckpointStorage`` holds back: none may lose a run's restore point.

A held step checkpoint is written by its run's next save, dropped when a pause or a finish makes it
useless, and written when the run ends otherwise. These tests end runs the awkward ways (a pause whose
save is refused or cancelled before it is sent, a failure read at once from another storage object or
ending ``asyncio.run``, a reader cancelled while another run's rows are being written, a write that fails
or waits at the server midway through a run, a delete of a running run's held checkpoint) and check that
a restore still finds the last step checkpoint saved. Every test runs against a real PostgreSQL cluster
(``postgres_server``); a ``SHARE`` lock on a table taken from another connection holds a write at the
server, so the races are deterministic.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from durable_support import buffered_storage, checkpoints_elsewhere, until
from postgres_server import new_schema

from agent_framework_functional import PostgresCheckpointStorage, RunContext, step, workflow
from agent_framework_functional._step_cache import StepCacheOffer

pytestmark = pytest.mark.slow

GATES: dict[str, list[asyncio.Event]] = {}
CALLS: list[str] = []


class Unlisted:
    """Request data of a type the storage's allow-list lacks: its pause's save is refused."""

    def __init__(self, text: str) -> None:
        self.text = text


@step
async def _counted(text: str) -> str:
    CALLS.append(text)
    return text.upper()


@workflow(name="held_refused")
async def _refused(topic: str, ctx: RunContext) -> str:
    first = await _counted(topic)
    return await ctx.request_info(Unlisted(first), response_type=str)


@workflow(name="held_gated")
async def _gated(topic: str) -> str:
    first = await _counted(f"{topic} 1")
    await GATES[topic][0].wait()
    second = await _counted(f"{topic} 2")
    await GATES[topic][1].wait()
    raise RuntimeError(f"the run fails after {first} and {second}")


@workflow(name="held_gated_pause")
async def _gated_pause(topic: str, ctx: RunContext) -> str:
    first = await _counted(f"{topic} 1")
    await GATES[topic][0].wait()
    second = await _counted(f"{topic} 2")
    return await ctx.request_info({"draft": [first, second]}, response_type=str)


@contextlib.contextmanager
def _segments_locked(url: str, schema: str, table: str = "delta_segments") -> Iterator[psycopg.Connection[Any]]:
    """Hold a SHARE lock on the segments table (or ``table``): saves wait at the server, reads do not."""
    with psycopg.connect(url) as locker:
        locker.execute(f'LOCK TABLE "{schema}".{table} IN SHARE MODE')
        try:
            yield locker
        finally:
            locker.rollback()


def _blocked_pids(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'").fetchall()
    return [int(row[0]) for row in rows]


async def _a_write_blocked(url: str) -> bool:
    return bool(_blocked_pids(url))


async def _run_to_first_gate(
    storage: PostgresCheckpointStorage, topic: str, saved: list[str] | None = None, run: Any = _gated
) -> asyncio.Task[Any]:
    """Start ``_gated`` and return once its first step's checkpoint is saved (held) and it waits."""
    GATES[topic] = [asyncio.Event(), asyncio.Event()]
    saved = [] if saved is None else saved
    save = storage.save_buffered

    async def noting(checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        saved.append(await save(checkpoint, offer))
        return saved[-1]

    storage.save_buffered = noting  # type: ignore[method-assign]
    task = asyncio.ensure_future(run.build(checkpoint_storage=storage).run(topic))

    async def held() -> bool:
        return bool(saved)

    await until(held, "the first step's save")
    return task


async def test_a_pause_whose_save_is_refused_keeps_the_step_checkpoints_it_superseded(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema)
    CALLS.clear()
    try:
        with pytest.raises(WorkflowCheckpointException, match="allowed_checkpoint_types"):
            await _refused.build(checkpoint_storage=storage).run("tea")  # the pause's save is refused
        [checkpoint] = await checkpoints_elsewhere(postgres_server, schema, "held_refused")
        assert list(checkpoint.state["_step_cache"].values()) == ["TEA"]  # the step's result, for a restore
        fixed = PostgresCheckpointStorage(
            postgres_server, schema=schema, allowed_checkpoint_types=[f"{__name__}:Unlisted"]
        )
        try:
            paused = await _refused.build(checkpoint_storage=fixed).run(checkpoint_id=checkpoint.checkpoint_id)
            assert paused.get_request_info_events()
        finally:
            await fixed.aclose()
        assert CALLS == ["tea"]  # the restore did not run the step again
    finally:
        await storage.aclose()


async def test_a_failed_run_s_step_checkpoint_is_on_the_server_when_the_failure_reaches_the_caller(
    postgres_server: str,
) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema)
    try:
        assert await storage.list_checkpoint_ids(workflow_name="held_gated") == []  # the schema exists
        task = await _run_to_first_gate(storage, "late")
        with _segments_locked(postgres_server, schema):
            GATES["late"][0].set()
            GATES["late"][1].set()  # the run fails; writing its held step checkpoints waits for the lock
            await until(lambda: _a_write_blocked(postgres_server), "the held write at the lock")
            surfaced_first = task.done()
        with pytest.raises(RuntimeError, match="the run fails"):
            await task
        assert not surfaced_first  # a host that restores on another worker at once would find nothing
        checkpoint = (await checkpoints_elsewhere(postgres_server, schema, "held_gated"))[-1]
        assert len(checkpoint.state["_step_cache"]) == 2
    finally:
        await storage.aclose()


async def test_a_cancelled_reader_does_not_cancel_another_run_s_held_write(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema)
    try:
        assert await storage.list_checkpoint_ids(workflow_name="held_gated") == []
        task = await _run_to_first_gate(storage, "cut")
        with _segments_locked(postgres_server, schema):
            reader = asyncio.ensure_future(storage.list_checkpoint_ids(workflow_name="other"))  # writes held rows first
            await until(lambda: _a_write_blocked(postgres_server), "the held write at the lock")
            reader.cancel()  # e.g. a host's request that read the storage, cancelled by its client
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        GATES["cut"][0].set()
        await storage.flush()
        checkpoint = (await checkpoints_elsewhere(postgres_server, schema, "held_gated"))[-1]
        assert len(checkpoint.state["_step_cache"]) == 1  # the first step's checkpoint, written after all
        GATES["cut"][1].set()
        with pytest.raises(RuntimeError, match="the run fails"):
            await task
    finally:
        await storage.aclose()


async def test_after_a_failed_held_write_the_run_s_later_step_checkpoints_are_still_written(
    postgres_server: str,
) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema)
    try:
        assert await storage.list_checkpoint_ids(workflow_name="held_gated") == []
        task = await _run_to_first_gate(storage, "cut off")
        with _segments_locked(postgres_server, schema):
            flushing = asyncio.ensure_future(storage.flush())
            await until(lambda: _a_write_blocked(postgres_server), "the held write at the lock")
            with psycopg.connect(postgres_server, autocommit=True) as admin:  # the connection drops mid-write
                for pid in _blocked_pids(postgres_server):
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            await flushing  # the lost write is logged, not raised (as after a server crash)
        GATES["cut off"][0].set()
        GATES["cut off"][1].set()
        with pytest.raises(RuntimeError, match="the run fails"):
            await task
        await storage.flush()
        [checkpoint] = await checkpoints_elsewhere(postgres_server, schema, "held_gated")  # the second step's
        assert len(checkpoint.state["_step_cache"]) == 2
    finally:
        await storage.aclose()


async def test_a_run_s_held_writes_commit_in_order(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema)
    saved: list[str] = []
    try:
        assert await storage.list_checkpoint_ids(workflow_name="held_gated") == []
        task = await _run_to_first_gate(storage, "order", saved)
        with _segments_locked(postgres_server, schema, "delta_checkpoints"):  # the segment row exists, uncommitted
            first = asyncio.ensure_future(storage.flush())  # the first step's row (a slow server: > 0.2 s)
            await until(lambda: _a_write_blocked(postgres_server), "the first write at the lock")
            GATES["order"][0].set()

            async def second_held() -> bool:
                return len(saved) == 2

            await until(second_held, "the second step's save")
            second = asyncio.ensure_future(storage.flush())  # its timer fires while the first write waits
            await asyncio.wait([second], timeout=1.0)  # a second write sent now finds no segment yet
        await first
        await second
        GATES["order"][1].set()
        with pytest.raises(RuntimeError, match="the run fails"):
            await task
        checkpoint = (await checkpoints_elsewhere(postgres_server, schema, "held_gated"))[-1]
        assert checkpoint.checkpoint_id == saved[1] and len(checkpoint.state["_step_cache"]) == 2
    finally:
        await storage.aclose()


async def test_a_run_cancelled_before_its_pause_is_sent_keeps_the_step_checkpoints_it_superseded(
    postgres_server: str,
) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema)
    saved: list[str] = []
    try:
        assert await storage.list_checkpoint_ids(workflow_name="held_gated_pause") == []
        task = await _run_to_first_gate(storage, "stop", saved, _gated_pause)
        with _segments_locked(postgres_server, schema):
            flushing = asyncio.ensure_future(storage.flush())  # the first step's row waits at the server
            await until(lambda: _a_write_blocked(postgres_server), "the first write at the lock")
            GATES["stop"][0].set()  # the second step is held; the pause waits for the first write

            async def pause_waits() -> bool:
                return bool(storage._unsent)  # pyright: ignore[reportPrivateUsage]

            await until(pause_waits, "the pause's save")
            task.cancel()  # e.g. the caller hung up: the pause's statement was never sent
        with pytest.raises(asyncio.CancelledError):
            await task
        await flushing
        checkpoint = (await checkpoints_elsewhere(postgres_server, schema, "held_gated_pause"))[-1]
        assert checkpoint.checkpoint_id == saved[1] and len(checkpoint.state["_step_cache"]) == 2
    finally:
        await storage.aclose()


async def test_deleting_a_running_run_s_held_checkpoint_keeps_its_next_one_writable(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = buffered_storage(postgres_server, schema)
    saved: list[str] = []
    try:
        task = await _run_to_first_gate(storage, "prune", saved)
        assert await storage.delete(saved[0])  # e.g. a host's retention: dropped unwritten
        GATES["prune"][0].set()
        GATES["prune"][1].set()
        with pytest.raises(RuntimeError, match="the run fails"):
            await task
        [checkpoint] = await checkpoints_elsewhere(postgres_server, schema, "held_gated")
        assert checkpoint.checkpoint_id == saved[1] and len(checkpoint.state["_step_cache"]) == 2
    finally:
        await storage.aclose()


def test_a_script_whose_run_fails_leaves_its_restore_point_without_closing_the_storage(
    postgres_server: str,
) -> None:
    schema = new_schema(postgres_server)

    async def script() -> None:  # asyncio.run(main()) of a script that forgets aclose(): the failure ends it
        storage = buffered_storage(postgres_server, schema)
        task = await _run_to_first_gate(storage, "script")
        GATES["script"][0].set()
        GATES["script"][1].set()
        await task

    with pytest.raises(RuntimeError, match="the run fails"):
        asyncio.run(script())  # cancels what is still running, then closes the loop
    checkpoint = asyncio.run(checkpoints_elsewhere(postgres_server, schema, "held_gated"))[-1]
    assert len(checkpoint.state["_step_cache"]) == 2


_LEFT_OPEN = """
import asyncio, sys
from agent_framework import WorkflowCheckpoint
from agent_framework_functional import PostgresCheckpointStorage


class Stuck:  # a pool maintenance task still running when asyncio.run cancels everything
    async def run(self):
        await asyncio.Event().wait()


async def main():
    storage = PostgresCheckpointStorage(sys.argv[1], schema=sys.argv[2])
    await storage.save(WorkflowCheckpoint(workflow_name="left_open", graph_signature_hash="h"))
    pool = storage._db._pool
    pool._tasks.put_nowait(Stuck())
    await asyncio.sleep(0.2)  # a worker is inside Stuck.run
    raise RuntimeError("the script fails, its storage not closed")


asyncio.run(main())
"""


def test_asyncio_run_ends_when_a_failing_script_left_the_storage_s_pool_open(postgres_server: str) -> None:
    """psycopg_pool's worker swallows a cancellation that lands in a maintenance task: the package closes the pool."""
    schema = new_schema(postgres_server)
    script = [sys.executable, "-c", _LEFT_OPEN, postgres_server, schema]
    done = subprocess.run(script, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert "the script fails, its storage not closed" in done.stderr
