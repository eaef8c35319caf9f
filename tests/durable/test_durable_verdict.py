"""Verify once, pass the verdict on: a remote chat resume reads the store and the checkpoint once.

Also the stale-copy bug: on the worker that paused round one, after round one was resumed
elsewhere, a chat-native round-two resume must work as ``run(responses=..., continuation_token=...)``
does (the stale local copy is dropped, not a pending conflict).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentResponse, Content, FileCheckpointStorage, Message, WorkflowCheckpoint
from durable_workflows import CHECKPOINT_TYPES, EFFECTS, approve_bool, two_rounds

from agent_framework_functional import (
    ContinuationRecord,
    ContinuationStore,
    FunctionalWorkflowDefinition,
    VerifiedContinuation,
    continuation_token_hash,
)


class CountingStore:
    """A real store, with every read and write counted (delegation, not a fake)."""

    def __init__(self, inner: ContinuationStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.log: list[str] = []

    @property
    def ttl_seconds(self) -> float:
        return self.inner.ttl_seconds

    def now(self) -> float:
        return self.inner.now()

    async def save(self, record: ContinuationRecord) -> None:
        self._count("save")
        await self.inner.save(record)

    async def get(self, token_hash: str) -> ContinuationRecord | None:
        self._count("get")
        return await self.inner.get(token_hash)

    async def claim(self, token_hash: str, *, claimer: str | None = None) -> bool:
        self._count("claim")
        return await self.inner.claim(token_hash, claimer=claimer)

    async def release(self, token_hash: str, claimer: str) -> bool:
        self._count("release")
        return await self.inner.release(token_hash, claimer)

    async def abandon(self, token_hash: str, *, force: bool = False) -> bool:
        self._count("abandon")
        return await self.inner.abandon(token_hash, force=force)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def supersede(self, checkpoint_id: str, *, since: float) -> bool:
        self._count("supersede")
        return await self.inner.supersede(checkpoint_id, since=since)

    def _count(self, name: str) -> None:
        self.calls[name] += 1
        self.log.append(name)


class CountingStorage(FileCheckpointStorage):
    """Core's FileCheckpointStorage with its loads counted."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, allowed_checkpoint_types=CHECKPOINT_TYPES)
        self.loads = 0

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        self.loads += 1
        return await super().load(checkpoint_id)


@pytest.fixture
def worker(make_store: Callable[..., ContinuationStore], checkpoint_dir: Path) -> Callable[..., Any]:
    """A "process": its own (counted) store object and checkpoint storage on the shared database and folder."""

    def make(definition: FunctionalWorkflowDefinition = approve_bool) -> tuple[Any, CountingStore, CountingStorage]:
        store = CountingStore(make_store())
        storage = CountingStorage(checkpoint_dir)
        agent = definition.build(checkpoint_storage=storage, continuation_store=store).as_agent()
        return agent, store, storage

    return make


def approval(paused: AgentResponse, approved: bool = True) -> Message:
    return Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=approved)])


@pytest.mark.parametrize("stream", [False, True])
async def test_remote_chat_resume_reads_the_store_once_and_the_checkpoint_once(
    worker: Callable[..., Any], stream: bool
) -> None:
    owner, _, _ = worker()
    paused = await owner.run("tea")
    remote, store, storage = worker()

    message = approval(paused)
    if stream:
        updates = [u async for u in remote.run(message, continuation_token=paused.continuation_token, stream=True)]
        done = AgentResponse.from_updates(updates)
    else:
        done = await remote.run(message, continuation_token=paused.continuation_token)

    assert done.text == "shipped: draft about tea (approved=True)"
    assert EFFECTS == ["True"]
    before_claim = store.log[: store.log.index("claim")]
    assert before_claim == ["get"]  # the verdict's one lookup; run() reuses it
    assert store.calls["claim"] == 1
    assert storage.loads == 2  # ours (the requests' response types) and core's own restore


async def test_verify_async_returns_a_verdict_that_run_accepts(worker: Callable[..., Any]) -> None:
    owner, _, _ = worker()
    paused = await owner.run("tea")
    remote, store, storage = worker()
    verified = await remote.workflow.verify_continuation_token_async(paused.continuation_token)
    assert isinstance(verified, VerifiedContinuation)
    assert list(verified) == ["auto::0"] and verified.record is not None
    assert verified.token == paused.continuation_token
    done = await remote.workflow.run(responses={"auto::0": True}, continuation_token=verified)
    assert done.get_outputs() == ["shipped: draft about tea (approved=True)"]
    assert store.log == ["get", "claim"]
    assert storage.loads == 2


async def test_a_verdict_of_another_instance_is_checked_again(worker: Callable[..., Any]) -> None:
    owner, _, _ = worker()
    paused = await owner.run("tea")
    first, _, _ = worker()
    verified = await first.workflow.verify_continuation_token_async(paused.continuation_token)
    second, store, _ = worker()
    done = await second.workflow.run(responses={"auto::0": True}, continuation_token=verified)
    assert done.get_outputs() == ["shipped: draft about tea (approved=True)"]
    assert store.log[:1] == ["get"]  # not trusted: looked up in the store by its token


async def test_responses_round_two_resumes_on_the_worker_that_paused_round_one(worker: Callable[..., Any]) -> None:
    first, _, _ = worker(two_rounds)
    paused = await first.run("tea")
    assert first.workflow.has_pending_continuation
    second, _, _ = worker(two_rounds)
    round_two = await second.run(
        Message("tool", [Content.from_function_result(call_id="auto::0", result="one")]),
        continuation_token=paused.continuation_token,
    )
    assert round_two.continuation_token is not None
    # Back on the first worker, which still holds round one (claimed elsewhere: a stale copy).
    done = await first.run(
        responses={"auto::0": "one", "auto::1": "two"}, continuation_token=round_two.continuation_token, stream=False
    )
    assert done.text == "shipped: draft about tea [one] [two]"


async def test_chat_native_round_two_resumes_on_the_worker_holding_a_stale_round_one(
    worker: Callable[..., Any],
) -> None:
    first, _, _ = worker(two_rounds)
    paused = await first.run("tea")
    second, _, _ = worker(two_rounds)
    round_two = await second.run(
        Message("tool", [Content.from_function_result(call_id="auto::0", result="one")]),
        continuation_token=paused.continuation_token,
    )
    assert first.workflow.has_pending_continuation  # round one, claimed by the second worker

    # Before the fix this raised PendingContinuationError while run(responses=...) succeeded.
    resumed = await first.run(
        Message("tool", [Content.from_function_result(call_id="auto::1", result="two")]),
        continuation_token=round_two.continuation_token,
    )
    store = first.workflow.continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(round_two.continuation_token))
    assert record is not None and record.status == "claimed"  # round two was resumed here
    # The stale round-one copy is gone; what the instance holds now is this run's own pause (round
    # one's answer was given on the other worker, which this one cannot remember yet).
    assert resumed.continuation_token is not None
    assert first.workflow.verify_continuation_token(resumed.continuation_token)
