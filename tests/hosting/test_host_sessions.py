"""What the hosts keep per conversation when they are given no store: bounded, and what they drop.

The Responses route keeps each conversation's session in a bounded ``InMemorySessionStore`` (TTL from the
last write, the least recently written dropped past ``max_entries``) and frees its busy key when a request
ends; AG-UI's endpoint keeps thread snapshots the same way without ``snapshot_store``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from typing import Any

import httpx
import pytest
from agent_framework_ag_ui import AGUIThreadSnapshot, InMemoryAGUIThreadSnapshotStore
from agent_framework_ag_ui._approval_lifecycle import ApprovalOccurrence  # pyright: ignore[reportPrivateUsage]
from agui_support import BUSY, Thread, errors, text_of
from fastapi import FastAPI
from hosting_support import DEPLOYS, HangUps, deployer, make_agent
from responses_support import Responses, approval_items, approve
from responses_support import text_of as response_text

from agent_framework_functional import InMemorySessionStore
from agent_framework_functional._store import DEFAULT_TTL_SECONDS
from agent_framework_functional.hosting import ThreadSnapshotStore, agui_endpoint, responses_app

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out


def test_responses_app_keeps_sessions_in_a_bounded_store_by_default(serve: Any, http: httpx.Client) -> None:
    app = responses_app(make_agent())
    host = app.state.responses_host
    assert isinstance(host.turns.session_store, InMemorySessionStore)
    assert host.turns.session_store.records.ttl == DEFAULT_TTL_SECONDS
    assert host.turns.session_store.records.max_entries == 10_000


def test_every_host_keeps_sessions_for_the_agents_pause_ttl() -> None:
    """One TTL: without a store, the sessions a host keeps live as long as the agent's pause (its token)."""
    from agent_framework_functional.hosting._snapshots import snapshot_store_for

    agent = deployer.build(continuation_ttl=90).as_agent(name="deployer")
    assert agent.continuation_ttl == 90
    assert responses_app(agent).state.responses_host.turns.session_store.records.ttl == 90
    snapshots = snapshot_store_for(None, agent)
    assert isinstance(snapshots, ThreadSnapshotStore)
    assert snapshots.sessions.records.ttl == 90  # type: ignore[attr-defined]


def test_responses_sessions_past_max_entries_are_dropped_oldest_first(serve: Any, http: httpx.Client) -> None:
    sessions = InMemorySessionStore(max_entries=4)
    app = responses_app(deployer.build().as_agent(name="deployer"), session_store=sessions)
    client = Responses(http, serve(app).base)
    first = client.call({"input": "first", "conversation": "c-first"})
    for number in range(6):  # each conversation: one session (and the busy key only while its request runs)
        client.call({"input": f"later-{number}", "conversation": f"c-{number}"})
    assert len(sessions) == 4
    assert app.state.responses_host.turns.busy == set()
    (request,) = approval_items(first)
    reply = client.post({"input": [approve(request["id"])], "conversation": "c-first"})
    # The oldest conversation's session (and its token) was dropped: the answer is refused, nothing runs.
    assert reply.status_code == 409, reply.text
    assert reply.json()["error"]["code"] == "continuation_refused"
    assert DEPLOYS["first"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_responses_a_paused_conversation_whose_session_was_evicted_takes_new_input(
    serve: Any, http: httpx.Client, stream: bool
) -> None:
    """Past ``max_entries`` the paused conversation's session (its token) is dropped: the answer gets 409
    ``continuation_refused`` (start over), and new input starts a new turn instead of 409 ``pending_request``
    ("answer it first", which the client no longer can) until the pause's TTL."""
    sessions = InMemorySessionStore(max_entries=2)
    app = responses_app(deployer.build().as_agent(name="deployer"), session_store=sessions)
    client = Responses(http, serve(app).base)
    conversation = {"conversation": f"c-evicted-{stream}"}
    first = client.call({**conversation, "input": f"evicted first {stream}"})
    for number in range(2):
        client.call({"conversation": f"c-evicting-{stream}-{number}", "input": "evicting"})
    (request,) = approval_items(first)
    refused = client.post({**conversation, "input": [approve(request["id"])], "stream": stream})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "continuation_refused"
    body = {**conversation, "input": f"evicted again {stream}"}
    again = client.stream(body)[1] if stream else client.call(body)  # was 409 pending_request
    (request,) = approval_items(again)
    done = client.call({**conversation, "input": [approve(request["id"])]})
    assert response_text(done) == f"deployed: evicted again {stream}"
    assert DEPLOYS[f"evicted first {stream}"] == 0


def test_responses_new_input_on_an_earlier_finished_response_keeps_the_chains_pause(
    serve: Any, http: httpx.Client
) -> None:
    """R1 pauses, R2 answers it, R3 (after R2) pauses: new input after R2 again is a branch from a snapshot that
    held nothing pending, not an evicted session, so it gets 409 ``pending_request`` and R3 stays answerable
    (it was taken for an orphan: 200, R3 abandoned)."""
    client = Responses(http, serve(responses_app(deployer.build().as_agent(name="deployer"))).base)
    first = client.call({"input": "branch one"})
    (request,) = approval_items(first)
    second = client.call({"input": [approve(request["id"])], "previous_response_id": first["id"]})
    third = client.call({"input": "branch three", "previous_response_id": second["id"]})
    branch = client.post({"input": "branch two", "previous_response_id": second["id"]})
    assert branch.status_code == 409, branch.text
    assert branch.json()["error"]["code"] == "pending_request"
    (request,) = approval_items(third)
    done = client.call({"input": [approve(request["id"])], "previous_response_id": third["id"]})
    assert response_text(done) == "deployed: branch three"
    assert DEPLOYS["branch two"] == 0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("lost", ["evicted", "expired"])
def test_agui_a_paused_thread_whose_snapshot_was_dropped_takes_new_input(
    serve: Any, http: httpx.Client, tmp_path: Any, lost: str
) -> None:
    """The thread's snapshot (with its token) is dropped from the session store, past ``max_entries`` (in memory)
    or its ``ttl`` (SQLite, a clock moved on): the answer gets the 400 of an expired pause, and new input starts a
    new turn instead of AG-UI's ``APPROVAL_RESUME_REQUIRED`` (or the agent's conflict) until the pause's TTL."""
    from agent_framework_functional import SQLiteSessionStore

    clock = Clock()
    sessions = (
        InMemorySessionStore(max_entries=2)
        if lost == "evicted"
        else SQLiteSessionStore(tmp_path / "sessions.db", ttl=100, clock=clock)
    )
    app = FastAPI()
    agui_endpoint(app, deployer.build().as_agent(name="deployer"), "/agent", snapshot_store=sessions, single_user=True)
    url = f"{serve(app).base}/agent"
    try:
        thread = Thread(http, url)
        thread.say(f"agui {lost} first")
        if lost == "evicted":
            for _ in range(2):
                Thread(http, url).say("evicting")
        else:
            clock.now += 101
        assert "is not pending on this thread" in thread.refused(400, resume=thread.resume())
        again = thread.say(f"agui {lost} again")  # was RUN_ERROR APPROVAL_RESUME_REQUIRED
        assert not errors(again), errors(again)
        assert thread.interrupts
        done = thread.answer()
        assert not errors(done), errors(done)
        assert text_of(done) == f"deployed: agui {lost} again"
        assert DEPLOYS[f"agui {lost} first"] == 0
    finally:
        if isinstance(sessions, SQLiteSessionStore):
            sessions.close()


class HeldSnapshots(InMemoryAGUIThreadSnapshotStore):
    """Snapshot saves wait until the test releases them: a run whose snapshot is not saved yet, for as long as
    the test needs."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def save(self, *, scope: Any, thread_id: str, snapshot: AGUIThreadSnapshot) -> None:
        await asyncio.to_thread(self.release.wait, 10)
        await super().save(scope=scope, thread_id=thread_id, snapshot=snapshot)


def test_agui_new_input_before_the_pause_snapshot_is_saved_keeps_the_pause(serve: Any, http: httpx.Client) -> None:
    """A thread whose pause is not in its snapshot yet (the client hung up at the approval request and sent new
    text at once, while AG-UI still saves) is not a thread whose snapshot was dropped: its approvals stay, AG-UI
    answers 409, and the answer still deploys."""
    snapshots = HeldSnapshots()
    app = FastAPI()
    hang_ups = HangUps()
    agui_endpoint(app, make_agent(), "/agent", snapshot_store=snapshots, single_user=True)
    thread = Thread(http, f"{serve(hang_ups.watch(app)).base}/agent")
    target = f"deploy settling {thread.thread_id}"
    thread.say_and_hang_up_at_the_approval_request(target)
    new_text = [*thread.messages, {"id": "m-new", "role": "user", "content": "something else"}]
    busy = thread.post(messages=new_text)  # the snapshot save is held: AG-UI's run of the thread is still on
    assert (busy.status_code, busy.json()) == (409, BUSY)
    snapshots.release.set()
    done = thread.answer(busy_retry_seconds=10)
    assert not errors(done), errors(done)
    assert text_of(done) == "deployed: " + target
    assert DEPLOYS[target] == 1


def test_agui_endpoint_without_a_snapshot_store_keeps_threads_in_a_bounded_store(
    serve: Any, http: httpx.Client
) -> None:
    app = FastAPI()
    agui_endpoint(app, make_agent(), "/agent", single_user=True)
    thread = Thread(http, f"{serve(app).base}/agent")
    thread.say("deploy default-store")
    done = thread.answer()
    assert not errors(done)
    assert text_of(done) == "deployed: deploy default-store"


def test_agui_endpoint_keeps_snapshots_in_a_session_store_given(serve: Any, http: httpx.Client) -> None:
    sessions = InMemorySessionStore()
    app = FastAPI()
    agui_endpoint(app, make_agent(), "/agent", snapshot_store=sessions, single_user=True)
    thread = Thread(http, f"{serve(app).base}/agent")
    thread.say("deploy shared-store")
    assert len(sessions) == 1  # the thread's snapshot
    assert text_of(thread.answer()) == "deployed: deploy shared-store"
    assert isinstance(ThreadSnapshotStore(sessions).sessions, InMemorySessionStore)


def test_two_apps_on_one_sqlite_file_share_agui_threads_and_responses_conversations(
    serve: Any, http: httpx.Client, tmp_path: Any
) -> None:
    """Two apps (as two workers on one machine) on one SQLite file for continuations and sessions: a pause on
    one is answered on the other, on both hosts. Pins the AG-UI approval state restored from the snapshot
    (AG-UI keeps it per process) and the ``single_user`` scope being the same for both apps."""
    from agent_framework import FileCheckpointStorage

    from agent_framework_functional import SQLiteContinuationStore, SQLiteSessionStore

    bases = []
    opened: list[Any] = []
    for _ in range(2):
        store = SQLiteContinuationStore(tmp_path / "continuations.db")
        sessions = SQLiteSessionStore(tmp_path / "sessions.db")
        opened += [store, sessions]

        def agent() -> Any:
            storage = FileCheckpointStorage(tmp_path / "checkpoints")
            return deployer.build(checkpoint_storage=storage, continuation_store=store).as_agent(name="deployer")  # noqa: B023

        app = responses_app(agent(), session_store=sessions)
        agui_endpoint(app, agent(), "/agui", snapshot_store=sessions, single_user=True)
        bases.append(serve(app).base)
    try:
        thread = Thread(http, f"{bases[0]}/agui")
        thread.say("agui-across-apps")
        thread.url = f"{bases[1]}/agui"
        done = thread.answer()
        assert not errors(done), errors(done)
        assert text_of(done) == "deployed: agui-across-apps"

        one, two = Responses(http, bases[0]), Responses(http, bases[1])
        pause = one.call({"input": "responses-across-apps", "conversation": "c-across"})
        (request,) = approval_items(pause)
        done_text = two.call({"input": [approve(request["id"])], "conversation": "c-across"})
        assert "deployed: responses-across-apps" in json.dumps(done_text)
        assert DEPLOYS["agui-across-apps"] == 1 and DEPLOYS["responses-across-apps"] == 1
    finally:
        for item in opened:
            item.close()


def test_agui_endpoint_keeps_answered_and_unanswered_approvals_for_one_ttl_only(serve: Any, http: httpx.Client) -> None:
    """AG-UI's approval state drops answered approvals (its own default keeps them 15 minutes, and refuses new
    approvals at 10,000 per scope) and unanswered ones (its default: 24 h) by the agent's TTL, on access (the
    sweep task, off here, would drop them with no request: ``test_sweep.py``)."""
    agent = deployer.build(continuation_ttl=0.5).as_agent(name="deployer")
    app = FastAPI()
    agui_endpoint(app, agent, "/agent", single_user=True, sweep_every=None)
    url = f"{serve(app).base}/agent"

    def kept() -> int:
        return sum(isinstance(obj, ApprovalOccurrence) for obj in gc.get_objects())

    before = kept()
    for index in range(3):
        thread = Thread(http, url)
        thread.say(f"answered {index}")
        assert not errors(thread.answer())
    Thread(http, url).say("left paused")
    assert kept() - before == 4
    time.sleep(1.1)  # unanswered: expired after one TTL, then kept as answered ones are (the TTL here, 0.5 s)
    Thread(http, url).say("after one ttl")
    gc.collect()
    assert kept() - before == 1
