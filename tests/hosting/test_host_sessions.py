"""What the hosts keep per conversation when they are given no store: bounded, and what they drop.

The Responses route keeps each conversation's session in a bounded ``InMemorySessionStore`` (TTL from the
last write, the least recently written dropped past ``max_entries``) and frees its busy key when a request
ends; AG-UI's endpoint keeps thread snapshots the same way without ``snapshot_store``.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

import httpx
from agent_framework_ag_ui._approval_lifecycle import ApprovalOccurrence  # pyright: ignore[reportPrivateUsage]
from agui_support import Thread, errors, text_of
from fastapi import FastAPI
from hosting_support import DEPLOYS, deployer, make_agent
from responses_support import Responses, approval_items, approve

from agent_framework_functional import InMemorySessionStore
from agent_framework_functional._store import DEFAULT_TTL_SECONDS
from agent_framework_functional.hosting import ThreadSnapshotStore, agui_endpoint, responses_app


def test_responses_app_keeps_sessions_in_a_bounded_store_by_default(serve: Any, http: httpx.Client) -> None:
    app = responses_app(make_agent())
    host = app.state.responses_host
    assert isinstance(host.session_store, InMemorySessionStore)
    assert host.session_store.records.ttl == DEFAULT_TTL_SECONDS
    assert host.session_store.records.max_entries == 10_000


def test_every_host_keeps_sessions_for_the_agents_pause_ttl() -> None:
    """One TTL: without a store, the sessions a host keeps live as long as the agent's pause (its token)."""
    from agent_framework_functional.hosting._snapshots import snapshot_store_for

    agent = deployer.build(continuation_ttl=90).as_agent(name="deployer")
    assert agent.continuation_ttl == 90
    assert responses_app(agent).state.responses_host.session_store.records.ttl == 90
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
    assert app.state.responses_host.busy == set()
    (request,) = approval_items(first)
    reply = client.post({"input": [approve(request["id"])], "conversation": "c-first"})
    # The oldest conversation's session (and its token) was dropped: the answer is refused, nothing runs.
    assert reply.status_code == 409, reply.text
    assert reply.json()["error"]["code"] == "continuation_refused"
    assert DEPLOYS["first"] == 0


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
