"""Sessions: the paused run's token lives in the session, JSON-safe, until it is spent or abandoned."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_framework import AgentSession, Message
from request_ids import core_ids

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflowAgent,
    PendingContinuationError,
    ResponseMismatchError,
    RunContext,
    step,
    workflow,
)
from agent_framework_functional._session import SESSION_STATE_KEY

published: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    published.clear()


@step
async def publish(text: str) -> str:
    published.append(text)
    return f"published {text}"


@workflow(name="gate")
async def gate(topic: str, ctx: RunContext) -> str:
    if topic == "boom-after-resume":
        approved = await ctx.request_info({"topic": topic}, response_type=bool)
        raise RuntimeError(f"resumed code failed (approved={approved})")
    approved = await ctx.request_info({"topic": topic}, response_type=bool)
    return await publish(topic) if approved else "rejected"


def new_agent() -> FunctionalWorkflowAgent:
    return gate.build().as_agent(name="gate")


def yes(response: Any) -> Message:
    return Message("user", [response.user_input_requests[0].to_function_approval_response(approved=True)])


def stored(session: AgentSession, agent: FunctionalWorkflowAgent) -> Any:
    return session.state.get(SESSION_STATE_KEY, {}).get(agent.id, {}).get("continuation_token")


def round_trip(session: AgentSession) -> AgentSession:
    return AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))


async def test_paused_run_stores_the_token_in_its_session_and_resume_needs_nothing_else() -> None:
    agent = new_agent()
    session = agent.create_session()

    paused = await agent.run("tea", session=session)

    assert stored(session, agent) == paused.continuation_token
    done = await agent.run(yes(paused), session=session)
    assert done.text == "published tea"
    assert published == ["tea"]
    assert session.state[SESSION_STATE_KEY] == {}  # spent: the token removed, the empty entry kept


async def test_session_survives_a_json_round_trip_with_the_token() -> None:
    agent = new_agent()
    session = agent.create_session(session_id="chat-1")
    paused = await agent.run("tea", session=session)

    restored = round_trip(session)

    assert restored.session_id == "chat-1"
    assert stored(restored, agent) == paused.continuation_token
    done = await agent.run(yes(paused), session=restored, stream=True).get_final_response()
    assert done.text == "published tea"
    assert restored.state[SESSION_STATE_KEY] == {}
    json.dumps(restored.to_dict())


async def test_streaming_pause_stores_the_token_before_the_last_update() -> None:
    agent = new_agent()
    session = agent.create_session()
    stream = agent.run_stream("tea", session=session)

    updates = [update async for update in stream]

    assert updates[-1].continuation_token is not None
    assert stored(session, agent) == updates[-1].continuation_token


async def test_token_lookup_order_argument_then_options_then_session() -> None:
    agent = new_agent()
    session = agent.create_session()
    paused = await agent.run("tea", session=session)
    wrong = {"kind": "functional_workflow", "version": "1", "token": "w" * 43}

    # A wrong argument wins over good options and a good session: first match decides.
    with pytest.raises(ContinuationAuthorityError):
        agent.run(
            yes(paused),
            session=session,
            continuation_token=wrong,
            options={"continuation_token": paused.continuation_token},
        )
    # Wrong options win over a good session.
    with pytest.raises(ContinuationAuthorityError):
        agent.run(yes(paused), session=session, options={"continuation_token": wrong})
    assert stored(session, agent) == paused.continuation_token  # rejected calls leave the session alone
    # Good options, and a session rebuilt with the same id but no state (as AG-UI does between turns).
    rebuilt = AgentSession(session_id=session.session_id)
    done = await agent.run(yes(paused), session=rebuilt, options={"continuation_token": paused.continuation_token})
    assert done.text == "published tea"


async def test_argument_token_resumes_and_still_clears_the_session_copy() -> None:
    agent = new_agent()
    session = agent.create_session()
    paused = await agent.run("tea", session=session)

    await agent.run(yes(paused), session=session, continuation_token=paused.continuation_token)

    assert session.state[SESSION_STATE_KEY] == {}


async def test_another_session_or_no_session_gets_the_authority_error() -> None:
    agent = new_agent()
    session = agent.create_session()
    paused = await agent.run("tea", session=session)
    other = agent.create_session()

    with pytest.raises(ContinuationAuthorityError):
        agent.run(yes(paused), session=other)
    with pytest.raises(ContinuationAuthorityError):
        agent.run(yes(paused), stream=True)

    assert other.state == {}
    assert stored(session, agent) == paused.continuation_token
    assert core_ids(agent.pending_requests_for(session)) == {"auto::0"}
    assert agent.pending_requests == {}  # the session-less conversation is another one


async def test_a_rejected_call_changes_neither_session_nor_workflow() -> None:
    agent = new_agent()
    session = agent.create_session()
    paused = await agent.run("tea", session=session)
    before = json.dumps(session.to_dict(), sort_keys=True)

    for call in (
        lambda: agent.run("new text", session=session),
        lambda: agent.run(Message("tool", []), session=session, continuation_token={"kind": "x"}),
        lambda: agent.run(Message("user", ["extra text", yes(paused).contents[0]]), session=session, stream=True),
    ):
        with pytest.raises((ValueError, RuntimeError)):
            call()

    assert json.dumps(session.to_dict(), sort_keys=True) == before
    assert core_ids(agent.pending_requests_for(session)) == {"auto::0"}
    assert agent.pending_requests == {}  # the session-less conversation is another one
    assert (await agent.run(yes(paused), session=session)).text == "published tea"


async def test_next_pause_replaces_the_stored_token() -> None:
    agent = new_agent()
    session = agent.create_session()
    first = await agent.run("tea", session=session)
    await agent.run(yes(first), session=session)

    second = await agent.run("coffee", session=session)

    assert stored(session, agent) == second.continuation_token != first.continuation_token
    assert (await agent.run(yes(second), session=session)).text == "published coffee"
    assert published == ["tea", "coffee"]


async def test_failed_resume_spends_the_token_and_removes_it() -> None:
    agent = new_agent()
    session = agent.create_session()
    paused = await agent.run("boom-after-resume", session=session)

    with pytest.raises(RuntimeError, match="resumed code failed"):
        await agent.run(yes(paused), session=session)

    assert session.state[SESSION_STATE_KEY] == {}
    assert agent.pending_requests_for(session) == {}
    assert (await agent.run("tea", session=session)).user_input_requests


async def test_stream_dropped_before_iteration_keeps_the_token_resumable() -> None:
    agent = new_agent()
    session = agent.create_session()
    paused = await agent.run("tea", session=session)

    stream = agent.run(yes(paused), session=session, stream=True)
    assert agent.pending_requests_for(session) == {}  # accepted: the resume claimed the continuation
    await stream.close()
    del stream

    assert stored(session, agent) == paused.continuation_token
    assert core_ids(agent.pending_requests_for(session)) == {"auto::0"}
    assert agent.pending_requests == {}  # the session-less conversation is another one
    assert (await agent.run(yes(paused), session=session)).text == "published tea"


async def test_abandon_with_the_session_token_clears_workflow_and_session() -> None:
    agent = new_agent()
    session = agent.create_session()
    paused = await agent.run("tea", session=session)

    with pytest.raises(ContinuationAuthorityError):
        agent.abandon_continuation(session=agent.create_session())
    assert stored(session, agent) == paused.continuation_token

    agent.abandon_continuation(session=session)

    assert session.state[SESSION_STATE_KEY] == {}
    assert agent.pending_requests_for(session) == {}
    assert (await agent.run("coffee", session=session)).user_input_requests
    assert published == []


async def test_force_abandon_clears_a_lost_token_from_the_session() -> None:
    agent = new_agent()
    session = agent.create_session()
    await agent.run("tea", session=session)

    agent.abandon_continuation(force=True, session=session)

    assert session.state[SESSION_STATE_KEY] == {}
    assert agent.pending_requests_for(session) == {}


async def test_stale_session_token_is_dropped_by_the_next_run_with_that_session() -> None:
    agent = new_agent()
    session = agent.create_session()
    paused = await agent.run("tea", session=session)
    conversation = agent.workflow_for(session)
    assert conversation is not None
    conversation.abandon_continuation(paused.continuation_token)  # abandoned without the session
    assert stored(session, agent) == paused.continuation_token

    with pytest.raises(ContinuationAuthorityError):
        agent.run(yes(paused), session=session)
    done = await agent.run("coffee", session=session)

    assert stored(session, agent) == done.continuation_token != paused.continuation_token


async def test_two_agents_share_a_session_without_mixing_tokens() -> None:
    first, second = gate.build().as_agent(name="first"), gate.build().as_agent(name="second")
    session = AgentSession()
    paused_first = await first.run("tea", session=session)
    paused_second = await second.run("coffee", session=session)

    assert stored(session, first) == paused_first.continuation_token
    assert stored(session, second) == paused_second.continuation_token
    assert (await second.run(yes(paused_second), session=session)).text == "published coffee"
    assert stored(session, first) == paused_first.continuation_token
    assert (await first.run(yes(paused_first), session=session)).text == "published tea"
    assert session.state[SESSION_STATE_KEY] == {}


@pytest.mark.parametrize("through", ["json", "session"])
async def test_an_earlier_rounds_answer_replayed_on_a_later_pause_is_an_unknown_id(through: str) -> None:
    """Core restarts its ids (``auto::0``) in every run; the published ids are unique to their pause."""
    agent = new_agent()
    session = agent.create_session()
    first = await agent.run("one", session=session)
    answer = yes(first)  # round 1's exact answer, kept by a client that will send it twice
    if through == "json":
        answer = Message.from_dict(json.loads(json.dumps(answer.to_dict())))
    assert (await agent.run(answer, session=session)).text == "published one"
    second = await agent.run("two", session=session)
    (first_id,), (second_id,) = (
        [request.id for request in response.user_input_requests] for response in (first, second)
    )
    assert core_ids([first_id]) == core_ids([second_id]) == {"auto::0"}  # core's id is the same in both rounds
    token = stored(session, agent)

    with pytest.raises(ResponseMismatchError) as refused:
        await agent.run(answer, session=session)  # the replay: answers no request of this pause
    assert refused.value.unknown_id and refused.value.request_id == first_id
    assert published == ["one"] and stored(session, agent) == token  # nothing ran, the pause is intact
    assert list(agent.pending_requests_for(session)) == [second_id] and second_id != first_id
    assert (await agent.run(yes(second), session=session)).text == "published two"


async def test_new_input_on_an_older_copy_of_the_session_conflicts_with_the_live_pause() -> None:
    # A copy saved while nothing was pending (an earlier Responses snapshot, an old ``to_dict()``) is not a session
    # the host dropped: new input on it must not abandon the conversation's live pause (only a session that comes
    # back with no entry of the package at all is taken for an evicted one).
    agent = new_agent()
    session = agent.create_session(session_id="chat-branch")
    await agent.run(yes(await agent.run("one", session=session)), session=session)
    older = round_trip(session)
    live = await agent.run("two", session=session)
    with pytest.raises(PendingContinuationError):
        await agent.run("branch", session=older)
    assert stored(session, agent) == live.continuation_token
    done = await agent.run(yes(live), session=session)
    assert done.text == "published two"
