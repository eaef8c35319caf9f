"""New text on a restored session whose token is still issued, on a worker that does not
hold the pause, is a pending conflict (it used to start a fresh run and overwrite the session's token)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_framework import AgentSession, FileCheckpointStorage, Message
from durable_workflows import CHECKPOINT_TYPES, EFFECTS, approve_bool

from agent_framework_functional import ContinuationStore, FunctionalWorkflowAgent, PendingContinuationError
from agent_framework_functional._session import SESSION_STATE_KEY


@pytest.fixture
def make_agent(
    make_store: Callable[..., ContinuationStore], checkpoint_dir: Path
) -> Callable[[], FunctionalWorkflowAgent]:
    def make() -> FunctionalWorkflowAgent:
        storage = FileCheckpointStorage(checkpoint_dir, allowed_checkpoint_types=CHECKPOINT_TYPES)
        return approve_bool.build(checkpoint_storage=storage, continuation_store=make_store()).as_agent()

    return make


def restored(session: AgentSession) -> AgentSession:
    return AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))


async def test_new_text_on_a_live_session_token_elsewhere_is_a_conflict_and_keeps_the_token(
    make_agent: Callable[[], FunctionalWorkflowAgent],
) -> None:
    owner = make_agent()
    session = owner.create_session()
    paused = await owner.run("tea", session=session)
    worker = make_agent()
    copy = restored(session)

    with pytest.raises(PendingContinuationError, match="function_approval_response"):
        await worker.run("coffee", session=copy)  # checked in the store on the first await

    assert copy.state[SESSION_STATE_KEY][worker.id]["continuation_token"] == paused.continuation_token
    answer = paused.user_input_requests[0].to_function_approval_response(approved=True)
    done = await worker.run(Message("user", [answer]), session=copy)
    assert done.text == "shipped: draft about tea (approved=True)"
    assert EFFECTS == ["True"]


async def test_new_text_on_a_spent_session_token_starts_a_fresh_run(
    make_agent: Callable[[], FunctionalWorkflowAgent],
) -> None:
    owner = make_agent()
    session = owner.create_session()
    paused = await owner.run("tea", session=session)
    stale = restored(session)
    answer = paused.user_input_requests[0].to_function_approval_response(approved=True)
    await owner.run(Message("user", [answer]), session=session)  # spent by the owner

    worker = make_agent()
    fresh = await worker.run("coffee", session=stale)
    assert fresh.continuation_token is not None and fresh.continuation_token != paused.continuation_token
    assert stale.state[SESSION_STATE_KEY][worker.id]["continuation_token"] == fresh.continuation_token


async def test_round_two_on_another_worker_needs_only_its_own_answer_with_the_session(
    make_store: Callable[..., ContinuationStore], checkpoint_dir: Path
) -> None:
    """Earlier rounds' answers travel in the session, across workers."""
    from durable_workflows import two_rounds

    def worker() -> FunctionalWorkflowAgent:
        storage = FileCheckpointStorage(checkpoint_dir, allowed_checkpoint_types=CHECKPOINT_TYPES)
        return two_rounds.build(checkpoint_storage=storage, continuation_store=make_store()).as_agent()

    first = worker()
    session = first.create_session()
    await first.run("tea", session=session)
    on_second = restored(session)  # the host hands the conversation to another worker
    round_two = await worker().run(responses={"auto::0": "one"}, session=on_second)
    assert round_two.continuation_token is not None
    on_third = restored(on_second)  # and round two to a third one
    done = await worker().run(responses={"auto::1": "two"}, session=on_third)  # only round two's answer
    assert done.text == "shipped: draft about tea [one] [two]"
