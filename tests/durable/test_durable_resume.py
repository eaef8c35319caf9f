"""Resume from any "process" exactly once; every in-memory contract holds across processes.

Each workflow instance below stands for one process: it has its own store object (its own database
connection or Redis client) and shares only the database and the checkpoint folder. Real processes
are in test_durable_processes.py.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage
from durable_workflows import EFFECTS, HOOKS, approval, approval_v2, other_approval, two_rounds

from agent_framework_functional import (
    ContinuationAuthorityError,
    ContinuationStore,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    PendingContinuationError,
    continuation_token_hash,
)
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE

Pause = tuple[FunctionalWorkflow, dict[str, Any], str]


@pytest.fixture
def build(
    make_store: Callable[..., ContinuationStore], storage: FileCheckpointStorage
) -> Callable[..., FunctionalWorkflow]:
    """Build an instance as a separate process would: own store object, shared database and checkpoints."""

    def make(definition: FunctionalWorkflowDefinition = approval, **store_options: Any) -> FunctionalWorkflow:
        return definition.build(checkpoint_storage=storage, continuation_store=make_store(**store_options))

    return make


async def _pause(wf: FunctionalWorkflow, topic: str = "tea") -> Pause:
    paused = await wf.run(topic)
    assert paused.continuation_token is not None
    return wf, dict(paused.continuation_token), paused.get_request_info_events()[0].request_id


async def _status(store: ContinuationStore, token: dict[str, Any]) -> str | None:
    record = await store.get(continuation_token_hash(token))
    return record.status if record is not None else None


async def test_another_process_resumes_a_pause_it_never_saw(build: Callable[..., FunctionalWorkflow]) -> None:
    _, token, request_id = await _pause(build())
    worker = build()
    assert not worker.has_pending_continuation
    done = await worker.run(responses={request_id: "approved"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea (approved)"]
    assert done.continuation_token is None
    assert EFFECTS == ["approved"]
    assert await _status(worker.continuation_store, token) == "claimed"  # type: ignore[arg-type]
    assert not worker.is_running and not worker.has_pending_continuation


async def test_replay_on_the_pausing_process_is_rejected_after_a_remote_resume(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    owner, token, request_id = await _pause(build())
    await build().run(responses={request_id: "approved"}, continuation_token=token)
    assert owner.has_pending_continuation  # the owner cannot know yet ...
    with pytest.raises(ContinuationAuthorityError) as info:
        await owner.run(responses={request_id: "again"}, continuation_token=token)
    assert str(info.value) == AUTHORITY_ERROR_MESSAGE
    assert EFFECTS == ["approved"]  # ... but its resume never reaches user code
    assert not owner.has_pending_continuation and not owner.is_running  # the stale local copy is dropped
    assert (await owner.run("coffee")).continuation_token is not None  # and the instance is free


async def test_in_memory_fast_path_claims_through_the_store(build: Callable[..., FunctionalWorkflow]) -> None:
    owner, token, request_id = await _pause(build())
    done = await owner.run(responses={request_id: "approved"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea (approved)"]
    assert await _status(owner.continuation_store, token) == "claimed"  # type: ignore[arg-type]
    with pytest.raises(ContinuationAuthorityError):
        await build().run(responses={request_id: "again"}, continuation_token=token)
    assert EFFECTS == ["approved"]


async def test_concurrent_resumes_in_one_process_run_once(build: Callable[..., FunctionalWorkflow]) -> None:
    owner, token, request_id = await _pause(build())
    contenders = [owner, *(build() for _ in range(7))]
    outcomes = await asyncio.gather(
        *(wf.run(responses={request_id: f"w{i}"}, continuation_token=token) for i, wf in enumerate(contenders)),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(winners) == 1 and len(EFFECTS) == 1
    assert all(isinstance(o, ContinuationAuthorityError) and str(o) == AUTHORITY_ERROR_MESSAGE for o in losers)
    assert all(not wf.is_running for wf in contenders)


def _random_token() -> dict[str, Any]:
    return {"kind": "functional_workflow", "version": "1", "token": secrets.token_urlsafe(32)}


@pytest.mark.parametrize("case", ["unknown", "other_workflow", "other_version", "claimed", "abandoned"])
async def test_every_remote_authority_problem_is_the_same_error_and_changes_nothing(
    build: Callable[..., FunctionalWorkflow], case: str
) -> None:
    if case == "other_workflow":
        _, token, request_id = await _pause(build(other_approval))
    else:
        owner, token, request_id = await _pause(build())
    if case == "unknown":
        token = _random_token()
    elif case == "claimed":
        await owner.run(responses={request_id: "first"}, continuation_token=token)
    elif case == "abandoned":
        await owner.abandon_continuation_async(token)
    worker = build(approval_v2) if case == "other_version" else build()
    before = await _status(worker.continuation_store, token)  # type: ignore[arg-type]
    effects = list(EFFECTS)
    with pytest.raises(ContinuationAuthorityError) as info:
        await worker.run(responses={request_id: "x"}, continuation_token=token)
    assert str(info.value) == AUTHORITY_ERROR_MESSAGE
    assert effects == EFFECTS
    assert await _status(worker.continuation_store, token) == before  # type: ignore[arg-type]
    assert not worker.is_running and not worker.has_pending_continuation


@pytest.mark.parametrize(
    "bad",
    [None, "token", {"kind": "functional_workflow", "version": "1"}, {"kind": "x", "version": "1", "token": "y"}],
)
@pytest.mark.parametrize("stream", [False, True])
def test_malformed_token_is_rejected_synchronously(
    build: Callable[..., FunctionalWorkflow], bad: Any, stream: bool
) -> None:
    wf = build()
    with pytest.raises(ContinuationAuthorityError) as info:
        wf.run(responses={"auto::0": "x"}, continuation_token=bad, stream=stream)  # type: ignore[call-overload]
    assert str(info.value) == AUTHORITY_ERROR_MESSAGE
    assert not wf.is_running


async def test_well_shaped_unknown_token_is_rejected_inside_the_stream(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    wf = build()
    stream = wf.run(responses={"auto::0": "x"}, continuation_token=_random_token(), stream=True)
    assert wf.is_running  # accepted for the store lookup, which is asynchronous
    with pytest.raises(ContinuationAuthorityError):
        async for _ in stream:
            pass
    assert not wf.is_running


async def test_uncorrelated_responses_do_not_spend_the_token(build: Callable[..., FunctionalWorkflow]) -> None:
    _, token, request_id = await _pause(build())
    worker = build()
    with pytest.raises(ValueError, match="None of the responses answers a pending request") as info:
        await worker.run(responses={"not-a-request": "x"}, continuation_token=token)
    assert not isinstance(info.value, ContinuationAuthorityError)
    assert request_id in str(info.value)
    assert await _status(worker.continuation_store, token) == "issued"  # type: ignore[arg-type]
    done = await worker.run(responses={request_id: "approved"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea (approved)"]


@pytest.mark.parametrize("stream", [False, True])
async def test_remote_answer_of_the_wrong_type_does_not_spend_the_token(
    build: Callable[..., FunctionalWorkflow], stream: bool
) -> None:
    _, token, request_id = await _pause(build())
    worker = build()
    with pytest.raises(ValueError, match="not a str") as info:
        if stream:
            async for _ in worker.run(responses={request_id: 5}, continuation_token=token, stream=True):
                pass
        else:
            await worker.run(responses={request_id: 5}, continuation_token=token)
    assert "still pending" in str(info.value)
    assert await _status(worker.continuation_store, token) == "issued"  # type: ignore[arg-type]
    assert EFFECTS == []
    done = await worker.run(responses={request_id: "approved"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea (approved)"]


async def test_pending_conflict_on_the_resuming_process(build: Callable[..., FunctionalWorkflow]) -> None:
    _, token, request_id = await _pause(build())
    busy, own_token, _ = await _pause(build(), "coffee")
    with pytest.raises(PendingContinuationError):
        await busy.run(responses={request_id: "approved"}, continuation_token=token)
    assert await _status(busy.continuation_store, token) == "issued"  # type: ignore[arg-type]
    assert busy.has_pending_continuation  # its own pause is intact and still resumes
    done = await busy.run(responses={"auto::0": "ok"}, continuation_token=own_token)
    assert done.get_outputs() == ["shipped: draft about coffee (ok)"]


async def test_authority_is_checked_before_the_pending_conflict(build: Callable[..., FunctionalWorkflow]) -> None:
    busy, _, _ = await _pause(build())
    with pytest.raises(ContinuationAuthorityError):
        await busy.run(responses={"auto::0": "x"}, continuation_token=_random_token())
    assert busy.has_pending_continuation


@pytest.mark.parametrize("remote", [False, True])
async def test_the_store_claim_happens_before_resumed_user_code(
    build: Callable[..., FunctionalWorkflow], remote: bool
) -> None:
    owner, token, request_id = await _pause(build())
    seen: list[str | None] = []

    async def observe(_: Any) -> None:
        seen.append(await _status(owner.continuation_store, token))  # type: ignore[arg-type]

    HOOKS["after_answer"] = observe
    resumer = build() if remote else owner
    await resumer.run(responses={request_id: "approved"}, continuation_token=token)
    assert seen == ["claimed"]


async def test_rotation_across_processes(build: Callable[..., FunctionalWorkflow]) -> None:
    first, token1, _ = await _pause(build(two_rounds))
    second = build(two_rounds)
    paused = await second.run(responses={"auto::0": "one"}, continuation_token=token1)
    token2 = paused.continuation_token
    assert token2 is not None and token2["token"] != token1["token"]
    store = second.continuation_store
    assert store is not None
    assert await _status(store, token1) == "claimed"
    record2 = await store.get(continuation_token_hash(token2))
    assert record2 is not None and record2.status == "issued" and record2.pending_request_ids == ("auto::1",)
    third = build(two_rounds)
    done = await third.run(responses={"auto::0": "one", "auto::1": "two"}, continuation_token=token2)
    assert done.get_outputs() == ["shipped: draft about tea [one] [two]"]
    assert EFFECTS == ["one", "one", "two"]  # round one's code replays on the second resume (core's replay)
    with pytest.raises(ContinuationAuthorityError):
        await first.run(responses={"auto::0": "one"}, continuation_token=token1)


async def test_round_two_comes_back_to_the_worker_that_paused_round_one(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    first, token1, _ = await _pause(build(two_rounds))
    paused = await build(two_rounds).run(responses={"auto::0": "one"}, continuation_token=token1)
    token2 = paused.continuation_token
    assert token2 is not None
    # The first worker still holds round one in memory, but the store says it was claimed: that stale
    # copy is not a pending conflict, it is dropped, and round two resumes here.
    assert first.has_pending_continuation
    done = await first.run(responses={"auto::0": "one", "auto::1": "two"}, continuation_token=token2)
    assert done.get_outputs() == ["shipped: draft about tea [one] [two]"]
    assert not first.has_pending_continuation


async def test_a_live_local_pause_still_conflicts_with_a_remote_resume(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    _, other_token, other_request = await _pause(build())
    local, local_token, _ = await _pause(build())
    with pytest.raises(PendingContinuationError):
        await local.run(responses={other_request: "x"}, continuation_token=other_token)
    assert local.has_pending_continuation
    assert await _status(local.continuation_store, local_token) == "issued"  # type: ignore[arg-type]
    assert await _status(local.continuation_store, other_token) == "issued"  # type: ignore[arg-type]


async def test_agent_resumes_a_remote_pause(build: Callable[..., FunctionalWorkflow]) -> None:
    owner_agent = build().as_agent(name="owner")
    paused = await owner_agent.run("tea")
    assert paused.continuation_token is not None
    request_id = next(iter(owner_agent.pending_requests))
    worker_agent = build().as_agent(name="worker")
    response = await worker_agent.run(responses={request_id: "approved"}, continuation_token=paused.continuation_token)
    assert response.text == "shipped: draft about tea (approved)"
    assert response.continuation_token is None
    with pytest.raises(ContinuationAuthorityError):
        await owner_agent.run(responses={request_id: "again"}, continuation_token=paused.continuation_token)
    assert owner_agent.pending_requests == {}


async def test_remote_resume_streams(build: Callable[..., FunctionalWorkflow]) -> None:
    _, token, request_id = await _pause(build())
    stream = build().run(responses={request_id: "approved"}, continuation_token=token, stream=True)
    types = [event.type async for event in stream]
    assert "output" in types
    assert (await stream.get_final_response()).get_outputs() == ["shipped: draft about tea (approved)"]


async def test_a_stream_never_iterated_claims_nothing(build: Callable[..., FunctionalWorkflow]) -> None:
    owner, token, request_id = await _pause(build())
    worker = build()
    stream = worker.run(responses={request_id: "approved"}, continuation_token=token, stream=True)
    del stream  # dropped unstarted: the weak finalizer releases the instance
    assert not worker.is_running
    assert await _status(worker.continuation_store, token) == "issued"
    owner_stream = owner.run(responses={request_id: "approved"}, continuation_token=token, stream=True)
    del owner_stream
    assert owner.has_pending_continuation  # in-memory semantics unchanged
    done = await worker.run(responses={request_id: "approved"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea (approved)"]


async def test_failed_resumed_code_leaves_the_token_spent_and_the_checkpoint_restorable(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    _, token, request_id = await _pause(build())

    async def crash(_: Any) -> None:
        raise RuntimeError("resumed code failed")

    HOOKS["after_answer"] = crash
    worker = build()
    with pytest.raises(RuntimeError, match="resumed code failed"):
        await worker.run(responses={request_id: "approved"}, continuation_token=token)
    HOOKS.clear()
    store = worker.continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    assert record is not None and record.status == "claimed"
    with pytest.raises(ContinuationAuthorityError):
        await build().run(responses={request_id: "approved"}, continuation_token=token)
    done = await build().run(checkpoint_id=record.checkpoint_id, responses={request_id: "approved"})
    assert done.get_outputs() == ["shipped: draft about tea (approved)"]


async def test_missing_checkpoint_fails_before_user_code_and_keeps_the_token(
    build: Callable[..., FunctionalWorkflow], storage: FileCheckpointStorage
) -> None:
    _, token, request_id = await _pause(build())
    worker = build()
    store = worker.continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    assert record is not None
    checkpoint = await storage.load(record.checkpoint_id)
    await storage.delete(record.checkpoint_id)
    with pytest.raises(Exception) as info:  # core's error for a missing checkpoint
        await worker.run(responses={request_id: "approved"}, continuation_token=token)
    assert not isinstance(info.value, ContinuationAuthorityError)
    assert EFFECTS == [] and await _status(store, token) == "issued" and not worker.is_running
    await storage.save(checkpoint)  # the storage comes back: the same token still resumes
    done = await worker.run(responses={request_id: "approved"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea (approved)"]


async def test_checkpoint_restore_that_pauses_issues_durable_authority(
    build: Callable[..., FunctionalWorkflow], storage: FileCheckpointStorage
) -> None:
    first, token1, _ = await _pause(build(two_rounds))
    store = first.continuation_store
    assert store is not None
    record1 = await store.get(continuation_token_hash(token1))
    assert record1 is not None
    restorer = build(two_rounds)
    paused = await restorer.run(checkpoint_id=record1.checkpoint_id, responses={"auto::0": "one"})
    token2 = paused.continuation_token
    assert token2 is not None
    done = await build(two_rounds).run(responses={"auto::0": "one", "auto::1": "two"}, continuation_token=token2)
    assert done.get_outputs() == ["shipped: draft about tea [one] [two]"]


async def test_without_a_store_tokens_stay_process_local(storage: FileCheckpointStorage) -> None:
    owner = approval.build(checkpoint_storage=storage)
    paused = await owner.run("tea")
    other = approval.build(checkpoint_storage=storage)
    with pytest.raises(ContinuationAuthorityError):
        other.run(responses={"auto::0": "x"}, continuation_token=paused.continuation_token)
    assert owner.continuation_store is None
    owner.abandon_continuation(paused.continuation_token)  # the synchronous path is unchanged
    assert not owner.has_pending_continuation
