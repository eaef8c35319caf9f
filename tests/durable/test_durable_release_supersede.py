"""``supersede`` through the workflow: a checkpoint restore abandons its pause's issued token.

``release`` and ``supersede`` at the store (every store) are in the conformance suite, ``tests/stores/``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage
from durable_support import FakeClock
from durable_workflows import EFFECTS, approval, approval_v2, other_approval

from agent_framework_functional import (
    CheckpointRestoreConflictError,
    ContinuationAuthorityError,
    ContinuationRecord,
    ContinuationStore,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    ResponseMismatchError,
    continuation_token_hash,
)


@pytest.fixture
def build(
    make_store: Callable[..., ContinuationStore], storage: FileCheckpointStorage
) -> Callable[[], FunctionalWorkflow]:
    return lambda: approval.build(checkpoint_storage=storage, continuation_store=make_store())


async def _pause(build: Callable[[], FunctionalWorkflow]) -> tuple[dict[str, Any], ContinuationRecord]:
    owner = build()
    paused = await owner.run("tea")
    assert paused.continuation_token is not None
    token = dict(paused.continuation_token)
    store = owner.continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    assert record is not None
    return token, record


async def test_a_restore_supersedes_the_issued_token_so_the_pause_runs_once(
    build: Callable[[], FunctionalWorkflow],
) -> None:
    token, record = await _pause(build)
    restored = await build().run(checkpoint_id=record.checkpoint_id, responses={"auto::0": "restored"})
    assert restored.get_outputs() == ["shipped: draft about tea (restored)"]
    with pytest.raises(ContinuationAuthorityError):
        await build().run(responses={"auto::0": "token"}, continuation_token=token)
    assert EFFECTS == ["restored"]


async def test_a_restore_that_loses_to_a_claim_runs_nothing(
    make_store: Callable[..., ContinuationStore], storage: FileCheckpointStorage, clock: FakeClock
) -> None:
    owner = approval.build(checkpoint_storage=storage, continuation_store=make_store(clock=clock))
    paused = await owner.run("tea")
    store = owner.continuation_store
    assert store is not None and paused.continuation_token is not None
    record = await store.get(continuation_token_hash(paused.continuation_token))
    assert record is not None
    # The token resume claims the pause a moment after the restore started (the restore's clock lags).
    clock.advance(5.0)
    assert await store.claim(record.token_hash)
    lagging = FakeClock()
    lagging.now = clock.now - 1.0
    restorer = approval.build(checkpoint_storage=storage, continuation_store=make_store(clock=lagging))
    with pytest.raises(CheckpointRestoreConflictError, match="could run the resumed code twice"):
        await restorer.run(checkpoint_id=record.checkpoint_id, responses={"auto::0": "restored"})
    assert EFFECTS == [] and not restorer.is_running


async def _refused_restore_leaves_the_token(
    build: Callable[[], FunctionalWorkflow],
    restorer: FunctionalWorkflow,
    answers: dict[str, Any],
    error: type[Exception],
    stream: bool,
) -> None:
    token, record = await _pause(build)
    with pytest.raises(error):
        if stream:
            async for _ in restorer.run(checkpoint_id=record.checkpoint_id, responses=answers, stream=True):
                pass
        else:
            await restorer.run(checkpoint_id=record.checkpoint_id, responses=answers)
    assert EFFECTS == [] and not restorer.is_running
    store = restorer.continuation_store
    assert store is not None
    kept = await store.get(record.token_hash)
    assert kept is not None and kept.status == "issued", "a refused restore must not supersede the token"
    done = await build().run(responses={"auto::0": "token"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea (token)"]
    assert EFFECTS == ["token"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("answers", [{"auto::0": 5}, {"auto::9": "ok"}], ids=["wrong-type", "no-request"])
async def test_a_restore_with_wrong_answers_is_refused_and_leaves_the_token_resumable(
    build: Callable[[], FunctionalWorkflow], answers: dict[str, Any], stream: bool
) -> None:
    await _refused_restore_leaves_the_token(build, build(), answers, ResponseMismatchError, stream)


@pytest.mark.parametrize("definition", [approval_v2, other_approval], ids=["another-version", "another-workflow"])
async def test_a_restore_of_another_workflows_checkpoint_is_refused_and_leaves_the_token_resumable(
    make_store: Callable[..., ContinuationStore],
    storage: FileCheckpointStorage,
    build: Callable[[], FunctionalWorkflow],
    definition: FunctionalWorkflowDefinition,
) -> None:
    restorer = definition.build(checkpoint_storage=storage, continuation_store=make_store())
    await _refused_restore_leaves_the_token(build, restorer, {"auto::0": "restored"}, ValueError, False)
