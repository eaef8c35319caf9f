"""Typed answers through ``responses_app`` with the official ``openai`` client: bool, str and a pydantic model.

The agreed wire contract: a pause is a ``function_call`` item (``call_id`` = request id, ``arguments`` with
the request ``data``, ``response_type`` and the answer's JSON Schema ``response_schema``) plus an
``mcp_approval_request`` item (``id`` = request id, the same arguments). A ``bool`` request takes an
``mcp_approval_response``; any request takes a ``function_call_output`` whose ``output`` is the JSON text of
the value. A wrong shape is a 400 naming the field, and the pause stays answerable.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hosting_support import DEPLOYS, ROOT, deployer, reviewer, run_sample_self_check
from openai import AsyncOpenAI, BadRequestError, ConflictError
from pydantic import BaseModel
from request_ids import core_id

from agent_framework_functional import RunContext, workflow
from agent_framework_functional.hosting import responses_app

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out


class Draft(BaseModel):
    title: str
    body: str
    tags: list[str] = []


class Review(BaseModel):
    approved: bool
    draft: Draft


@workflow(name="editor", description="Asks for a review with edits of a draft, then publishes it.")
async def editor(topic: str, ctx: RunContext) -> str:
    """One ``Review`` request whose data is the ``Draft``; the answer's draft is what gets published."""
    review = await ctx.request_info(Draft(title=topic, body=f"About {topic}.", tags=[topic]), response_type=Review)
    if not review.approved:
        return f"dropped: {topic}"
    return f"published: {review.draft.title} / {review.draft.body} / {','.join(review.draft.tags)}"


@pytest.fixture
async def openai_client(serve: Any) -> AsyncIterator[Callable[[Any], AsyncOpenAI]]:
    """Make an ``openai`` client of ``responses_app`` over a fresh agent of a definition (closed afterwards)."""
    clients: list[AsyncOpenAI] = []

    def make(definition: Any) -> AsyncOpenAI:
        app = responses_app(definition.build().as_agent(name=definition.name))
        clients.append(AsyncOpenAI(base_url=f"{serve(app).base}/v1", api_key="unused", max_retries=0))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()


def output(call_id: str, value: Any) -> list[dict[str, Any]]:
    return [{"type": "function_call_output", "call_id": call_id, "output": json.dumps(value)}]


def pause_items(response: Any) -> tuple[Any, Any]:
    """The pause's ``function_call`` and ``mcp_approval_request`` items (one request)."""
    (call,) = [item for item in response.output if item.type == "function_call"]
    (approval,) = [item for item in response.output if item.type == "mcp_approval_request"]
    assert call.call_id == approval.id and core_id(approval.id) == "auto::0"  # the id published for this pause
    assert call.name == approval.name == "request_info"
    return call, approval


@pytest.mark.parametrize("stream", [False, True])
async def test_bool_request_approved_with_the_openai_client(openai_client: Any, stream: bool) -> None:
    client = openai_client(deployer)
    target = f"openai bool {stream}"
    paused = await client.responses.create(model="deployer", input=target)
    assert paused.status == "completed"
    _, approval = pause_items(paused)
    assert json.loads(approval.arguments)["data"] == {"action": "deploy", "target": target}
    answer = [{"type": "mcp_approval_response", "approval_request_id": approval.id, "approve": True}]
    if not stream:
        done = await client.responses.create(model="deployer", previous_response_id=paused.id, input=answer)
        assert done.output_text == f"deployed: {target}"
    else:
        events = await client.responses.create(
            model="deployer", previous_response_id=paused.id, input=answer, stream=True
        )
        kinds = [event.type async for event in events]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert "response.output_text.delta" in kinds
    assert DEPLOYS[target] == 1


async def test_bool_request_answered_with_a_function_call_output(openai_client: Any) -> None:
    client = openai_client(deployer)
    paused = await client.responses.create(model="deployer", input="openai output false")
    call, _ = pause_items(paused)
    with pytest.raises(BadRequestError) as refused:  # "maybe" is no bool; the pause stays
        await client.responses.create(model="x", previous_response_id=paused.id, input=output(call.call_id, "maybe"))
    assert refused.value.body["code"] == "answer_mismatch"  # type: ignore[index]
    done = await client.responses.create(model="x", previous_response_id=paused.id, input=output(call.call_id, False))
    assert done.output_text == "not deployed: openai output false"


@pytest.mark.parametrize("answer", ["JSON text", "plain text"])
async def test_str_request_answered_with_a_function_call_output(openai_client: Any, answer: str) -> None:
    client = openai_client(reviewer)
    paused = await client.responses.create(model="reviewer", input="the post")
    call, _ = pause_items(paused)
    assert json.loads(call.arguments)["response_type"] == "str"
    text = json.dumps("ship it") if answer == "JSON text" else "ship it"
    item = [{"type": "function_call_output", "call_id": call.call_id, "output": text}]
    done = await client.responses.create(model="reviewer", previous_response_id=paused.id, input=item)
    assert done.output_text == "published: the post (ship it)"


async def test_approve_with_edits_a_pydantic_answer(openai_client: Any) -> None:
    """The reviewer edits fields of the draft and approves: the workflow receives a ``Review``."""
    client = openai_client(editor)
    paused = await client.responses.create(model="editor", input="tea", conversation="conv_edits")
    call, _ = pause_items(paused)
    request = json.loads(call.arguments)
    assert request["data"] == {"title": "tea", "body": "About tea.", "tags": ["tea"]}
    edited = {"approved": True, "draft": {**request["data"], "title": "Tea, brewed right", "tags": ["tea", "howto"]}}
    done = await client.responses.create(model="editor", conversation="conv_edits", input=output(call.call_id, edited))
    assert done.output_text == "published: Tea, brewed right / About tea. / tea,howto"


async def test_a_wrong_shape_is_a_400_naming_the_field_and_keeps_the_pause(openai_client: Any) -> None:
    client = openai_client(editor)
    paused = await client.responses.create(model="editor", input="milk")
    call, _ = pause_items(paused)
    wrong = {"approved": True, "draft": {"title": "Milk"}}  # no body
    for stream in (False, True):
        with pytest.raises(BadRequestError) as refused:
            await client.responses.create(
                model="editor", previous_response_id=paused.id, input=output(call.call_id, wrong), stream=stream
            )
        error: dict[str, Any] = refused.value.body  # type: ignore[assignment]
        assert (error["code"], error["param"]) == ("answer_mismatch", "input[0].output")
        assert "draft.body" in error["message"]  # the field at fault
    right = {"approved": False, "draft": {"title": "Milk", "body": "b"}}
    done = await client.responses.create(
        model="editor", previous_response_id=paused.id, input=output(call.call_id, right)
    )
    assert done.output_text == "dropped: milk"


async def test_requests_carry_the_answer_schema_to_the_client(openai_client: Any) -> None:
    """Both items of the pause carry ``response_schema``: enough for a client to build the answer's form."""
    client = openai_client(editor)
    paused = await client.responses.create(model="editor", input="schema")
    call, approval = pause_items(paused)
    for item in (call, approval):
        schema = json.loads(item.arguments)["response_schema"]
        assert schema["title"] == "Review"
        assert set(schema["required"]) == {"approved", "draft"}
    bool_call, _ = pause_items(await openai_client(deployer).responses.create(model="d", input="schema b"))
    assert json.loads(bool_call.arguments)["response_schema"] == {"type": "boolean"}


async def test_the_openai_client_sees_409_with_its_retry_advice(openai_client: Any) -> None:
    """A pending request makes new text a 409 that says not to retry (the openai client retries 409s by default)."""
    client = openai_client(deployer)
    await client.responses.create(model="d", input="busy with approval", conversation="conv_openai_409")
    with pytest.raises(ConflictError) as refused:
        await client.responses.create(model="d", input="other", conversation="conv_openai_409")
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert refused.value.body["code"] == "pending_request"  # type: ignore[index]


def test_review_with_edits_sample_self_check() -> None:
    out = run_sample_self_check(ROOT / "samples" / "review_with_edits.py")
    assert "responses: published: Tea, brewed right | A first draft about tea. | tags=tea,howto" in out
    assert "Responses refused a wrong shape: 400" in out
    assert "self-check passed: responses" in out
