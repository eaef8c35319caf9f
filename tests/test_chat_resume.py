"""Chat-native resume: answers arrive as message contents, the way chat UIs and orchestrations send them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from agent_framework import Content, Message
from pydantic import BaseModel
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

side_effects: list[str] = []


@pytest.fixture(autouse=True)
def _reset_side_effects() -> None:
    side_effects.clear()


@step
async def record(value: str) -> str:
    side_effects.append(value)
    return value


class Verdict(BaseModel):
    approved: bool
    note: str


@dataclasses.dataclass
class Rating:
    stars: int
    comment: str


def asks(response_type: Any):
    """A workflow that records its input in a step, asks once with ``response_type``, and returns the answer."""

    @workflow(name="asks")
    async def asks_workflow(topic: str, ctx: RunContext) -> str:
        await record(topic)
        answer = await ctx.request_info({"topic": topic}, response_type=response_type)
        shown = f"Content({answer.type})" if isinstance(answer, Content) else repr(answer)
        return f"answer={shown} type={type(answer).__name__}"

    return asks_workflow


async def paused_agent(response_type: Any) -> tuple[FunctionalWorkflowAgent, Any]:
    agent = asks(response_type).build().as_agent(name="asker")
    paused = await agent.run("tea")
    assert paused.continuation_token is not None
    return agent, paused


def approval(paused: Any, approved: bool) -> Message:
    return Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=approved)])


def function_result(call_id: str, result: Any) -> Message:
    return Message("tool", [Content.from_function_result(call_id=call_id, result=result)])


async def test_approval_answers_a_bool_request_with_approved() -> None:
    agent, paused = await paused_agent(bool)

    done = await agent.run(approval(paused, False), continuation_token=paused.continuation_token)

    assert done.text == "answer=False type=bool"
    assert done.continuation_token is None
    assert side_effects == ["tea"]


@pytest.mark.parametrize("approved", ["no", "false", "yes", 1, 0, [], None])
async def test_an_approval_whose_approved_is_not_a_bool_is_refused_and_nothing_runs(approved: Any) -> None:
    # Truthiness would approve on "no" or "false"; an approval is never inferred.
    agent, paused = await paused_agent(bool)
    request = paused.user_input_requests[0]
    answer = Content(
        "function_approval_response", id=request.id, approved=approved, function_call=request.function_call
    )

    with pytest.raises(ResponseMismatchError, match="only true or false"):
        await agent.run(Message("user", [answer]), continuation_token=paused.continuation_token)

    assert core_ids(agent.pending_requests) == {"auto::0"}
    done = await agent.run(approval(paused, True), continuation_token=paused.continuation_token)
    assert done.text == "answer=True type=bool"


async def test_approval_answers_a_content_request_with_the_content_itself() -> None:
    agent, paused = await paused_agent(Content)

    done = await agent.run(approval(paused, True), continuation_token=paused.continuation_token)

    assert done.text == "answer=Content(function_approval_response) type=Content"


async def test_approval_cannot_answer_a_str_request_and_the_continuation_stays() -> None:
    agent, paused = await paused_agent(str)

    with pytest.raises(ValueError, match="function_result") as caught:
        agent.run(approval(paused, True), continuation_token=paused.continuation_token)

    assert not isinstance(caught.value, ContinuationAuthorityError)
    assert core_ids(agent.pending_requests) == {"auto::0"}
    done = await agent.run(function_result("auto::0", "ship it"), continuation_token=paused.continuation_token)
    assert done.text == "answer='ship it' type=str"


@pytest.mark.parametrize(
    ("response_type", "result", "expected"),
    [
        (str, "ship it", "answer='ship it' type=str"),
        (int, "42", "answer=42 type=int"),
        (int, 42, "answer=42 type=int"),
        (dict, {"a": 1}, "answer={'a': 1} type=dict"),
        (Verdict, {"approved": True, "note": "ok"}, "answer=Verdict(approved=True, note='ok') type=Verdict"),
        (Rating, '{"stars": 5, "comment": "great"}', "answer=Rating(stars=5, comment='great') type=Rating"),
    ],
)
async def test_function_result_is_converted_to_the_response_type(
    response_type: Any, result: Any, expected: str
) -> None:
    agent, paused = await paused_agent(response_type)

    done = await agent.run(function_result("auto::0", result), continuation_token=paused.continuation_token)

    assert done.text == expected
    assert side_effects == ["tea"]


async def test_function_result_answers_a_content_request_with_the_content() -> None:
    agent, paused = await paused_agent(Content)

    done = await agent.run(function_result("auto::0", "raw"), continuation_token=paused.continuation_token)

    assert done.text == "answer=Content(function_result) type=Content"


async def test_unconvertible_result_is_rejected_and_changes_nothing() -> None:
    agent, paused = await paused_agent(Verdict)

    with pytest.raises(ValueError, match="cannot be converted to Verdict"):
        agent.run(function_result("auto::0", "not json"), continuation_token=paused.continuation_token)
    with pytest.raises(ValueError, match=r"not a Verdict .*approved: Input should be a valid boolean"):
        agent.run(function_result("auto::0", {"approved": "maybe?"}), continuation_token=paused.continuation_token)

    assert core_ids(agent.pending_requests) == {"auto::0"}
    done = await agent.run(
        function_result("auto::0", {"approved": True, "note": "fine"}), continuation_token=paused.continuation_token
    )
    assert "Verdict(approved=True" in done.text


async def test_answer_for_no_pending_request_is_rejected_and_changes_nothing() -> None:
    agent, paused = await paused_agent(bool)
    stray = Content.from_function_approval_response(
        approved=True, id="auto::9", function_call=Content.from_function_call(call_id="auto::9", name="request_info")
    )

    with pytest.raises(ValueError, match=r"does not answer a pending request.*auto::0"):
        agent.run(Message("user", [stray]), continuation_token=paused.continuation_token)
    with pytest.raises(ValueError, match="does not answer a pending request"):
        agent.run(function_result("other-call", "x"), continuation_token=paused.continuation_token, stream=True)

    assert core_ids(agent.pending_requests) == {"auto::0"}
    assert agent.workflow.has_pending_continuation
    done = await agent.run(approval(paused, True), continuation_token=paused.continuation_token)
    assert done.text == "answer=True type=bool"


async def test_two_answers_for_one_request_are_rejected() -> None:
    agent, paused = await paused_agent(bool)
    answer = paused.user_input_requests[0].to_function_approval_response(approved=True)

    with pytest.raises(ValueError, match="more than once"):
        agent.run(Message("user", [answer, answer]), continuation_token=paused.continuation_token)

    assert core_ids(agent.pending_requests) == {"auto::0"}


async def test_authority_is_checked_before_the_answers() -> None:
    """Without the token a caller learns nothing: not the pending ids, not whether its answer matched."""
    agent, paused = await paused_agent(bool)
    stray = function_result("auto::9", "x")

    for bad_token in (None, {"kind": "functional_workflow", "version": "1", "token": "x" * 43}, "token"):
        with pytest.raises(ContinuationAuthorityError) as caught:
            agent.run(stray, continuation_token=bad_token)  # type: ignore[arg-type]
        assert "auto::" not in str(caught.value)
        with pytest.raises(ContinuationAuthorityError):
            agent.run(approval(paused, True), continuation_token=bad_token, stream=True)  # type: ignore[arg-type]

    assert core_ids(agent.pending_requests) == {"auto::0"}
    assert side_effects == ["tea"]


async def test_new_text_while_pending_is_the_workflow_conflict_error() -> None:
    agent, paused = await paused_agent(bool)

    with pytest.raises(PendingContinuationError) as caught:
        agent.run("something else")
    # The agent's message names the agent's ways out (answers, or abandoning on the session).
    assert "agent.abandon_continuation(session=session)" in str(caught.value)
    assert "function_approval_response" in str(caught.value)
    with pytest.raises(PendingContinuationError):
        agent.run(Message("user", ["something else"]), stream=True)

    assert core_ids(agent.pending_requests) == {"auto::0"}
    done = await agent.run(approval(paused, True), continuation_token=paused.continuation_token)
    assert done.text == "answer=True type=bool"


async def test_text_mixed_with_answers_while_pending_is_rejected_after_authority() -> None:
    agent, paused = await paused_agent(bool)
    mixed = Message("user", ["yes please", paused.user_input_requests[0].to_function_approval_response(approved=True)])

    with pytest.raises(ContinuationAuthorityError):
        agent.run(mixed)
    with pytest.raises(ValueError, match="send the answers alone"):
        agent.run(mixed, continuation_token=paused.continuation_token)

    assert core_ids(agent.pending_requests) == {"auto::0"}


async def test_answers_with_nothing_pending_are_an_authority_error_not_a_fresh_run() -> None:
    """Core's functional agent restarts on a stray approval; this one refuses, whatever the token."""
    agent, paused = await paused_agent(bool)
    answer = approval(paused, True)
    await agent.run(answer, continuation_token=paused.continuation_token)
    assert side_effects == ["tea"]

    with pytest.raises(ContinuationAuthorityError):
        agent.run(answer, continuation_token=paused.continuation_token)
    with pytest.raises(ContinuationAuthorityError):
        agent.run(answer)

    assert side_effects == ["tea"]
    assert not agent.workflow.has_pending_continuation


async def test_answers_inside_a_conversation_are_content_when_nothing_is_pending() -> None:
    """Tool results of other agents in a shared conversation are not resume attempts."""

    @workflow(name="count")
    async def count(conversation: list[Message]) -> str:
        return f"{len(conversation)} messages"

    agent = count.build().as_agent()
    conversation = [Message("user", ["hi"]), function_result("call_1", "42"), Message("assistant", ["it is 42"])]

    done = await agent.run(conversation)

    assert done.text == "3 messages"


async def test_streaming_chat_resume_carries_no_token_when_done() -> None:
    agent, paused = await paused_agent(bool)

    stream = agent.run(approval(paused, True), continuation_token=paused.continuation_token, stream=True)
    assert agent.pending_requests == {}
    updates = [update async for update in stream]
    final = await stream.get_final_response()

    assert final.text == "answer=True type=bool"
    assert final.continuation_token is None
    assert all(update.continuation_token is None for update in updates)


async def test_multi_round_pause_remembers_earlier_answers() -> None:
    @workflow(name="two")
    async def two(topic: str, ctx: RunContext) -> str:
        first = await ctx.request_info("first?", response_type=bool, request_id="first")
        second = await ctx.request_info("second?", response_type=str, request_id="second")
        return f"{first}/{second}"

    agent = two.build().as_agent()
    paused = await agent.run("x")
    assert core_ids(agent.pending_requests) == {"first"}
    paused_again = await agent.run(
        Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=True)]),
        continuation_token=paused.continuation_token,
    )
    assert core_ids(agent.pending_requests) == {"second"}

    with pytest.raises(ValueError, match=r"does not answer a pending request.*second"):
        agent.run(
            [approval(paused, True), function_result("second", "two")],
            continuation_token=paused_again.continuation_token,
        )
    # Only the new answer: the agent adds the earlier one (core's replay would ask "first" again).
    done = await agent.run(function_result("second", "two"), continuation_token=paused_again.continuation_token)
    assert done.text == "True/two"


async def test_verify_token_now_uses_the_workflow_public_verify() -> None:
    """The agent's synchronous check is the public verify_continuation_token; without a store nothing is deferred."""
    wf = asks(bool).build()
    paused = await wf.run("tea")
    assert dict(wf.verify_token_now(paused.continuation_token) or {}) == dict(
        wf.verify_continuation_token(paused.continuation_token)
    )
    forged = {**(paused.continuation_token or {}), "token": "A" * 43}
    for bad in (None, forged):
        with pytest.raises(ContinuationAuthorityError):
            wf.verify_token_now(bad)  # no continuation store: never deferred to the run
    assert wf.has_pending_continuation


@pytest.mark.parametrize("depth", [2_000, 100_000])
async def test_deeply_nested_json_answer_is_a_response_mismatch_not_a_recursion_error(depth: int) -> None:
    agent, paused = await paused_agent(list[int])
    nested = "[" * depth + "]" * depth
    with pytest.raises(ResponseMismatchError, match="cannot be converted"):
        agent.run(function_result("auto::0", nested), continuation_token=paused.continuation_token)
    assert core_ids(agent.pending_requests) == {"auto::0"}  # nothing changed: the continuation is still pending


async def test_deeply_nested_response_on_a_workflow_resume_is_a_response_mismatch() -> None:
    agent, paused = await paused_agent(list[int])
    nested: list[object] = []
    for _ in range(5_000):
        nested = [nested]
    with pytest.raises(ResponseMismatchError):
        agent.workflow.run(responses={"auto::0": nested}, continuation_token=paused.continuation_token)
    assert agent.workflow.has_pending_continuation


async def test_answers_that_match_no_request_are_a_response_mismatch_error() -> None:
    agent, paused = await paused_agent(str)
    with pytest.raises(ResponseMismatchError):
        agent.run(function_result("nope", "x"), continuation_token=paused.continuation_token)
    with pytest.raises(ResponseMismatchError):
        agent.workflow.run(responses={"nope": "x"}, continuation_token=paused.continuation_token)
    assert agent.workflow.has_pending_continuation


async def test_cores_rejection_result_declines_a_bool_request() -> None:
    import inspect

    import agent_framework._tools as core_tools

    from agent_framework_functional._chat import REJECTED_RESULT

    assert REJECTED_RESULT in inspect.getsource(core_tools)  # core's own text for a declined approval
    agent, paused = await paused_agent(bool)
    done = await agent.run(function_result("auto::0", REJECTED_RESULT), continuation_token=paused.continuation_token)
    assert done.text == "answer=False type=bool"


async def test_answers_at_the_end_resume_after_new_text_of_the_same_turn() -> None:
    agent, paused = await paused_agent(bool)
    session_less = [Message("user", ["deploy db"]), approval(paused, True)]  # AG-UI: the turn's text, then the answer
    done = await agent.run(session_less, continuation_token=paused.continuation_token)
    assert done.text == "answer=True type=bool"
