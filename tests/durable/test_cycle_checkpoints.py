"""What one pause-and-resume cycle saves and deletes, and when (AGENTS.md invariants 24 and 30).

A run that finishes cleanly does not save core's last checkpoint when its chain is deleted at once
(``checkpoint_retention=0``: nothing would ever read it); with a retention (the default) or
``checkpoint_retention=None`` it does. With a continuation store, the
pause's earlier checkpoints are deleted while its record is saved, the pause's own checkpoint is kept
whatever becomes of the record, and a failed record save issues no token.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_framework import InMemoryCheckpointStorage, WorkflowCheckpoint
from durable_workflows import approval, finishes

from agent_framework_functional import (
    ContinuationRecord,
    FunctionalWorkflowDefinition,
    SQLiteContinuationStore,
)


class CountingStorage(InMemoryCheckpointStorage):
    """Core's in-memory storage that notes each save and delete, and can hold a delete back."""

    def __init__(self) -> None:
        super().__init__()
        self.saves: list[bool] = []  # one per save: did the checkpoint carry pending requests
        self.deleted: list[str] = []
        self.delete_started = asyncio.Event()

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        self.saves.append(bool(checkpoint.pending_request_info_events))
        return await super().save(checkpoint)

    async def delete(self, checkpoint_id: str) -> bool:
        self.delete_started.set()
        self.deleted.append(checkpoint_id)
        return await super().delete(checkpoint_id)


async def _cycle(definition: FunctionalWorkflowDefinition, storage: CountingStorage, *, stream: bool) -> None:
    wf = definition.build(checkpoint_storage=storage)
    paused = await (wf.run("tea", stream=True).get_final_response() if stream else wf.run("tea"))
    assert paused.continuation_token is not None
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
    assert done.get_outputs() == ["shipped: draft about tea (ok)"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_clean_finish_saves_no_checkpoint_its_end_would_delete(stream: bool) -> None:
    at_once = FunctionalWorkflowDefinition(approval.func, name="approval", checkpoint_retention=0)
    storage = CountingStorage()
    await _cycle(at_once, storage, stream=stream)
    # The pausing run: after its step, then the pause. The resume: after its step; no save at the finish.
    assert storage.saves == [False, True, False]
    assert await storage.list_checkpoint_ids(workflow_name="approval") == []
    quiet = CountingStorage()
    finishes_at_once = FunctionalWorkflowDefinition(finishes.func, name=finishes.name, checkpoint_retention=0)
    await finishes_at_once.build(checkpoint_storage=quiet).run("no pause")
    assert quiet.saves == [False]  # after its one step; nothing at the finish
    assert await quiet.list_checkpoint_ids(workflow_name=finishes.name) == []


@pytest.mark.parametrize("stream", [False, True])
async def test_a_clean_finish_with_a_retention_saves_core_s_final_checkpoint(stream: bool) -> None:
    storage = CountingStorage()
    await _cycle(approval, storage, stream=stream)  # the default retention: 24 hours
    # The pausing run: its step (deleted at the pause), the pause. The resume: its step, then the finish.
    assert storage.saves == [False, True, False, False]
    finished = await storage.list_checkpoints(workflow_name="approval")
    assert len(finished) == 3 and not max(finished, key=lambda c: c.timestamp).pending_request_info_events
    quiet = CountingStorage()
    await finishes.build(checkpoint_storage=quiet).run("no pause")
    assert quiet.saves == [False, False]  # after its one step, and at the finish


async def test_retention_none_still_saves_the_finish() -> None:
    kept = FunctionalWorkflowDefinition(approval.func, name="approval", checkpoint_retention=None)
    storage = CountingStorage()
    await _cycle(kept, storage, stream=False)
    assert storage.saves == [False, True, False, False]  # core's own saves, the finish's included
    assert len(await storage.list_checkpoint_ids(workflow_name="approval")) == 4


class GatedStore(SQLiteContinuationStore):
    """A store whose record save waits for the storage's first delete (or fails after it)."""

    storage: CountingStorage
    fail = False

    async def save(self, record: ContinuationRecord) -> None:
        await asyncio.wait_for(self.storage.delete_started.wait(), timeout=5)
        if self.fail:
            raise OSError("the store is down")
        await super().save(record)


async def test_the_pause_s_earlier_checkpoints_go_while_its_record_is_saved(tmp_path: Path) -> None:
    storage = CountingStorage()
    async with GatedStore(tmp_path / "store.db") as store:
        store.storage = storage
        wf = approval.build(checkpoint_storage=storage, continuation_store=store)
        paused = await wf.run("tea")  # the record's save would time out if the delete came after it
        assert paused.continuation_token is not None
        (pause_id,) = await storage.list_checkpoint_ids(workflow_name="approval")
        assert len(storage.deleted) == 1 and pause_id not in storage.deleted
        done = await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == ["shipped: draft about tea (ok)"]
        finished = await storage.list_checkpoint_ids(workflow_name="approval")
        assert pause_id in finished and len(finished) == 3  # the finished chain, kept for the retention


async def test_a_failed_record_save_keeps_the_pause_checkpoint_and_issues_no_token(tmp_path: Path) -> None:
    storage = CountingStorage()
    async with GatedStore(tmp_path / "store.db") as store:
        store.storage, store.fail = storage, True
        wf = approval.build(checkpoint_storage=storage, continuation_store=store)
        with pytest.raises(OSError, match="the store is down"):
            await wf.run("tea")
        assert wf.has_pending_continuation is False
        (kept,) = await storage.list_checkpoint_ids(workflow_name="approval")
        assert (await storage.load(kept)).pending_request_info_events  # the pause stays restorable
