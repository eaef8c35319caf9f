"""Core's agent middleware on FunctionalWorkflowAgent: it sees, changes or stops every call, a resume included.

The middleware are core's own classes (``AgentMiddleware``, ``@agent_middleware``). The ``invoke_agent``
span and the continuation telemetry are in ``tests/test_telemetry.py`` (they need process-global
OpenTelemetry providers, so they run in a subprocess).
"""

from __future__ import annotations

import collections
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agent_framework import (
    AgentContext,
    AgentMiddleware,
    AgentMiddlewareLayer,
    AgentResponse,
    Content,
    Message,
    MiddlewareTermination,
    RunContext,
    agent_middleware,
    step,
)
from agent_framework.observability import AgentTelemetryLayer
from request_ids import core_ids

from agent_framework_functional import FunctionalWorkflowAgent, _core_compat, workflow

DEPLOYS: collections.Counter[str] = collections.Counter()


@step
async def deploy(target: str) -> str:
    DEPLOYS[target] += 1
    return f"deployed {target}"


@workflow(name="gated_deploy")
async def gated_deploy(target: str, ctx: RunContext) -> str:
    approved = await ctx.request_info({"deploy": target}, response_type=bool)
    if not approved:
        return f"declined {target}"
    return await deploy(target)


class Recorder(AgentMiddleware):
    """Records what each call looked like on the way in."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def process(self, context: AgentContext, call_next: Callable[[], Awaitable[None]]) -> None:
        self.seen.append(
            {
                "stream": context.stream,
                "kinds": [content.type for message in context.messages for content in message.contents],
                "token": context.kwargs.get("continuation_token"),
                "session": context.session,
            }
        )
        await call_next()


def _approval(paused: AgentResponse, approved: bool) -> Message:
    return Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=approved)])


async def _run(agent: FunctionalWorkflowAgent, messages: Any, stream: bool, **kwargs: Any) -> AgentResponse:
    if stream:
        return await agent.run(messages, stream=True, **kwargs).get_final_response()
    return await agent.run(messages, **kwargs)


def test_the_agent_carries_cores_agent_layers() -> None:
    assert issubclass(FunctionalWorkflowAgent, AgentMiddlewareLayer)
    assert issubclass(FunctionalWorkflowAgent, AgentTelemetryLayer)
    # The layer helpers _core_compat calls (core's own names; a rename must fail here first).
    assert callable(AgentMiddlewareLayer._get_agent_middleware_pipeline)  # pyright: ignore[reportPrivateUsage]
    assert "execute" in inspect.signature(AgentTelemetryLayer._trace_agent_invocation).parameters  # pyright: ignore[reportPrivateUsage]
    assert callable(_core_compat.agent_middleware_of)


@pytest.mark.parametrize("stream", [False, True])
async def test_agent_middleware_sees_the_fresh_run_and_the_resume(stream: bool) -> None:
    DEPLOYS.clear()
    recorder = Recorder()
    agent = gated_deploy.build().as_agent(middleware=[recorder])
    session = agent.create_session()
    paused = await _run(agent, "prod", stream, session=session)
    assert paused.continuation_token is not None
    done = await _run(agent, _approval(paused, True), stream, session=session)
    assert done.text == "deployed prod"
    assert DEPLOYS["prod"] == 1
    assert [call["stream"] for call in recorder.seen] == [stream, stream]
    assert recorder.seen[0]["kinds"] == ["text"]
    assert recorder.seen[1]["kinds"] == ["function_approval_response"]  # the resume, as the caller sent it
    assert all(call["session"] is session for call in recorder.seen)


async def test_run_level_middleware_sees_the_token_of_a_token_resume() -> None:
    recorder = Recorder()
    agent = gated_deploy.build().as_agent()
    paused = await agent.run("qa")
    request_id = paused.user_input_requests[0].id
    done = await agent.run(
        responses={request_id: True}, continuation_token=paused.continuation_token, middleware=[recorder]
    )
    assert done.text == "deployed qa"
    assert recorder.seen[0]["token"] == paused.continuation_token


@pytest.mark.parametrize("stream", [False, True])
async def test_agent_middleware_can_change_the_answer_of_a_resume(stream: bool) -> None:
    DEPLOYS.clear()

    @agent_middleware
    async def always_decline(context: AgentContext, call_next: Callable[[], Awaitable[None]]) -> None:
        context.messages = [
            Message(
                "user",
                [
                    Content.from_function_approval_response(
                        approved=False, id=content.id or "", function_call=content.function_call
                    )
                    if content.type == "function_approval_response"
                    else content
                    for content in message.contents
                ],
            )
            for message in context.messages
        ]
        await call_next()

    agent = gated_deploy.build().as_agent(middleware=[always_decline])
    session = agent.create_session()
    paused = await _run(agent, "prod", stream, session=session)
    done = await _run(agent, _approval(paused, True), stream, session=session)
    assert done.text == "declined prod"
    assert DEPLOYS["prod"] == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_agent_middleware_can_stop_a_resume_and_the_pause_stays(stream: bool) -> None:
    DEPLOYS.clear()
    blocking = {"on": False}

    @agent_middleware
    async def gate(context: AgentContext, call_next: Callable[[], Awaitable[None]]) -> None:
        if blocking["on"]:
            if not context.stream:
                context.result = AgentResponse(messages=[Message("assistant", ["blocked by policy"])])
            raise MiddlewareTermination()  # stop: the agent is never called
        await call_next()

    agent = gated_deploy.build().as_agent(middleware=[gate])
    session = agent.create_session()
    paused = await _run(agent, "prod", stream, session=session)
    pending = core_ids(agent.pending_requests_for(session))
    blocking["on"] = True
    if stream:
        stopped = await agent.run(_approval(paused, True), stream=True, session=session).get_final_response()
        assert stopped.text == ""  # a stopped stream is empty, as core's Agent
    else:
        stopped = await agent.run(_approval(paused, True), session=session)
        assert stopped.text == "blocked by policy"
    assert DEPLOYS["prod"] == 0
    assert core_ids(agent.pending_requests_for(session)) == pending  # nothing ran, the pause is intact
    blocking["on"] = False
    done = await _run(agent, _approval(paused, True), stream, session=session)
    assert done.text == "deployed prod"
    assert DEPLOYS["prod"] == 1


async def test_without_middleware_a_rejected_call_still_raises_at_run() -> None:
    agent = gated_deploy.build().as_agent()
    await agent.run("prod")
    with pytest.raises(ValueError):
        agent.run(responses={"auto::0": True}, continuation_token={"kind": "functional_workflow"})


async def test_middleware_that_leaves_the_input_alone_passes_a_plain_string_through() -> None:
    seen: list[Any] = []

    @workflow
    async def echo(text: Any) -> str:
        seen.append(text)
        return "ok"

    agent = echo.build().as_agent(middleware=[Recorder()])
    assert (await agent.run("hello")).text == "ok"
    assert seen == ["hello"]
