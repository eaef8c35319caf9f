"""Typed answers on workers that never saw the pause (SQLite and Redis): JSON converts, a wrong shape spends nothing.

Round one asks for an enum, round two for ``list[Draft]``; each round is answered on another worker
from a session that travelled as JSON. The earlier answer, kept as JSON in the session, is converted
again with the type read back from the record (``durable_workflows:Tone``), and the pending one with
the type in the pause's checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentResponse, AgentSession, Content, FileCheckpointStorage, Message
from durable_workflows import CHECKPOINT_TYPES, EFFECTS, Draft, Tone, edit_rounds
from pydantic import TypeAdapter

from agent_framework_functional import (
    ContinuationStore,
    FunctionalWorkflowAgent,
    ResponseMismatchError,
    continuation_token_hash,
)


@pytest.fixture
def make_agent(
    make_store: Callable[..., ContinuationStore], checkpoint_dir: Path
) -> Callable[[], FunctionalWorkflowAgent]:
    """An agent as another process would build it: own store object and storage, shared database and folder."""

    def make() -> FunctionalWorkflowAgent:
        storage = FileCheckpointStorage(checkpoint_dir, allowed_checkpoint_types=CHECKPOINT_TYPES)
        return edit_rounds.build(checkpoint_storage=storage, continuation_store=make_store()).as_agent()

    return make


def moved(session: AgentSession) -> AgentSession:
    return AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))


def result(call_id: str, value: Any) -> Message:
    return Message("tool", [Content.from_function_result(call_id=call_id, result=value)])


async def run(agent: FunctionalWorkflowAgent, message: Message, session: AgentSession, stream: bool) -> AgentResponse:
    if stream:
        return await agent.run(message, session=session, stream=True).get_final_response()
    return await agent.run(message, session=session)


async def refused(agent: FunctionalWorkflowAgent, message: Message, session: AgentSession, stream: bool) -> str:
    """The error of a refused remote resume: raised on the first await (or the first ``__anext__``), nothing yielded."""
    with pytest.raises(ResponseMismatchError) as info:
        if stream:
            stream_ = agent.run(message, session=session, stream=True)
            await stream_.__anext__()
        else:
            await agent.run(message, session=session)
    return str(info.value)


async def status(store: ContinuationStore | None, token: Any) -> str | None:
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    return record.status if record is not None else None


@pytest.mark.parametrize("stream", [False, True])
async def test_json_answers_convert_on_other_workers_and_a_wrong_shape_spends_nothing(
    make_agent: Callable[[], FunctionalWorkflowAgent], stream: bool
) -> None:
    owner = make_agent()
    session = owner.create_session()
    first = await owner.run("tea", session=session)
    call = first.messages[-1].contents[0]
    assert call.arguments["response_schema"] == TypeAdapter(Tone).json_schema()  # type: ignore[index]

    second_worker = make_agent()
    copy = moved(session)
    before = json.dumps(copy.to_dict(), sort_keys=True)
    message = await refused(second_worker, result(call.call_id, "loud"), copy, stream)  # the id this pause published
    assert repr(call.call_id) in message and "Input should be 'formal' or 'casual'" in message
    assert json.dumps(copy.to_dict(), sort_keys=True) == before
    assert await status(second_worker.workflow.continuation_store, first.continuation_token) == "issued"

    second = await run(second_worker, result(call.call_id, "formal"), copy, stream)
    assert second.continuation_token is not None
    request = second.messages[-1].contents[0]
    assert request.arguments["response_schema"] == TypeAdapter(list[Draft]).json_schema()  # type: ignore[index]
    assert request.arguments["data"] == [{"title": "draft about tea", "body": "formal"}]  # type: ignore[index]

    third_worker = make_agent()  # holds neither round: the Tone answer comes back from the session as JSON
    last = moved(copy)
    before = json.dumps(last.to_dict(), sort_keys=True)
    wrong = result(request.call_id, json.dumps([{"title": 5, "body": "x"}]))
    message = await refused(third_worker, wrong, last, stream)
    assert repr(request.call_id) in message and "[0].title: Input should be a valid string" in message
    assert second.continuation_token["token"] not in message
    assert json.dumps(last.to_dict(), sort_keys=True) == before
    assert await status(third_worker.workflow.continuation_store, second.continuation_token) == "issued"
    assert EFFECTS == []

    edited = [{"title": "Tea, edited", "body": "b"}, {"title": "Second", "body": "c"}]
    done = await run(third_worker, result(request.call_id, json.dumps(edited)), last, stream)
    assert done.text == "formal: Tea, edited (Draft), Second (Draft)"
    assert EFFECTS == ["formal:['Tea, edited', 'Second']"]
    assert await status(third_worker.workflow.continuation_store, second.continuation_token) == "claimed"


async def test_explicit_json_responses_convert_on_another_worker(
    make_agent: Callable[[], FunctionalWorkflowAgent],
) -> None:
    owner = make_agent()
    first = await owner.workflow.run("tea")
    second = await make_agent().workflow.run(
        responses={"auto::0": "casual"}, continuation_token=first.continuation_token
    )
    worker = make_agent().workflow
    answers = {"auto::0": "casual", "auto::1": [{"title": "T", "body": "B"}]}
    with pytest.raises(ResponseMismatchError, match=r"'auto::0'.*Input should be 'formal' or 'casual'"):
        await worker.run(responses={**answers, "auto::0": "rude"}, continuation_token=second.continuation_token)
    done = await worker.run(responses=answers, continuation_token=second.continuation_token)
    assert done.get_outputs() == ["casual: T (Draft)"]
    assert EFFECTS == ["casual:['T']"]
