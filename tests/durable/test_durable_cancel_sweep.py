"""A resume cancelled at any await point runs its effect exactly once or keeps its token.

Each trial pauses a fresh run, starts a resume as a task, and cancels it at its k-th suspension
(k = 1, 2, ... until a trial finishes before it is cancelled), so every await point of the resume
path is hit once: the store read, the checkpoint load, the store's claim (also while it waits for
SQLite's write lock or Redis's reply), core's replay. Whatever k, the trial must end in one of two
states: the resumed side effect ran exactly once (the token is spent), or it never ran and the same
token still resumes (exactly once). Never: spent with nothing run, or run twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentSession, FileCheckpointStorage, InMemoryCheckpointStorage, Message
from durable_support import StoreSpec, close_store
from durable_workflows import CHECKPOINT_TYPES, EFFECTS, approval, approve_bool

from agent_framework_functional import (
    ContinuationAuthorityError,
    ContinuationStore,
    FunctionalWorkflow,
    continuation_token_hash,
)

MAX_TRIALS = 400
"""A hang guard: no resume path suspends this often."""

Resume = Callable[[], Awaitable[Any]]


async def cancel_at_suspension(resume: Resume, k: int) -> bool:
    """Run ``resume()`` as a task and cancel it at its k-th suspension; True when it finished first.

    A suspension is counted when the task waits on a new future (``Task._fut_waiter``, asyncio's
    record of what a task awaits); a bare ``sleep(0)`` yield counts too.
    """
    task = asyncio.ensure_future(resume())
    seen, last = 0, None
    while not task.done():
        waiter = getattr(task, "_fut_waiter", None)
        if waiter is None or waiter is not last:
            last = waiter
            seen += 1
            if seen == k:
                task.cancel()
                break
        await asyncio.sleep(0)
    try:
        await task
    except asyncio.CancelledError:
        return False
    return not task.cancelled() and seen < k


async def sweep(trial: Callable[[int], Awaitable[bool]]) -> int:
    """Run ``trial(k)`` for k = 1, 2, ... until one finishes uncancelled; return how many were cancelled."""
    for k in range(1, MAX_TRIALS):
        if await trial(k):
            return k - 1
    raise AssertionError("the resume never finished before its cancellation")


async def check_outcome(retry: Resume, *, effect: str) -> str:
    """After a cancelled resume: effect once and token spent, or no effect and the token still resumes."""
    assert EFFECTS.count(effect) <= 1, EFFECTS
    if EFFECTS.count(effect) == 1:
        with pytest.raises(ContinuationAuthorityError):
            await retry()
        return "ran"
    await retry()  # the same token resumes: exactly once
    assert EFFECTS.count(effect) == 1, EFFECTS
    return "kept"


def _open(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], ContinuationStore | None]:
    if kind == "memory":
        return lambda: None
    if kind == "sqlite":
        spec = StoreSpec("sqlite", str(tmp_path / "continuations.db"))
    else:
        spec = StoreSpec("redis", request.getfixturevalue("redis_server"), namespace=f"sweep:{tmp_path.name}")
    return spec.open


@pytest.fixture(params=["memory", "sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return request.param


@pytest.fixture
async def stores(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Open store objects on one database ("processes"); all closed after the test."""
    opener = _open(backend, tmp_path, request)
    opened: list[ContinuationStore] = []

    def make() -> ContinuationStore | None:
        store = opener()
        if store is not None:
            opened.append(store)
        return store

    yield make
    for store in opened:
        await close_store(store)


# An in-memory token is valid only on the instance that paused, so "remote" runs only with a store.
BACKEND_WHERE = [("memory", "same"), ("sqlite", "same"), ("sqlite", "remote"), ("redis", "same"), ("redis", "remote")]


@pytest.mark.parametrize(("backend", "where"), BACKEND_WHERE, indirect=["backend"])
@pytest.mark.parametrize("stream", [False, True])
async def test_cancelled_workflow_resume_runs_once_or_keeps_its_token(
    backend: str, stores: Callable[[], ContinuationStore | None], tmp_path: Path, where: str, stream: bool
) -> None:
    storage: Any = InMemoryCheckpointStorage() if backend == "memory" else FileCheckpointStorage(tmp_path / "ckpt")
    outcomes: list[str] = []

    def build() -> FunctionalWorkflow:
        return approval.build(checkpoint_storage=storage, continuation_store=stores())

    async def trial(k: int) -> bool:
        EFFECTS.clear()
        owner = build()
        paused = await owner.run("tea")
        token = paused.continuation_token
        resumer = owner if where == "same" else build()

        async def resume() -> Any:
            if stream:
                events = [
                    event
                    async for event in resumer.run(responses={"auto::0": "yes"}, continuation_token=token, stream=True)
                ]
                return events
            return await resumer.run(responses={"auto::0": "yes"}, continuation_token=token)

        if await cancel_at_suspension(resume, k):
            assert EFFECTS == ["yes"]
            return True
        assert not resumer.is_running
        outcomes.append(await check_outcome(resume, effect="yes"))
        if outcomes[-1] == "kept" and where == "same":
            assert not owner.has_pending_continuation  # the retry consumed it
        return False

    cancelled = await sweep(trial)
    assert cancelled == len(outcomes) and cancelled > 0


@pytest.mark.parametrize(("backend", "where"), BACKEND_WHERE, indirect=["backend"])
async def test_cancelled_agent_resume_runs_once_or_keeps_its_token(
    backend: str, stores: Callable[[], ContinuationStore | None], tmp_path: Path, where: str
) -> None:
    memory = InMemoryCheckpointStorage()

    def make_agent() -> Any:
        storage: Any = (
            memory
            if backend == "memory"
            else FileCheckpointStorage(tmp_path / "ckpt", allowed_checkpoint_types=CHECKPOINT_TYPES)
        )
        return approve_bool.build(checkpoint_storage=storage, continuation_store=stores()).as_agent()

    async def trial(k: int) -> bool:
        EFFECTS.clear()
        owner = make_agent()
        session = owner.create_session()
        paused = await owner.run("tea", session=session)
        request = paused.user_input_requests[0]
        message = Message("user", [request.to_function_approval_response(approved=True)])
        agent = owner if where == "same" else make_agent()
        resumed_session = session if where == "same" else AgentSession.from_dict(session.to_dict())

        async def resume() -> Any:
            return await agent.run(message, session=resumed_session)

        if await cancel_at_suspension(resume, k):
            assert EFFECTS == ["True"]
            return True
        await check_outcome(resume, effect="True")
        return False

    assert await sweep(trial) > 0


async def test_a_claim_cancelled_while_sqlite_is_locked_is_handed_back(tmp_path: Path) -> None:
    """The reported case: the claim waits for another process's write lock and is cancelled there."""
    import sqlite3

    spec = StoreSpec("sqlite", str(tmp_path / "continuations.db"))
    storage = FileCheckpointStorage(tmp_path / "ckpt")
    owner_store, worker_store = spec.open(), spec.open()
    try:
        owner = approval.build(checkpoint_storage=storage, continuation_store=owner_store)
        paused = await owner.run("tea")
        token = paused.continuation_token
        assert token is not None
        worker = approval.build(checkpoint_storage=storage, continuation_store=worker_store)
        verdict = await worker.verify_continuation_token_async(token)  # no store read left before the claim
        locker = sqlite3.connect(spec.location, isolation_level=None)
        locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        task = asyncio.ensure_future(worker.run(responses={"auto::0": "yes"}, continuation_token=verdict))
        # The claim is the first store call left; it holds the store object's lock while SQLite makes it wait.
        while not worker_store._lock.locked():  # type: ignore[attr-defined]  # noqa: ASYNC110 - a thread holds it
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.sleep(0)
        locker.execute("COMMIT")
        locker.close()
        with pytest.raises(asyncio.CancelledError):
            await task
        record = await worker_store.get(continuation_token_hash(token))
        assert EFFECTS == [] and record is not None and record.status == "issued"
        done = await worker.run(responses={"auto::0": "yes"}, continuation_token=token)
        assert done.get_outputs() == ["shipped: draft about tea (yes)"] and EFFECTS == ["yes"]
    finally:
        await close_store(owner_store)
        await close_store(worker_store)
