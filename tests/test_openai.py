"""A workflow whose @step calls an OpenAI chat-client agent; respx fakes the Responses API.

``agent_framework.openai.OpenAIChatClient`` (the Responses API client core's OpenAI integration
uses by default) posts to ``/v1/responses``; the fakes answer in the real wire format, as JSON or
as server-sent events. The step's result is cached by core, so a resumed run must not call the
model again: respx counts the requests.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import respx
from agent_framework import Agent, Message
from openai_wire import (
    RESPONSES_URL,
    chat_client,
    is_streaming_request,
    json_response,
    request_input_text,
    sse_response,
)

from agent_framework_functional import RunContext, step, workflow

writer_agent: Agent | None = None


@pytest.fixture
def openai_route() -> AsyncIterator[respx.Route]:
    global writer_agent
    with respx.mock(assert_all_called=True) as mock:
        writer_agent = Agent(client=chat_client(), name="writer", instructions="Write one sentence.")
        yield mock.post(RESPONSES_URL).mock(
            side_effect=lambda request: (
                sse_response(["Green tea ", "is calm."])
                if is_streaming_request(request)
                else json_response("Green tea is calm.")
            )
        )
    writer_agent = None


@step
async def draft(topic: str) -> str:
    assert writer_agent is not None
    response = await writer_agent.run(f"Write about {topic}.")
    return response.text


@step
async def draft_streaming(topic: str) -> str:
    assert writer_agent is not None
    stream = writer_agent.run(f"Write about {topic}.", stream=True)
    chunks = [update.text async for update in stream]
    assert len(chunks) >= 2  # really streamed, chunk by chunk
    return (await stream.get_final_response()).text


@workflow(name="post")
async def post(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    approved = await ctx.request_info({"draft": text}, response_type=bool)
    return text if approved else "(withheld)"


@workflow(name="post_streaming")
async def post_streaming(topic: str, ctx: RunContext) -> str:
    text = await draft_streaming(topic)
    approved = await ctx.request_info({"draft": text}, response_type=bool)
    return text if approved else "(withheld)"


async def test_non_streaming_model_call_runs_once_across_pause_and_resume(openai_route: respx.Route) -> None:
    agent = post.build().as_agent(name="post")

    paused = await agent.run("green tea")

    assert openai_route.call_count == 1
    sent = openai_route.calls.last.request
    assert not is_streaming_request(sent)
    assert "Write about green tea." in request_input_text(sent)
    assert json.loads(sent.content)["model"] == "gpt-4o-mini"
    request = paused.user_input_requests[0]
    assert request.function_call.parse_arguments()["data"] == {"draft": "Green tea is calm."}

    done = await agent.run(
        Message("user", [request.to_function_approval_response(approved=True)]),
        continuation_token=paused.continuation_token,
    )

    assert done.text == "Green tea is calm."
    assert openai_route.call_count == 1  # the completed step was replayed from core's cache


async def test_streaming_sse_model_call_runs_once_across_pause_and_resume(openai_route: respx.Route) -> None:
    agent = post_streaming.build().as_agent(name="post")
    session = agent.create_session()

    stream = agent.run("green tea", session=session, stream=True)
    paused = await stream.get_final_response()

    assert openai_route.call_count == 1
    assert is_streaming_request(openai_route.calls.last.request)
    request = paused.user_input_requests[0]
    assert request.function_call.parse_arguments()["data"] == {"draft": "Green tea is calm."}

    resumed = agent.run(
        Message("user", [request.to_function_approval_response(approved=True)]), session=session, stream=True
    )
    updates = [update async for update in resumed]

    assert "".join(update.text for update in updates) == "Green tea is calm."
    assert openai_route.call_count == 1


async def test_a_fresh_run_after_finishing_calls_the_model_again(openai_route: respx.Route) -> None:
    agent = post.build().as_agent(name="post")
    first = await agent.run("green tea")
    await agent.run(responses={"auto::0": False}, continuation_token=first.continuation_token)

    await agent.run("black tea")

    assert openai_route.call_count == 2
    assert "Write about black tea." in request_input_text(openai_route.calls.last.request)
