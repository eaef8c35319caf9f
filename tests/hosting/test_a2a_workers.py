"""``a2a_app`` on two workers sharing one task store (a2a-sdk's ``DatabaseTaskStore`` on SQLite), one session store,
one continuation store and one checkpoint folder: a finished task stays finished whichever worker wrote it.

An answer on worker two is held inside the resumed workflow (``GATE``, a ``threading.Event`` the test opens), so a
cancel or a second answer on worker one surely meets a running answer; no sleeps decide the order.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client
from a2a.helpers import new_text_part
from a2a.types import CancelTaskRequest, GetTaskRequest, Task, TaskState
from a2a.utils.errors import A2AError
from agent_framework import AgentSession, FileCheckpointStorage, SessionStore
from hosting_support import DEPLOYS, ServerThread
from request_ids import core_id
from test_a2a import client_for, output_of, request_of, send

from agent_framework_functional import RunContext, SQLiteContinuationStore, workflow
from agent_framework_functional.hosting.a2a import a2a_app, new_answer_part

GATE = threading.Event()
"""Opened by the test: the resumed workflow waits on it after its answer."""
ENTERED = threading.Event()
"""Set by the resumed workflow when it got its answer and waits on ``GATE``."""


@workflow(name="held_deployer", description="One bool approval; the resumed run waits for the test's gate.")
async def held_deployer(text: str, ctx: RunContext) -> str:
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    ENTERED.set()
    await asyncio.to_thread(GATE.wait, 60)
    if not approved:
        return f"not deployed: {text}"
    DEPLOYS[text] += 1
    return f"deployed: {text}"


class WorkerSessions(SessionStore):
    """One worker's view of the shared session store; ``hold(skip)`` makes its read after ``skip`` more wait."""

    def __init__(self, shared: SessionStore) -> None:
        super().__init__()
        self.shared = shared
        self.skip: int | None = None
        self.reached = threading.Event()
        self.release = threading.Event()

    def hold(self, skip: int) -> None:
        self.skip = skip

    async def get(self, session_id: str) -> AgentSession | None:
        if self.skip is not None:
            if self.skip == 0:
                self.skip = None
                self.reached.set()
                await asyncio.to_thread(self.release.wait, 30)
            else:
                self.skip -= 1
        return await self.shared.get(session_id)

    async def set(self, session_id: str, session: AgentSession) -> None:
        await self.shared.set(session_id, session)

    async def delete(self, session_id: str) -> None:
        await self.shared.delete(session_id)


SESSIONS: list[WorkerSessions] = []
"""Each worker's view of the shared session store, in the order of ``workers``."""


@pytest.fixture
async def workers(tmp_path: Path) -> AsyncIterator[tuple[Client, Client]]:
    """Two workers (each its own database engine, as two processes) and an a2a-sdk client for each."""
    from a2a.server.tasks import DatabaseTaskStore
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    GATE.clear()
    ENTERED.clear()
    sessions = SessionStore()
    SESSIONS.clear()
    servers: list[ServerThread] = []
    async with SQLiteContinuationStore(tmp_path / "continuations.db") as store:

        def worker() -> str:
            engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'tasks.db'}", poolclass=NullPool)
            agent = held_deployer.build(
                checkpoint_storage=FileCheckpointStorage(tmp_path / "checkpoints"), continuation_store=store
            ).as_agent(name="deployer")
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            url = f"http://127.0.0.1:{port}/"
            SESSIONS.append(WorkerSessions(sessions))
            app = a2a_app(agent, url=url, session_store=SESSIONS[-1], task_store=DatabaseTaskStore(engine))
            servers.append(ServerThread(app, port=port).start())
            return url

        first_url = worker()
        async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
            first = await client_for(first_url, http)
            second = await client_for(worker(), http)
            try:
                yield first, second
            finally:
                GATE.set()
                for view in SESSIONS:
                    view.release.set()
                for server in reversed(servers):
                    server.stop()


async def running(client: Client, task: Task) -> None:
    """Wait until the resumed workflow holds its answer and the store shows the task working."""
    assert await asyncio.to_thread(ENTERED.wait, 30)
    for _ in range(600):
        if (await client.get_task(GetTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_WORKING:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the answer's run never showed as working")


async def test_a_cancel_that_meets_a_running_answer_is_refused(workers: tuple[Client, Client]) -> None:
    """Worker one cancels while worker two runs the answer: refused, and the task ends with the answer's outcome.
    (It reported CANCELED, then the task turned COMPLETED.)"""
    first, second = workers
    paused = await send(first, [new_text_part("a2a-cancel-race")])
    assert core_id(request_of(paused)["request_id"]) == "auto::0"
    answer = asyncio.ensure_future(send(second, [new_answer_part(True, request_of(paused)["request_id"])], paused))
    await running(first, paused)
    with pytest.raises(A2AError, match="answer"):
        await first.cancel_task(CancelTaskRequest(id=paused.id))
    GATE.set()
    assert output_of(await answer) == "deployed: a2a-cancel-race"
    for client in (first, second):
        assert output_of(await client.get_task(GetTaskRequest(id=paused.id))) == "deployed: a2a-cancel-race"
    assert DEPLOYS["a2a-cancel-race"] == 1


async def test_an_answer_that_loses_a_race_never_rewrites_the_finished_task(workers: tuple[Client, Client]) -> None:
    """A second answer on worker one while worker two runs the first, then again once it completed: the task stays
    COMPLETED with one deploy. (The loser wrote ``input-required`` over the winner's completed task.)"""
    first, second = workers
    paused = await send(first, [new_text_part("a2a-answer-race")])
    answer = asyncio.ensure_future(send(second, [new_answer_part(True, request_of(paused)["request_id"])], paused))
    await running(first, paused)
    outcomes: list[Any] = []
    try:
        outcomes.append(await send(first, [new_answer_part(True, request_of(paused)["request_id"])], paused))
    except A2AError as exc:
        outcomes.append(exc)
    GATE.set()
    assert output_of(await answer) == "deployed: a2a-answer-race"
    try:
        outcomes.append(await send(first, [new_answer_part(True, request_of(paused)["request_id"])], paused))
    except A2AError as exc:
        outcomes.append(exc)
    for outcome in outcomes:
        assert isinstance(outcome, A2AError) or outcome.status.state in (
            TaskState.TASK_STATE_WORKING,
            TaskState.TASK_STATE_COMPLETED,
        ), outcome
    for client in (first, second):
        assert output_of(await client.get_task(GetTaskRequest(id=paused.id))) == "deployed: a2a-answer-race"
    assert DEPLOYS["a2a-answer-race"] == 1


@pytest.mark.parametrize("released", ["after the winner completed", "while the winner runs"])
async def test_a_late_answer_never_rewrites_the_finished_task(workers: tuple[Client, Client], released: str) -> None:
    """Worker one takes an answer, then waits (its session read held) while worker two answers; worker one goes on
    once worker two completed the task, or while worker two's answer runs. Either way the task ends COMPLETED
    with one deploy: worker one's late writes never turn it back to working or waiting for input (they did, after
    completion), and it does not fail the task whose answer another worker runs (it did, and then that
    answer's COMPLETED was written over the failure)."""
    first, second = workers
    target = f"a2a-late-{released.split()[0]}"
    paused = await send(first, [new_text_part(target)])
    SESSIONS[0].hold(1)  # the handler's check reads once; the executor's read waits
    late = asyncio.ensure_future(send(first, [new_answer_part(True, request_of(paused)["request_id"])], paused))
    assert await asyncio.to_thread(SESSIONS[0].reached.wait, 30)
    answer = asyncio.ensure_future(send(second, [new_answer_part(True, request_of(paused)["request_id"])], paused))
    if released == "while the winner runs":
        assert await asyncio.to_thread(ENTERED.wait, 30)
        SESSIONS[0].release.set()
        try:
            outcome: Any = await late
        except A2AError as exc:
            outcome = exc
        GATE.set()
    else:
        GATE.set()
        await answer
        SESSIONS[0].release.set()
        try:
            outcome = await late
        except A2AError as exc:
            outcome = exc
    assert output_of(await answer) == f"deployed: {target}"
    assert isinstance(outcome, A2AError) or outcome.status.state in (
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED,
    ), outcome
    for client in (first, second):
        assert output_of(await client.get_task(GetTaskRequest(id=paused.id))) == f"deployed: {target}"
    assert DEPLOYS[target] == 1


async def test_a_cancel_on_the_other_worker_abandons_the_pause(workers: tuple[Client, Client]) -> None:
    """A cancel on the worker that did not take the pause: CANCELED, for good; the answer on the first worker
    runs nothing, and the context takes new input."""
    first, second = workers
    GATE.set()
    paused = await send(first, [new_text_part("a2a-cancel-other")])
    cancelled = await second.cancel_task(CancelTaskRequest(id=paused.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    try:
        outcome: Any = await send(first, [new_answer_part(True, request_of(paused)["request_id"])], paused)
    except A2AError as exc:
        outcome = exc
    assert isinstance(outcome, A2AError) or outcome.status.state == TaskState.TASK_STATE_CANCELED, outcome
    for client in (first, second):
        assert (await client.get_task(GetTaskRequest(id=paused.id))).status.state == TaskState.TASK_STATE_CANCELED
    assert DEPLOYS["a2a-cancel-other"] == 0
    again = await send(second, [new_text_part("a2a-cancel-other-2")], context_id=paused.context_id)
    done = await send(first, [new_answer_part(True, request_of(again)["request_id"])], again)
    assert output_of(done) == "deployed: a2a-cancel-other-2"
