"""A durable run chain deletes the pause checkpoints no issued token needs.

When a claimed resume pauses again, the resumed pause's checkpoint and the run's other checkpoints
go (the new pause's checkpoint stays: it backs the new token); when a run finishes with
``checkpoint_retention=0``, every checkpoint of its chain goes (with the default retention they are kept,
``tests/test_checkpoint_retention.py``). A resume that fails keeps the resumed pause's checkpoint (restoring
it is the recovery path); an abandoned pause deletes its checkpoint (nothing can resume it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage
from durable_workflows import HOOKS, two_rounds

from agent_framework_functional import (
    ContinuationAuthorityError,
    ContinuationStore,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    continuation_token_hash,
)

# The finish's deletion is what these tests pin, so the chain is not retained.
AT_ONCE = FunctionalWorkflowDefinition(two_rounds.func, name=two_rounds.name, checkpoint_retention=0)


@pytest.fixture
def build(
    make_store: Callable[..., ContinuationStore], storage: FileCheckpointStorage
) -> Callable[[], FunctionalWorkflow]:
    return lambda: AT_ONCE.build(checkpoint_storage=storage, continuation_store=make_store())


async def _ids(storage: FileCheckpointStorage) -> set[str]:
    return set(await storage.list_checkpoint_ids(workflow_name="approval_two_rounds"))


async def _checkpoint_of(wf: FunctionalWorkflow, token: Any) -> str:
    store = wf.continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    assert record is not None
    return record.checkpoint_id


@pytest.mark.parametrize("remote", [False, True])
async def test_a_finished_chain_leaves_no_checkpoints(
    build: Callable[[], FunctionalWorkflow], storage: FileCheckpointStorage, remote: bool
) -> None:
    owner = build()
    paused = await owner.run("tea")
    first = await _checkpoint_of(owner, paused.continuation_token)
    assert await _ids(storage) == {first}  # only the pause's checkpoint backs the token
    resumer = build() if remote else owner
    again = await resumer.run(responses={"auto::0": "one"}, continuation_token=paused.continuation_token)
    second = await _checkpoint_of(resumer, again.continuation_token)
    assert await _ids(storage) == {second}
    done = await build().run(
        responses={"auto::0": "one", "auto::1": "two"}, continuation_token=again.continuation_token
    )
    assert done.get_outputs() == ["shipped: draft about tea [one] [two]"]
    assert await _ids(storage) == set()


async def test_a_failed_resume_keeps_the_checkpoint_it_resumed(
    build: Callable[[], FunctionalWorkflow], storage: FileCheckpointStorage
) -> None:
    owner = build()
    paused = await owner.run("tea")
    first = await _checkpoint_of(owner, paused.continuation_token)

    async def crash(_: Any) -> None:
        raise RuntimeError("resumed code failed")

    HOOKS["after_answer"] = crash
    with pytest.raises(RuntimeError):
        await build().run(responses={"auto::0": "one"}, continuation_token=paused.continuation_token)
    HOOKS.clear()
    assert first in await _ids(storage)  # the recovery path: restore it
    restored = await build().run(checkpoint_id=first, responses={"auto::0": "one"})
    assert restored.continuation_token is not None


@pytest.mark.parametrize("where", ["owner", "elsewhere"])
async def test_an_abandoned_pause_deletes_its_checkpoint(
    build: Callable[[], FunctionalWorkflow], storage: FileCheckpointStorage, where: str
) -> None:
    owner = build()
    paused = await owner.run("tea")
    assert await _checkpoint_of(owner, paused.continuation_token) in await _ids(storage)
    await (owner if where == "owner" else build()).abandon_continuation_async(paused.continuation_token)
    assert await _ids(storage) == set()  # nothing can resume it: its checkpoint backs nothing


@pytest.mark.parametrize("verified", [False, True])
async def test_a_loser_after_the_winner_deleted_the_checkpoint_gets_the_authority_error(
    build: Callable[[], FunctionalWorkflow], verified: bool
) -> None:
    owner = build()
    paused = await owner.run("tea")
    token = paused.continuation_token
    loser = build()
    # The loser checked the token (a verdict) or read the record before the winner finished and
    # deleted the checkpoint it is about to restore.
    presented: Any = await loser.verify_continuation_token_async(token) if verified else token
    await build().run(responses={"auto::0": "one"}, continuation_token=token)
    with pytest.raises(ContinuationAuthorityError):
        await loser.run(responses={"auto::0": "late"}, continuation_token=presented)
