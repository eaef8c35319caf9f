"""Every host releases expired pauses with no request at all: the sweep task its app's lifespan runs.

Each test serves a host whose agent has a short pause TTL, pauses a few conversations over HTTP, then sends
nothing more: within one TTL plus one sweep interval (and a generous margin for a loaded machine) the agent
keeps no instance, the pauses' checkpoints are deleted and the host's store holds nothing; once the server
stops, the sweep task has ended. Without the sweep they stay (expiry is otherwise checked on access only).
"""

from __future__ import annotations

import asyncio
import gc
import secrets
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_part
from a2a.types import Message, Role, SendMessageRequest, TaskState
from agent_framework import InMemoryCheckpointStorage
from agent_framework_ag_ui._approval_lifecycle import ApprovalOccurrence  # pyright: ignore[reportPrivateUsage]
from fastapi import FastAPI
from hosting_support import ServerThread, deployer
from mcp import Client, types

from agent_framework_functional import FunctionalWorkflowAgent, InMemorySessionStore
from agent_framework_functional._continuation import remember_spent
from agent_framework_functional._session import attached_instances
from agent_framework_functional.hosting import (
    ReleaseFreeMemory,
    a2a_app,
    agui_endpoint,
    devui_app,
    mcp_app,
    responses_app,
)
from agent_framework_functional.hosting._sweep import DEFAULT_SWEEP_EVERY, ExpirySweep

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

TTL = 3.0
EVERY = 0.25
PAUSED = 3
MARGIN = 15.0  # seconds past TTL + interval before the test gives up (a loaded machine, never a timing goal)
TOKEN = "sweep-test-token"


class Host:
    """One served host: its agent, checkpoints, what its store holds, and the server."""

    def __init__(
        self, app: Any, agent: FunctionalWorkflowAgent, storage: InMemoryCheckpointStorage, port: int = 0
    ) -> None:
        self.app, self.agent, self.storage = app, agent, storage
        self.store_size: Callable[[], int] = lambda: 0
        self.server = ServerThread(app, port=port).start()
        (self.sweep,) = app.state.expiry_sweeps
        assert isinstance(self.sweep, ExpirySweep) and self.sweep.every == EVERY

    @property
    def base(self) -> str:
        return self.server.base

    async def kept(self) -> tuple[int, int, int]:
        """(attached instances, checkpoints, store entries)."""
        checkpoints = await self.storage.list_checkpoint_ids(workflow_name="deployer")
        return attached_instances(self.agent.workflow), len(checkpoints), self.store_size()

    async def released_without_traffic(self) -> None:
        """Sends nothing: waits until nothing is kept, at most TTL + interval + MARGIN; then stops the server."""
        before = await self.kept()
        assert before[0] == PAUSED and before[1] >= PAUSED, before
        paused_at = time.monotonic()
        deadline = paused_at + 2 * TTL + EVERY + MARGIN  # AG-UI drops an expired approval one TTL after it expired
        while (kept := await self.kept()) != (0, 0, 0) and time.monotonic() < deadline:  # noqa: ASYNC110 - another thread
            await asyncio.sleep(0.1)
        assert kept == (0, 0, 0), f"still kept after {time.monotonic() - paused_at:.1f} s: {kept}"
        assert self.sweep.sweeps > 0
        task = self.sweep.task
        assert task is not None and not task.done()
        self.server.stop()
        assert task.done() and self.sweep.task is None  # the lifespan stopped it


def agent_and_storage() -> tuple[FunctionalWorkflowAgent, InMemoryCheckpointStorage]:
    storage = InMemoryCheckpointStorage()
    return deployer.build(checkpoint_storage=storage, continuation_ttl=TTL).as_agent(name="deployer"), storage


@pytest.fixture
async def http() -> Any:
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        yield client


async def test_responses_app_releases_expired_pauses_with_no_request(http: httpx.AsyncClient) -> None:
    agent, storage = agent_and_storage()
    sessions = InMemorySessionStore(ttl=TTL)
    host = Host(responses_app(agent, session_store=sessions, sweep_every=EVERY), agent, storage)
    host.store_size = lambda: len(sessions)
    for n in range(PAUSED):
        reply = await http.post(f"{host.base}/v1/responses", json={"input": f"sweep-r{n}"})
        assert [i["type"] for i in reply.json()["output"]].count("mcp_approval_request") == 1, reply.text
    assert len(sessions) == PAUSED
    await host.released_without_traffic()


async def test_agui_endpoint_releases_expired_pauses_with_no_request(http: httpx.AsyncClient) -> None:
    agent, storage = agent_and_storage()
    snapshots = InMemorySessionStore(ttl=TTL)
    app = FastAPI()
    agui_endpoint(app, agent, "/agent", snapshot_store=snapshots, single_user=True, sweep_every=EVERY)
    host = Host(app, agent, storage)
    approvals = sum(isinstance(obj, ApprovalOccurrence) for obj in gc.get_objects())
    # the snapshots, and AG-UI's approvals (unanswered: expired at one TTL, then dropped one TTL later)
    host.store_size = lambda: (
        len(snapshots) + sum(isinstance(o, ApprovalOccurrence) for o in gc.get_objects()) - approvals
    )
    for n in range(PAUSED):
        body = {
            "threadId": uuid.uuid4().hex,
            "runId": uuid.uuid4().hex,
            "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": f"sweep-a{n}"}],
            **{"tools": [], "context": [], "state": {}, "forwardedProps": {}},
        }
        reply = await http.post(f"{host.base}/agent", json=body, headers={"Accept": "text/event-stream"})
        assert '"interrupt"' in reply.text, reply.text
    deadline = time.monotonic() + 10  # AG-UI saves the thread's snapshot after the run (detached)
    while len(snapshots) < PAUSED and time.monotonic() < deadline:  # noqa: ASYNC110 - the server thread saves
        await asyncio.sleep(0.02)
    await host.released_without_traffic()


@pytest.mark.usefixtures("no_global_tracer_provider")
async def test_devui_app_releases_expired_pauses_and_conversations_with_no_request(http: httpx.AsyncClient) -> None:
    agent, storage = agent_and_storage()
    app = devui_app(agent, auth_token=TOKEN, sweep_every=EVERY)
    host = Host(app, agent, storage)
    conversations = app.state.devui_conversations
    host.store_size = lambda: len(conversations)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    entity = (await http.get(f"{host.base}/v1/entities", headers=auth)).json()["entities"][0]["id"]
    for n in range(PAUSED):
        created = await http.post(
            f"{host.base}/v1/conversations", json={"metadata": {"agent_id": entity}}, headers=auth
        )
        body = {"metadata": {"entity_id": entity}, "conversation": created.json()["id"], "stream": True}
        reply = await http.post(f"{host.base}/v1/responses", json={**body, "input": f"sweep-d{n}"}, headers=auth)
        assert "response.function_approval.requested" in reply.text, reply.text
    await host.released_without_traffic()


async def test_a2a_app_releases_expired_pauses_with_no_request(http: httpx.AsyncClient) -> None:
    agent, storage = agent_and_storage()
    sessions = InMemorySessionStore(ttl=TTL)
    with socket.socket() as probe:  # the agent card names the URL before the server starts
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    host = Host(a2a_app(agent, url=url, session_store=sessions, sweep_every=EVERY), agent, storage, port=port)
    host.store_size = lambda: len(sessions)
    client = await create_client(url, ClientConfig(httpx_client=http, streaming=False))
    for n in range(PAUSED):
        message = Message(role=Role.ROLE_USER, parts=[new_text_part(f"sweep-a2a{n}")], message_id=uuid.uuid4().hex)
        events = [event async for event in client.send_message(SendMessageRequest(message=message))]
        assert events[-1].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, events[-1]
    await host.released_without_traffic()


async def test_mcp_app_releases_expired_pauses_with_no_request() -> None:
    agent, storage = agent_and_storage()
    host = Host(mcp_app(agent, key=b"sweep-test-key-0123456789abcdef0", sweep_every=EVERY), agent, storage)
    async with Client(f"{host.base}/mcp") as client:
        for n in range(PAUSED):
            paused = await client.session.call_tool("deployer", {"task": f"sweep-m{n}"}, allow_input_required=True)
            assert isinstance(paused, types.InputRequiredResult), paused
    await host.released_without_traffic()


def test_a2a_and_mcp_hand_free_pages_back_by_default() -> None:
    agent, _ = agent_and_storage()
    for app in (a2a_app(agent, url="http://127.0.0.1:1/"), mcp_app(agent, key=b"k" * 32)):
        assert [m.kwargs["every"] for m in app.user_middleware if m.cls is ReleaseFreeMemory] == [60.0]
        (sweep,) = app.state.expiry_sweeps
        assert sweep.every == TTL / 4
    for app in (
        a2a_app(agent, url="http://127.0.0.1:1/", release_memory_every=None, sweep_every=None),
        mcp_app(agent, key=b"k" * 32, release_memory_every=None, sweep_every=None),
    ):
        assert not [m for m in app.user_middleware if m.cls is ReleaseFreeMemory]
        assert not hasattr(app.state, "expiry_sweeps")


async def test_a_sweep_that_dropped_spent_token_notes_hands_free_pages_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose answered conversations leave nothing but spent-token notes (MCP: no store) still trims."""
    released: list[bool] = []
    monkeypatch.setattr(ReleaseFreeMemory, "release_now", staticmethod(lambda: released.append(True) or True))
    agent, _ = agent_and_storage()
    remember_spent(secrets.token_urlsafe(32), keep_for=0.01)
    await asyncio.sleep(0.05)
    assert await ExpirySweep(agent, every=EVERY).sweep() >= 1
    assert released == [True]
    assert await ExpirySweep(agent, every=EVERY).sweep() == 0  # nothing dropped: no release
    assert released == [True]
    assert await ExpirySweep(agent, every=EVERY, release_memory=False).sweep() == 0


def test_the_interval_is_at_most_a_quarter_of_the_ttl_and_none_turns_the_sweep_off() -> None:
    agent, _ = agent_and_storage()
    (sweep,) = responses_app(agent).state.expiry_sweeps
    assert sweep.every == TTL / 4  # min(60 s, TTL / 4)
    long_lived = deployer.build().as_agent(name="deployer")
    (sweep,) = responses_app(long_lived).state.expiry_sweeps
    assert sweep.every == DEFAULT_SWEEP_EVERY == 60.0
    assert not hasattr(responses_app(agent, sweep_every=None).state, "expiry_sweeps")
    app = FastAPI()
    agui_endpoint(app, agent, "/one", single_user=True, sweep_every=1)
    agui_endpoint(app, agent, "/two", single_user=True, sweep_every=None)
    assert [s.every for s in app.state.expiry_sweeps] == [0.75]


@pytest.mark.parametrize("every", [0, -1, float("nan"), float("inf"), True, "60"])
def test_a_bad_interval_is_refused_naming_the_option(every: Any) -> None:
    agent, _ = agent_and_storage()
    with pytest.raises(ValueError, match="sweep_every must be a positive, finite number"):
        responses_app(agent, sweep_every=every)
    with pytest.raises(ValueError, match="sweep_every must be a positive, finite number"):
        devui_app(agent, auth_token=TOKEN, sweep_every=every)
    app = FastAPI()
    with pytest.raises(ValueError, match="sweep_every must be a positive, finite number"):
        agui_endpoint(app, agent, "/agent", single_user=True, sweep_every=every)
    assert app.user_middleware == []
    with pytest.raises(ValueError, match="sweep_every must be a positive, finite number"):
        a2a_app(agent, url="http://127.0.0.1:1/", sweep_every=every)
    with pytest.raises(ValueError, match="sweep_every must be a positive, finite number"):
        mcp_app(agent, key=b"k" * 32, sweep_every=every)
