"""verify_continuation_token_async with a continuation store: read-only, fixed error, from any process.

Each instance stands for one process (own store object and checkpoint storage object, shared
database and folder). The check reads the store and the pause's checkpoint and never claims,
abandons or changes anything, here or in the store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage
from durable_support import FakeClock
from durable_workflows import CHECKPOINT_TYPES, EFFECTS, Verdict, approval, approval_v2, ask_verdict, other_approval

from agent_framework_functional import (
    ContinuationAuthorityError,
    ContinuationRecord,
    ContinuationStore,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    continuation_token_hash,
)
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE


@pytest.fixture
def build(
    make_store: Callable[..., ContinuationStore], checkpoint_dir: Path, clock: FakeClock
) -> Callable[..., FunctionalWorkflow]:
    def make(definition: FunctionalWorkflowDefinition = approval) -> FunctionalWorkflow:
        storage = FileCheckpointStorage(checkpoint_dir, allowed_checkpoint_types=CHECKPOINT_TYPES)
        return definition.build(checkpoint_storage=storage, continuation_store=make_store(ttl=60.0, clock=clock))

    return make


async def _pause(wf: FunctionalWorkflow) -> dict[str, Any]:
    paused = await wf.run("tea")
    assert paused.continuation_token is not None
    return dict(paused.continuation_token)


async def _record(wf: FunctionalWorkflow, token: dict[str, Any]) -> ContinuationRecord | None:
    assert wf.continuation_store is not None
    return await wf.continuation_store.get(continuation_token_hash(token))


async def test_a_remote_token_gives_the_pause_requests_from_its_checkpoint(
    build: Callable[..., FunctionalWorkflow],
) -> None:
    token = await _pause(build(ask_verdict))
    worker = build(ask_verdict)
    before = await _record(worker, token)

    pending = await worker.verify_continuation_token_async(token)

    assert list(pending) == ["auto::0"]
    event = pending["auto::0"]
    assert event.type == "request_info" and event.request_id == "auto::0"
    assert event.response_type is Verdict and event.data == {"draft": "draft about tea"}
    assert await _record(worker, token) == before  # nothing claimed
    assert not worker.has_pending_continuation and not worker.is_running
    with pytest.raises(ContinuationAuthorityError):
        worker.verify_continuation_token(token)  # the in-memory check knows nothing of it
    done = await worker.run(responses={"auto::0": Verdict(approved=True, note="ok")}, continuation_token=token)
    assert done.get_outputs() == ["Verdict: Verdict(approved=True, note='ok')"]


async def test_a_held_token_is_also_checked_in_the_store(build: Callable[..., FunctionalWorkflow]) -> None:
    owner = build()
    token = await _pause(owner)
    assert set(await owner.verify_continuation_token_async(token)) == {"auto::0"}

    await build().run(responses={"auto::0": "elsewhere"}, continuation_token=token)

    assert set(owner.verify_continuation_token(token)) == {"auto::0"}  # memory alone cannot know (documented)
    with pytest.raises(ContinuationAuthorityError):
        await owner.verify_continuation_token_async(token)
    assert owner.has_pending_continuation  # the check changed nothing, not even the stale copy
    assert EFFECTS == ["elsewhere"]


def _malformed(token: dict[str, Any]) -> list[Any]:
    secret = token["token"]
    return [
        None,
        {},
        secret,
        {**token, "kind": "other"},
        {**token, "version": "2"},
        {**token, "token": secret[:-1]},
        {**token, "token": "é" + secret[1:]},
    ]


async def test_every_bad_token_gets_the_fixed_error_and_changes_nothing(
    build: Callable[..., FunctionalWorkflow], clock: FakeClock
) -> None:
    token = await _pause(build())
    other_token = await _pause(build(other_approval))  # same store, another workflow name
    worker = build()
    worker_v2 = build(approval_v2)  # same name, another version (signature)
    claimed_token = await _pause(build())
    await build().run(responses={"auto::0": "used"}, continuation_token=claimed_token)
    abandoned_token = await _pause(build())
    await build().abandon_continuation_async(abandoned_token)
    forged = {**token, "token": ("A" if token["token"][0] != "A" else "B") + token["token"][1:]}
    cases: list[tuple[FunctionalWorkflow, Any]] = [(worker, bad) for bad in _malformed(token)]
    cases += [(worker, forged), (worker, other_token), (worker_v2, token), (worker, claimed_token)]
    cases += [(worker, abandoned_token)]
    records = {key: await _record(worker, t) for key, t in _known(token, other_token, claimed_token, abandoned_token)}

    for instance, bad in cases:
        with pytest.raises(ContinuationAuthorityError) as caught:
            await instance.verify_continuation_token_async(bad)
        assert str(caught.value) == AUTHORITY_ERROR_MESSAGE

    clock.advance(60.0)  # expired
    with pytest.raises(ContinuationAuthorityError):
        await worker.verify_continuation_token_async(token)
    assert {key: await _record(worker, t) for key, t in _known(token, other_token, claimed_token, abandoned_token)} == (
        records
    )
    assert not worker.has_pending_continuation and not worker.is_running and not worker_v2.is_running
    assert EFFECTS == ["used"]


def _known(*tokens: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(t["token"], t) for t in tokens]
