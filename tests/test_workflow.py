"""One pending continuation per instance, abandonment, and consumption before resumed code."""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage, ResponseStream, WorkflowRunState

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    PendingContinuationError,
    RunContext,
    WorkflowRunningError,
    workflow,
)


async def _resume_ok(wf: FunctionalWorkflow, token: dict[str, Any], answer: str = "ok") -> None:
    done = await wf.run(responses={"auto::0": answer}, continuation_token=token)
    assert done.get_outputs() == [f"published: draft about tea ({answer})"]
    assert done.continuation_token is None


def _assert_idle(wf: FunctionalWorkflow) -> None:
    assert not wf.is_running
    assert not wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset()
    assert dict(wf.pending_requests) == {}


# ---------------------------------------------------------------------------- argument shape


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"message": "tea", "responses": {"auto::0": "x"}},
        {"message": "tea", "checkpoint_id": "abc"},
    ],
    ids=["nothing", "message+responses", "message+checkpoint"],
)
def test_bad_argument_shape_raises_value_error_synchronously(wf: FunctionalWorkflow, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as info:
        wf.run(**kwargs)
    assert not isinstance(info.value, ContinuationAuthorityError)
    assert not wf.is_running


def test_responses_must_be_a_mapping_with_string_keys(wf: FunctionalWorkflow) -> None:
    with pytest.raises(TypeError):
        wf.run(responses=[("auto::0", "x")])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wf.run(responses={0: "x"})  # type: ignore[dict-item]
    assert not wf.is_running


async def test_pending_views_are_read_only(paused: tuple[FunctionalWorkflow, dict[str, Any]]) -> None:
    wf, token = paused
    with pytest.raises(TypeError):
        wf.pending_requests["forged"] = wf.pending_requests["auto::0"]  # type: ignore[index]
    assert isinstance(wf.pending_request_ids, frozenset)
    assert wf.pending_request_ids == frozenset({"auto::0"})
    await _resume_ok(wf, token)


# ---------------------------------------------------------------------------- pending conflict


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_new_message_while_pending_is_rejected_and_continuation_survives(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str], stream: bool
) -> None:
    wf, token = paused
    with pytest.raises(PendingContinuationError) as info:
        wf.run("coffee", stream=stream)
    assert isinstance(info.value, RuntimeError)
    assert token["token"] not in str(info.value)
    assert "coffee" not in str(info.value)
    assert wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset({"auto::0"})
    assert not wf.is_running
    assert calls["draft"] == 1
    await _resume_ok(wf, token)


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_checkpoint_restore_while_pending_is_rejected_and_continuation_survives(
    review_definition: FunctionalWorkflowDefinition, pause_checkpoint_id: Any, stream: bool
) -> None:
    storage = InMemoryCheckpointStorage()
    wf = review_definition.build(checkpoint_storage=storage)
    token = (await wf.run("tea")).continuation_token
    assert token is not None
    checkpoint_id = await pause_checkpoint_id(storage, wf.name)
    for kwargs in ({}, {"responses": {"auto::0": "x"}}):
        with pytest.raises(PendingContinuationError):
            wf.run(checkpoint_id=checkpoint_id, stream=stream, **kwargs)
    assert wf.has_pending_continuation
    assert not wf.is_running
    await _resume_ok(wf, dict(token))


# ---------------------------------------------------------------------------- abandonment


async def test_abandon_with_token_clears_everything_and_allows_fresh_runs(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    wf, token = paused
    wf.abandon_continuation(token)
    _assert_idle(wf)
    # The abandoned token is dead, even with the right answers.
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    # Core's replay state (pending ids) went with it: core would warn about a pending cycle otherwise.
    with caplog.at_level(logging.WARNING):
        fresh = await wf.run("tea")
    assert not [r for r in caplog.records if "still pending" in r.getMessage()]
    assert fresh.continuation_token is not None
    assert fresh.continuation_token["token"] != token["token"]
    await _resume_ok(wf, dict(fresh.continuation_token))


async def test_abandon_with_force_needs_no_token(paused: tuple[FunctionalWorkflow, dict[str, Any]]) -> None:
    wf, token = paused
    wf.abandon_continuation(force=True)
    _assert_idle(wf)
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert (await wf.run("tea")).continuation_token is not None


def test_abandon_with_force_when_nothing_is_pending_is_a_no_op(wf: FunctionalWorkflow) -> None:
    wf.abandon_continuation(force=True)
    _assert_idle(wf)


@pytest.mark.parametrize(
    "bad",
    [None, {}, "x", {"kind": "functional_workflow", "version": "1", "token": "A" * 43}],
    ids=["none", "empty", "string", "wrong-value"],
)
async def test_abandon_with_wrong_token_changes_nothing(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], bad: Any
) -> None:
    wf, token = paused
    with pytest.raises(ContinuationAuthorityError) as info:
        wf.abandon_continuation(bad)
    assert str(info.value) == str(ContinuationAuthorityError())
    assert wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset({"auto::0"})
    await _resume_ok(wf, token)


async def test_abandon_without_token_and_without_force_is_rejected(
    paused: tuple[FunctionalWorkflow, dict[str, Any]],
) -> None:
    wf, token = paused
    with pytest.raises(ContinuationAuthorityError):
        wf.abandon_continuation()
    assert wf.has_pending_continuation
    await _resume_ok(wf, token)


async def test_abandon_with_nothing_pending_needs_force(review_definition: FunctionalWorkflowDefinition) -> None:
    donor = review_definition.build()
    token = (await donor.run("tea")).continuation_token
    idle = review_definition.build()
    with pytest.raises(ContinuationAuthorityError):
        idle.abandon_continuation(token)
    assert donor.has_pending_continuation


async def test_abandon_while_running_raises_runtime_error(
    gated_definition: FunctionalWorkflowDefinition, hooks: dict[str, Any], gate: Any
) -> None:
    wf = gated_definition.build()
    hooks["start"] = gate
    task = asyncio.create_task(wf.run("tea"))
    await gate.entered.wait()
    assert wf.is_running
    with pytest.raises(WorkflowRunningError) as info:
        wf.abandon_continuation(force=True)
    assert isinstance(info.value, RuntimeError)
    gate.release.set()
    paused = await task
    assert paused.continuation_token is not None
    assert wf.pending_request_ids == frozenset({"auto::0"})


async def test_abandon_during_a_resume_is_rejected_and_resume_completes(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], hooks: dict[str, Any], gate: Any
) -> None:
    wf, token = paused
    hooks["after_feedback"] = gate
    task = asyncio.create_task(wf.run(responses={"auto::0": "ok"}, continuation_token=token))
    await gate.entered.wait()
    with pytest.raises(WorkflowRunningError):
        wf.abandon_continuation(force=True)
    # The token was spent before the resumed code ran: it no longer authorises anything.
    with pytest.raises(ContinuationAuthorityError):
        wf.abandon_continuation(token)
    gate.release.set()
    done = await task
    assert done.get_outputs() == ["published: draft about tea (ok)"]
    _assert_idle(wf)


@pytest.mark.parametrize("stream", [False, True])
async def test_abandon_with_the_token_of_an_accepted_resume_is_a_running_error(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], stream: bool
) -> None:
    wf, token = paused
    resume = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=stream)
    # Accepted, token not spent yet: the run holds the pause (as with a continuation store, which
    # refuses the same way); once spent, the token authorises nothing (the test above).
    with pytest.raises(WorkflowRunningError):
        wf.abandon_continuation(token)
    with pytest.raises(WorkflowRunningError):
        await wf.abandon_continuation_async(token)
    done = await (resume.get_final_response() if isinstance(resume, ResponseStream) else resume)
    assert done.get_outputs() == ["published: draft about tea (ok)"]
    _assert_idle(wf)


# ---------------------------------------------------------------------------- running guard


async def test_second_run_while_running_is_rejected_synchronously(
    gated_definition: FunctionalWorkflowDefinition, hooks: dict[str, Any], gate: Any
) -> None:
    wf = gated_definition.build()
    hooks["start"] = gate
    task = asyncio.create_task(wf.run("tea"))
    await gate.entered.wait()
    for stream in (False, True):
        with pytest.raises(WorkflowRunningError):
            wf.run("coffee", stream=stream)
    gate.release.set()
    paused = await task
    assert [e.data for e in paused.get_request_info_events()] == [{"topic": "tea"}]
    assert not wf.is_running


# ---------------------------------------------------------------------------- consumption


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_resumed_code_that_raises_spends_the_token_and_releases_the_instance(
    paused: tuple[FunctionalWorkflow, dict[str, Any]],
    hooks: dict[str, Any],
    calls: collections.Counter[str],
    stream: bool,
) -> None:
    wf, token = paused

    async def explode(feedback: str) -> None:
        raise RuntimeError("resumed code failed")

    hooks["after_feedback"] = explode
    if stream:
        events = []
        with pytest.raises(RuntimeError, match="resumed code failed"):
            async for event in wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True):
                events.append(event)
        assert [e.type for e in events if e.type == "failed"] == ["failed"]
        assert events[-1].type == "status"
        assert events[-1].state == WorkflowRunState.FAILED
    else:
        with pytest.raises(RuntimeError, match="resumed code failed"):
            await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert calls["resumed"] == 1
    _assert_idle(wf)
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    del hooks["after_feedback"]
    fresh = await wf.run("tea")
    assert fresh.continuation_token is not None
    await _resume_ok(wf, dict(fresh.continuation_token))


async def test_resumed_run_cancelled_inside_user_code_releases_the_instance(
    paused: tuple[FunctionalWorkflow, dict[str, Any]],
    hooks: dict[str, Any],
    gate: Any,
    calls: collections.Counter[str],
) -> None:
    wf, token = paused
    hooks["after_feedback"] = gate
    task = asyncio.create_task(wf.run(responses={"auto::0": "ok"}, continuation_token=token))
    await gate.entered.wait()
    assert wf.is_running
    assert not wf.has_pending_continuation
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls["publish"] == 0
    _assert_idle(wf)
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    del hooks["after_feedback"]
    fresh = await wf.run("tea")
    assert fresh.continuation_token is not None
    await _resume_ok(wf, dict(fresh.continuation_token))


async def test_resume_cancelled_before_it_started_keeps_the_continuation(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str]
) -> None:
    wf, token = paused
    task = asyncio.create_task(wf.run(responses={"auto::0": "ok"}, continuation_token=token))
    task.cancel()
    cancelled = False
    try:
        await task
    except asyncio.CancelledError:  # no ExceptionInfo: its traceback would keep the dropped run alive
        cancelled = True
    assert cancelled
    del task
    await asyncio.sleep(0)  # let the loop drop its last reference to the cancelled task's frames
    gc.collect()
    assert calls["resumed"] == 0
    assert not wf.is_running
    assert wf.has_pending_continuation
    await _resume_ok(wf, token)


async def test_resume_awaitable_closed_unawaited_keeps_the_continuation(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str]
) -> None:
    wf, token = paused
    awaitable = wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert wf.is_running
    awaitable.close()  # type: ignore[attr-defined]  # a coroutine the caller decided not to await
    del awaitable
    gc.collect()
    assert not wf.is_running
    assert wf.has_pending_continuation
    assert calls["resumed"] == 0
    await _resume_ok(wf, token)


async def test_fresh_run_that_raises_releases_the_instance(
    gated_definition: FunctionalWorkflowDefinition, hooks: dict[str, Any]
) -> None:
    wf = gated_definition.build()

    async def explode(topic: str) -> None:
        raise ValueError("bad topic")

    hooks["start"] = explode
    with pytest.raises(ValueError, match="bad topic"):
        await wf.run("tea")
    _assert_idle(wf)
    del hooks["start"]
    assert (await wf.run("tea")).continuation_token is not None


async def test_run_kwargs_are_forwarded_to_core() -> None:
    from agent_framework_functional import workflow

    @workflow
    async def uses_kwargs(topic: str, ctx: RunContext) -> str:
        # Core documents run kwargs as RunContext._run_kwargs; there is no public accessor in 1.23.
        return f"{topic}:{ctx._run_kwargs.get('tenant')}"

    result = await uses_kwargs.build().run("tea", tenant="t-1")
    assert result.get_outputs() == ["tea:t-1"]


# ---------------------------------------------------------------------------- answer types before the claim


@workflow(name="count_check")
async def count_check(topic: str, ctx: RunContext) -> str:
    """Pauses for an ``int``; code after the pause counts as resumed user code."""
    count = await ctx.request_info({"topic": topic}, response_type=int)
    return f"{topic} x{count}"


@pytest.mark.parametrize("bad", ["abc", object(), [1]])
async def test_resume_with_an_answer_of_the_wrong_type_is_rejected_and_keeps_the_token(bad: Any) -> None:
    wf = count_check.build()
    paused = await wf.run("tea")
    token = paused.continuation_token
    request = paused.get_request_info_events()[0]
    for stream in (False, True):
        with pytest.raises(ValueError, match="not a int") as info:
            wf.run(responses={request.request_id: bad}, continuation_token=token, stream=stream)
        assert "still pending" in str(info.value)
        assert wf.has_pending_continuation and not wf.is_running
    done = await wf.run(responses={request.request_id: 3}, continuation_token=token)
    assert done.get_outputs() == ["tea x3"]


async def test_closing_the_stream_on_the_pause_status_keeps_the_pause(wf: FunctionalWorkflow) -> None:
    stream = wf.run("tea", stream=True)
    async for event in stream:
        if event.type == "status" and event.state == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS:
            break
    await stream.close()
    # The caller saw the pause, so it exists: the token was issued before the last status went out.
    assert wf.has_pending_continuation and not wf.is_running
    final = await stream.get_final_response()
    assert final.continuation_token is not None
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=final.continuation_token)
    assert done.continuation_token is None


# ---------------------------------------------------------------------------- argument types


def test_workflow_rejects_a_function_that_is_not_async() -> None:
    def not_async(topic: str) -> str:
        return topic

    with pytest.raises(TypeError, match="async function"):
        workflow(not_async)  # type: ignore[arg-type]


def test_build_rejects_something_that_is_not_a_checkpoint_storage(
    review_definition: FunctionalWorkflowDefinition,
) -> None:
    with pytest.raises(TypeError, match="CheckpointStorage"):
        review_definition.build(checkpoint_storage="checkpoints/")  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True])
async def test_run_rejects_a_per_run_storage_that_is_not_a_checkpoint_storage(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], stream: bool
) -> None:
    wf, token = paused
    with pytest.raises(TypeError, match="CheckpointStorage"):
        wf.run(responses={"auto::0": "ok"}, continuation_token=token, checkpoint_storage="x", stream=stream)  # type: ignore[call-overload]
    # Rejected at the call: nothing was claimed or spent.
    assert wf.has_pending_continuation and not wf.is_running
    await _resume_ok(wf, token)


@workflow(name="typed_rounds")
async def typed_rounds(topic: str, ctx: RunContext) -> str:
    """Two pauses outside any step: core replays both and checks both answers on the last resume."""
    approved = await ctx.request_info({"topic": topic}, response_type=bool)
    copies = await ctx.request_info({"topic": topic}, response_type=int)
    return f"{topic} approved={approved} copies={copies}"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_wrongly_typed_earlier_answer_is_rejected_and_keeps_the_token(stream: bool) -> None:
    wf = typed_rounds.build()
    first = await wf.run("tea")
    second = await wf.run(responses={"auto::0": True}, continuation_token=first.continuation_token)
    token = second.continuation_token
    assert token is not None and wf.pending_request_ids == {"auto::1"}
    # The caller passes all answers so far; the earlier one has the wrong type.
    with pytest.raises(ValueError, match="'auto::0' is not a bool"):
        wf.run(responses={"auto::0": "definitely", "auto::1": 5}, continuation_token=token, stream=stream)
    assert wf.has_pending_continuation and not wf.is_running
    done = await wf.run(responses={"auto::0": True, "auto::1": 5}, continuation_token=token)
    assert done.get_outputs() == ["tea approved=True copies=5"]
