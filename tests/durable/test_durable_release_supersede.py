"""Issue 11 items 3 and 7 at the store: ``release`` (a claim handed back by its claimer) and
``supersede`` (a checkpoint restore abandons its pause's issued token), then through the workflow."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage
from durable_support import FakeClock
from durable_workflows import EFFECTS, approval

from agent_framework_functional import (
    CheckpointRestoreConflictError,
    ContinuationAuthorityError,
    ContinuationRecord,
    ContinuationStore,
    FunctionalWorkflow,
    continuation_token_hash,
)


def _record(store: ContinuationStore, checkpoint_id: str = "checkpoint-1") -> ContinuationRecord:
    now = store.now()
    return ContinuationRecord(
        secrets.token_hex(32), "approval", "s" * 64, checkpoint_id, ("auto::0",), now, now + store.ttl_seconds
    )


async def _status(store: ContinuationStore, token_hash: str) -> str | None:
    record = await store.get(token_hash)
    return None if record is None else record.status


async def test_only_the_claimer_can_hand_a_claim_back(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    assert await store.claim(record.token_hash, claimer="run-a")
    assert not await store.release(record.token_hash, "run-b")
    assert not await store.release(record.token_hash, "")
    assert await _status(store, record.token_hash) == "claimed"
    assert await store.release(record.token_hash, "run-a")
    assert await _status(store, record.token_hash) == "issued"
    assert not await store.release(record.token_hash, "run-a")  # once
    assert await store.claim(record.token_hash, claimer="run-c")  # usable again, exactly once
    assert not await store.claim(record.token_hash)


async def test_a_claim_without_claimer_and_an_abandoned_record_cannot_be_released(store: ContinuationStore) -> None:
    claimed, abandoned = _record(store), _record(store)
    await store.save(claimed)
    await store.save(abandoned)
    assert await store.claim(claimed.token_hash)
    assert await store.abandon(abandoned.token_hash)
    assert not await store.release(claimed.token_hash, "")
    assert not await store.release(abandoned.token_hash, "")
    assert not await store.release(secrets.token_hex(32), "x")


async def test_supersede_abandons_the_issued_record_of_a_checkpoint(store: ContinuationStore) -> None:
    record, other = _record(store, "checkpoint-a"), _record(store, "checkpoint-b")
    await store.save(record)
    await store.save(other)
    assert await store.supersede("checkpoint-a", since=store.now())
    assert await _status(store, record.token_hash) == "abandoned"
    assert await _status(store, other.token_hash) == "issued"
    assert not await store.claim(record.token_hash)  # the token lost to the restore
    assert await store.supersede("checkpoint-a", since=store.now())  # nothing left to supersede
    assert await store.supersede("never-recorded", since=store.now())


async def test_supersede_loses_to_a_claim_made_after_the_restore_started(
    make_store: Callable[..., ContinuationStore], clock: FakeClock
) -> None:
    store = make_store(clock=clock)
    early, late = _record(store, "checkpoint-early"), _record(store, "checkpoint-late")
    await store.save(early)
    await store.save(late)
    assert await store.claim(early.token_hash)
    clock.advance(1.0)
    since = store.now()
    assert await store.claim(late.token_hash)  # a resume claims while the restore starts
    assert not await store.supersede("checkpoint-late", since=since)
    assert await _status(store, late.token_hash) == "claimed"
    # A resume claimed before the restore started (and failed, or crashed): restoring is the owner's recovery.
    assert await store.supersede("checkpoint-early", since=since)


async def test_concurrent_supersede_and_claim_have_one_winner(make_store: Callable[..., ContinuationStore]) -> None:
    for _ in range(10):
        a, b = make_store(), make_store()
        record = _record(a, f"checkpoint-{secrets.token_hex(4)}")
        await a.save(record)
        since = a.now()
        claimed, superseded = await asyncio.gather(
            a.claim(record.token_hash), b.supersede(record.checkpoint_id, since=since)
        )
        assert claimed != superseded


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
