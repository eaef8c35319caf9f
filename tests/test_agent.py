"""The chat adapter carries the token and mirrors pending requests."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import gc
import json
from typing import Any

import pytest
from agent_framework import AgentResponse, AgentResponseUpdate, ResponseStream
from request_ids import core_id, core_ids

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflowAgent,
    FunctionalWorkflowDefinition,
    PendingContinuationError,
    RunContext,
    WorkflowRunningError,
    workflow,
)


@pytest.fixture
def agent(review_definition: FunctionalWorkflowDefinition) -> FunctionalWorkflowAgent:
    return review_definition.build().as_agent(name="reviewer")


def _approval_requests(response: AgentResponse) -> list[Any]:
    return [c for m in response.messages for c in m.contents if c.type == "function_approval_request"]


def _assert_synced(agent: FunctionalWorkflowAgent, expected: set[str]) -> None:
    assert core_ids(agent.pending_requests) == expected
    assert core_ids(agent.pending_requests) == set(agent.workflow.pending_request_ids)
    assert [event.request_id for event in agent.pending_requests.values()] == sorted(expected)  # core's ids


async def _paused(agent: FunctionalWorkflowAgent) -> dict[str, Any]:
    response = await agent.run("tea")
    assert response.continuation_token is not None
    return dict(response.continuation_token)


# ---------------------------------------------------------------------------- non-streaming


async def test_non_streaming_pause_and_resume(agent: FunctionalWorkflowAgent, calls: collections.Counter[str]) -> None:
    paused = await agent.run("tea")
    assert isinstance(paused, AgentResponse)
    token = paused.continuation_token
    assert token is not None
    assert agent.workflow.has_pending_continuation
    _assert_synced(agent, {"auto::0"})
    requests = _approval_requests(paused)
    assert [r.id for r in requests] == list(agent.pending_requests)
    assert core_ids(r.id for r in requests) == {"auto::0"}

    done = await agent.run(responses={"auto::0": "ok"}, continuation_token=json.loads(json.dumps(token)))
    assert done.continuation_token is None
    assert done.text == "published: draft about tea (ok)"
    assert done.agent_id == agent.id
    assert calls["draft"] == 1
    _assert_synced(agent, set())


async def test_approval_request_content_shape(agent: FunctionalWorkflowAgent) -> None:
    paused = await agent.run("tea")
    (content,) = _approval_requests(paused)
    assert content.type == "function_approval_request"
    assert core_id(content.id) == "auto::0" and content.id in agent.pending_requests
    assert content.function_call.call_id == content.id
    arguments = content.function_call.arguments
    assert arguments["request_id"] == content.id == content.additional_properties["request_id"]
    assert arguments["data"] == {"draft": "draft about tea"}
    assert json.loads(json.dumps(content.to_dict())) == content.to_dict()


@dataclasses.dataclass
class ReviewRequest:
    draft: str
    due: datetime.datetime


async def test_approval_request_data_is_made_json_safe() -> None:
    @workflow
    async def asks_with_dataclass(topic: str, ctx: RunContext) -> str:
        due = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        return await ctx.request_info(ReviewRequest(draft=topic, due=due), response_type=str)

    agent = asks_with_dataclass.build().as_agent()
    paused = await agent.run("tea")
    (content,) = _approval_requests(paused)
    data = content.function_call.arguments["data"]
    assert data == {"draft": "tea", "due": "2026-01-02T03:04:05Z"}
    json.dumps(content.to_dict())
    # The pending view still holds the original event, data untouched.
    assert isinstance(agent.pending_requests[content.id].data, ReviewRequest)


# ---------------------------------------------------------------------------- streaming


async def test_streaming_last_update_carries_the_token(agent: FunctionalWorkflowAgent) -> None:
    stream = agent.run("tea", stream=True)
    assert isinstance(stream, ResponseStream)
    updates: list[AgentResponseUpdate] = []
    async for update in stream:
        updates.append(update)
        if update.continuation_token is not None:
            _assert_synced(agent, {"auto::0"})  # set by the time the token reaches the caller
    assert all(isinstance(u, AgentResponseUpdate) for u in updates)
    token = updates[-1].continuation_token
    assert token is not None
    assert all(u.continuation_token is None for u in updates[:-1])
    assert AgentResponse.from_updates(updates).continuation_token == token
    final = await stream.get_final_response()
    assert final.continuation_token == token
    published = [c.id for m in final.messages for c in m.contents if c.type == "function_approval_request"]
    assert published == list(agent.pending_requests) and core_ids(published) == {"auto::0"}
    _assert_synced(agent, {"auto::0"})

    resumed = agent.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    resumed_updates = [update async for update in resumed]
    assert all(u.continuation_token is None for u in resumed_updates)
    assert AgentResponse.from_updates(resumed_updates).continuation_token is None
    done = await resumed.get_final_response()
    assert done.continuation_token is None
    assert done.text == "published: draft about tea (ok)"
    _assert_synced(agent, set())


async def test_streaming_get_final_response_without_iterating(agent: FunctionalWorkflowAgent) -> None:
    final = await agent.run("tea", stream=True).get_final_response()
    assert final.continuation_token is not None
    done = await agent.run(
        responses={"auto::0": "ok"}, continuation_token=final.continuation_token, stream=True
    ).get_final_response()
    assert done.text == "published: draft about tea (ok)"


async def test_run_stream_is_an_alias(agent: FunctionalWorkflowAgent) -> None:
    stream = agent.run_stream("tea")
    assert isinstance(stream, ResponseStream)
    updates = [u async for u in stream]
    token = updates[-1].continuation_token
    assert token is not None
    done = await agent.run_stream(responses={"auto::0": "ok"}, continuation_token=token).get_final_response()
    assert done.text == "published: draft about tea (ok)"
    with pytest.raises(TypeError):
        agent.run_stream("tea", stream=False)
    assert not agent.workflow.is_running


async def test_streamed_multi_round_tokens_rotate(two_rounds_definition: FunctionalWorkflowDefinition) -> None:
    agent = two_rounds_definition.build().as_agent()
    first = [u async for u in agent.run("tea", stream=True)][-1].continuation_token
    second = [u async for u in agent.run(responses={"auto::0": "A"}, continuation_token=first, stream=True)]
    token2 = second[-1].continuation_token
    assert first is not None and token2 is not None
    assert token2["token"] != first["token"]
    _assert_synced(agent, {"auto::1"})
    with pytest.raises(ContinuationAuthorityError):
        agent.run(responses={"auto::0": "A", "auto::1": "B"}, continuation_token=first, stream=True)
    done = await agent.run(responses={"auto::0": "A", "auto::1": "B"}, continuation_token=token2)
    assert done.text == "draft about tea [A] [B]"


# ---------------------------------------------------------------------------- pending_requests in sync


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_pending_requests_are_empty_inside_an_accepted_resume(
    agent: FunctionalWorkflowAgent, hooks: dict[str, Any], stream: bool
) -> None:
    token = await _paused(agent)
    seen: list[set[str]] = []

    async def look(feedback: str) -> None:
        seen.append(core_ids(agent.pending_requests))

    hooks["after_feedback"] = look
    if stream:
        call = agent.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
        _assert_synced(agent, set())  # cleared the moment the run is accepted
        done = await call.get_final_response()
    else:
        call = agent.run(responses={"auto::0": "ok"}, continuation_token=token)
        _assert_synced(agent, set())
        done = await call
    assert seen == [set()]
    assert done.continuation_token is None


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_rejected_calls_leave_pending_requests_untouched(agent: FunctionalWorkflowAgent, stream: bool) -> None:
    token = await _paused(agent)
    bad_calls: list[tuple[type[Exception], dict[str, Any]]] = [
        (
            ContinuationAuthorityError,
            {"responses": {"auto::0": "x"}, "continuation_token": {**token, "token": "B" * 43}},
        ),
        (ContinuationAuthorityError, {"responses": {"auto::0": "x"}, "continuation_token": None}),
        (ContinuationAuthorityError, {"responses": {"nope": "x"}, "continuation_token": "garbage"}),
        (PendingContinuationError, {"messages": "coffee"}),
        (ValueError, {"responses": {"nope": "x"}, "continuation_token": token}),
    ]
    for error, kwargs in bad_calls:
        with pytest.raises(error):
            agent.run(stream=stream, **kwargs)  # raises at the call, before iteration or await
        _assert_synced(agent, {"auto::0"})
        assert not agent.workflow.is_running
    done = await agent.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.text == "published: draft about tea (ok)"


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_failed_resume_empties_pending_requests(
    agent: FunctionalWorkflowAgent, hooks: dict[str, Any], stream: bool
) -> None:
    token = await _paused(agent)

    async def explode(feedback: str) -> None:
        raise RuntimeError("reviewer service down")

    hooks["after_feedback"] = explode
    with pytest.raises(RuntimeError, match="reviewer service down"):
        if stream:
            async for _ in agent.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True):
                pass
        else:
            await agent.run(responses={"auto::0": "ok"}, continuation_token=token)
    _assert_synced(agent, set())
    assert not agent.workflow.is_running
    with pytest.raises(ContinuationAuthorityError):
        agent.run(responses={"auto::0": "ok"}, continuation_token=token)
    del hooks["after_feedback"]
    assert (await agent.run("tea")).continuation_token is not None


async def test_cancelled_resume_empties_pending_requests(
    agent: FunctionalWorkflowAgent, hooks: dict[str, Any], gate: Any
) -> None:
    token = await _paused(agent)
    hooks["after_feedback"] = gate
    task = asyncio.create_task(agent.run(responses={"auto::0": "ok"}, continuation_token=token))
    await gate.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _assert_synced(agent, set())
    assert not agent.workflow.is_running
    del hooks["after_feedback"]
    assert (await agent.run("tea")).continuation_token is not None


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_failed_pause_checkpoint_gives_no_token_and_empty_pending(
    review_definition: FunctionalWorkflowDefinition, failing_pause_storage: Any, stream: bool
) -> None:
    agent = review_definition.build(checkpoint_storage=failing_pause_storage).as_agent()
    updates: list[AgentResponseUpdate] = []
    with pytest.raises(OSError, match="disk full"):
        if stream:
            async for update in agent.run("tea", stream=True):
                updates.append(update)
        else:
            await agent.run("tea")
    assert all(u.continuation_token is None for u in updates)
    _assert_synced(agent, set())
    assert not agent.workflow.is_running
    failing_pause_storage.fail = False
    assert (await agent.run("tea")).continuation_token is not None
    _assert_synced(agent, {"auto::0"})


async def test_never_iterated_agent_stream_keeps_the_continuation(agent: FunctionalWorkflowAgent) -> None:
    token = await _paused(agent)
    stream = agent.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    del stream
    gc.collect()
    assert not agent.workflow.is_running
    _assert_synced(agent, {"auto::0"})
    done = await agent.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.text == "published: draft about tea (ok)"


# ---------------------------------------------------------------------------- abandonment on the agent


async def test_agent_abandon_with_token(agent: FunctionalWorkflowAgent) -> None:
    token = await _paused(agent)
    agent.abandon_continuation(token)
    _assert_synced(agent, set())
    assert not agent.workflow.has_pending_continuation
    with pytest.raises(ContinuationAuthorityError):
        agent.run(responses={"auto::0": "ok"}, continuation_token=token)
    fresh = await agent.run("coffee")
    assert fresh.continuation_token is not None
    assert fresh.continuation_token["token"] != token["token"]


async def test_agent_abandon_with_force(agent: FunctionalWorkflowAgent) -> None:
    token = await _paused(agent)
    agent.abandon_continuation(force=True)
    _assert_synced(agent, set())
    with pytest.raises(ContinuationAuthorityError):
        agent.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert (await agent.run("coffee")).continuation_token is not None


async def test_agent_abandon_with_wrong_token_changes_nothing(agent: FunctionalWorkflowAgent) -> None:
    token = await _paused(agent)
    for bad in (None, {}, {**token, "token": "C" * 43}):
        with pytest.raises(ContinuationAuthorityError):
            agent.abandon_continuation(bad)
        _assert_synced(agent, {"auto::0"})
    done = await agent.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.text == "published: draft about tea (ok)"


async def test_agent_abandon_while_running_raises(
    gated_definition: FunctionalWorkflowDefinition, hooks: dict[str, Any], gate: Any
) -> None:
    agent = gated_definition.build().as_agent()
    hooks["start"] = gate
    task = asyncio.create_task(agent.run("tea"))
    await gate.entered.wait()
    with pytest.raises(WorkflowRunningError):
        agent.abandon_continuation(force=True)
    with pytest.raises(RuntimeError):
        agent.run("coffee")
    gate.release.set()
    paused = await task
    assert paused.continuation_token is not None
    _assert_synced(agent, {"auto::0"})


# ---------------------------------------------------------------------------- agent protocol


async def test_run_accepts_what_core_agent_protocol_passes(agent: FunctionalWorkflowAgent) -> None:
    session = agent.create_session()
    paused = await agent.run("tea", session=session, function_invocation_kwargs={}, client_kwargs={})
    assert paused.continuation_token is not None
    stream = agent.run(
        responses={"auto::0": "ok"},
        continuation_token=paused.continuation_token,
        stream=True,
        session=session,
        function_invocation_kwargs={},
        client_kwargs={},
    )
    done = await stream.get_final_response()
    assert done.text == "published: draft about tea (ok)"


async def test_agent_checkpoint_restore_needs_no_token(
    review_definition: FunctionalWorkflowDefinition, pause_checkpoint_id: Any, calls: collections.Counter[str]
) -> None:
    from agent_framework import InMemoryCheckpointStorage

    storage = InMemoryCheckpointStorage()
    first = review_definition.build(checkpoint_storage=storage).as_agent()
    await first.run("tea")
    checkpoint_id = await pause_checkpoint_id(storage, first.workflow.name)

    restorer = review_definition.build(checkpoint_storage=storage).as_agent()
    again = await restorer.run(checkpoint_id=checkpoint_id)
    assert again.continuation_token is not None
    _assert_synced(restorer, {"auto::0"})
    done = await restorer.run(responses={"auto::0": "ok"}, continuation_token=again.continuation_token)
    assert done.text == "published: draft about tea (ok)"
    other = review_definition.build(checkpoint_storage=storage).as_agent()
    finished = await other.run(checkpoint_id=checkpoint_id, responses={"auto::0": "late"})
    assert finished.text == "published: draft about tea (late)"
    assert finished.continuation_token is None
    assert calls["draft"] == 1
