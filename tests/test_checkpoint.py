"""Checkpoint restore is a separate, token-free path; a failed pause save issues no token."""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    CheckpointStorage,
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    WorkflowCheckpointException,
    WorkflowRunState,
)

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    ResponseMismatchError,
    workflow,
)


@pytest.fixture(params=["memory", "file"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStorage:
    if request.param == "memory":
        return InMemoryCheckpointStorage()
    return FileCheckpointStorage(tmp_path / "checkpoints")


def _build(definition: FunctionalWorkflowDefinition, storage: CheckpointStorage, where: str) -> FunctionalWorkflow:
    return definition.build(checkpoint_storage=storage) if where == "default" else definition.build()


def _run_kwargs(storage: CheckpointStorage, where: str) -> dict[str, Any]:
    return {} if where == "default" else {"checkpoint_storage": storage}


@pytest.mark.parametrize("where", ["default", "per-run"])
async def test_restore_with_responses_needs_no_token(
    review_definition: FunctionalWorkflowDefinition,
    storage: CheckpointStorage,
    where: str,
    pause_checkpoint_id: Any,
    calls: collections.Counter[str],
) -> None:
    original = _build(review_definition, storage, where)
    paused = await original.run("tea", **_run_kwargs(storage, where))
    assert paused.continuation_token is not None
    checkpoint_id = await pause_checkpoint_id(storage, original.name)

    # Another instance (a new process, say) restores the pause from storage alone.
    restorer = _build(review_definition, storage, where)
    done = await restorer.run(checkpoint_id=checkpoint_id, responses={"auto::0": "ok"}, **_run_kwargs(storage, where))
    assert done.get_outputs() == ["published: draft about tea (ok)"]
    assert done.continuation_token is None
    assert calls["draft"] == 1, "the restored step cache must be used"
    assert not restorer.has_pending_continuation
    assert not restorer.is_running
    # The original instance still holds its own in-memory continuation.
    assert original.has_pending_continuation


@pytest.mark.parametrize("answers", [None, {}], ids=["no-responses", "empty-responses"])
@pytest.mark.parametrize("where", ["default", "per-run"])
async def test_restore_without_responses_pauses_again_with_fresh_token(
    review_definition: FunctionalWorkflowDefinition,
    storage: CheckpointStorage,
    where: str,
    pause_checkpoint_id: Any,
    calls: collections.Counter[str],
    answers: dict[str, Any] | None,
) -> None:
    original = _build(review_definition, storage, where)
    first_token = (await original.run("tea", **_run_kwargs(storage, where))).continuation_token
    assert first_token is not None
    checkpoint_id = await pause_checkpoint_id(storage, original.name)

    restorer = _build(review_definition, storage, where)
    responses = {} if answers is None else {"responses": answers}  # an empty mapping is no answers, as in core
    again = await restorer.run(checkpoint_id=checkpoint_id, **responses, **_run_kwargs(storage, where))
    token = again.continuation_token
    assert token is not None
    assert token["token"] != first_token["token"]
    assert again.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    assert restorer.pending_request_ids == frozenset({"auto::0"})
    # The original token belongs to the original instance only.
    with pytest.raises(ContinuationAuthorityError):
        restorer.run(responses={"auto::0": "ok"}, continuation_token=first_token)

    done = await restorer.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["published: draft about tea (ok)"]
    assert calls["draft"] == 1
    assert not restorer.has_pending_continuation


async def test_restored_multi_round_run_pauses_again_and_resumes_in_memory(
    two_rounds_definition: FunctionalWorkflowDefinition,
    storage: CheckpointStorage,
    pause_checkpoint_id: Any,
) -> None:
    original = two_rounds_definition.build(checkpoint_storage=storage)
    await original.run("tea")
    checkpoint_id = await pause_checkpoint_id(storage, original.name)

    restorer = two_rounds_definition.build(checkpoint_storage=storage)
    second = await restorer.run(checkpoint_id=checkpoint_id, responses={"auto::0": "A"})
    token = second.continuation_token
    assert token is not None
    assert restorer.pending_request_ids == frozenset({"auto::1"})
    done = await restorer.run(responses={"auto::0": "A", "auto::1": "B"}, continuation_token=token)
    assert done.get_outputs() == ["draft about tea [A] [B]"]
    assert done.continuation_token is None


async def test_a_restore_after_abandon_finds_the_pause_checkpoint_deleted(
    review_definition: FunctionalWorkflowDefinition, storage: CheckpointStorage, pause_checkpoint_id: Any
) -> None:
    """Abandonment deletes the pause's checkpoint (docs: "The rules of run"), and a restore right after a synchronous
    abandon always sees it gone: the run waits for the deletion abandon started (it raced the restore's read, so the
    restore ran on some Pythons and failed on others). The instance stays usable."""
    wf = review_definition.build(checkpoint_storage=storage)
    token = (await wf.run("tea")).continuation_token
    checkpoint_id = await pause_checkpoint_id(storage, wf.name)
    wf.abandon_continuation(token)
    with pytest.raises(WorkflowCheckpointException, match="No checkpoint found"):
        await wf.run(checkpoint_id=checkpoint_id, responses={"auto::0": "later"})
    assert not wf.has_pending_continuation
    paused = await wf.run("coffee")
    assert paused.continuation_token is not None


async def test_restore_rejects_a_continuation_token(
    review_definition: FunctionalWorkflowDefinition, pause_checkpoint_id: Any
) -> None:
    storage = InMemoryCheckpointStorage()
    wf = review_definition.build(checkpoint_storage=storage)
    token = (await wf.run("tea")).continuation_token
    checkpoint_id = await pause_checkpoint_id(storage, wf.name)
    restorer = review_definition.build(checkpoint_storage=storage)
    with pytest.raises(ValueError) as info:
        restorer.run(checkpoint_id=checkpoint_id, responses={"auto::0": "x"}, continuation_token=token)
    assert not isinstance(info.value, ContinuationAuthorityError)
    assert not restorer.is_running
    assert (await restorer.run(checkpoint_id=checkpoint_id, responses={"auto::0": "x"})).continuation_token is None


async def test_restore_of_unknown_checkpoint_fails_and_releases(
    review_definition: FunctionalWorkflowDefinition,
) -> None:
    wf = review_definition.build(checkpoint_storage=InMemoryCheckpointStorage())
    with pytest.raises(Exception):  # core's storage error for an unknown id  # noqa: B017
        await wf.run(checkpoint_id="does-not-exist")
    assert not wf.is_running
    assert not wf.has_pending_continuation
    assert (await wf.run("tea")).continuation_token is not None


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("keep", [False, True])
async def test_a_restore_with_a_wrong_answer_is_refused_before_the_run(
    review_definition: FunctionalWorkflowDefinition,
    storage: CheckpointStorage,
    pause_checkpoint_id: Any,
    calls: collections.Counter[str],
    stream: bool,
    keep: bool,
) -> None:
    definition = workflow(name="review", checkpoint_retention=None if keep else 0)(review_definition.func)
    await definition.build(checkpoint_storage=storage).run("tea")
    checkpoint_id = await pause_checkpoint_id(storage, "review")
    restorer = definition.build(checkpoint_storage=storage)
    resumed = calls["resumed"]
    for answers, unknown_id in (({"auto::0": 5}, False), ({"auto::9": "ok"}, True)):
        with pytest.raises(ResponseMismatchError) as info:
            if stream:
                async for _ in restorer.run(checkpoint_id=checkpoint_id, responses=answers, stream=True):
                    pass
            else:
                await restorer.run(checkpoint_id=checkpoint_id, responses=answers)
        assert info.value.unknown_id is unknown_id
        assert calls["resumed"] == resumed and not restorer.is_running
    done = await restorer.run(checkpoint_id=checkpoint_id, responses={"auto::0": "ok"})
    assert done.get_outputs() == ["published: draft about tea (ok)"]


async def test_a_restore_of_another_workflows_checkpoint_is_refused_before_the_run(
    review_definition: FunctionalWorkflowDefinition, storage: CheckpointStorage, pause_checkpoint_id: Any
) -> None:
    await review_definition.build(checkpoint_storage=storage).run("tea")
    checkpoint_id = await pause_checkpoint_id(storage, "review")
    other = workflow(name="other_review")(review_definition.func).build(checkpoint_storage=storage)
    with pytest.raises(ValueError, match="saved by workflow 'review'"):
        await other.run(checkpoint_id=checkpoint_id, responses={"auto::0": "ok"})
    assert not other.is_running and not other.has_pending_continuation


@pytest.mark.parametrize("stream", [False, True])
def test_restore_without_any_checkpoint_storage_is_rejected_at_the_call(
    review_definition: FunctionalWorkflowDefinition, stream: bool
) -> None:
    wf = review_definition.build()
    with pytest.raises(ValueError, match="without checkpoint storage"):
        wf.run(checkpoint_id="any", stream=stream)
    assert not wf.is_running


# ---------------------------------------------------------------------------- failed pause save


@pytest.mark.parametrize("where", ["default", "per-run"])
async def test_failed_pause_save_raises_issues_no_token_and_releases(
    review_definition: FunctionalWorkflowDefinition,
    failing_pause_storage: Any,
    where: str,
    calls: collections.Counter[str],
) -> None:
    wf = _build(review_definition, failing_pause_storage, where)
    with pytest.raises(OSError, match="disk full"):
        await wf.run("tea", **_run_kwargs(failing_pause_storage, where))
    assert failing_pause_storage.failed_saves == 1
    assert not wf.is_running
    assert not wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset()
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "ok"}, continuation_token=None)

    failing_pause_storage.fail = False
    fresh = await wf.run("tea", **_run_kwargs(failing_pause_storage, where))
    assert fresh.continuation_token is not None
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=fresh.continuation_token)
    assert done.get_outputs() == ["published: draft about tea (ok)"]


async def test_failed_pause_save_streams_failed_and_failed_status_before_the_exception(
    review_definition: FunctionalWorkflowDefinition, failing_pause_storage: Any
) -> None:
    wf = review_definition.build(checkpoint_storage=failing_pause_storage)
    stream = wf.run("tea", stream=True)
    events = []
    with pytest.raises(OSError, match="disk full"):
        async for event in stream:
            events.append(event)
    types = [e.type for e in events]
    assert "failed" in types
    failed = next(e for e in events if e.type == "failed")
    assert failed.details is not None
    assert failed.details.error_type == "OSError"
    statuses = [e.state for e in events if e.type == "status"]
    assert statuses[-1] == WorkflowRunState.FAILED
    assert WorkflowRunState.IDLE_WITH_PENDING_REQUESTS not in statuses
    assert types.index("failed") < len(types) - 1  # the FAILED status follows the failed event
    assert not wf.has_pending_continuation
    assert not wf.is_running
    failing_pause_storage.fail = False
    assert (await wf.run("tea")).continuation_token is not None


async def test_failed_save_on_a_resume_that_pauses_again(
    two_rounds_definition: FunctionalWorkflowDefinition, failing_pause_storage: Any
) -> None:
    failing_pause_storage.fail = False
    wf = two_rounds_definition.build(checkpoint_storage=failing_pause_storage)
    token = (await wf.run("tea")).continuation_token
    failing_pause_storage.fail = True
    with pytest.raises(OSError):
        await wf.run(responses={"auto::0": "A"}, continuation_token=token)
    assert not wf.has_pending_continuation
    assert not wf.is_running
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "A"}, continuation_token=token)
    failing_pause_storage.fail = False
    assert (await wf.run("tea")).continuation_token is not None


async def _failed_event(wf: FunctionalWorkflow, **run_kwargs: Any) -> Any:
    events = []
    with pytest.raises(Exception):  # noqa: B017 - the type depends on the failure under test
        async for event in wf.run(stream=True, **run_kwargs):
            events.append(event)
    (failed,) = [e for e in events if e.type == "failed"]
    return failed.details


@pytest.mark.parametrize("sensitive", [False, True], ids=["default", "sensitive-data-enabled"])
async def test_failed_pause_save_event_redacts_like_core(
    review_definition: FunctionalWorkflowDefinition,
    failing_pause_storage: Any,
    hooks: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    sensitive: bool,
) -> None:
    from agent_framework.observability import OBSERVABILITY_SETTINGS

    monkeypatch.setattr(type(OBSERVABILITY_SETTINGS), "SENSITIVE_DATA_ENABLED", property(lambda self: sensitive))
    ours = await _failed_event(review_definition.build(checkpoint_storage=failing_pause_storage), message="tea")

    # Core's own failure surface for comparison: resumed user code that raises.
    async def explode(feedback: str) -> None:
        raise RuntimeError("connection string user:pw@db")

    plain = review_definition.build()
    token = (await plain.run("tea")).continuation_token
    hooks["after_feedback"] = explode
    core = await _failed_event(plain, responses={"auto::0": "x"}, continuation_token=token)

    assert ours.error_type == "OSError"
    assert core.error_type == "RuntimeError"
    if sensitive:
        assert ours.message == "disk full while saving the pause checkpoint"
        assert core.message == "connection string user:pw@db"
        assert ours.traceback is not None and core.traceback is not None
    else:
        # Without sensitive data enabled, core reports only the type: no message, no traceback.
        assert core.message == "RuntimeError"
        assert core.traceback is None
        assert ours.message == "OSError"
        assert ours.traceback is None


def test_a_capability_check_is_remembered_per_class_only_where_the_class_decides() -> None:
    """``implements`` answers as ``isinstance`` does, for plain classes and for a proxy whose instances differ."""
    from agent_framework_functional._step_cache import DeltaCheckpointStorage, implements

    class Delta:
        async def save_with_offer(self, checkpoint: object, offer: object) -> str:
            return "id"

    class Plain:
        pass

    class Proxy:
        def __init__(self, inner: object) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

    # Python 3.12 made protocol checks static (``__getattr__`` is not consulted), so a proxy's answer is
    # whatever ``isinstance`` says on this Python; what matters is that it is asked each time.
    proxy_answer = isinstance(Proxy(Delta()), DeltaCheckpointStorage)
    assert proxy_answer is (sys.version_info < (3, 12))
    for _ in range(2):  # the second round answers from what the first remembered
        assert implements(Delta(), DeltaCheckpointStorage)
        assert not implements(Plain(), DeltaCheckpointStorage)
        assert not implements(None, DeltaCheckpointStorage)
        assert not implements(Proxy(Plain()), DeltaCheckpointStorage)
        assert implements(Proxy(Delta()), DeltaCheckpointStorage) is proxy_answer  # a no for one proxy is not kept


async def test_a_storage_subclass_that_overrides_save_has_its_save_called(tmp_path: Path) -> None:
    """A subclass's own ``save`` (an audit) runs for every save: the inherited ``save_with_offer`` would skip it."""
    from agent_framework import RunContext, WorkflowCheckpoint

    from agent_framework_functional import SQLiteCheckpointStorage, step
    from agent_framework_functional._checkpoint_chain import RecordingCheckpointStorage

    saved: list[str] = []

    class Audited(SQLiteCheckpointStorage):
        async def save(self, checkpoint: WorkflowCheckpoint) -> str:
            checkpoint_id = await super().save(checkpoint)
            saved.append(checkpoint_id)
            return checkpoint_id

    @step
    async def draft(text: str) -> str:
        return text + "!"

    @workflow(checkpoint_retention=None)
    async def audited(text: str, ctx: RunContext) -> str:
        answer = await ctx.request_info(await draft(text), response_type=str)
        return answer

    storage = Audited(str(tmp_path / "audited.db"))
    plain = SQLiteCheckpointStorage(str(tmp_path / "plain.db"))
    try:
        assert RecordingCheckpointStorage(plain).offered is plain  # the inherited capability, kept
        assert RecordingCheckpointStorage(storage).offered is None  # the subclass's save wins
        wf = audited.build(checkpoint_storage=storage)
        paused = await wf.run("x")
        assert paused.continuation_token is not None and len(saved) >= 1
        request_id = paused.get_request_info_events()[0].request_id
        done = await wf.run(responses={request_id: "ok"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == ["ok"]
        listed = {c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=wf.name)}
        assert listed and listed <= set(saved)  # every stored checkpoint went through the audit
    finally:
        storage.close()
        plain.close()


def test_a_continuation_store_proxy_is_not_joined_behind_its_back() -> None:
    """A proxy store (``__getattr__``) gets no joint pair: the pair would write records past the proxy."""
    from agent_framework_functional._store_records import StoreRecords

    pair = object()

    class Joinable:
        def joint(self, storage: object) -> object:
            return pair

    class Proxy:
        def __init__(self, inner: object) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

    storage = InMemoryCheckpointStorage()
    identity = lambda: ("wf", "sig")  # noqa: E731
    assert StoreRecords(Joinable(), storage, identity, None).joint is pair  # type: ignore[arg-type]
    assert StoreRecords(Proxy(Joinable()), storage, identity, None).joint is None  # type: ignore[arg-type]
