"""Expiry (the store's TTL) and abandonment, in one process and across processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage
from durable_support import FakeClock
from durable_workflows import EFFECTS, HOOKS, approval, other_approval

from agent_framework_functional import (
    ContinuationAuthorityError,
    ContinuationStore,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    WorkflowRunningError,
    continuation_token_hash,
)
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE


@pytest.fixture
def build(
    make_store: Callable[..., ContinuationStore], storage: FileCheckpointStorage, clock: FakeClock
) -> Callable[..., FunctionalWorkflow]:
    def make(definition: FunctionalWorkflowDefinition = approval) -> FunctionalWorkflow:
        store = make_store(ttl=60.0, clock=clock)
        return definition.build(checkpoint_storage=storage, continuation_store=store)

    return make


async def _pause(wf: FunctionalWorkflow) -> dict[str, Any]:
    paused = await wf.run("tea")
    assert paused.continuation_token is not None
    return dict(paused.continuation_token)


async def _status(wf: FunctionalWorkflow, token: dict[str, Any]) -> str | None:
    assert wf.continuation_store is not None
    record = await wf.continuation_store.get(continuation_token_hash(token))
    return record.status if record is not None else None


# ---------------------------------------------------------------- expiry


@pytest.mark.parametrize("remote", [False, True])
async def test_expired_token_gets_the_authority_error(
    build: Callable[..., FunctionalWorkflow], clock: FakeClock, remote: bool
) -> None:
    owner = build()
    token = await _pause(owner)
    clock.advance(59.0)
    assert await _status(owner, token) == "issued"
    clock.advance(1.0)  # now == expires_at: no longer accepted
    resumer = build() if remote else owner
    with pytest.raises(ContinuationAuthorityError) as info:
        await resumer.run(responses={"auto::0": "late"}, continuation_token=token)
    assert str(info.value) == AUTHORITY_ERROR_MESSAGE
    assert EFFECTS == []
    assert not resumer.is_running


async def test_expired_pause_is_restored_by_checkpoint_id(
    build: Callable[..., FunctionalWorkflow], clock: FakeClock
) -> None:
    owner = build()
    token = await _pause(owner)
    clock.advance(3600)
    store = owner.continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    assert record is not None and not record.is_claimable(store.now())
    # The owner (on any process) restores the pause from its checkpoint; no token needed.
    done = await build().run(checkpoint_id=record.checkpoint_id, responses={"auto::0": "late"})
    assert done.get_outputs() == ["shipped: draft about tea (late)"]


async def test_expired_pause_is_abandoned_by_its_owner_with_force(
    build: Callable[..., FunctionalWorkflow], clock: FakeClock
) -> None:
    owner = build()
    token = await _pause(owner)
    clock.advance(3600)
    with pytest.raises(ContinuationAuthorityError):
        await owner.abandon_continuation_async(token)  # an expired token is no authority
    await owner.abandon_continuation_async(token, force=True)
    assert not owner.has_pending_continuation
    assert await _status(owner, token) == "abandoned"
    assert (await owner.run("coffee")).continuation_token is not None


async def test_owner_force_abandons_an_expired_pause_held_by_another_process(
    build: Callable[..., FunctionalWorkflow], clock: FakeClock
) -> None:
    token = await _pause(build())
    clock.advance(3600)
    owner_elsewhere = build()
    await owner_elsewhere.abandon_continuation_async(token, force=True)
    assert await _status(owner_elsewhere, token) == "abandoned"


# ---------------------------------------------------------------- abandonment


async def test_abandon_in_b_then_resume_in_a_is_rejected(build: Callable[..., FunctionalWorkflow]) -> None:
    owner = build()
    token = await _pause(owner)
    other = build()
    await other.abandon_continuation_async(token)
    assert await _status(other, token) == "abandoned"
    assert not other.has_pending_continuation  # B never held it and is unchanged
    with pytest.raises(ContinuationAuthorityError):
        await owner.run(responses={"auto::0": "late"}, continuation_token=token)
    with pytest.raises(ContinuationAuthorityError):
        await build().run(responses={"auto::0": "late"}, continuation_token=token)
    assert EFFECTS == []
    assert not owner.has_pending_continuation  # the stale local copy was dropped


async def test_abandon_twice_is_rejected(build: Callable[..., FunctionalWorkflow]) -> None:
    owner = build()
    token = await _pause(owner)
    await owner.abandon_continuation_async(token)
    assert not owner.has_pending_continuation
    assert await _status(owner, token) == "abandoned"
    for wf in (owner, build()):
        with pytest.raises(ContinuationAuthorityError):
            await wf.abandon_continuation_async(token)


async def test_abandon_after_a_remote_resume_is_rejected_and_drops_the_stale_copy(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    owner = build()
    token = await _pause(owner)
    await build().run(responses={"auto::0": "approved"}, continuation_token=token)
    with pytest.raises(ContinuationAuthorityError):
        await owner.abandon_continuation_async(token)
    assert await _status(owner, token) == "claimed"
    assert not owner.has_pending_continuation


@pytest.mark.parametrize("bad", [None, {"kind": "functional_workflow", "version": "1", "token": "x" * 43}, "nope"])
async def test_abandon_with_a_wrong_token_changes_nothing(build: Callable[..., FunctionalWorkflow], bad: Any) -> None:
    owner = build()
    token = await _pause(owner)
    with pytest.raises(ContinuationAuthorityError) as info:
        await owner.abandon_continuation_async(bad)
    assert str(info.value) == AUTHORITY_ERROR_MESSAGE
    assert owner.has_pending_continuation and await _status(owner, token) == "issued"
    assert (await owner.run(responses={"auto::0": "ok"}, continuation_token=token)).get_outputs()


async def test_abandon_of_another_workflows_pause_is_rejected(build: Callable[..., FunctionalWorkflow]) -> None:
    token = await _pause(build(other_approval))
    with pytest.raises(ContinuationAuthorityError):
        await build().abandon_continuation_async(token)
    other = build(other_approval)
    assert await _status(other, token) == "issued"
    await build().abandon_continuation_async(token, force=True)  # force still only touches this workflow's records
    assert await _status(other, token) == "issued"


def test_synchronous_abandon_is_refused_with_a_store(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    owner = build()
    with pytest.raises(RuntimeError, match="abandon_continuation_async"):
        owner.abandon_continuation(force=True)
    with pytest.raises(RuntimeError, match="abandon_continuation_async"):
        owner.as_agent().abandon_continuation(force=True)


async def test_synchronous_abandon_refusal_keeps_the_pause(build: Callable[..., FunctionalWorkflow]) -> None:
    owner = build()
    token = await _pause(owner)
    with pytest.raises(RuntimeError, match="abandon_continuation_async"):
        owner.abandon_continuation(token)
    assert owner.has_pending_continuation and await _status(owner, token) == "issued"


async def test_force_abandon_without_a_token_clears_the_local_pause_in_the_store(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    owner = build()
    token = await _pause(owner)
    await owner.abandon_continuation_async(force=True)
    assert not owner.has_pending_continuation
    assert await _status(owner, token) == "abandoned"
    with pytest.raises(ContinuationAuthorityError):
        await build().run(responses={"auto::0": "x"}, continuation_token=token)


async def test_abandon_while_the_resume_runs_is_refused(build: Callable[..., FunctionalWorkflow]) -> None:
    owner = build()
    token = await _pause(owner)
    errors: list[BaseException] = []

    async def try_abandon(_: Any) -> None:
        try:
            await owner.abandon_continuation_async(token, force=True)
        except BaseException as exc:
            errors.append(exc)

    HOOKS["after_answer"] = try_abandon
    done = await owner.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea (ok)"]
    assert len(errors) == 1 and isinstance(errors[0], WorkflowRunningError)


async def test_abandon_async_without_a_store_is_the_in_memory_abandon(storage: FileCheckpointStorage) -> None:
    wf = approval.build(checkpoint_storage=storage)
    paused = await wf.run("tea")
    with pytest.raises(ContinuationAuthorityError):
        await wf.abandon_continuation_async({"kind": "functional_workflow", "version": "1", "token": "x" * 43})
    assert wf.has_pending_continuation
    await wf.abandon_continuation_async(paused.continuation_token)
    assert not wf.has_pending_continuation


async def test_agent_abandons_through_the_store_with_the_session_token(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    owner = build()
    agent = owner.as_agent()
    session = agent.create_session()
    paused = await agent.run("tea", session=session)
    token = dict(paused.continuation_token or {})
    assert await _status(owner, token) == "issued"
    await agent.abandon_continuation_async(session=session)
    assert await _status(owner, token) == "abandoned"
    assert not owner.has_pending_continuation and dict(agent.pending_requests) == {}
    with pytest.raises(ContinuationAuthorityError):
        await build().run(responses={"auto::0": "ok"}, continuation_token=token)
