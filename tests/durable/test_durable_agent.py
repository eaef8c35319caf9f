"""Chat-native resume across processes: the agent answers a pause it never saw, through the store.

Each agent below stands for one process: its own workflow instance, its own store object (its own
database connection or Redis client) and its own ``FileCheckpointStorage`` object, sharing only the
database and the checkpoint folder. Sessions travel between them as JSON (``to_dict`` ->
``json`` -> ``AgentSession.from_dict``). Real subprocesses are in test_durable_agent_processes.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentResponse, AgentSession, Content, FileCheckpointStorage, Message
from durable_workflows import CHECKPOINT_TYPES, EFFECTS, approval, approve_bool, ask_rating, ask_verdict

from agent_framework_functional import (
    ContinuationAuthorityError,
    ContinuationStore,
    FunctionalWorkflowAgent,
    FunctionalWorkflowDefinition,
    PendingContinuationError,
    continuation_token_hash,
)
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE
from agent_framework_functional._session import SESSION_STATE_KEY

MakeAgent = Callable[..., FunctionalWorkflowAgent]


@pytest.fixture
def make_agent(make_store: Callable[..., ContinuationStore], checkpoint_dir: Path) -> MakeAgent:
    """Build an agent as a separate process would: own store object and storage, shared database and folder."""

    def make(definition: FunctionalWorkflowDefinition = approve_bool) -> FunctionalWorkflowAgent:
        storage = FileCheckpointStorage(checkpoint_dir, allowed_checkpoint_types=CHECKPOINT_TYPES)
        return definition.build(checkpoint_storage=storage, continuation_store=make_store()).as_agent()

    return make


def round_trip(session: AgentSession) -> AgentSession:
    return AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))


def stored_token(session: AgentSession, agent: FunctionalWorkflowAgent) -> Any:
    return session.state.get(SESSION_STATE_KEY, {}).get(agent.id, {}).get("continuation_token")


def approval_message(paused: AgentResponse, approved: bool) -> Message:
    request = paused.user_input_requests[0]
    return Message("user", [request.to_function_approval_response(approved=approved)])


def result_message(call_id: str, result: Any) -> Message:
    return Message("tool", [Content.from_function_result(call_id=call_id, result=result)])


async def status(agent: FunctionalWorkflowAgent, token: Any) -> str | None:
    store = agent.workflow.continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    return record.status if record is not None else None


async def pause(agent: FunctionalWorkflowAgent, session: AgentSession | None = None) -> AgentResponse:
    paused = await agent.run("tea", session=session)
    assert paused.continuation_token is not None
    return paused


# ------------------------------------------------------------------------------ approval (bool)


@pytest.mark.parametrize("stream", [False, True])
async def test_approval_resumes_on_another_instance_with_a_restored_session(
    make_agent: MakeAgent, stream: bool
) -> None:
    owner = make_agent()
    owner_session = owner.create_session()
    paused = await pause(owner, owner_session)
    token = paused.continuation_token
    worker = make_agent()
    worker_session = round_trip(owner_session)
    assert stored_token(worker_session, worker) == token
    assert not worker.workflow.has_pending_continuation  # the worker never saw the pause

    if stream:
        updates = [u async for u in worker.run(approval_message(paused, True), session=worker_session, stream=True)]
        done = AgentResponse.from_updates(updates)
    else:
        done = await worker.run(approval_message(paused, True), session=worker_session)

    assert done.text == "shipped: draft about tea (approved=True)"
    assert done.continuation_token is None
    assert EFFECTS == ["True"]  # the resumed code ran once, with the approval mapped to bool
    assert stored_token(worker_session, worker) is None  # spent: removed from the session
    assert await status(worker, token) == "claimed"
    assert not worker.workflow.is_running


@pytest.mark.parametrize("source", ["argument", "options"])
async def test_approval_resumes_with_the_token_from_the_argument_or_options(make_agent: MakeAgent, source: str) -> None:
    owner = make_agent()
    paused = await pause(owner)
    worker = make_agent()
    token = json.loads(json.dumps(paused.continuation_token))
    message = approval_message(paused, False)

    if source == "argument":
        done = await worker.run(message, continuation_token=token)
    else:
        done = await worker.run(message, options={"continuation_token": token})

    assert done.text == "shipped: draft about tea (approved=False)"
    assert EFFECTS == ["False"]


async def test_replay_on_either_instance_gets_the_authority_error(make_agent: MakeAgent) -> None:
    owner = make_agent()
    owner_session = owner.create_session()
    paused = await pause(owner, owner_session)
    worker = make_agent()
    worker_session = round_trip(owner_session)
    await worker.run(approval_message(paused, True), session=worker_session)

    # The worker's session no longer holds the token; with the token itself it is rejected by the store.
    with pytest.raises(ContinuationAuthorityError) as on_worker:
        await worker.run(approval_message(paused, True), continuation_token=paused.continuation_token)
    # The owner still holds its (now stale) copy in memory and in its session: the store's claim rejects it.
    with pytest.raises(ContinuationAuthorityError) as on_owner:
        await owner.run(approval_message(paused, True), session=owner_session)
    assert str(on_worker.value) == str(on_owner.value) == AUTHORITY_ERROR_MESSAGE
    assert EFFECTS == ["True"]  # exactly once
    assert stored_token(owner_session, owner) is None  # the owner's session dropped the spent token
    assert owner.pending_requests == {}
    assert not owner.workflow.is_running and not worker.workflow.is_running


async def test_a_fresh_session_without_a_token_is_rejected_on_the_other_instance(make_agent: MakeAgent) -> None:
    owner = make_agent()
    paused = await pause(owner, owner.create_session())
    worker = make_agent()

    with pytest.raises(ContinuationAuthorityError):
        worker.run(approval_message(paused, True), session=worker.create_session())  # no token: raises at the call

    assert EFFECTS == []
    assert await status(worker, paused.continuation_token) == "issued"


# ------------------------------------------------------------------------------ function results (structured)


@pytest.mark.parametrize(
    ("definition", "result", "expected"),
    [
        (ask_verdict, {"approved": True, "note": "ship"}, "Verdict: Verdict(approved=True, note='ship')"),
        (ask_rating, '{"stars": 5, "comment": "great"}', "Rating: Rating(stars=5, comment='great')"),
    ],
    ids=["pydantic", "dataclass"],
)
async def test_function_result_is_converted_on_another_instance(
    make_agent: MakeAgent, definition: FunctionalWorkflowDefinition, result: Any, expected: str
) -> None:
    owner = make_agent(definition)
    owner_session = owner.create_session()
    paused = await pause(owner, owner_session)
    request_id = paused.user_input_requests[0].id
    worker = make_agent(definition)
    worker_session = round_trip(owner_session)

    done = await worker.run(result_message(request_id, result), session=worker_session)

    assert done.text == expected
    assert len(EFFECTS) == 1
    assert stored_token(worker_session, worker) is None
    with pytest.raises(ContinuationAuthorityError):
        await owner.run(result_message(request_id, result), session=owner_session)
    assert len(EFFECTS) == 1


# ------------------------------------------------------------------------------ wrong answers keep the token


async def _assert_untouched(worker: FunctionalWorkflowAgent, session: AgentSession, token: Any) -> None:
    assert await status(worker, token) == "issued"
    assert stored_token(session, worker) == token
    assert not worker.workflow.is_running and not worker.workflow.has_pending_continuation
    assert EFFECTS == []


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (lambda paused, rid: approval_message(paused, True), "expects a Verdict"),
        (lambda paused, rid: result_message("not-a-request", {"approved": True, "note": "x"}), "does not answer"),
        (lambda paused, rid: result_message(rid, "not json"), "cannot be converted to Verdict"),
        (lambda paused, rid: result_message(rid, {"approved": "maybe"}), "cannot be converted to Verdict"),
    ],
    ids=["approval-for-a-model", "unknown-call-id", "not-json", "invalid-model"],
)
async def test_a_wrong_answer_on_another_instance_is_rejected_and_spends_nothing(
    make_agent: MakeAgent, message: Callable[[AgentResponse, str], Message], match: str
) -> None:
    owner = make_agent(ask_verdict)
    owner_session = owner.create_session()
    paused = await pause(owner, owner_session)
    request_id = paused.user_input_requests[0].id
    worker = make_agent(ask_verdict)
    session = round_trip(owner_session)

    call = worker.run(message(paused, request_id), session=session)  # not held here: checked on the first await
    with pytest.raises(ValueError, match=match) as caught:
        await call

    assert not isinstance(caught.value, ContinuationAuthorityError)
    assert "still pending" in str(caught.value)
    await _assert_untouched(worker, session, paused.continuation_token)
    done = await worker.run(result_message(request_id, {"approved": True, "note": "ok"}), session=session)
    assert done.text == "Verdict: Verdict(approved=True, note='ok')"


async def test_a_wrong_answer_surfaces_on_the_first_iteration_when_streaming(make_agent: MakeAgent) -> None:
    owner = make_agent(ask_verdict)
    owner_session = owner.create_session()
    paused = await pause(owner, owner_session)
    worker = make_agent(ask_verdict)
    session = round_trip(owner_session)

    stream = worker.run(approval_message(paused, True), session=session, stream=True)
    with pytest.raises(ValueError, match="expects a Verdict"):
        async for _ in stream:
            pass

    await _assert_untouched(worker, session, paused.continuation_token)


async def test_authority_is_checked_before_the_answers(make_agent: MakeAgent) -> None:
    owner = make_agent(ask_verdict)
    paused = await pause(owner)
    worker = make_agent(ask_verdict)
    token = dict(paused.continuation_token or {})
    forged = {**token, "token": token["token"][::-1]}  # well shaped, unknown to the store
    bad_answer = result_message("not-a-request", "not json")

    with pytest.raises(ContinuationAuthorityError) as caught:
        await worker.run(bad_answer, continuation_token=forged)
    assert str(caught.value) == AUTHORITY_ERROR_MESSAGE
    with pytest.raises(ContinuationAuthorityError):
        worker.run(bad_answer, continuation_token={"kind": "functional_workflow"})  # malformed: at the call
    assert await status(worker, token) == "issued"
    assert EFFECTS == []


async def test_a_token_of_another_workflow_is_rejected_by_the_store(make_agent: MakeAgent) -> None:
    owner = make_agent(approval)  # same store and folder, another workflow
    paused = await owner.run("tea")
    worker = make_agent(approve_bool)

    with pytest.raises(ContinuationAuthorityError):
        await worker.run(result_message("auto::0", "true"), continuation_token=paused.continuation_token)
    assert await status(worker, paused.continuation_token) == "issued"


async def test_a_pending_pause_on_the_other_instance_is_a_conflict_and_both_stay(make_agent: MakeAgent) -> None:
    owner = make_agent()
    paused = await pause(owner)
    worker = make_agent()
    own = await pause(worker)  # the worker holds a pause of its own

    with pytest.raises(PendingContinuationError):
        await worker.run(approval_message(paused, True), continuation_token=paused.continuation_token)

    assert await status(worker, paused.continuation_token) == "issued"
    assert worker.workflow.verify_continuation_token(own.continuation_token)  # its own pause is intact
    done = await owner.run(approval_message(paused, True), continuation_token=paused.continuation_token)
    assert done.text == "shipped: draft about tea (approved=True)"


# ------------------------------------------------------------------------------ session bookkeeping


async def test_abandoning_on_another_instance_clears_the_session_and_the_owner_is_rejected(
    make_agent: MakeAgent,
) -> None:
    owner = make_agent()
    owner_session = owner.create_session()
    paused = await pause(owner, owner_session)
    worker = make_agent()
    session = round_trip(owner_session)

    await worker.abandon_continuation_async(session=session)

    assert stored_token(session, worker) is None
    assert await status(worker, paused.continuation_token) == "abandoned"
    with pytest.raises(ContinuationAuthorityError):
        await owner.run(approval_message(paused, True), session=owner_session)
    assert EFFECTS == []


async def test_a_session_keeps_a_remote_token_while_the_store_accepts_it(make_agent: MakeAgent) -> None:
    owner = make_agent()
    owner_session = owner.create_session()
    paused = await pause(owner, owner_session)
    token = paused.continuation_token
    other = make_agent()
    other_paused = await pause(other, other.create_session())
    checkpoint_id = await _pause_checkpoint(other, other_paused)  # another conversation's pause
    worker = make_agent()
    session = round_trip(owner_session)

    # A run with the session that ends without a token and never touched the pause (a host-side
    # checkpoint restore) keeps the token: the store still accepts it, though this process never held it.
    await worker.run(responses={"auto::0": False}, checkpoint_id=checkpoint_id, session=session)
    assert stored_token(session, worker) == token

    # Once another instance spends it, the next such run removes it from the session.
    await make_agent().run(approval_message(paused, True), continuation_token=token)
    await worker.run(responses={"auto::0": False}, checkpoint_id=checkpoint_id, session=session)
    assert stored_token(session, worker) is None
    assert EFFECTS == ["False", "True", "False"]


async def test_restoring_the_pause_checkpoint_supersedes_the_session_token(make_agent: MakeAgent) -> None:
    owner = make_agent()
    owner_session = owner.create_session()
    paused = await pause(owner, owner_session)
    checkpoint_id = await _pause_checkpoint(owner, paused)
    worker = make_agent()
    session = round_trip(owner_session)

    await worker.run(responses={"auto::0": False}, checkpoint_id=checkpoint_id, session=session)
    assert stored_token(session, worker) is None  # the restore superseded it in the store
    with pytest.raises(ContinuationAuthorityError):
        await owner.run(approval_message(paused, True), session=owner_session)
    assert EFFECTS == ["False"]  # the pause ran once


async def _pause_checkpoint(agent: FunctionalWorkflowAgent, paused: AgentResponse) -> str:
    store = agent.workflow.continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(paused.continuation_token or {}))
    assert record is not None
    return record.checkpoint_id
