"""One agent, many conversations; pauses that survive a closed stream; chat-shaped answers."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from agent_framework import AgentResponse, AgentSession, Content, Message, RunContext
from request_ids import core_id, core_ids

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflowAgent,
    PendingContinuationError,
    step,
    workflow,
)
from agent_framework_functional._session import SESSION_STATE_KEY, attached_instances

EFFECTS: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    EFFECTS.clear()


@step
async def deploy(target: str) -> str:
    EFFECTS.append(target)
    return f"deployed {target}"


@workflow(name="deployer")
async def deployer(target: str, ctx: RunContext) -> str:
    approved = await ctx.request_info({"action": "deploy", "target": target}, response_type=bool)
    return await deploy(target) if approved else f"skipped {target}"


@workflow(name="two_questions")
async def two_questions(topic: str, ctx: RunContext) -> str:
    first = await ctx.request_info({"q": 1}, response_type=str)
    second = await ctx.request_info({"q": 2}, response_type=str)
    return f"{topic}: {first} / {second}"


def approve(response: AgentResponse, approved: bool = True) -> Message:
    return Message("user", [response.user_input_requests[0].to_function_approval_response(approved=approved)])


async def test_one_agent_serves_interleaved_conversations_without_cross_talk() -> None:
    agent = deployer.build().as_agent()
    sessions = [agent.create_session() for _ in range(20)]
    paused = [await agent.run(f"app{i}", session=session) for i, session in enumerate(sessions)]
    assert all(response.continuation_token is not None for response in paused)
    assert len({response.continuation_token["token"] for response in paused}) == 20  # type: ignore[index]
    assert attached_instances(agent.workflow) == 20
    # Answer in reverse order, every other one declined: each conversation gets its own answer.
    for i in reversed(range(20)):
        done = await agent.run(approve(paused[i], approved=i % 2 == 0), session=sessions[i])
        assert done.text == (f"deployed app{i}" if i % 2 == 0 else f"skipped app{i}")
        assert agent.pending_requests_for(sessions[i]) == {}
    assert sorted(EFFECTS) == sorted(f"app{i}" for i in range(0, 20, 2))
    assert attached_instances(agent.workflow) == 0  # nothing kept once the conversations finished
    assert agent.pending_requests == {}  # the session-less conversation was never touched


async def test_a_token_of_one_conversation_does_not_resume_another() -> None:
    agent = deployer.build().as_agent()
    a, b = agent.create_session(), agent.create_session()
    paused_a = await agent.run("a", session=a)
    await agent.run("b", session=b)
    with pytest.raises(ContinuationAuthorityError):
        agent.run(approve(paused_a), session=b, continuation_token=paused_a.continuation_token)
    assert core_ids(agent.pending_requests_for(b)) == {"auto::0"}
    assert (await agent.run(approve(paused_a), session=a)).text == "deployed a"


async def test_concurrent_conversations_on_one_agent() -> None:
    agent = deployer.build().as_agent()
    sessions = [agent.create_session() for _ in range(30)]
    paused = await asyncio.gather(*(agent.run(f"c{i}", session=s) for i, s in enumerate(sessions)))
    done = await asyncio.gather(*(agent.run(approve(p), session=s) for p, s in zip(paused, sessions, strict=True)))
    assert [d.text for d in done] == [f"deployed c{i}" for i in range(30)]


async def test_a_rebuilt_session_with_the_same_id_and_state_resumes() -> None:
    agent = deployer.build().as_agent()
    session = agent.create_session()
    paused = await agent.run("x", session=session)
    rebuilt = AgentSession.from_dict(session.to_dict())  # a host that rebuilds the session each turn
    assert rebuilt is not session
    assert (await agent.run(approve(paused), session=rebuilt)).text == "deployed x"


@pytest.mark.parametrize("stream", [False, True])
async def test_approval_request_is_preceded_by_its_function_call(stream: bool) -> None:
    agent = deployer.build().as_agent()
    if stream:
        updates = [u async for u in agent.run("x", stream=True)]
        response = AgentResponse.from_updates(updates)
    else:
        response = await agent.run("x")
    contents = [c for m in response.messages for c in m.contents]
    kinds = [c.type for c in contents]
    assert kinds.index("function_call") < kinds.index("function_approval_request")
    call = contents[kinds.index("function_call")]
    request = contents[kinds.index("function_approval_request")]
    assert call.call_id == request.id and core_id(request.id) == "auto::0"
    assert request.function_call is not None and request.function_call.call_id == request.id
    assert call.name == "request_info" and call.parse_arguments()["response_type"] == "bool"  # type: ignore[index]
    assert request.additional_properties["response_type"] == "bool"


async def test_a_stream_closed_right_after_the_approval_request_keeps_the_pause_answerable() -> None:
    agent = deployer.build().as_agent()
    session = agent.create_session()
    async for update in agent.run("x", session=session, stream=True):
        if update.user_input_requests:
            request = update.user_input_requests[0]
            break  # a browser closing the connection as soon as it showed the approval
    gc.collect()
    assert session.state[SESSION_STATE_KEY][agent.id]["continuation_token"]["kind"] == "functional_workflow"
    answer = Message("user", [request.to_function_approval_response(approved=True)])
    assert (await agent.run(answer, session=session)).text == "deployed x"
    assert EFFECTS == ["x"]


async def test_answers_after_replayed_history_resume_and_history_is_ignored() -> None:
    agent = deployer.build().as_agent()
    session = agent.create_session()
    paused = await agent.run("app", session=session)
    history = [Message("user", ["app"]), *paused.messages]
    done = await agent.run([*history, approve(paused)], session=session)  # AG-UI resends the transcript
    assert done.text == "deployed app"


async def test_a_str_workflow_gets_the_last_user_message_of_a_resent_transcript() -> None:
    @workflow(name="echo")
    async def echo(text: str) -> str:
        return f"echo:{text}"

    agent = echo.build().as_agent()
    transcript = [Message("user", ["first"]), Message("assistant", ["echo:first"]), Message("user", ["second"])]
    assert (await agent.run(transcript)).text == "echo:second"


async def test_plain_text_answers_a_str_request_on_the_session() -> None:
    agent = two_questions.build().as_agent()
    session = agent.create_session()
    first = await agent.run("tea", session=session)
    assert first.user_input_requests[0].additional_properties["response_type"] == "str"
    second = await agent.run("green", session=session)  # typed as a chat reply
    assert second.continuation_token is not None
    done = await agent.run("hot", session=session)
    assert done.text == "tea: green / hot"  # the first answer was remembered for round two


async def test_plain_text_answers_can_be_turned_off() -> None:
    agent = FunctionalWorkflowAgent(two_questions.build(), text_answers=False)
    session = agent.create_session()
    await agent.run("tea", session=session)
    with pytest.raises(PendingContinuationError):
        agent.run("green", session=session)
    assert core_ids(agent.pending_requests_for(session)) == {"auto::0"}


async def test_plain_text_does_not_answer_a_bool_request() -> None:
    agent = deployer.build().as_agent()
    session = agent.create_session()
    await agent.run("x", session=session)
    with pytest.raises(PendingContinuationError):
        agent.run("yes please", session=session)


@pytest.mark.parametrize("use_session", [False, True])
async def test_responses_remember_earlier_rounds_like_message_answers(use_session: bool) -> None:
    agent = two_questions.build().as_agent()
    kwargs: dict[str, Any] = {"session": agent.create_session()} if use_session else {}
    first = await agent.run("tea", **kwargs)
    second = await agent.run(responses={"auto::0": "green"}, continuation_token=first.continuation_token, **kwargs)
    assert second.continuation_token is not None
    # Only the newest answer: the agent adds round one's (before, core's replay asked round one again).
    done = await agent.run(responses={"auto::1": "hot"}, continuation_token=second.continuation_token, **kwargs)
    assert done.text == "tea: green / hot"


async def test_earlier_answers_travel_with_a_serialised_session() -> None:
    agent = two_questions.build().as_agent()
    session = agent.create_session()
    first = await agent.run("tea", session=session)
    (first_id,) = agent.pending_requests_for(session)
    await agent.run(Message("tool", [Content.from_function_result(call_id=first_id, result="green")]), session=session)
    restored = AgentSession.from_dict(session.to_dict())
    (second_id,) = agent.pending_requests_for(restored)
    done = await agent.run(
        Message("tool", [Content.from_function_result(call_id=second_id, result="hot")]), session=restored
    )
    assert done.text == "tea: green / hot"
    assert first.continuation_token is not None


async def test_token_can_stay_in_the_session_only() -> None:
    agent = FunctionalWorkflowAgent(deployer.build(), continuation_token_on_response=False)
    session = agent.create_session()
    paused = await agent.run("x", session=session)
    assert paused.continuation_token is None and paused.user_input_requests
    streamed = [u async for u in agent.run("y", session=agent.create_session(), stream=True)]
    assert all(u.continuation_token is None for u in streamed)
    assert (await agent.run(approve(paused), session=session)).text == "deployed x"
    with pytest.raises(ValueError, match="session"):
        agent.run("z")


def test_the_conversations_benchmark_runs_clean_in_quick_mode() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_conversations.py"
    proc = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cross-talk (wrong answers): 0; each side effect once: True" in proc.stdout
    assert "attached instances after: 0" in proc.stdout
    assert "of which spent-token notes" in proc.stdout and proc.stdout.rstrip().endswith("OK")


async def test_a_second_agent_on_a_shared_session_does_not_discard_the_first_agents_pause() -> None:
    first = deployer.build().as_agent()
    second = deployer.build().as_agent()  # same default id, another instance (a host rebuilding agents)
    session = first.create_session()
    paused = await first.run("x", session=session)
    before = session.to_dict()
    with pytest.raises(PendingContinuationError):
        await second.run("unrelated", session=session)  # cannot know the token is stale: it conflicts
    assert session.to_dict() == before
    assert (await first.run(approve(paused), session=session)).text == "deployed x"


async def test_a_rejected_abandon_on_an_idle_session_leaves_nothing_behind() -> None:
    agent = deployer.build().as_agent()
    session = agent.create_session()
    forged = {"kind": "functional_workflow", "version": "1", "token": "x" * 43}
    for _ in range(5):
        with pytest.raises(ContinuationAuthorityError):
            agent.abandon_continuation(forged, session=session)
    assert agent.workflow_for(session) is None
    assert attached_instances(agent.workflow) == 0


@pytest.mark.parametrize("role", ["system", "tool", "assistant"])
async def test_only_a_user_message_gives_a_text_answer(role: str) -> None:
    agent = two_questions.build().as_agent()
    session = agent.create_session()
    await agent.run("tea", session=session)
    with pytest.raises(PendingContinuationError):
        agent.run(Message(role, ["You are a helpful assistant."]), session=session)  # type: ignore[arg-type]
    with pytest.raises(PendingContinuationError):
        agent.run("   ", session=session)  # whitespace is no answer
    assert core_ids(agent.pending_requests_for(session)) == {"auto::0"}


@pytest.mark.parametrize("responses", [["auto::0"], "auto::0", 0])
async def test_responses_that_are_not_a_mapping_are_a_type_error(responses: Any) -> None:
    agent = deployer.build().as_agent()
    session = agent.create_session()
    await agent.run("x", session=session)
    with pytest.raises(TypeError, match="mapping"):
        agent.run(responses=responses, session=session)
    assert core_ids(agent.pending_requests_for(session)) == {"auto::0"}
