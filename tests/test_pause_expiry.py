"""One pause TTL: the token, the conversation's live instance and the pause's checkpoint expire together.

Also the bound on live instances without a store (``max_conversations``, least recently paused first,
never a running one), and abandonment deleting the pause's checkpoint files.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentResponse, AgentSession, FileCheckpointStorage, Message, RunContext

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflowAgent,
    SQLiteContinuationStore,
    StaleContinuationError,
    _authority,
    _continuation,
    _session,
    workflow,
)
from agent_framework_functional._expiry import checkpoint_deletions
from agent_framework_functional._session import attached_instances

TTL = 60.0
GATE: dict[str, asyncio.Event] = {}


class Clock:
    """The wall clock the pause expiry reads, moved forward by the test (no sleeping, no timing)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    for module in (_authority, _continuation, _session):
        monkeypatch.setattr(module, "time", fake)
    return fake


@workflow(name="deployer")
async def deployer(target: str, ctx: RunContext) -> str:
    if target.startswith("slow"):
        GATE["started"].set()
        await GATE["go"].wait()
    approved = await ctx.request_info({"action": "deploy", "target": target}, response_type=bool)
    return f"deployed {target}" if approved else f"skipped {target}"


def approve(response: AgentResponse) -> Message:
    return Message("user", [response.user_input_requests[0].to_function_approval_response(approved=True)])


def files(folder: Path) -> int:
    return len(list(folder.glob("*.json"))) if folder.exists() else 0


async def pause_many(agent: FunctionalWorkflowAgent, count: int) -> list[tuple[AgentSession, AgentResponse]]:
    paused: list[tuple[AgentSession, AgentResponse]] = []
    for i in range(count):
        session = agent.create_session()
        paused.append((session, await agent.run(f"app{i}", session=session)))
    return paused


# ---------------------------------------------------------------------------------------------- one TTL


def test_continuation_ttl_defaults_to_24_hours_and_is_set_in_one_place(tmp_path: Path) -> None:
    assert deployer.build().continuation_ttl == 24 * 3600.0
    assert deployer.build(continuation_ttl=timedelta(minutes=5)).as_agent().continuation_ttl == 300.0
    storage = FileCheckpointStorage(tmp_path / "cp")
    store = SQLiteContinuationStore(tmp_path / "c.db", ttl=600)
    with_store = deployer.build(checkpoint_storage=storage, continuation_store=store)
    assert with_store.continuation_ttl == 600.0 == with_store.as_agent().continuation_ttl
    assert deployer.build(checkpoint_storage=storage, continuation_store=store, continuation_ttl=600).continuation_ttl
    with pytest.raises(ValueError, match="one TTL"):
        deployer.build(checkpoint_storage=storage, continuation_store=store, continuation_ttl=60)
    store.close()
    with pytest.raises(ValueError, match="continuation_ttl"):
        deployer.build(continuation_ttl=0)


async def test_an_expired_pause_is_refused_and_new_input_runs(tmp_path: Path, clock: Clock) -> None:
    folder = tmp_path / "cp"
    wf = deployer.build(checkpoint_storage=FileCheckpointStorage(folder), continuation_ttl=TTL)
    paused = await wf.run("a")
    request_id = paused.get_request_info_events()[0].request_id
    assert wf.has_pending_continuation and files(folder) == 1
    clock.advance(TTL * 1.5)
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={request_id: True}, continuation_token=paused.continuation_token)
    assert not wf.has_pending_continuation
    await checkpoint_deletions()
    assert files(folder) == 0  # the expired pause's checkpoint went with it
    again = await wf.run("b")  # no PendingContinuationError: the expired pause holds nothing
    assert again.continuation_token is not None


async def test_an_answer_after_expiry_gets_the_stale_error_and_the_instance_is_released(
    tmp_path: Path, clock: Clock
) -> None:
    folder = tmp_path / "cp"
    agent = deployer.build(checkpoint_storage=FileCheckpointStorage(folder), continuation_ttl=TTL).as_agent()
    [(session, paused)] = await pause_many(agent, 1)
    clock.advance(TTL * 1.5)
    with pytest.raises(StaleContinuationError):
        agent.run(approve(paused), session=session)
    assert attached_instances(agent.workflow) == 0
    await checkpoint_deletions()
    assert files(folder) == 0
    assert (await agent.run("fresh", session=session)).continuation_token is not None  # new input starts over


async def test_unanswered_pauses_are_released_within_one_ttl(tmp_path: Path, clock: Clock) -> None:
    folder = tmp_path / "cp"
    agent = deployer.build(checkpoint_storage=FileCheckpointStorage(folder), continuation_ttl=TTL).as_agent()
    await pause_many(agent, 30)
    assert attached_instances(agent.workflow) == 30 and files(folder) == 30
    clock.advance(TTL * 1.5)
    await pause_many(agent, 1)  # any new conversation sweeps the expired ones
    await checkpoint_deletions()
    assert attached_instances(agent.workflow) == 1
    assert files(folder) == 1


async def test_with_a_store_instances_of_expired_records_are_released(tmp_path: Path, clock: Clock) -> None:
    folder = tmp_path / "cp"
    store = SQLiteContinuationStore(tmp_path / "c.db", ttl=TTL, clock=clock.time)
    try:
        agent = deployer.build(checkpoint_storage=FileCheckpointStorage(folder), continuation_store=store).as_agent()
        paused = await pause_many(agent, 20)
        assert attached_instances(agent.workflow) == 20
        clock.advance(TTL * 1.5)
        await pause_many(agent, 1)
        await checkpoint_deletions()
        assert attached_instances(agent.workflow) == 1
        assert files(folder) == 1
        session, response = paused[0]
        with pytest.raises(ContinuationAuthorityError):
            await agent.run(approve(response), session=session)
    finally:
        await store.aclose()


# ---------------------------------------------------------------------------------------------- max count


async def test_max_conversations_evicts_the_least_recently_paused_first() -> None:
    agent = deployer.build().as_agent(max_conversations=3)
    paused = await pause_many(agent, 3)
    # Re-pause the oldest one (answer it into a new conversation turn on the same session).
    session0, response0 = paused[0]
    assert (await agent.run(approve(response0), session=session0)).text == "deployed app0"
    repaused0 = await agent.run("again", session=session0)
    paused[0] = (session0, repaused0)
    await pause_many(agent, 1)  # a fourth: app1 is now the least recently paused
    assert attached_instances(agent.workflow) == 3
    with pytest.raises(StaleContinuationError):
        agent.run(approve(paused[1][1]), session=paused[1][0])
    assert (await agent.run(approve(paused[0][1]), session=paused[0][0])).text == "deployed again"
    assert (await agent.run(approve(paused[2][1]), session=paused[2][0])).text == "deployed app2"


async def test_memory_stays_bounded_by_max_conversations(tmp_path: Path) -> None:
    folder = tmp_path / "cp"
    agent = deployer.build(checkpoint_storage=FileCheckpointStorage(folder)).as_agent(max_conversations=10)
    await pause_many(agent, 200)
    await checkpoint_deletions()
    assert attached_instances(agent.workflow) == 10
    assert files(folder) == 10  # evicted pauses took their checkpoints with them


async def test_a_running_conversation_is_never_evicted() -> None:
    GATE["started"], GATE["go"] = asyncio.Event(), asyncio.Event()
    agent = deployer.build().as_agent(max_conversations=1)
    slow_session = agent.create_session()
    slow = asyncio.ensure_future(agent.run("slow", session=slow_session))
    await GATE["started"].wait()
    paused = await pause_many(agent, 2)  # over the bound, but the running one stays
    assert agent.workflow_for(slow_session) is not None
    assert attached_instances(agent.workflow) == 2  # the running one and the latest pause
    GATE["go"].set()
    slow_paused = await slow
    assert (await agent.run(approve(slow_paused), session=slow_session)).text == "deployed slow"
    with pytest.raises(StaleContinuationError):
        agent.run(approve(paused[0][1]), session=paused[0][0])


def test_max_conversations_must_be_a_positive_int() -> None:
    for bad in (0, -1, 1.5, "3", True):
        with pytest.raises(ValueError, match="max_conversations"):
            deployer.build().as_agent(max_conversations=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- abandonment


@pytest.mark.parametrize("force", [False, True])
async def test_abandonment_deletes_the_pause_checkpoint_files(tmp_path: Path, force: bool) -> None:
    folder = tmp_path / "cp"
    agent = deployer.build(checkpoint_storage=FileCheckpointStorage(folder)).as_agent()
    paused = await pause_many(agent, 20)
    assert files(folder) == 20
    for session, _ in paused[:10]:
        agent.abandon_continuation(force=force, session=session)
    for session, _ in paused[10:]:
        await agent.abandon_continuation_async(force=force, session=session)
    await checkpoint_deletions()
    assert files(folder) == 0
    assert attached_instances(agent.workflow) == 0


async def test_abandonment_with_a_store_deletes_the_checkpoint_files(tmp_path: Path) -> None:
    folder = tmp_path / "cp"
    store = SQLiteContinuationStore(tmp_path / "c.db")
    try:
        agent = deployer.build(checkpoint_storage=FileCheckpointStorage(folder), continuation_store=store).as_agent()
        paused = await pause_many(agent, 6)
        for session, _ in paused[:3]:
            await agent.abandon_continuation_async(force=True, session=session)
        # A pause held by another process (a fresh agent on the same store and storage) abandoned by token.
        other: Any = deployer.build(checkpoint_storage=FileCheckpointStorage(folder), continuation_store=store)
        for _, response in paused[3:]:
            await other.abandon_continuation_async(response.continuation_token)
        assert files(folder) == 0
    finally:
        await store.aclose()


async def test_retention_none_keeps_them_on_abandonment(tmp_path: Path) -> None:
    folder = tmp_path / "cp"

    @workflow(name="kept", checkpoint_retention=None)
    async def kept(target: str, ctx: RunContext) -> str:
        return str(await ctx.request_info({"target": target}, response_type=bool))

    agent = kept.build(checkpoint_storage=FileCheckpointStorage(folder)).as_agent()
    session = agent.create_session()
    await agent.run("a", session=session)
    saved = files(folder)
    await agent.abandon_continuation_async(session=session)
    await checkpoint_deletions()
    assert files(folder) == saved > 0


async def test_with_a_store_an_evicted_conversation_still_resumes_through_the_store(tmp_path: Path) -> None:
    store = SQLiteContinuationStore(tmp_path / "c.db")
    try:
        storage = FileCheckpointStorage(tmp_path / "cp")
        agent = deployer.build(checkpoint_storage=storage, continuation_store=store).as_agent(max_conversations=1)
        paused = await pause_many(agent, 3)
        assert attached_instances(agent.workflow) == 1  # only the instances went
        for session, response in paused:
            assert (await agent.run(approve(response), session=session)).text.startswith("deployed app")
    finally:
        await store.aclose()
