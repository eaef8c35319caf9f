"""Streaming fresh runs and resumes; rejected calls raise at ``run(...)``; dropped streams."""

from __future__ import annotations

import asyncio
import collections
import gc
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage, ResponseStream, WorkflowRunState

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    FunctionalWorkflowRunResult,
    PendingContinuationError,
    WorkflowRunningError,
)


async def test_streamed_fresh_run_pauses_with_token(wf: FunctionalWorkflow) -> None:
    stream = wf.run("tea", stream=True)
    assert isinstance(stream, ResponseStream)
    events = [event async for event in stream]
    types = [e.type for e in events]
    assert "request_info" in types
    assert events[-1].type == "status"
    assert events[-1].state == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    result = await stream.get_final_response()
    assert isinstance(result, FunctionalWorkflowRunResult)
    assert result.continuation_token is not None
    assert wf.has_pending_continuation
    assert [e.request_id for e in result.get_request_info_events()] == ["auto::0"]


async def test_get_final_response_without_iterating(wf: FunctionalWorkflow) -> None:
    result = await wf.run("tea", stream=True).get_final_response()
    assert result.continuation_token is not None
    assert wf.pending_request_ids == frozenset({"auto::0"})


async def test_streamed_resume_finishes_and_clears_token(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str]
) -> None:
    wf, token = paused
    stream = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    events = [event async for event in stream]
    outputs = [e.data for e in events if e.type == "output"]
    assert outputs == ["published: draft about tea (ok)"]
    assert events[-1].state == WorkflowRunState.IDLE
    result = await stream.get_final_response()
    assert result.continuation_token is None
    assert result.get_outputs() == outputs
    assert calls["draft"] == 1
    assert not wf.has_pending_continuation
    assert not wf.is_running


async def test_streamed_multi_round_rotates_token(two_rounds_definition: FunctionalWorkflowDefinition) -> None:
    wf = two_rounds_definition.build()
    first = await wf.run("tea", stream=True).get_final_response()
    stream = wf.run(responses={"auto::0": "A"}, continuation_token=first.continuation_token, stream=True)
    _ = [e async for e in stream]
    second = await stream.get_final_response()
    assert second.continuation_token is not None
    assert first.continuation_token is not None
    assert second.continuation_token["token"] != first.continuation_token["token"]
    done = await wf.run(
        responses={"auto::0": "A", "auto::1": "B"}, continuation_token=second.continuation_token, stream=True
    ).get_final_response()
    assert done.get_outputs() == ["draft about tea [A] [B]"]


async def test_no_event_reaches_the_caller_before_the_token_is_spent(
    paused: tuple[FunctionalWorkflow, dict[str, Any]],
) -> None:
    wf, token = paused
    stream = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    async for _event in stream:
        # From the first event on, the token is spent: nothing can resume it a second time.
        assert not wf.has_pending_continuation
        with pytest.raises(ContinuationAuthorityError):
            wf.run(responses={"auto::0": "again"}, continuation_token=token)
    assert (await stream.get_final_response()).continuation_token is None


async def test_include_status_events_for_non_streaming(wf: FunctionalWorkflow) -> None:
    plain = await wf.run("tea")
    assert not [e for e in plain if e.type == "status"]
    assert plain.status_timeline()
    wf.abandon_continuation(plain.continuation_token)
    with_status = await wf.run("tea", include_status_events=True)
    assert [e for e in with_status if e.type == "status"]
    assert with_status.continuation_token is not None


# ---------------------------------------------------------------------------- rejections at the call


async def test_rejected_stream_calls_raise_at_the_call_and_change_nothing(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str]
) -> None:
    wf, token = paused
    rejected = [
        (
            ContinuationAuthorityError,
            {"responses": {"auto::0": "x"}, "continuation_token": {**token, "token": "A" * 43}},
        ),
        (ContinuationAuthorityError, {"responses": {"auto::0": "x"}}),
        (PendingContinuationError, {"message": "coffee"}),
        (PendingContinuationError, {"checkpoint_id": "any-checkpoint-id"}),
        (ValueError, {"responses": {"unknown": "x"}, "continuation_token": token}),
        (ValueError, {"message": "coffee", "responses": {"auto::0": "x"}}),
    ]
    for error, kwargs in rejected:
        with pytest.raises(error):
            wf.run(stream=True, **kwargs)
        assert wf.has_pending_continuation
        assert wf.pending_request_ids == frozenset({"auto::0"})
        assert not wf.is_running
    assert calls["resumed"] == 0
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True).get_final_response()
    assert done.get_outputs() == ["published: draft about tea (ok)"]


async def test_running_rejection_raises_at_the_stream_call(
    gated_definition: FunctionalWorkflowDefinition, hooks: dict[str, Any], gate: Any
) -> None:
    wf = gated_definition.build()
    hooks["start"] = gate
    first = wf.run("tea", stream=True)
    task = asyncio.create_task(first.get_final_response())
    await gate.entered.wait()
    with pytest.raises(WorkflowRunningError):
        wf.run("coffee", stream=True)
    gate.release.set()
    assert (await task).continuation_token is not None


# ---------------------------------------------------------------------------- dropped streams


async def test_never_iterated_fresh_stream_does_not_wedge_the_instance(
    wf: FunctionalWorkflow, calls: collections.Counter[str]
) -> None:
    stream = wf.run("tea", stream=True)
    assert wf.is_running
    del stream
    gc.collect()
    assert not wf.is_running
    assert calls["draft"] == 0
    result = await wf.run("tea")
    assert result.continuation_token is not None


async def test_never_iterated_resume_stream_keeps_the_continuation(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str]
) -> None:
    wf, token = paused
    stream = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    assert wf.is_running
    assert not wf.has_pending_continuation  # claimed by the accepted resume
    del stream
    gc.collect()
    assert not wf.is_running
    assert wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset({"auto::0"})
    assert calls["resumed"] == 0
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["published: draft about tea (ok)"]


async def test_never_iterated_restore_stream_does_not_wedge(
    review_definition: FunctionalWorkflowDefinition, pause_checkpoint_id: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(review_definition, "checkpoint_retention", None)  # it restores an abandoned pause
    storage = InMemoryCheckpointStorage()
    wf = review_definition.build(checkpoint_storage=storage)
    wf.abandon_continuation((await wf.run("tea")).continuation_token)
    checkpoint_id = await pause_checkpoint_id(storage, wf.name)
    stream = wf.run(checkpoint_id=checkpoint_id, stream=True)
    del stream
    gc.collect()
    assert not wf.is_running
    done = await wf.run(checkpoint_id=checkpoint_id, responses={"auto::0": "ok"})
    assert done.get_outputs() == ["published: draft about tea (ok)"]


async def test_stream_dropped_after_it_paused_keeps_the_new_token(wf: FunctionalWorkflow) -> None:
    stream = wf.run("tea", stream=True)
    _ = [e async for e in stream]
    token = (await stream.get_final_response()).continuation_token
    del stream
    gc.collect()
    assert wf.has_pending_continuation
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.continuation_token is None


async def test_stream_closed_mid_resume_spends_token_and_releases(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str]
) -> None:
    wf, token = paused
    stream = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    iterator = stream.__aiter__()
    first = await iterator.__anext__()
    assert first is not None
    # The token is spent before the first event reaches the caller; dropping the stream now loses it.
    del iterator, stream, first
    gc.collect()
    await asyncio.sleep(0)
    assert not wf.is_running
    assert not wf.has_pending_continuation
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert (await wf.run("tea")).continuation_token is not None


async def test_break_at_final_status_then_get_final_response_gives_the_token(wf: FunctionalWorkflow) -> None:
    stream = wf.run("tea", stream=True)
    async for event in stream:
        if event.type == "status" and event.state == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS:
            break
    result = await stream.get_final_response()
    assert result.continuation_token is not None
    assert wf.has_pending_continuation
    assert not wf.is_running
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=result.continuation_token)
    assert done.get_outputs() == ["published: draft about tea (ok)"]


async def test_stream_dropped_before_its_token_was_delivered_leaves_nothing_pending(wf: FunctionalWorkflow) -> None:
    # No caller ever received a token, so no continuation may block the instance afterwards.
    stream = wf.run("tea", stream=True)
    async for event in stream:
        if event.type == "request_info":
            break
    del stream, event
    gc.collect()
    await asyncio.sleep(0)
    assert not wf.is_running
    assert not wf.has_pending_continuation
    assert (await wf.run("coffee")).continuation_token is not None


# ---------------------------------------------------------------------------- explicitly closed streams


async def test_closing_a_never_iterated_resume_stream_hands_the_continuation_back(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str]
) -> None:
    wf, token = paused
    stream = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    await stream.close()
    # The closed stream is still referenced: releasing must not wait for garbage collection.
    assert not wf.is_running
    assert wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset({"auto::0"})
    assert calls["resumed"] == 0
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["published: draft about tea (ok)"]
    assert stream is not None


async def test_async_with_a_never_iterated_stream_releases_the_instance(wf: FunctionalWorkflow) -> None:
    async with wf.run("tea", stream=True) as stream:
        pass
    assert not wf.is_running
    assert not wf.has_pending_continuation
    paused = await wf.run("tea")
    assert paused.continuation_token is not None
    async with wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token, stream=True):
        pass
    assert not wf.is_running
    assert wf.has_pending_continuation  # never reached user code: still resumable with its token
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
    assert done.continuation_token is None
    assert stream is not None


async def test_closing_a_resume_stream_mid_run_spends_the_token_and_releases(
    paused: tuple[FunctionalWorkflow, dict[str, Any]],
) -> None:
    wf, token = paused
    stream = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    async for _event in stream:
        break
    await stream.close()
    assert not wf.is_running
    assert not wf.has_pending_continuation
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert (await wf.run("tea")).continuation_token is not None


async def test_async_with_full_consumption_keeps_the_pause(wf: FunctionalWorkflow) -> None:
    async with wf.run("tea", stream=True) as stream:
        events = [event async for event in stream]
    assert events[-1].state == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    result = await stream.get_final_response()
    assert result.continuation_token is not None
    assert wf.has_pending_continuation
    assert not wf.is_running
    async with wf.run(
        responses={"auto::0": "ok"}, continuation_token=result.continuation_token, stream=True
    ) as resumed:
        done = await resumed.get_final_response()
    assert done.get_outputs() == ["published: draft about tea (ok)"]
    assert not wf.is_running
