"""``devui_app`` bounds DevUI's conversation store (DevUI's own keeps every conversation for good).

A conversation no request used for the agent's ``continuation_ttl`` is dropped, and past
``max_conversations`` the least recently used ones; the approvals DevUI tracks for a dropped one go too.
The touches of DevUI's private API (``hosting/_devui_store.py``) are pinned here.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from agent_framework import AgentResponse
from agent_framework_devui import DevServer
from agent_framework_devui._conversations import InMemoryConversationStore
from agent_framework_devui._executor import AgentFrameworkExecutor
from hosting_support import make_agent

from agent_framework_functional import RunContext, workflow
from agent_framework_functional.hosting import devui_app
from agent_framework_functional.hosting._devui_store import BoundedConversationStore
from agent_framework_functional.hosting._turn import ConversationBusy
from agent_framework_functional.hosting.devui import DevUIAgent

pytestmark = pytest.mark.usefixtures("no_global_tracer_provider")

TOKEN = "devui-store-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_devui_private_api_the_store_relies_on() -> None:
    """What ``_devui_store`` reads or replaces in DevUI: if DevUI changes it, this fails first."""
    assert inspect.iscoroutinefunction(DevServer._ensure_executor)  # pyright: ignore[reportPrivateUsage]
    store = InMemoryConversationStore()
    assert store._conversations == {} and store._item_index == {}  # pyright: ignore[reportPrivateUsage]
    made = store.create_conversation()
    session = store.get_session(made.id)
    assert session is not None and session.session_id == made.id  # DevUIAgent finds its conversation so
    init = inspect.signature(AgentFrameworkExecutor.__init__).parameters
    assert "conversation_store" in init
    source = inspect.getsource(AgentFrameworkExecutor.__init__)
    for name in ("self.conversation_store", "self.checkpoint_manager", "self._pending_approvals"):
        assert name in source


def test_idle_conversations_go_after_the_ttl_and_used_ones_stay() -> None:
    clock = Clock()
    store = BoundedConversationStore(ttl=60, max_conversations=100, clock=clock)
    idle = store.create_conversation().id
    used = store.create_conversation().id
    clock.now += 40
    assert store.get_session(used) is not None  # a use: its idle time starts again
    clock.now += 30
    fresh = store.create_conversation().id
    assert store.get_conversation(idle) is None
    assert store.get_session(used) is not None and store.get_session(fresh) is not None
    assert len(store) == 2
    with pytest.raises(ValueError, match="ttl"):
        BoundedConversationStore(ttl=0)
    with pytest.raises(ValueError, match="max_conversations"):
        BoundedConversationStore(ttl=1, max_conversations=0)


async def test_a_conversation_with_a_turn_running_is_not_dropped_for_idleness() -> None:
    clock = Clock()
    store = BoundedConversationStore(ttl=60, max_conversations=100, clock=clock)
    running = store.create_conversation().id
    store.running = {running}  # what a DevUIAgent's turns hold (``Turns.busy``)
    clock.now += 100  # a turn longer than the TTL (DevUI reads the session only when a turn starts)
    store.create_conversation()
    assert store.get_session(running) is not None
    store.running = set()
    await store.set(running, store.get_session(running))  # the turn's write back: a use
    clock.now += 61
    store.create_conversation()
    assert store.get_conversation(running) is None  # idle for the TTL after its turn ended


async def test_a_turn_running_past_the_ttl_counts_as_a_use_for_the_count_too() -> None:
    clock = Clock()
    store = BoundedConversationStore(ttl=60, max_conversations=2, clock=clock)
    running = store.create_conversation().id
    store.running = {running}
    clock.now += 30
    idle = store.create_conversation().id
    clock.now += 40  # the turn runs past the TTL, the other conversation is idle
    fresh = store.create_conversation().id
    clock.now += 1
    assert store.get_session(fresh) is not None  # past the count: the least recently used goes
    assert store.get_conversation(running) is not None  # a running turn counts as used now, not when it started
    assert store.get_conversation(idle) is None


def test_creating_a_conversation_under_the_id_of_an_expired_one_keeps_the_new_one() -> None:
    clock = Clock()
    store = BoundedConversationStore(ttl=60, max_conversations=100, clock=clock)
    store.create_conversation(conversation_id="named")
    clock.now += 100  # expired, not yet dropped (nothing used the store since)
    assert store.create_conversation(conversation_id="named").id == "named"
    assert store.get_conversation("named") is not None and len(store) == 1


async def test_past_the_count_the_least_recently_used_go() -> None:
    clock = Clock()
    store = BoundedConversationStore(ttl=60, max_conversations=3, clock=clock)
    ids = [store.create_conversation().id for _ in range(3)]
    clock.now += 1
    await store.add_items(ids[0], [{"type": "message", "role": "user", "content": "hi"}])  # the first is used
    store.create_conversation()
    assert store.get_conversation(ids[1]) is None  # the least recently used went, not the oldest made
    assert store.get_conversation(ids[0]) is not None and len(store) == 3
    assert [c.id for c in await store.list_conversations_by_metadata({})].count(ids[0]) == 1


def test_devui_app_keeps_at_most_max_conversations_and_their_approvals(serve: Any, http: httpx.Client) -> None:
    app = devui_app(make_agent(), auth_token=TOKEN, max_conversations=3)
    base = serve(app).base
    entity = http.get(f"{base}/v1/entities", headers=AUTH).json()["entities"][0]["id"]
    made: list[str] = []
    for index in range(5):  # five conversations left paused
        created = http.post(f"{base}/v1/conversations", json={"metadata": {"agent_id": entity}}, headers=AUTH)
        made.append(created.json()["id"])
        body = {"metadata": {"entity_id": entity}, "conversation": made[-1], "input": f"app{index}", "stream": True}
        reply = http.post(f"{base}/v1/responses", json=body, headers=AUTH)
        assert "response.function_approval.requested" in reply.text
    store = app.state.devui_conversations
    assert isinstance(store, BoundedConversationStore) and len(store) == 3
    assert not store.running  # every turn DevUI ran ended
    assert http.get(f"{base}/v1/conversations/{made[0]}", headers=AUTH).status_code == 404
    assert http.get(f"{base}/v1/conversations/{made[4]}", headers=AUTH).status_code == 200
    approvals = store.approvals  # DevUI's executor's tracked approvals, pruned with their conversations
    assert approvals is not None
    kept = {key[0] for key in approvals if isinstance(key, tuple)}
    assert kept and kept <= set(made[2:])


async def test_a_conversation_runs_one_turn_at_a_time_and_its_end_is_a_use() -> None:
    """Each DevUI run is a ``Turn`` of its conversation (``hosting/_turn.py``): a second one meanwhile is refused."""
    clock = Clock()
    store = BoundedConversationStore(ttl=60, max_conversations=100, clock=clock)
    agent = DevUIAgent(make_agent(), store)
    conversation = store.create_conversation().id
    session = store.get_session(conversation)
    first = agent.run("deploy one-at-a-time", stream=True, session=session)
    assert store.running == {conversation}
    with pytest.raises(ConversationBusy, match="still running"):
        agent.run("deploy again", stream=True, session=session)
    clock.now += 100  # a turn longer than the TTL
    async for _ in first:
        pass
    assert not store.running  # ended with its stream, written back (a use: its idle time starts now)
    clock.now += 30
    store.create_conversation()
    assert store.get_conversation(conversation) is not None


@workflow(name="sleeper", description="sleeps, then answers")
async def sleeper(text: str, ctx: RunContext) -> str:
    await asyncio.sleep(5)
    return "late"


async def test_a_hung_up_turn_ends_and_frees_its_conversation() -> None:
    """A client's hang-up cancels the response with an anyio cancel scope, again at every await: the turn must end
    anyway (a cleanup hook stopped at the second cancellation and left the conversation refused for good)."""
    store = BoundedConversationStore(ttl=600, max_conversations=100)
    agent = DevUIAgent(make_agent(sleeper), store)
    conversation = store.create_conversation().id
    stream = agent.run("slow", stream=True, session=store.get_session(conversation))
    with anyio.move_on_after(0.3):
        async for _ in stream:
            pass
    await asyncio.sleep(0.1)
    assert not store.running


async def test_a_stream_dropped_at_an_update_ends_its_turn() -> None:
    """DevUI drops its generator at a ``yield`` when its own code fails after our update (no ``aclose``): the event
    loop closes the abandoned generator, and the turn ends with it."""
    store = BoundedConversationStore(ttl=600, max_conversations=100)
    agent = DevUIAgent(make_agent(), store)
    conversation = store.create_conversation().id
    session = store.get_session(conversation)

    async def execute_agent() -> AsyncIterator[Any]:
        stream = agent.run("deploy dropped", stream=True, session=session)
        async for update in stream:
            yield update
        await stream.get_final_response()

    with pytest.raises(RuntimeError):
        async for _ in execute_agent():
            raise RuntimeError("the host's error after our first update")
    for _ in range(3):
        gc.collect()
        await asyncio.sleep(0.05)
    assert not store.running
    other = store.get_session(store.create_conversation().id)
    final = await agent.run("deploy other", stream=True, session=other).get_final_response()
    assert isinstance(final, AgentResponse)  # the turn's stream keeps the agent's final response
    assert final.continuation_token is not None
