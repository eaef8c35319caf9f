"""Our agent as a participant of real agent-framework-orchestrations workflows.

How the orchestrations talk to a participant (measured on agent-framework-orchestrations 1.4):
each agent participant is wrapped in core's ``AgentExecutor``, which calls ``agent.run(messages,
session=<its own session>, ...)``. When the response carries ``function_approval_request``
contents (``user_input_requests``), the executor re-emits each one as an outer ``request_info``
with the same request id and ``response_type=Content``. The caller answers through the outer
workflow (``run(responses={id: request.to_function_approval_response(...)})``); the executor then
calls ``agent.run([Message("user", [answer])], session=<same session>)`` with no token, so the
resume works only because the paused run stored its token in that session.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import respx
from agent_framework import (
    Agent,
    AgentResponse,
    AgentResponseUpdate,
    Content,
    FileCheckpointStorage,
    Message,
    WorkflowEvent,
)
from agent_framework.orchestrations import ConcurrentBuilder, GroupChatBuilder, HandoffBuilder, SequentialBuilder
from openai_wire import RESPONSES_URL, chat_client, is_streaming_request, json_response, sse_response
from request_ids import core_ids

from agent_framework_functional import FunctionalWorkflowAgent, RunContext, step, workflow

published: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    published.clear()


@pytest.fixture
def openai_route() -> AsyncIterator[respx.Route]:
    with respx.mock(assert_all_called=True) as mock:
        yield mock.post(RESPONSES_URL).mock(
            side_effect=lambda request: (
                sse_response(["Tea is ", "a drink."])
                if is_streaming_request(request)
                else json_response("Tea is a drink.")
            )
        )


@step
async def publish(text: str) -> str:
    published.append(text)
    return f"published: {text}"


@workflow(name="approval")
async def approval(conversation: list[Message], ctx: RunContext) -> str:
    draft = conversation[-1].text
    approved = await ctx.request_info({"draft": draft}, response_type=bool)
    return await publish(draft) if approved else "rejected"


@workflow(name="two_approvals")
async def two_approvals(conversation: list[Message], ctx: RunContext) -> str:
    draft = conversation[-1].text
    legal = await ctx.request_info({"check": "legal", "draft": draft}, response_type=bool, request_id="legal")
    brand = await ctx.request_info({"check": "brand", "draft": draft}, response_type=bool, request_id="brand")
    return await publish(draft) if legal and brand else "rejected"


def writer() -> Agent:
    return Agent(client=chat_client(), name="writer", instructions="Write one sentence.")


def approver(definition: Any = approval) -> FunctionalWorkflowAgent:
    return definition.build().as_agent(name="approver", description="Publishes after a human approves.")


async def run_outer(outer: Any, stream: bool, **kwargs: Any) -> list[WorkflowEvent[Any]]:
    if stream:
        return [event async for event in outer.run(stream=True, **kwargs)]
    return list(await outer.run(**kwargs))


def approval_answers(events: list[WorkflowEvent[Any]], approved: bool = True) -> dict[str, Content]:
    requests = [event for event in events if event.type == "request_info"]
    assert requests, "the outer workflow surfaced no request"
    for request in requests:
        assert isinstance(request.data, Content)
        assert request.data.type == "function_approval_request"
    return {request.request_id: request.data.to_function_approval_response(approved=approved) for request in requests}


def output_text(events: list[WorkflowEvent[Any]]) -> str:
    parts: list[str] = []
    for event in events:
        if event.type != "output":
            continue
        data = event.data
        if isinstance(data, (AgentResponse, AgentResponseUpdate)):
            parts.append(data.text)
    return "".join(parts)


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_sequential_plain_agent_then_ours_pauses_resumes_once_and_outputs(
    openai_route: respx.Route, stream: bool
) -> None:
    ours = approver()
    outer = SequentialBuilder(participants=[writer(), ours]).build()

    paused = await run_outer(outer, stream, message="Write about tea.")

    answers = approval_answers(paused)
    assert core_ids(answers) == {"auto::0"} and len(answers) == 1
    assert ours.pending_requests == {}  # the pause is the executor's conversation's, not the session-less one
    assert published == []

    done = await run_outer(outer, stream, responses=answers)

    assert "published: Tea is a drink." in output_text(done)
    assert not [event for event in done if event.type == "request_info"]
    assert published == ["Tea is a drink."]  # the side effect ran exactly once
    assert openai_route.call_count == 1  # the plain agent was not called again on resume
    assert ours.pending_requests == {}


async def test_sequential_ours_first_then_the_plain_agent_sees_our_output(openai_route: respx.Route) -> None:
    outer = SequentialBuilder(participants=[approver(), writer()]).build()

    paused = await run_outer(outer, False, message="Tea notes.")
    assert openai_route.call_count == 0  # the writer waits for our participant
    done = await run_outer(outer, False, responses=approval_answers(paused))

    assert output_text(done) == "Tea is a drink."
    assert published == ["Tea notes."]
    assert openai_route.call_count == 1
    sent = json.loads(openai_route.calls.last.request.content)
    assert "published: Tea notes." in json.dumps(sent["input"])


async def test_sequential_rejection_reaches_the_outer_result(openai_route: respx.Route) -> None:
    outer = SequentialBuilder(participants=[writer(), approver()]).build()
    paused = await run_outer(outer, False, message="Write about tea.")

    done = await run_outer(outer, False, responses=approval_answers(paused, approved=False))

    assert output_text(done) == "rejected"
    assert published == []


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_sequential_two_pauses_in_one_run(openai_route: respx.Route, stream: bool) -> None:
    """The executor sends only the newest answer; the agent adds the earlier one for core's replay."""
    outer = SequentialBuilder(participants=[writer(), approver(two_approvals)]).build()

    first = await run_outer(outer, stream, message="Write about tea.")
    assert core_ids(approval_answers(first)) == {"legal"}
    second = await run_outer(outer, stream, responses=approval_answers(first))
    assert core_ids(approval_answers(second)) == {"brand"}
    done = await run_outer(outer, stream, responses=approval_answers(second))

    assert "published: Tea is a drink." in output_text(done)
    assert published == ["Tea is a drink."]


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_concurrent_ours_beside_a_plain_agent(openai_route: respx.Route, stream: bool) -> None:
    ours = approver()
    outer = ConcurrentBuilder(participants=[writer(), ours]).build()

    paused = await run_outer(outer, stream, message="Tea?")
    assert not [event for event in paused if event.type == "output"]  # the aggregator waits for us
    done = await run_outer(outer, stream, responses=approval_answers(paused))

    outputs = [event.data for event in done if event.type == "output"]
    assert len(outputs) == 1
    texts = [message.text for message in outputs[0].messages]
    assert "Tea is a drink." in texts
    assert "published: Tea?" in texts
    assert published == ["Tea?"]
    assert openai_route.call_count == 1


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_group_chat_with_ours_as_a_participant(openai_route: respx.Route, stream: bool) -> None:
    conversations: list[list[Message]] = []

    def approver_has_spoken(conversation: list[Message]) -> bool:
        conversations.append(list(conversation))
        return any(message.author_name == "approver" for message in conversation)

    outer = GroupChatBuilder(
        participants=[writer(), approver()],
        selection_func=lambda state: ["writer", "approver"][state.current_round % 2],
        termination_condition=approver_has_spoken,
    ).build()

    paused = await run_outer(outer, stream, message="Write about tea.")
    assert [event.source_executor_id for event in paused if event.type == "request_info"] == ["approver"]
    done = await run_outer(outer, stream, responses=approval_answers(paused))

    assert "termination condition" in output_text(done)
    final = conversations[-1]
    assert [(message.author_name, message.text) for message in final[-2:]] == [
        ("writer", "Tea is a drink."),
        ("approver", "published: Tea is a drink."),
    ]
    assert published == ["Tea is a drink."]
    assert openai_route.call_count == 1


async def test_sequential_restored_from_a_file_checkpoint_resumes_our_participant(
    openai_route: respx.Route, tmp_path: Any
) -> None:
    """The executor checkpoints its session with our token in it (JSON); a new outer instance resumes."""
    storage = FileCheckpointStorage(str(tmp_path))
    plain, ours = writer(), approver()
    outer = SequentialBuilder(participants=[plain, ours], checkpoint_storage=storage).build()
    paused = await run_outer(outer, False, message="Write about tea.")
    latest = await storage.get_latest(workflow_name=outer.name)
    assert latest is not None

    restored = SequentialBuilder(participants=[plain, ours], checkpoint_storage=storage).build()
    done = await run_outer(restored, False, checkpoint_id=latest.checkpoint_id, responses=approval_answers(paused))

    assert output_text(done) == "published: Tea is a drink."
    assert published == ["Tea is a drink."]
    assert openai_route.call_count == 1


def test_handoff_refuses_non_agent_participants() -> None:
    """HandoffBuilder accepts only core ``Agent`` (it clones participants and injects tools)."""
    with pytest.raises(TypeError, match="Participants must be Agent instances"):
        HandoffBuilder(participants=[approver()])
