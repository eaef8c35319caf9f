"""Core's agent calling convention: signature, message forms, sessions, context providers."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from agent_framework import (
    AgentResponse,
    AgentSession,
    BaseAgent,
    Content,
    ContextProvider,
    InMemoryHistoryProvider,
    Message,
    SessionContext,
    SupportsAgentRun,
    WorkflowAgent,
)
from request_ids import core_ids

from agent_framework_functional import (
    FunctionalWorkflowAgent,
    PendingContinuationError,
    RunContext,
    WorkflowRunningError,
    _core_compat,
    get_run_context,
    step,
    workflow,
)


@workflow(name="echo")
async def echo(text: str) -> str:
    return f"echo: {text}"


@step
async def seen_run_kwargs() -> str:
    ctx = get_run_context()
    assert ctx is not None
    return ",".join(sorted(ctx._run_kwargs))  # pyright: ignore[reportPrivateUsage]


@workflow(name="kwargs")
async def kwargs_workflow(text: str) -> str:
    return await seen_run_kwargs()


@workflow(name="gate")
async def gate(text: str, ctx: RunContext) -> str:
    approved = await ctx.request_info({"text": text}, response_type=bool)
    return f"{text}: {'yes' if approved else 'no'}"


class Recorder(ContextProvider):
    """Records what core hands a provider, and adds one context message before the run."""

    def __init__(self) -> None:
        super().__init__("recorder")
        self.calls: list[str] = []
        self.inputs: list[list[str]] = []
        self.responses: list[str | None] = []
        self.options: list[dict[str, Any]] = []

    async def before_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        self.calls.append("before")
        self.options.append(dict(context.options))
        state["runs"] = state.get("runs", 0) + 1
        context.extend_messages(self, [Message("system", ["from recorder"])])

    async def after_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        self.calls.append("after")
        self.inputs.append([message.text for message in context.input_messages])
        self.responses.append(context.response.text if context.response is not None else None)


def test_is_a_core_agent() -> None:
    agent = echo.build().as_agent()
    assert isinstance(agent, BaseAgent)
    assert isinstance(agent, SupportsAgentRun)


def test_run_accepts_every_keyword_of_the_core_agent_protocol_and_workflow_agent() -> None:
    ours = inspect.signature(FunctionalWorkflowAgent.run).parameters
    for reference in (SupportsAgentRun.run, WorkflowAgent.run):
        for name, parameter in inspect.signature(reference).parameters.items():
            if name == "self":
                continue
            assert name in ours, f"run() lacks {name!r}"
            assert ours[name].kind == parameter.kind, name
    for name in ("responses", "continuation_token", "options", "tools", "function_invocation_kwargs", "client_kwargs"):
        assert ours[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert ours[name].default is None


def test_core_private_names_this_package_relies_on_still_exist() -> None:
    assert _core_compat.accepts(True, bool)
    assert _core_compat.response_fits("2", int, "r") is False and _core_compat.response_fits(2, int, "r")
    assert _core_compat.response_fits("text", Content, "r")  # core turns str into Content
    context = SessionContext(input_messages=[])
    response = AgentResponse(messages=[Message("assistant", ["hi"])])
    _core_compat.set_context_response(context, response)
    assert context.response is response


def test_create_session_and_get_session() -> None:
    agent = echo.build().as_agent()
    session = agent.create_session(session_id="s-1")
    assert isinstance(session, AgentSession)
    assert session.session_id == "s-1"
    service = agent.get_session("svc-7", session_id="s-2")
    assert (service.session_id, service.service_session_id) == ("s-2", "svc-7")


@pytest.mark.parametrize(
    "messages",
    [
        "hello",
        Message("user", ["hello"]),
        Content.from_text(text="hello"),
        ["hello"],
        [Message("user", ["hello"])],
        [Content.from_text(text="hello")],
    ],
)
async def test_accepts_the_message_forms_core_accepts(messages: Any) -> None:
    agent = echo.build().as_agent()

    response = await agent.run(messages)
    streamed = await agent.run(messages, stream=True).get_final_response()

    assert response.text == streamed.text == "echo: hello"


async def test_context_providers_run_before_and_after_each_run_in_both_modes() -> None:
    recorder = Recorder()
    agent = echo.build().as_agent(context_providers=[recorder])
    session = agent.create_session()

    await agent.run("one", session=session, options={"note": 1})
    await agent.run("two", session=session, stream=True).get_final_response()

    assert recorder.calls == ["before", "after", "before", "after"]
    assert recorder.inputs == [["one"], ["two"]]
    assert recorder.responses == ["echo: one", "echo: two"]
    assert recorder.options[0] == {"note": 1}
    assert session.state["recorder"] == {"runs": 2}


async def test_context_providers_get_a_session_even_without_one() -> None:
    recorder = Recorder()
    agent = echo.build().as_agent(context_providers=[recorder])

    await agent.run("solo")

    assert recorder.calls == ["before", "after"]


async def test_history_provider_sees_input_and_response_across_a_pause_and_resume() -> None:
    agent = gate.build().as_agent(name="gate")
    session = agent.create_session()

    paused = await agent.run("ship?", session=session)
    answer = Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=True)])
    done = await agent.run(answer, session=session, stream=True).get_final_response()

    assert done.text == "ship?: yes"
    assert any(isinstance(provider, InMemoryHistoryProvider) for provider in agent.context_providers)
    history = session.state[InMemoryHistoryProvider.DEFAULT_SOURCE_ID]["messages"]
    kinds = [[content.type for content in message.contents] for message in history]
    # The approval request comes with its function call first (tool-call-shaped protocols).
    assert kinds == [["text"], ["function_call", "function_approval_request"], ["function_approval_response"], ["text"]]
    assert history[0].text == "ship?"
    assert history[-1].text == "ship?: yes"


async def test_rejected_call_runs_no_provider() -> None:
    recorder = Recorder()
    agent = gate.build().as_agent(context_providers=[recorder])
    await agent.run("x")

    with pytest.raises(RuntimeError):
        agent.run("y")

    assert recorder.calls == ["before", "after"]


async def test_tools_and_invocation_kwargs_are_forwarded_to_the_workflow_run() -> None:
    agent = kwargs_workflow.build().as_agent()

    plain = await agent.run("x")
    forwarded = await agent.run("x", tools=[], function_invocation_kwargs={"a": 1}, client_kwargs={"b": 2}, custom="c")

    assert plain.text == ""
    assert forwarded.text == "client_kwargs,custom,function_invocation_kwargs,tools"


async def test_options_must_be_a_mapping() -> None:
    agent = echo.build().as_agent()
    with pytest.raises(TypeError, match="options"):
        agent.run("x", options=["continuation_token"])  # type: ignore[arg-type]


async def test_continuation_token_on_a_new_turn_is_rejected() -> None:
    agent = echo.build().as_agent()
    with pytest.raises(ValueError, match="only used to resume"):
        agent.run("x", continuation_token={"kind": "functional_workflow", "version": "1", "token": "t"})


async def test_nothing_to_run_is_rejected() -> None:
    agent = echo.build().as_agent()
    with pytest.raises(ValueError, match="Nothing to run"):
        agent.run()
    with pytest.raises(ValueError, match="Nothing to run"):
        agent.run(stream=True)


async def test_explicit_responses_still_resume_with_the_token() -> None:
    agent = gate.build().as_agent()
    paused = await agent.run("x")

    done = await agent.run(responses={"auto::0": True}, continuation_token=paused.continuation_token)

    assert done.text == "x: yes"


async def test_a_second_run_while_one_is_in_progress_is_rejected_at_the_call() -> None:
    agent = gate.build().as_agent()
    first = agent.run("x", stream=True)

    with pytest.raises(WorkflowRunningError):
        agent.run("y")
    with pytest.raises(WorkflowRunningError):
        agent.run("y", stream=True)

    paused = await first.get_final_response()
    assert paused.continuation_token is not None


async def test_breaking_out_of_an_agent_stream_frees_the_workflow_at_once() -> None:
    agent = gate.build().as_agent()

    async for update in agent.run("x", stream=True):
        if update.user_input_requests:
            break

    assert not agent.workflow.is_running  # no wait for the event loop to close the generator
    # The approval request is yielded only once the pause is saved and its token issued, so a caller
    # that stops reading there keeps the pause: it is still pending and answerable.
    assert core_ids(agent.pending_requests) == {"auto::0"}
    with pytest.raises(PendingContinuationError):
        agent.run("y")
