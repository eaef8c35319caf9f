"""Shared workflows and fixtures for the agent-framework-functional test suite.

The workflows live at module level so that core can checkpoint and replay their steps without a
``replay_key``. They count what runs in ``CALLS`` and let a test inject behaviour into resumed user
code through ``HOOKS``; both are reset before every test by the autouse fixture below.
"""

from __future__ import annotations

import asyncio
import collections
import shutil
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from agent_framework import CheckpointStorage, InMemoryCheckpointStorage, WorkflowCheckpoint
from postgres_server import PostgresServer, missing_postgres_advice
from redis_server import REDIS_DURABLE_OPTIONS, RedisServer
from retention_clock import retention_clock  # noqa: F401  (a fixture)

from agent_framework_functional import (
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    RunContext,
    step,
    workflow,
)

CALLS: collections.Counter[str] = collections.Counter()
HOOKS: dict[str, Callable[[Any], Awaitable[None]]] = {}


@step
async def draft(topic: str) -> str:
    CALLS["draft"] += 1
    return f"draft about {topic}"


@step
async def publish(text: str) -> str:
    CALLS["publish"] += 1
    return f"published: {text}"


@workflow(name="review", description="Draft, ask a human, publish.")
async def review(topic: str, ctx: RunContext) -> str:
    """One pause: draft (step) -> request_info -> publish (step)."""
    text = await draft(topic)
    feedback = await ctx.request_info({"draft": text}, response_type=str)
    CALLS["resumed"] += 1  # user code after the pause: runs only on an accepted resume
    hook = HOOKS.get("after_feedback")
    if hook is not None:
        await hook(feedback)
    return await publish(f"{text} ({feedback})")


@workflow(name="two_rounds")
async def two_rounds(topic: str, ctx: RunContext) -> str:
    """Two pauses in one run; answers accumulate (``auto::0`` then ``auto::1``)."""
    text = await draft(topic)
    first = await ctx.request_info({"draft": text, "round": 1}, response_type=str)
    CALLS["after_first"] += 1
    second = await ctx.request_info({"draft": text, "round": 2}, response_type=str)
    CALLS["after_second"] += 1
    return f"{text} [{first}] [{second}]"


@workflow(name="gated")
async def gated(topic: str, ctx: RunContext) -> str:
    """Calls ``HOOKS["start"](topic)`` first (if set), then pauses once like ``review``."""
    hook = HOOKS.get("start")
    if hook is not None:
        await hook(topic)
    CALLS["gated_started"] += 1
    answer = await ctx.request_info({"topic": topic}, response_type=str)
    CALLS["resumed"] += 1
    return f"{topic}: {answer}"


@workflow
async def no_pause(topic: str) -> str:
    """Finishes without pausing."""
    return await draft(topic)


@pytest.fixture(autouse=True)
def _reset_counters() -> Any:
    CALLS.clear()
    HOOKS.clear()
    yield
    CALLS.clear()
    HOOKS.clear()


@pytest.fixture
def calls() -> collections.Counter[str]:
    """What ran: ``draft``, ``publish`` (steps), ``resumed``, ``after_first``, ``after_second``."""
    return CALLS


@pytest.fixture
def hooks() -> dict[str, Callable[[Any], Awaitable[None]]]:
    """Set ``hooks["after_feedback"] = async fn(feedback)`` to run inside resumed user code of ``review``."""
    return HOOKS


@pytest.fixture
def review_definition() -> FunctionalWorkflowDefinition:
    return review


@pytest.fixture
def two_rounds_definition() -> FunctionalWorkflowDefinition:
    return two_rounds


@pytest.fixture
def gated_definition() -> FunctionalWorkflowDefinition:
    return gated


@pytest.fixture
def no_pause_definition() -> FunctionalWorkflowDefinition:
    return no_pause


@pytest.fixture
def wf() -> FunctionalWorkflow:
    """A fresh ``review`` instance without checkpoint storage."""
    return review.build()


@pytest.fixture
async def paused(wf: FunctionalWorkflow) -> tuple[FunctionalWorkflow, dict[str, Any]]:
    """A ``review`` instance paused on ``auto::0`` and its continuation token."""
    result = await wf.run("tea")
    assert result.continuation_token is not None
    return wf, dict(result.continuation_token)


class Gate:
    """An async hook that records entry, signals ``entered`` and waits for ``release``."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.entries = 0

    async def __call__(self, value: Any) -> None:
        self.entries += 1
        self.entered.set()
        await self.release.wait()


@pytest.fixture
def gate() -> Gate:
    """Use as ``hooks["after_feedback"] = gate`` or ``hooks["start"] = gate`` to hold a run inside user code."""
    return Gate()


class FailingPauseSaveStorage(InMemoryCheckpointStorage):
    """Real in-memory storage whose ``save`` fails for the checkpoint of a pause.

    A pause checkpoint is recognised by its pending ``request_info`` events, so step checkpoints
    before the pause still save and only the last save of a paused run fails.
    """

    def __init__(self) -> None:
        super().__init__()
        self.failed_saves = 0
        self.fail = True

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        if self.fail and checkpoint.pending_request_info_events:
            self.failed_saves += 1
            raise OSError("disk full while saving the pause checkpoint")
        return await super().save(checkpoint)


@pytest.fixture
def failing_pause_storage() -> FailingPauseSaveStorage:
    return FailingPauseSaveStorage()


async def latest_pause_checkpoint_id(storage: CheckpointStorage, workflow_name: str) -> str:
    """Id of the newest checkpoint of ``workflow_name`` that has pending requests."""
    checkpoints = await storage.list_checkpoints(workflow_name=workflow_name)
    pauses = [c for c in checkpoints if c.pending_request_info_events]
    assert pauses, "no pause checkpoint was saved"
    return max(pauses, key=lambda c: c.timestamp).checkpoint_id


@pytest.fixture
def pause_checkpoint_id() -> Callable[[CheckpointStorage, str], Awaitable[str]]:
    """``await pause_checkpoint_id(storage, workflow_name)`` -> newest pause checkpoint id."""
    return latest_pause_checkpoint_id


# ---------------------------------------------------------------- a real PostgreSQL server (tests/postgres_server.py)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 for this test session; yields its URL.

    Fails (never skips) when PostgreSQL is missing: run ``scripts/services/postgres.sh``.
    """
    advice = missing_postgres_advice()
    if advice is not None:
        pytest.fail(advice, pytrace=False)
    server = PostgresServer()
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def postgres_servers() -> Iterator[Callable[[], PostgresServer]]:
    """Start private PostgreSQL clusters (``make()``) that a test may SIGKILL and restart; all stop afterwards."""
    advice = missing_postgres_advice()
    if advice is not None:
        pytest.fail(advice, pytrace=False)
    started: list[PostgresServer] = []

    def make() -> PostgresServer:
        server = PostgresServer()
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.stop()


# ---------------------------------------------------------------- a real redis-server (tests/redis_server.py)


@pytest.fixture(scope="session")
def redis_binary() -> str:
    """Path of Debian's redis-server; fails (never skips) when it is missing."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "redis-server is not installed, and the durable tests need a real one. Install it with "
            "`bash scripts/services/redis.sh` (or `apt-get install -y redis-server`) and run the tests again.",
            pytrace=False,
        )
    return binary


@pytest.fixture(scope="session")
def redis_server(redis_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server on 127.0.0.1 for this test session, AOF fsynced on every write; yields its URL.

    ``appendfsync always`` is what the store's default ``durability="fsync"`` asks for, so every
    Redis test runs against the configuration "Redis" in the docs tells hosts to use.
    """
    server = RedisServer(redis_binary, tmp_path_factory.mktemp("redis-session"), *REDIS_DURABLE_OPTIONS)
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()
