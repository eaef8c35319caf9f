"""A session's conversation guards its pause on workers that hold neither conversation (SQLite and Redis).

A's session with B's token (argument, ``options``, or written into A's session state) used to resume B
inside A's session on a worker that held neither: A's session then held B's next token, A's pause
was orphaned and B's own session refused. Each record now names its conversation. A rejected call
that only the store can decide raises on the first ``await`` or ``__anext__``, before any update.
The in-memory counterparts are in tests/test_agent_conversation_guard.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentResponse, AgentSession, FileCheckpointStorage, Message
from durable_workflows import CHECKPOINT_TYPES, EFFECTS, approve_bool

from agent_framework_functional import (
    SESSION_STATE_KEY,
    ContinuationAuthorityError,
    ContinuationStore,
    FunctionalWorkflowAgent,
    PendingContinuationError,
    StaleContinuationError,
    continuation_token_hash,
)

MakeAgent = Callable[[], FunctionalWorkflowAgent]


@pytest.fixture
def make_agent(make_store: Callable[..., ContinuationStore], checkpoint_dir: Path) -> MakeAgent:
    """An agent as another process would build it: own store object and storage, shared database and folder."""

    def make() -> FunctionalWorkflowAgent:
        storage = FileCheckpointStorage(checkpoint_dir, allowed_checkpoint_types=CHECKPOINT_TYPES)
        return approve_bool.build(checkpoint_storage=storage, continuation_store=make_store()).as_agent()

    return make


def moved(session: AgentSession) -> AgentSession:
    return AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))


def snapshot(session: AgentSession) -> str:
    return json.dumps(session.to_dict(), sort_keys=True)


def approve(response: AgentResponse) -> Message:
    return Message("user", [response.user_input_requests[0].to_function_approval_response(approved=True)])


async def status(agent: FunctionalWorkflowAgent, token: Any) -> str | None:
    store = agent.workflow.continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    return record.status if record is not None else None


async def refused(call: Any, stream: bool) -> BaseException:
    """Run a call that must be refused; when streaming, nothing may be yielded before the error."""
    with pytest.raises(Exception) as info:
        if stream:
            await call.__anext__()  # the first update would come here: the error must come first
        else:
            await call
    return info.value


async def two_conversations(make_agent: MakeAgent) -> tuple[AgentSession, AgentResponse, AgentSession, AgentResponse]:
    owner_a, owner_b = make_agent(), make_agent()
    a, b = owner_a.create_session(), owner_b.create_session()
    paused_a = await owner_a.run("a", session=a)
    paused_b = await owner_b.run("b", session=b)
    return moved(a), paused_a, moved(b), paused_b


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("where", ["argument", "options", "session state"])
async def test_another_conversations_token_is_refused_on_a_worker_holding_neither(
    make_agent: MakeAgent, where: str, stream: bool
) -> None:
    a, paused_a, b, paused_b = await two_conversations(make_agent)
    worker = make_agent()
    token_b = paused_b.continuation_token
    kwargs: dict[str, Any] = {}
    if where == "argument":
        kwargs["continuation_token"] = token_b
    elif where == "options":
        kwargs["options"] = {"continuation_token": token_b}
    else:
        a.state[SESSION_STATE_KEY] = copy.deepcopy(b.state[SESSION_STATE_KEY])  # client state merged over A's
    before = snapshot(a)

    error = await refused(worker.run(approve(paused_b), session=a, stream=stream, **kwargs), stream)

    assert isinstance(error, ContinuationAuthorityError)
    assert snapshot(a) == before
    assert await status(worker, token_b) == "issued" and EFFECTS == []
    done_b = await make_agent().run(approve(paused_b), session=b)  # B still resumes, in its own session
    assert done_b.text == "shipped: draft about b (approved=True)"
    if where != "session state":
        done_a = await make_agent().run(approve(paused_a), session=a)
        assert done_a.text == "shipped: draft about a (approved=True)"
        assert EFFECTS == ["True", "True"]


@pytest.mark.parametrize("stream", [False, True])
async def test_forged_session_state_on_a_worker_resumes_nothing_and_the_honest_resume_works(
    make_agent: MakeAgent, stream: bool
) -> None:
    a, paused_a, _, _ = await two_conversations(make_agent)
    worker = make_agent()
    forged = moved(a)
    forged.state[SESSION_STATE_KEY] = {
        worker.id: {"continuation_token": {"kind": "functional_workflow", "version": "1", "token": "A" * 43}}
    }
    error = await refused(worker.run(approve(paused_a), session=forged, stream=stream), stream)
    assert isinstance(error, ContinuationAuthorityError)
    assert await status(worker, paused_a.continuation_token) == "issued" and EFFECTS == []
    done = await worker.run(approve(paused_a), session=a)
    assert done.text == "shipped: draft about a (approved=True)" and EFFECTS == ["True"]


@pytest.mark.parametrize("stream", [False, True])
async def test_text_on_a_live_remote_pause_conflicts_before_any_update(make_agent: MakeAgent, stream: bool) -> None:
    a, paused_a, _, _ = await two_conversations(make_agent)
    worker = make_agent()
    before = snapshot(a)
    call = worker.run("coffee", session=a, stream=stream)  # needs the store: decided on the first await
    error = await refused(call, stream)
    assert isinstance(error, PendingContinuationError) and "pending" in str(error)
    assert snapshot(a) == before and await status(worker, paused_a.continuation_token) == "issued"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_spent_session_copy_on_a_worker_gets_its_own_error_and_new_text_starts_fresh(
    make_agent: MakeAgent, stream: bool
) -> None:
    owner = make_agent()
    session = owner.create_session()
    paused = await owner.run("a", session=session)
    old = moved(session)
    await owner.run(approve(paused), session=session)  # spent by the owner
    worker = make_agent()
    before = snapshot(old)

    error = await refused(worker.run(approve(paused), session=old, stream=stream), stream)
    assert type(error) is StaleContinuationError and "pending" not in str(error)
    assert snapshot(old) == before and EFFECTS == ["True"]

    if stream:
        fresh = await worker.run("b", session=old, stream=True).get_final_response()
    else:
        fresh = await worker.run("b", session=old)
    assert fresh.continuation_token is not None
    assert old.state[SESSION_STATE_KEY][worker.id]["continuation_token"] == fresh.continuation_token
