"""Without a continuation store too, a run chain deletes its spent checkpoints (AGENTS.md invariant 30).

A run that pauses keeps only its pause's checkpoint; a resume that pauses again keeps only the new
pause's; a run that finishes keeps its chain's for the retention (default 24 hours), after which the next
run's sweep deletes them: 1,000 runs leave only the newest pause's file in ``FileCheckpointStorage`` and
its keys in Redis. ``@workflow(checkpoint_retention=None)`` keeps every checkpoint (history). A resume that
fails deletes nothing, so its pause stays restorable.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from agent_framework import FileCheckpointStorage
from durable_workflows import HOOKS, approval, finishes, two_rounds
from retention_clock import RetentionClock

from agent_framework_functional import FunctionalWorkflow, FunctionalWorkflowDefinition, RedisCheckpointStorage

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

RUNS = 1_000


def _files(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*.json")) if folder.exists() else 0


async def _cycle(wf: FunctionalWorkflow, topic: str, *, stream: bool) -> None:
    """Fresh run -> pause -> resume with the token -> finished."""
    if stream:
        events = wf.run(topic, stream=True)
        paused = await events.get_final_response()
    else:
        paused = await wf.run(topic)
    assert paused.continuation_token is not None
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
    assert done.get_outputs() == [f"shipped: draft about {topic} (ok)"]


@pytest.mark.slow
async def test_a_thousand_finished_runs_leave_no_checkpoint_file_past_retention(
    tmp_path: Path, retention_clock: RetentionClock
) -> None:
    folder = tmp_path / "checkpoints"
    wf = approval.build(checkpoint_storage=FileCheckpointStorage(folder))
    paused = await wf.run("first")
    assert _files(folder) == 1  # only the pause's checkpoint backs the token
    await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
    assert _files(folder) == 3  # the finished chain: the pause's, the resume's step and core's final save
    for index in range(RUNS):
        await _cycle(wf, f"t{index}", stream=index % 2 == 1)
    assert _files(folder) == 3 * (RUNS + 1)  # all kept for the retention
    await finishes.build(checkpoint_storage=FileCheckpointStorage(folder)).run("no pause")
    await retention_clock.pass_retention()
    assert _files(folder) == 0  # a run that never paused has its own checkpoints deleted too


async def test_a_resume_that_pauses_again_keeps_only_the_new_pause(
    tmp_path: Path, retention_clock: RetentionClock
) -> None:
    storage = FileCheckpointStorage(tmp_path)
    wf = two_rounds.build(checkpoint_storage=storage)
    first = await wf.run("tea")
    first_ids = await storage.list_checkpoint_ids(workflow_name="approval_two_rounds")
    assert len(first_ids) == 1
    second = await wf.run(responses={"auto::0": "a"}, continuation_token=first.continuation_token)
    second_ids = await storage.list_checkpoint_ids(workflow_name="approval_two_rounds")
    assert len(second_ids) == 1 and second_ids != first_ids
    await wf.run(responses={"auto::0": "a", "auto::1": "b"}, continuation_token=second.continuation_token)
    finished = await storage.list_checkpoint_ids(workflow_name="approval_two_rounds")
    assert second_ids[0] in finished and len(finished) == 3  # the resumed pause's, its step's, core's final
    await retention_clock.pass_retention()
    assert await storage.list_checkpoint_ids(workflow_name="approval_two_rounds") == []


async def test_retention_none_keeps_the_history(tmp_path: Path) -> None:
    kept = FunctionalWorkflowDefinition(approval.func, name="approval", checkpoint_retention=None)
    assert kept.checkpoint_retention is None and approval.checkpoint_retention == 24 * 3600
    folder = tmp_path / "checkpoints"
    wf = kept.build(checkpoint_storage=FileCheckpointStorage(folder))
    counts = []
    for index in range(3):
        await _cycle(wf, f"t{index}", stream=False)
        counts.append(_files(folder))
    assert counts[0] > 0 and counts == [counts[0], 2 * counts[0], 3 * counts[0]]


async def test_a_failed_resume_keeps_its_pause_restorable(tmp_path: Path) -> None:
    storage = FileCheckpointStorage(tmp_path)
    wf = approval.build(checkpoint_storage=storage)
    paused = await wf.run("tea")
    [pause_id] = await storage.list_checkpoint_ids(workflow_name="approval")

    async def explode(answer: object) -> None:
        if answer == "boom":
            raise RuntimeError("resumed code failed")

    HOOKS["after_answer"] = explode
    with pytest.raises(RuntimeError, match="resumed code failed"):
        await wf.run(responses={"auto::0": "boom"}, continuation_token=paused.continuation_token)
    assert pause_id in await storage.list_checkpoint_ids(workflow_name="approval")
    restored = await wf.run(checkpoint_id=pause_id, responses={"auto::0": "fine"})
    assert restored.get_outputs() == ["shipped: draft about tea (fine)"]


@pytest.mark.slow
async def test_a_thousand_finished_runs_leave_no_key_in_redis_past_retention(
    redis_server: str, retention_clock: RetentionClock
) -> None:
    namespace = f"aff-test:{uuid.uuid4().hex}"
    storage = RedisCheckpointStorage(redis_server, namespace=namespace)
    raw = aioredis.Redis.from_url(redis_server)
    try:
        wf = approval.build(checkpoint_storage=storage)
        paused = await wf.run("first")
        kinds = sorted([key.split(b":")[2] async for key in raw.scan_iter(f"{namespace}:*")])
        # the pause's location, its step cache (heads in the chunks), the segment's references, the workflow's index
        assert kinds == [b"loc", b"seginfo", b"segment", b"wsegs"]
        await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
        for index in range(RUNS):
            await _cycle(wf, f"t{index}", stream=index % 2 == 1)
        assert [key async for key in raw.scan_iter(f"{namespace}:*")] != []  # kept for the retention
        await retention_clock.pass_retention()
        assert [key async for key in raw.scan_iter(f"{namespace}:*")] == []
    finally:
        await raw.aclose()
        await storage.aclose()
