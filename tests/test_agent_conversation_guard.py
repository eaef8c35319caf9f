"""A session guards its pause (in memory): no mixing, forged session state is harmless, a stale token is its own case.

* Another conversation's token (argument, ``options``, or written into ``session.state``) is refused
  with the authority error and changes nothing.
* A value under ``SESSION_STATE_KEY`` that is not this conversation's live token resumes nothing and
  does not wedge the conversation: the honest resume afterwards works, and runs once.
* A session whose stored token is spent (an older copy) starts a fresh run on new input, in both
  modes, and answers on it get ``StaleContinuationError``; a rejected call raises at ``run(...)``,
  also when streaming. The same on SQLite and Redis: tests/durable/test_durable_conversation_guard.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from agent_framework import AgentResponse, AgentSession, Message, RunContext
from request_ids import core_ids

from agent_framework_functional import (
    SESSION_STATE_KEY,
    ContinuationAuthorityError,
    FunctionalWorkflowAgent,
    PendingContinuationError,
    StaleContinuationError,
    step,
    workflow,
)
from agent_framework_functional._errors import AGENT_PENDING_CONTINUATION_MESSAGE

EFFECTS: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    EFFECTS.clear()


@step
async def deploy(target: str) -> str:
    EFFECTS.append(target)
    return f"deployed {target}"


@workflow(name="guarded_deployer")
async def deployer(target: str, ctx: RunContext) -> str:
    approved = await ctx.request_info({"target": target}, response_type=bool)
    return await deploy(target) if approved else f"skipped {target}"


def approve(response: AgentResponse) -> Message:
    return Message("user", [response.user_input_requests[0].to_function_approval_response(approved=True)])


def snapshot(session: AgentSession) -> str:
    return json.dumps(session.to_dict(), sort_keys=True)


def copied(session: AgentSession) -> AgentSession:
    return AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))


async def two_paused() -> tuple[FunctionalWorkflowAgent, AgentSession, AgentResponse, AgentSession, AgentResponse]:
    agent = deployer.build().as_agent()
    a, b = agent.create_session(), agent.create_session()
    paused_a = await agent.run("a", session=a)
    paused_b = await agent.run("b", session=b)
    return agent, a, paused_a, b, paused_b


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("where", ["argument", "options"])
async def test_another_conversations_token_is_refused_and_changes_nothing(where: str, stream: bool) -> None:
    agent, a, paused_a, b, paused_b = await two_paused()
    before = snapshot(a)
    kwargs: dict[str, Any] = (
        {"continuation_token": paused_b.continuation_token}
        if where == "argument"
        else {"options": {"continuation_token": paused_b.continuation_token}}
    )
    with pytest.raises(ContinuationAuthorityError):
        agent.run(approve(paused_b), session=a, stream=stream, **kwargs)
    assert snapshot(a) == before and core_ids(agent.pending_requests_for(a)) == {"auto::0"}
    assert core_ids(agent.pending_requests_for(b)) == {"auto::0"}
    assert (await agent.run(approve(paused_b), session=b)).text == "deployed b"
    assert (await agent.run(approve(paused_a), session=a)).text == "deployed a"
    assert EFFECTS == ["b", "a"]


FORGED: list[Any] = [
    "not a mapping",
    {"guarded_deployer": "x"},
    {"FunctionalWorkflowAgent_guarded_deployer": None},
    {"FunctionalWorkflowAgent_guarded_deployer": {"continuation_token": 5, "answers": ["x"]}},
    {"FunctionalWorkflowAgent_guarded_deployer": {"continuation_token": {"kind": "functional_workflow"}}},
    {
        "FunctionalWorkflowAgent_guarded_deployer": {
            "continuation_token": {"kind": "functional_workflow", "version": "1", "token": "A" * 43},
            "answers": {"auto::0": True},
        }
    },
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("forged", [*FORGED, "other conversation"])
async def test_forged_session_state_resumes_nothing_and_the_honest_resume_still_works(
    forged: Any, stream: bool
) -> None:
    agent, a, paused_a, b, paused_b = await two_paused()
    assert agent.id == "FunctionalWorkflowAgent_guarded_deployer"
    tampered = copied(a)
    # What a host that merges client state into the session (AG-UI) would hold after a hostile request.
    tampered.state[SESSION_STATE_KEY] = copy.deepcopy(
        b.state[SESSION_STATE_KEY] if forged == "other conversation" else forged
    )
    with pytest.raises(ContinuationAuthorityError):
        agent.run(approve(paused_a), session=tampered, stream=stream)
    with pytest.raises(PendingContinuationError):
        agent.run("deploy something else", session=tampered, stream=stream)  # a's pause is live: a conflict
    assert EFFECTS == []
    assert core_ids(agent.pending_requests_for(a)) == {"auto::0"} and core_ids(agent.pending_requests_for(b)) == {
        "auto::0"
    }
    assert (await agent.run(approve(paused_a), session=a)).text == "deployed a"  # the honest resume, once
    assert (await agent.run(approve(paused_b), session=b)).text == "deployed b"
    assert EFFECTS == ["a", "b"]


async def test_a_malformed_value_in_the_package_key_of_an_idle_session_is_ignored() -> None:
    agent = deployer.build().as_agent()
    session = agent.create_session()
    session.state[SESSION_STATE_KEY] = {agent.id: {"continuation_token": "garbage"}}
    paused = await agent.run("a", session=session)  # a fresh run, not a wedged conversation
    assert session.state[SESSION_STATE_KEY][agent.id]["continuation_token"] == paused.continuation_token
    assert (await agent.run(approve(paused), session=session)).text == "deployed a"


async def spent_copy() -> tuple[FunctionalWorkflowAgent, AgentSession, AgentResponse]:
    agent = deployer.build().as_agent()
    session = agent.create_session()
    paused = await agent.run("a", session=session)
    old = copied(session)
    await agent.run(approve(paused), session=session)  # spends the token the copy still holds
    return agent, old, paused


@pytest.mark.parametrize("stream", [False, True])
async def test_new_text_on_a_copy_with_a_spent_token_starts_a_fresh_run(stream: bool) -> None:
    agent, old, paused = await spent_copy()
    if stream:
        fresh = await agent.run("b", session=old, stream=True).get_final_response()
    else:
        fresh = await agent.run("b", session=old)
    assert fresh.continuation_token is not None and fresh.continuation_token != paused.continuation_token
    assert old.state[SESSION_STATE_KEY][agent.id]["continuation_token"] == fresh.continuation_token
    assert (await agent.run(approve(fresh), session=old)).text == "deployed b"
    assert EFFECTS == ["a", "b"]


@pytest.mark.parametrize("stream", [False, True])
async def test_answers_on_a_copy_with_a_spent_token_get_their_own_error_at_the_call(stream: bool) -> None:
    agent, old, paused = await spent_copy()
    before = snapshot(old)
    with pytest.raises(StaleContinuationError) as info:
        agent.run(approve(paused), session=old, stream=stream)  # raised here, before any update
    assert "pending continuation" not in str(info.value)
    assert str(info.value) != AGENT_PENDING_CONTINUATION_MESSAGE
    assert snapshot(old) == before and EFFECTS == ["a"]
    # A token presented by the caller keeps the fixed authority message: nothing about it is revealed.
    with pytest.raises(ContinuationAuthorityError) as presented:
        agent.run(approve(paused), session=old, continuation_token=paused.continuation_token, stream=stream)
    assert type(presented.value) is ContinuationAuthorityError


@pytest.mark.parametrize("stream", [False, True])
async def test_new_text_on_a_token_held_by_another_agent_object_conflicts_at_the_call(stream: bool) -> None:
    first = deployer.build().as_agent()
    second = deployer.build().as_agent()  # same id, another object (a host rebuilding agents): holds nothing
    session = first.create_session()
    paused = await first.run("a", session=session)
    before = snapshot(session)
    with pytest.raises(PendingContinuationError):
        second.run("unrelated", session=session, stream=stream)  # at the call, not when iterated
    assert snapshot(session) == before
    assert (await first.run(approve(paused), session=session)).text == "deployed a"
