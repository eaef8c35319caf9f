"""Typed answers through the agent: every request carries its answer's JSON Schema, and any JSON answer converts.

A host reads ``response_schema`` from the emitted ``function_call`` / ``function_approval_request`` and
answers with a ``function_result`` whose ``result`` is the JSON value (or JSON text of it); the agent
converts it to the request's ``response_type`` before the token is spent, or refuses it with a
``ResponseMismatchError`` naming the field, leaving the pause exactly as it was.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from typing import Any, Literal, Optional

import pytest
from agent_framework import AgentResponse, AgentSession, Content, Message
from pydantic import BaseModel, TypeAdapter
from request_ids import core_id, core_ids

from agent_framework_functional import (
    FunctionalWorkflowAgent,
    ResponseMismatchError,
    RunContext,
    response_schema,
    workflow,
)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Draft(BaseModel):
    title: str
    body: str
    tags: list[str] = []


@dataclasses.dataclass
class Rating:
    stars: int
    color: Color


seen: list[Any] = []


def asks(response_type: Any) -> Any:
    """A workflow that shows a pydantic draft, asks once with ``response_type`` and records the answer."""

    @workflow(name="typed")
    async def typed(topic: str, ctx: RunContext) -> str:
        answer = await ctx.request_info(Draft(title=topic, body="first"), response_type=response_type)
        seen.append(answer)
        return f"got {type(answer).__name__}"

    return typed


@pytest.fixture(autouse=True)
def _reset_seen() -> None:
    seen.clear()


# (response_type, JSON answer, what the workflow must receive)
CASES: list[tuple[Any, Any, Any]] = [
    (bool, True, True),
    (str, "looks good", "looks good"),
    (int, 3, 3),
    (float, 2, 2.0),
    (Color, "green", Color.GREEN),
    (Literal["ship", "hold"], "hold", "hold"),
    (Rating, {"stars": 4, "color": "red"}, Rating(4, Color.RED)),
    (Draft, {"title": "Edited", "body": "b"}, Draft(title="Edited", body="b")),
    (list[Draft], [{"title": "a", "body": "1"}, {"title": "b", "body": "2", "tags": ["x"]}], None),
    (Optional[Draft], None, None),  # noqa: UP045 - Optional is what users write
    (Optional[Draft], {"title": "t", "body": "b"}, Draft(title="t", body="b")),  # noqa: UP045
]
IDS = ["bool", "str", "int", "float", "enum", "literal", "dataclass", "model", "list", "optional-none", "optional"]


def answer(call_id: str, result: Any) -> Message:
    return Message("tool", [Content.from_function_result(call_id=call_id, result=result)])


def only_id(agent: FunctionalWorkflowAgent, session: AgentSession) -> str:
    """The published id of the one request pending on ``session`` (unique to its pause)."""
    (request_id,) = agent.pending_requests_for(session)
    return request_id


async def run(agent: FunctionalWorkflowAgent, message: Any, *, stream: bool, **kwargs: Any) -> AgentResponse:
    if stream:
        return await agent.run(message, stream=True, **kwargs).get_final_response()
    return await agent.run(message, **kwargs)


def expected(response_type: Any, value: Any, wanted: Any) -> Any:
    return TypeAdapter(response_type).validate_python(value) if wanted is None and value is not None else wanted


@pytest.mark.parametrize(("response_type", "value", "wanted"), CASES, ids=IDS)
async def test_every_request_carries_the_schema_and_json_safe_data(response_type: Any, value: Any, wanted: Any) -> None:
    del value, wanted
    agent = asks(response_type).build().as_agent()
    paused = await agent.run("tea")
    call, request = paused.messages[-1].contents[:2]
    schema = TypeAdapter(response_type).json_schema()
    assert call.type == "function_call" and request.type == "function_approval_request"
    assert call.arguments["response_schema"] == schema == response_schema(response_type)  # type: ignore[index]
    assert request.additional_properties["response_schema"] == schema
    assert call.arguments["data"] == {"title": "tea", "body": "first", "tags": []}  # type: ignore[index]
    json.dumps(call.arguments)  # JSON-safe, as hosts send it


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("as_text", [False, True])
@pytest.mark.parametrize(("response_type", "value", "wanted"), CASES, ids=IDS)
async def test_a_json_answer_converts_to_the_response_type(
    response_type: Any, value: Any, wanted: Any, as_text: bool, stream: bool
) -> None:
    agent = asks(response_type).build().as_agent()
    session = agent.create_session()
    await agent.run("tea", session=session)
    result = json.dumps(value) if as_text and not isinstance(value, str) else value
    done = await run(agent, answer(only_id(agent, session), result), stream=stream, session=session)
    assert done.continuation_token is None
    want = expected(response_type, value, wanted)
    assert seen == [want] and type(seen[0]) is type(want)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_bool_request_still_takes_an_approval(stream: bool) -> None:
    agent = asks(bool).build().as_agent()
    paused = await agent.run("tea")
    reply = Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=False)])
    await run(agent, reply, stream=stream, continuation_token=paused.continuation_token)
    assert seen == [False]


WRONG: list[tuple[Any, Any, str]] = [
    (Draft, {"title": 5, "body": "b"}, "title: Input should be a valid string"),
    (Draft, {"body": "b"}, "title: Field required"),
    (list[Draft], [{"title": "a", "body": "1"}, {"title": "b"}], r"\[1\]\.body: Field required"),
    (Rating, {"stars": "many", "color": "red"}, "stars: Input should be a valid integer"),
    (Rating, {"stars": 1, "color": "blue"}, "color: Input should be 'red' or 'green'"),
    (Color, "blue", "Input should be 'red' or 'green'"),
    (Literal["ship", "hold"], "sink", "Input should be 'ship' or 'hold'"),
    (int, "three", "Input should be a valid integer"),
    (bool, "perhaps", "only true or false answers a bool request"),
    (Draft, None, "not a Draft"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("response_type", "value", "message"), WRONG)
async def test_a_wrong_shape_names_the_field_and_keeps_the_pause(
    response_type: Any, value: Any, message: str, stream: bool
) -> None:
    agent = asks(response_type).build().as_agent()
    session = agent.create_session()
    paused = await agent.run("tea", session=session)
    state = json.dumps(session.to_dict(), sort_keys=True)
    request_id = only_id(agent, session)
    with pytest.raises(ResponseMismatchError, match=message) as info:
        agent.run(answer(request_id, value), session=session, stream=stream)  # refused at the call site
    assert repr(request_id) in str(info.value)
    assert paused.continuation_token is not None
    assert paused.continuation_token["token"] not in str(info.value)
    assert json.dumps(session.to_dict(), sort_keys=True) == state  # the session is exactly as it was
    assert core_ids(agent.pending_requests_for(session)) == {"auto::0"}
    assert seen == []
    good = {Draft: {"title": "t", "body": "b"}, Rating: {"stars": 1, "color": "red"}, Color: "red"}
    fixed = good.get(response_type, {"title": "t", "body": "b"} if response_type == list[Draft] else None)
    fixed = [fixed] if response_type == list[Draft] else fixed
    fixed = {Literal["ship", "hold"]: "ship", int: 3, bool: True}.get(response_type, fixed)
    done = await run(agent, answer(request_id, fixed), stream=stream, session=session)
    assert done.continuation_token is None and len(seen) == 1  # the same token still resumes it, once


@workflow(name="two_typed_rounds")
async def two_typed_rounds(topic: str, ctx: RunContext) -> str:
    color = await ctx.request_info({"topic": topic}, response_type=Color)
    draft = await ctx.request_info({"color": color.value}, response_type=Draft)
    seen.append((color, draft))
    return f"{color.value}: {draft.title}"


@pytest.mark.parametrize("stream", [False, True])
async def test_earlier_answers_kept_as_json_in_the_session_convert_again_on_the_next_round(stream: bool) -> None:
    agent = two_typed_rounds.build().as_agent()
    session = agent.create_session()
    await agent.run("tea", session=session)
    again = await run(agent, answer(only_id(agent, session), "green"), stream=stream, session=session)
    assert again.continuation_token is not None
    restored = AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))  # the host serialises it
    second = only_id(agent, restored)
    assert core_id(second) == "auto::1"
    done = await run(agent, answer(second, {"title": "T", "body": "B"}), stream=stream, session=restored)
    assert done.text == "green: T"
    assert seen == [(Color.GREEN, Draft(title="T", body="B"))]


async def test_the_workflow_converts_json_answers_too() -> None:
    wf = two_typed_rounds.build()
    first = await wf.run("tea")
    second = await wf.run(responses={"auto::0": "red"}, continuation_token=first.continuation_token)
    with pytest.raises(ResponseMismatchError, match=r"'auto::1'.*title: Input should be a valid string"):
        wf.run(
            responses={"auto::0": "red", "auto::1": {"title": 1, "body": ""}},
            continuation_token=second.continuation_token,
        )
    done = await wf.run(
        responses={"auto::0": "red", "auto::1": {"title": "T", "body": ""}},
        continuation_token=second.continuation_token,
    )
    assert done.get_outputs() == ["red: T"]


def test_response_schema_of_a_type_pydantic_cannot_describe_is_none() -> None:
    assert response_schema(Content) is None
    assert response_schema(bool) == {"type": "boolean"}
    first = response_schema(Draft)
    assert first is not None
    first["title"] = "changed"
    assert response_schema(Draft) == TypeAdapter(Draft).json_schema()  # a fresh copy each time


def test_a_long_python_literal_answer_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bracketed non-JSON answer is read as a Python literal only while short: ``ast`` is slow on big text and
    runs on the event loop, so a near-1 MB answer stalled every other request for seconds (from a breaker run)."""
    from agent_framework_functional import _answers

    assert _answers.parse_json_text("[1, 2,]", list[int]) == [1, 2]  # short: core's repr of a list still reads
    monkeypatch.setattr(_answers.ast, "literal_eval", lambda _text: pytest.fail("a long literal was parsed"))
    long_text = "[" + "0," * 20_000 + "]"  # not JSON (trailing comma), 40 KB
    assert _answers.parse_json_text(long_text, list[int]) == long_text
    with pytest.raises(ResponseMismatchError):
        _answers.convert_answer(long_text, list[int], "auto::0")


@pytest.mark.parametrize("answer", ["yes", "off", "true", 1, 0.0, "1", "no"])
def test_a_bool_request_takes_only_true_or_false(answer: Any) -> None:
    """An approval is never inferred: pydantic's lax rules would read ``"yes"``, ``"off"``, ``1`` or ``0.0`` as a
    bool (a breaker run approved a deploy with ``"yes"``); only ``True`` / ``False`` answer a bool request."""
    from agent_framework_functional import _answers

    with pytest.raises(ResponseMismatchError, match="only true or false"):
        _answers.convert_answer(answer, bool, "auto::0")
    assert _answers.convert_answer(True, bool, "auto::0") is True
    assert _answers.convert_answer(_answers.parse_json_text("false", bool), bool, "auto::0") is False


@pytest.mark.parametrize("answer", ["yes", 1, "on"])
def test_a_bool_field_takes_only_true_or_false(answer: Any) -> None:
    """A model's bool field (an ``approved`` flag) follows the bool request's rule: ``"yes"`` approved a publish."""
    from agent_framework_functional import _answers

    class Review(BaseModel):
        title: str
        approved: bool
        checks: list[bool] = []

    with pytest.raises(ResponseMismatchError, match="approved: Input should be a valid boolean"):
        _answers.convert_answer({"title": "t", "approved": answer}, Review, "auto::0")
    with pytest.raises(ResponseMismatchError, match=r"checks\[0\]"):
        _answers.convert_answer({"title": "t", "approved": True, "checks": [answer]}, Review, "auto::0")
    kept = _answers.convert_answer({"title": "t", "approved": True, "checks": [False]}, Review, "auto::0")
    assert Review.model_validate(kept) == Review(title="t", approved=True, checks=[False])


# (response_type, an answer only lax rules would take, the field named, what answers it)
LAX_NUMBERS: list[tuple[Any, Any, str, Any]] = [
    (int, True, "Input should be a valid integer", 3),
    (int, "3", "Input should be a valid integer", 3),
    (int, " 3 ", "Input should be a valid integer", 3.0),  # a whole float is an integer in JSON Schema
    (float, "2.5", "Input should be a valid number", 2.5),
    (float, False, "Input should be a valid number", 2),
    (Optional[int], "3", "Input should be a valid integer", None),  # noqa: UP045
    (Rating, {"stars": "4", "color": "red"}, "stars: Input should be a valid integer", {"stars": 4, "color": "red"}),
    (Rating, {"stars": True, "color": "red"}, "stars: Input should be a valid integer", {"stars": 4.0, "color": "red"}),
    (list[int], [1, True], r"\[1\]: Input should be a valid integer", [1, 2]),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("response_type", "lax", "message", "good"), LAX_NUMBERS)
async def test_a_number_takes_no_bool_and_no_numeric_text_in_run(
    response_type: Any, lax: Any, message: str, good: Any, stream: bool
) -> None:
    """``run(responses=...)`` follows the published JSON Schema: core would take ``True`` for an ``int`` and pydantic
    ``"3"``; the refusal names the request and the field, and the pause still takes the right answer."""
    wf = asks(response_type).build()
    paused = await wf.run("tea")
    with pytest.raises(ResponseMismatchError, match=message) as info:
        wf.run(responses={"auto::0": lax}, continuation_token=paused.continuation_token, stream=stream)
    assert "'auto::0'" in str(info.value) and "still pending" in str(info.value)
    assert wf.pending_request_ids == {"auto::0"}
    done = await wf.run(responses={"auto::0": good}, continuation_token=paused.continuation_token)
    assert done.continuation_token is None
    assert seen == [TypeAdapter(response_type).validate_python(good)]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_hosts_json_string_never_answers_a_number_but_json_text_does(stream: bool) -> None:
    """A host's typed value ``"3"`` (a JSON string, marked by ``value_result``) is refused for an ``int``; a plain
    ``function_result`` is JSON text, as a text-only protocol carries it, so ``3`` there is the number 3."""
    from agent_framework_functional._answers import value_result

    agent = asks(int).build().as_agent()
    session = agent.create_session()
    await agent.run("tea", session=session)
    (request_id,) = agent.pending_requests_for(session)  # the published id: core's, "~", the pause's tag
    for value in ("3", " 3 ", "true"):
        reply = Message("tool", [value_result(request_id, value)])
        with pytest.raises(ResponseMismatchError, match=f"'{request_id}'.*valid integer"):
            agent.run(reply, session=session, stream=stream)
    for refused in (True, '"3"'):  # JSON true, and the JSON text of a string
        with pytest.raises(ResponseMismatchError, match="valid integer"):
            agent.run(answer(request_id, refused), session=session, stream=stream)
    assert set(agent.pending_requests_for(session)) == {request_id}
    done = await run(agent, answer(request_id, "3"), stream=stream, session=session)
    assert done.continuation_token is None and seen == [3]


@pytest.mark.parametrize("response_type", [float, Draft, list[float], "float | None"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
async def test_nan_and_infinity_answer_no_number(response_type: Any, bad: float) -> None:
    """NaN and the infinities are no JSON numbers (JSON Schema admits neither): refused in ``run(responses=...)``
    and through the agent (JSON text ``NaN`` / ``Infinity``), and the pause keeps taking a finite number."""
    if response_type == "float | None":
        response_type = float | None
    value: Any = (
        {"title": "t", "body": bad} if response_type is Draft else [1.0, bad] if response_type == list[float] else bad
    )
    wf = asks(response_type).build()
    paused = await wf.run("tea")
    with pytest.raises(ResponseMismatchError, match="NaN and Infinity are not JSON numbers"):
        wf.run(responses={"auto::0": value}, continuation_token=paused.continuation_token)
    assert wf.pending_request_ids == {"auto::0"}
    if response_type is float:
        agent = asks(float).build().as_agent()
        session = agent.create_session()
        await agent.run("tea", session=session)
        with pytest.raises(ResponseMismatchError, match="not JSON numbers"):
            agent.run(answer(only_id(agent, session), json.dumps(bad)), session=session)
        done = await agent.run(answer(only_id(agent, session), "2.5"), session=session)
        assert done.continuation_token is None and seen[-1] == 2.5
