"""Storage faults with core's FileCheckpointStorage.

A storage that fails on chosen calls (``save`` at a step checkpoint, ``save`` at the pause, ``load``)
and checkpoint files truncated or edited on disk. Each gives a clear error, no token for a pause
that was not saved, an instance usable afterwards, and no earlier checkpoint lost or overwritten.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage, WorkflowCheckpoint, WorkflowCheckpointException
from agent_framework.observability import OBSERVABILITY_SETTINGS
from request_ids import core_ids

from agent_framework_functional import (
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    RunContext,
    step,
    workflow,
)


class StorageDown(OSError):
    """The injected storage failure."""


class FlakyStorage(FileCheckpointStorage):
    """Core's file storage that fails the n-th ``save``/``load`` call (1-based, counted per method)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls = {"save": 0, "load": 0}
        self.fail: set[tuple[str, int]] = set()

    def fail_next(self, method: str, nth: int = 1) -> None:
        self.fail.add((method, self.calls[method] + nth))

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        self.calls["save"] += 1
        if ("save", self.calls["save"]) in self.fail:
            raise StorageDown("checkpoint storage unavailable (save)")
        return await super().save(checkpoint)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        self.calls["load"] += 1
        if ("load", self.calls["load"]) in self.fail:
            raise StorageDown("checkpoint storage unavailable (load)")
        return await super().load(checkpoint_id)


@step
async def prepare(amount: int) -> int:
    return amount * 2


@workflow
async def refund(amount: int, ctx: RunContext) -> str:
    doubled = await prepare(amount)  # save #1: step checkpoint
    first = await ctx.request_info({"amount": doubled}, response_type=str)  # save #2: pause checkpoint
    second = await ctx.request_info({"confirm": first}, response_type=str)
    return f"{doubled}:{first}:{second}"


def snapshot(path: Path) -> dict[str, str]:
    """Checkpoint file name -> content digest."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.glob("*.json"))}


def assert_kept(before: dict[str, str], after: dict[str, str]) -> None:
    """No earlier checkpoint lost or overwritten (new ones may appear)."""
    assert {name: after.get(name) for name in before} == before


@pytest.fixture
def storage(tmp_path: Path) -> FlakyStorage:
    return FlakyStorage(tmp_path / "checkpoints")


@pytest.fixture
async def history(storage: FlakyStorage) -> dict[str, str]:
    """Checkpoints of an earlier, completed run in the same storage (kept: a finished chain deletes its own)."""
    kept = FunctionalWorkflowDefinition(refund.func, name=refund.name, checkpoint_retention=None)
    wf = kept.build(checkpoint_storage=storage)
    paused = await wf.run(1)
    paused = await wf.run(responses={"auto::0": "a"}, continuation_token=paused.continuation_token)
    done = await wf.run(responses={"auto::0": "a", "auto::1": "b"}, continuation_token=paused.continuation_token)
    assert done.get_outputs() == ["2:a:b"]
    files = snapshot(storage.storage_path)
    assert len(files) >= 3
    return files


async def assert_usable(wf: FunctionalWorkflow) -> None:
    assert not wf.is_running
    assert not wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset()
    paused = await wf.run(5)
    assert paused.continuation_token is not None
    first = await wf.run(responses={"auto::0": "x"}, continuation_token=paused.continuation_token)
    done = await wf.run(responses={"auto::0": "x", "auto::1": "y"}, continuation_token=first.continuation_token)
    assert done.get_outputs() == ["10:x:y"]


@pytest.mark.parametrize("nth", [1, 2], ids=["step-checkpoint", "pause-checkpoint"])
async def test_save_failure_gives_an_error_and_no_token(
    storage: FlakyStorage, history: dict[str, str], nth: int
) -> None:
    wf = refund.build(checkpoint_storage=storage)
    storage.fail_next("save", nth)
    with pytest.raises(StorageDown, match=r"unavailable \(save\)"):
        await wf.run(3)
    assert not wf.has_pending_continuation
    assert_kept(history, snapshot(storage.storage_path))
    await assert_usable(wf)


@pytest.mark.parametrize("nth", [1, 2], ids=["step-checkpoint", "pause-checkpoint"])
async def test_save_failure_streamed_shows_the_failure_surface(
    storage: FlakyStorage, history: dict[str, str], nth: int
) -> None:
    wf = refund.build(checkpoint_storage=storage)
    storage.fail_next("save", nth)
    stream = wf.run(3, stream=True)
    events: list[Any] = []
    with pytest.raises(StorageDown):
        async for event in stream:
            events.append(event)
    types = [event.type for event in events]
    assert types[-2:] == ["failed", "status"]
    assert events[-1].state.name == "FAILED"
    # Same redaction as core's own failed events: no message or traceback unless sensitive data is on.
    assert events[-2].details.error_type == "StorageDown"
    assert events[-2].details.message == "StorageDown"
    assert events[-2].details.traceback is None
    assert not wf.has_pending_continuation
    assert_kept(history, snapshot(storage.storage_path))
    await assert_usable(wf)


@pytest.mark.parametrize("nth", [1, 2], ids=["step-checkpoint", "pause-checkpoint"])
async def test_failure_surface_shows_details_only_when_sensitive_data_is_enabled(
    storage: FlakyStorage, monkeypatch: pytest.MonkeyPatch, nth: int
) -> None:
    monkeypatch.setattr(OBSERVABILITY_SETTINGS, "enable_instrumentation", True)
    monkeypatch.setattr(OBSERVABILITY_SETTINGS, "enable_sensitive_data", True)
    wf = refund.build(checkpoint_storage=storage)
    storage.fail_next("save", nth)
    events: list[Any] = []
    with pytest.raises(StorageDown):
        async for event in wf.run(3, stream=True):
            events.append(event)
    details = [event.details for event in events if event.type == "failed"]
    assert len(details) == 1
    assert details[0].message == "checkpoint storage unavailable (save)"
    assert details[0].traceback is not None


async def test_restore_load_failure_surface_is_redacted(storage: FlakyStorage, history: dict[str, str]) -> None:
    wf = refund.build(checkpoint_storage=storage)
    storage.fail_next("load", 1)
    events: list[Any] = []
    with pytest.raises(StorageDown):
        async for event in wf.run(checkpoint_id=next(iter(history)).removesuffix(".json"), stream=True):
            events.append(event)
    assert [event.type for event in events] == ["failed", "status"]
    assert events[0].details.message == "StorageDown"
    assert events[0].details.traceback is None
    await assert_usable(wf)


async def test_save_failure_when_a_resume_pauses_again(storage: FlakyStorage, history: dict[str, str]) -> None:
    wf = refund.build(checkpoint_storage=storage)
    paused = await wf.run(3)
    first_pause = snapshot(storage.storage_path)
    pause_checkpoint = max(
        (WorkflowCheckpoint.from_dict(json.loads(p.read_text())) for p in storage.storage_path.glob("*.json")),
        key=lambda cp: cp.timestamp,
    )
    storage.fail_next("save", 1)  # the resumed run's second pause
    with pytest.raises(StorageDown):
        await wf.run(responses={"auto::0": "a"}, continuation_token=paused.continuation_token)
    # The token was spent before the resumed code ran; no new token for the unsaved pause.
    assert not wf.has_pending_continuation
    with pytest.raises(ValueError):
        wf.run(responses={"auto::0": "a"}, continuation_token=paused.continuation_token)
    assert_kept(first_pause, snapshot(storage.storage_path))
    # Recovery: restore the saved pause (no token needed); the new pause issues fresh authority.
    restored = await wf.run(checkpoint_id=pause_checkpoint.checkpoint_id, responses={"auto::0": "a"})
    assert restored.continuation_token is not None
    done = await wf.run(responses={"auto::0": "a", "auto::1": "b"}, continuation_token=restored.continuation_token)
    assert done.get_outputs() == ["6:a:b"]
    assert_kept(history, snapshot(storage.storage_path))


async def test_load_failure_gives_an_error_and_the_instance_stays_usable(
    storage: FlakyStorage, history: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(refund, "checkpoint_retention", None)  # it restores an abandoned pause: keep its checkpoint
    wf = refund.build(checkpoint_storage=storage)
    paused = await wf.run(4)
    ids = sorted(snapshot(storage.storage_path))
    wf.abandon_continuation(paused.continuation_token)
    latest = max(
        (WorkflowCheckpoint.from_dict(json.loads(p.read_text())) for p in storage.storage_path.glob("*.json")),
        key=lambda cp: cp.timestamp,
    )
    storage.fail_next("load", 1)
    with pytest.raises(StorageDown, match=r"unavailable \(load\)"):
        await wf.run(checkpoint_id=latest.checkpoint_id, responses={"auto::0": "a"})
    assert not wf.is_running
    assert not wf.has_pending_continuation
    assert sorted(snapshot(storage.storage_path))[: len(ids)] == ids or set(ids) <= set(snapshot(storage.storage_path))
    restored = await wf.run(checkpoint_id=latest.checkpoint_id, responses={"auto::0": "a"})
    assert restored.continuation_token is not None
    wf.abandon_continuation(restored.continuation_token)
    assert_kept(history, snapshot(storage.storage_path))
    await assert_usable(wf)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _not_json(path: Path) -> None:
    path.write_text("this is not a checkpoint", encoding="utf-8")


def _not_utf8(path: Path) -> None:
    path.write_bytes(b"\xff\xfe\x00garbage")


def _edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def _other_version(path: Path) -> None:
    _edit(path, lambda d: d.update(graph_signature_hash="0" * 64))


def _forbidden_type(path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        for event in d["pending_request_info_events"].values():
            event["__type__"] = "os:system"

    _edit(path, change)


def _corrupt_pickle(path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        for event in d["pending_request_info_events"].values():
            event["__pickled__"] = "bm90IGEgcGlja2xl"

    _edit(path, change)


def _missing_fields(path: Path) -> None:
    _edit(path, lambda d: d.clear())


@pytest.mark.parametrize(
    "damage",
    [_truncate, _not_json, _not_utf8, _other_version, _forbidden_type, _corrupt_pickle, _missing_fields],
)
async def test_damaged_checkpoint_file_gives_a_clear_error(
    storage: FlakyStorage, history: dict[str, str], damage: Any
) -> None:
    # The pause stays with its owner (an abandoned pause deletes its checkpoint); another instance restores it.
    await refund.build(checkpoint_storage=storage).run(7)
    wf = refund.build(checkpoint_storage=storage)
    pause_file = max(
        storage.storage_path.glob("*.json"),
        key=lambda p: WorkflowCheckpoint.from_dict(json.loads(p.read_text())).timestamp,
    )
    checkpoint_id = pause_file.stem
    intact = {name: digest for name, digest in snapshot(storage.storage_path).items() if name != pause_file.name}
    damage(pause_file)
    damaged_digest = hashlib.sha256(pause_file.read_bytes()).hexdigest()
    with pytest.raises((WorkflowCheckpointException, ValueError, KeyError, TypeError)) as info:
        await wf.run(checkpoint_id=checkpoint_id, responses={"auto::0": "a"})
    message = str(info.value)
    assert message
    assert isinstance(info.value, (WorkflowCheckpointException, ValueError)), repr(info.value)
    assert not wf.is_running
    assert not wf.has_pending_continuation
    # Nothing else in storage moved, and the damaged file was not rewritten by the failed restore.
    after = snapshot(storage.storage_path)
    assert_kept(intact, after)
    assert after[pause_file.name] == damaged_digest
    await assert_usable(wf)


async def test_agent_sees_save_failure_at_pause_and_keeps_an_empty_view(
    storage: FlakyStorage, history: dict[str, str]
) -> None:
    wf = refund.build(checkpoint_storage=storage)
    agent = wf.as_agent()
    storage.fail_next("save", 2)
    with pytest.raises(StorageDown):
        await agent.run(3)
    assert dict(agent.pending_requests) == {}
    storage.fail_next("save", 2)
    updates: list[Any] = []
    with pytest.raises(StorageDown):
        async for update in agent.run(3, stream=True):
            updates.append(update)
    assert all(update.continuation_token is None for update in updates)
    assert dict(agent.pending_requests) == {}
    response = await agent.run(3)
    assert response.continuation_token is not None
    assert core_ids(agent.pending_requests) == {"auto::0"}
    assert_kept(history, snapshot(storage.storage_path))
