"""A finished run keeps its checkpoints for ``checkpoint_retention``, as core keeps them (AGENTS.md invariant 30).

Default 24 hours, after which the next run's sweep deletes them (core's own storages have no TTL); None
keeps every checkpoint for good; 0 deletes a finished chain at once. Abandoned and expired pauses still
release their checkpoint at once (``tests/test_pause_expiry.py``).
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage, InMemoryCheckpointStorage, RunContext, step
from retention_clock import RetentionClock

from agent_framework_functional import FunctionalWorkflowDefinition, SQLiteCheckpointStorage, _expiry, workflow
from agent_framework_functional._expiry import _retained, checkpoint_deletions


@step
async def shout(text: str) -> str:
    return text.upper()


async def ask(topic: str, ctx: RunContext) -> str:
    loud = await shout(topic)
    answer = await ctx.request_info({"draft": loud}, response_type=str)
    return f"{loud}: {answer}"


kept_a_day = workflow(name="kept_a_day")(ask)


async def _cycle(definition: FunctionalWorkflowDefinition, storage: Any) -> None:
    wf = definition.build(checkpoint_storage=storage)
    paused = await wf.run("tea")
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
    assert done.get_outputs() == ["TEA: ok"]


async def _ids(storage: Any, name: str) -> list[str]:
    return await storage.list_checkpoint_ids(workflow_name=name)


async def test_a_finished_chain_is_kept_and_restores_as_in_core() -> None:
    storage = InMemoryCheckpointStorage()
    await _cycle(kept_a_day, storage)
    finished = await storage.list_checkpoints(workflow_name="kept_a_day")
    assert len(finished) == 2  # the resumed pause's and core's final save (the step replayed from the cache)
    final = max(finished, key=lambda checkpoint: checkpoint.timestamp)
    assert final.pending_request_info_events == {}
    restored = await kept_a_day.build(checkpoint_storage=storage).run(checkpoint_id=final.checkpoint_id)
    assert [event.executor_id for event in restored if event.type == "executor_bypassed"] == ["shout"]
    assert restored.continuation_token is not None  # the request outside a step asks again, with fresh authority


async def test_past_the_retention_the_next_run_deletes_them(tmp_path: Path, retention_clock: RetentionClock) -> None:
    storage = FileCheckpointStorage(tmp_path)
    await _cycle(kept_a_day, storage)
    assert len(await _ids(storage, "kept_a_day")) == 2
    retention_clock.offset += 24 * 3600 - 60  # not yet
    paused = await kept_a_day.build(checkpoint_storage=storage).run("later")  # a run sweeps as it starts
    await checkpoint_deletions()
    assert len(await _ids(storage, "kept_a_day")) == 3  # and the new pause's
    retention_clock.offset += 120
    await kept_a_day.build(checkpoint_storage=storage).run("next")
    await checkpoint_deletions()
    remaining = await storage.list_checkpoints(workflow_name="kept_a_day")
    assert len(remaining) == 2 and all(checkpoint.pending_request_info_events for checkpoint in remaining)
    assert paused.continuation_token is not None  # the pauses are untouched: their own TTL governs them


async def test_a_retention_as_seconds_or_timedelta(tmp_path: Path, retention_clock: RetentionClock) -> None:
    for retention in (90, timedelta(seconds=90)):
        storage = FileCheckpointStorage(tmp_path / str(type(retention).__name__))
        definition = workflow(name="short", checkpoint_retention=retention)(ask)
        assert definition.checkpoint_retention == 90.0
        await _cycle(definition, storage)
        assert len(await _ids(storage, "short")) == 2
        await retention_clock.pass_retention(90)
        assert await _ids(storage, "short") == []


async def test_none_keeps_them_for_good(tmp_path: Path, retention_clock: RetentionClock) -> None:
    storage = FileCheckpointStorage(tmp_path)
    forever = workflow(name="forever", checkpoint_retention=None)(ask)
    await _cycle(forever, storage)
    saved = len(await _ids(storage, "forever"))
    assert saved == 3  # nothing deleted: the first run's step checkpoint too, as core keeps it
    await retention_clock.pass_retention(10 * 365 * 24 * 3600.0)
    assert len(await _ids(storage, "forever")) == saved


async def test_a_run_that_finishes_past_a_deadline_sweeps(tmp_path: Path, retention_clock: RetentionClock) -> None:
    storage = FileCheckpointStorage(tmp_path)
    await _cycle(kept_a_day, storage)
    gate = asyncio.Event()

    @workflow(name="slow", checkpoint_retention=0)
    async def slow(topic: str) -> str:
        await gate.wait()
        return topic

    running = asyncio.ensure_future(slow.build(checkpoint_storage=storage).run("x"))
    await asyncio.sleep(0)  # it started (and swept: nothing was due)
    retention_clock.offset += 24 * 3600 + 1
    gate.set()
    await running
    await checkpoint_deletions()
    assert await _ids(storage, "kept_a_day") == []  # its finish swept


def test_deletions_cut_short_by_the_loop_ending_are_left_for_the_next_sweep(
    tmp_path: Path, retention_clock: RetentionClock
) -> None:
    storage = SQLiteCheckpointStorage(tmp_path / "app.db")

    async def fill() -> None:
        for _ in range(20):
            await _cycle(kept_a_day, storage)

    async def one_more() -> None:  # as a run's start or finish: 20 deletions begin, then asyncio.run cancels them
        _expiry.sweep_retained()

    async def swept() -> list[str]:
        _expiry.sweep_retained()
        await checkpoint_deletions()
        return await _ids(storage, "kept_a_day")

    try:
        asyncio.run(fill())
        retention_clock.offset += 24 * 3600 + 1
        asyncio.run(one_more())
        assert asyncio.run(swept()) == []
    finally:
        storage.close()


async def test_a_closed_storage_is_forgotten_by_the_sweep(tmp_path: Path) -> None:
    storage = SQLiteCheckpointStorage(tmp_path / "app.db")
    await _cycle(kept_a_day, storage)
    assert any(entry[2]() is storage for entry in _retained)
    await storage.aclose()
    # A deletion through a closed storage would open connections nobody closes (Redis reconnects).
    assert not any(entry[2]() is storage for entry in _retained)


async def test_the_noted_chains_stay_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_expiry, "RETAINED_MAX", len(_retained) + 2)
    storage = FileCheckpointStorage(tmp_path)
    for _ in range(4):
        await _cycle(kept_a_day, storage)
    assert len(_retained) == _expiry.RETAINED_MAX  # the nearest deadlines went to the storage's own ttl
    assert sum(entry[2]() is storage for entry in _retained) == 2


async def test_zero_deletes_a_finished_chain_at_once() -> None:
    storage = InMemoryCheckpointStorage()
    await _cycle(workflow(name="at_once", checkpoint_retention=0)(ask), storage)
    assert await _ids(storage, "at_once") == []


async def test_core_s_in_memory_storage_is_not_kept_alive_by_its_retention() -> None:
    storage = InMemoryCheckpointStorage()
    await _cycle(kept_a_day, storage)
    gone = weakref.ref(storage)
    del storage
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize(
    ("retention", "error"),
    [
        (-1, ValueError),
        (10**400, ValueError),
        (timedelta(seconds=-5), ValueError),
        (float("nan"), ValueError),
        (True, TypeError),
        ("1h", TypeError),
    ],
)
def test_a_bad_retention_is_refused_at_the_decorator(retention: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="checkpoint_retention"):
        workflow(checkpoint_retention=retention)(ask)
    with pytest.raises(error, match="checkpoint_retention"):
        FunctionalWorkflowDefinition(ask, checkpoint_retention=retention)
