"""Helpers of the AG-UI tests: the app under test (``agui_endpoint`` routes, and raw AG-UI routes that show why the
call sets what it sets), a thread as an AG-UI client keeps it, and a snapshot store that a hang-up overtakes.

A pause ends the run with ``RUN_FINISHED`` whose ``outcome`` is an ``interrupt``; the canonical answer is a new run
on the same thread that resends the transcript with ``resume: [{"interruptId", "status": "resolved", "payload":
{"approved": true | false, "answer": <JSON>?}}]``. Every stream is checked with :func:`verify_agui_events`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
from agent_framework_ag_ui import (
    AGUIThreadSnapshot,
    InMemoryAGUIThreadSnapshotStore,
    add_agent_framework_fastapi_endpoint,
)
from fastapi import FastAPI
from hosting_support import HangUps, editor, iter_sse, make_agent, parse_sse, releaser, reviewer, verify_agui_events

from agent_framework_functional import FunctionalWorkflowAgent
from agent_framework_functional.hosting import agui_endpoint
from agent_framework_functional.hosting.agui import AGUIAgent

BUSY = {"detail": "An AG-UI run is already active for this scoped thread."}
"""AG-UI's 409 body: a run of this thread (a hung-up client's, detached) is still finishing."""

_NO_ANSWER: Any = object()


def build_app() -> FastAPI:
    """The routes under test, each with its own agent and snapshot store.

    ``agui_endpoint``: ``/agent`` (one bool approval), ``/releaser`` (two), ``/reviewer`` (a ``str`` request),
    ``/editor`` (a pydantic draft to edit and approve). Raw AG-UI (``add_agent_framework_fastapi_endpoint``):
    ``/raw-no-store`` (no snapshot store), ``/raw`` (the bare agent, with a store and detached runs),
    ``/raw-view`` (the agent's AG-UI view, :class:`AGUIAgent`, without the call's request guard).
    """
    app = FastAPI()
    for path, definition in [("/agent", None), ("/releaser", releaser), ("/reviewer", reviewer), ("/editor", editor)]:
        agent = make_agent() if definition is None else make_agent(definition)
        agui_endpoint(app, agent, path, snapshot_store=InMemoryAGUIThreadSnapshotStore(), single_user=True)
    add_agent_framework_fastapi_endpoint(app, make_agent(), "/raw-no-store", single_user=True)
    for path, raw_agent in [("/raw", make_agent()), ("/raw-view", AGUIAgent(make_agent()))]:
        add_agent_framework_fastapi_endpoint(
            app,
            raw_agent,  # pyright: ignore[reportArgumentType]
            path,
            snapshot_store=InMemoryAGUIThreadSnapshotStore(),
            single_user=True,
            detached_runs=True,
        )
    return app


class SlowSnapshotStore(InMemoryAGUIThreadSnapshotStore):
    """An in-memory snapshot store whose saves take until a client hangs up (at most 5 s): a remote store that a
    closed browser tab overtakes. AG-UI saves after it streamed the approval request, so with this store the
    hang-up always lands before that save, instead of racing it."""

    def __init__(self, hang_ups: HangUps) -> None:
        super().__init__()
        self.hang_ups = hang_ups

    async def save(self, *, scope: Any, thread_id: str, snapshot: AGUIThreadSnapshot) -> None:
        await self.hang_ups.wait(timeout=5)
        await super().save(scope=scope, thread_id=thread_id, snapshot=snapshot)


def serve_with_slow_store(
    serve: Any, agent: FunctionalWorkflowAgent, *, raw_without_detached_runs: bool
) -> tuple[str, HangUps]:
    """``agent`` on a :class:`SlowSnapshotStore` (``agui_endpoint``, or raw AG-UI with its default
    ``detached_runs=False``); returns the route's URL and the server's hang-ups."""
    app = FastAPI()
    hang_ups = HangUps()
    store = SlowSnapshotStore(hang_ups)
    if raw_without_detached_runs:
        add_agent_framework_fastapi_endpoint(app, agent, "/agent", snapshot_store=store, single_user=True)
    else:
        agui_endpoint(app, agent, "/agent", snapshot_store=store, single_user=True)
    return f"{serve(hang_ups.watch(app)).base}/agent", hang_ups


class Thread:
    """One AG-UI thread as a client keeps it: the transcript (from ``MESSAGES_SNAPSHOT``) and open interrupts."""

    def __init__(self, http: httpx.Client, url: str) -> None:
        self.http = http
        self.url = url
        self.thread_id = f"thread-{uuid.uuid4().hex[:8]}"
        self.messages: list[dict[str, Any]] = []
        self.interrupts: list[dict[str, Any]] = []

    def body(self, **extra: Any) -> dict[str, Any]:
        return {
            "threadId": self.thread_id,
            "runId": uuid.uuid4().hex,
            "messages": self.messages,
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
            **extra,
        }

    def post(self, **extra: Any) -> httpx.Response:
        return self.http.post(self.url, json=self.body(**extra), headers={"Accept": "text/event-stream"})

    def run(self, *, busy_retry_seconds: float = 0, **extra: Any) -> list[dict[str, Any]]:
        """One run; with ``busy_retry_seconds`` it retries while AG-UI answers 409 (a run of this thread whose
        client hung up is still finishing), as a reconnecting client does."""
        reply = self.post(**extra)
        deadline = time.monotonic() + busy_retry_seconds
        while reply.status_code == 409 and time.monotonic() < deadline:
            assert reply.json() == BUSY
            time.sleep(0.01)
            reply = self.post(**extra)
        assert reply.status_code == 200, reply.text
        events = [e["data"] for e in parse_sse(reply.text) if isinstance(e["data"], dict)]
        verify_agui_events(events)
        for event in events:
            if event["type"] == "MESSAGES_SNAPSHOT":
                self.messages = event["messages"]
        finished = [e for e in events if e["type"] == "RUN_FINISHED"]
        outcome = (finished[-1].get("outcome") or {}) if finished else {}
        self.interrupts = outcome.get("interrupts") or [] if outcome.get("type") == "interrupt" else []
        return events

    def say(self, text: str) -> list[dict[str, Any]]:
        self.messages = [*self.messages, {"id": uuid.uuid4().hex, "role": "user", "content": text}]
        return self.run()

    def say_and_hang_up_at_the_approval_request(self, text: str) -> list[dict[str, Any]]:
        """Send ``text``, read the SSE stream only up to the first ``function_approval_request`` CUSTOM event, then
        close the connection; the interrupts are taken from that event (AG-UI's interrupt id is ``value.id``)."""
        self.messages = [*self.messages, {"id": uuid.uuid4().hex, "role": "user", "content": text}]
        events: list[dict[str, Any]] = []
        with self.http.stream("POST", self.url, json=self.body(), headers={"Accept": "text/event-stream"}) as reply:
            assert reply.status_code == 200
            for event in iter_sse(reply.iter_lines()):
                if isinstance(event["data"], dict):
                    events.append(event["data"])
                    if events[-1]["type"] == "CUSTOM" and events[-1]["name"] == "function_approval_request":
                        break  # hang up: leave the with block without reading the rest
        verify_agui_events(events)  # a valid prefix of a run
        assert events[-1]["type"] == "CUSTOM", [e["type"] for e in events]
        self.interrupts = [{"id": events[-1]["value"]["id"]}]
        return events

    def resume(self, approved: bool = True, answer: Any = _NO_ANSWER) -> list[dict[str, Any]]:
        """The resume entries answering every open interrupt: ``{"approved": ...}`` plus ``answer`` when given."""
        assert self.interrupts, "nothing to answer"
        payload: dict[str, Any] = {"approved": approved}
        if answer is not _NO_ANSWER:
            payload["answer"] = answer
        return [{"interruptId": i["id"], "status": "resolved", "payload": payload} for i in self.interrupts]

    def answer(
        self, approved: bool = True, answer: Any = _NO_ANSWER, *, busy_retry_seconds: float = 0
    ) -> list[dict[str, Any]]:
        """Answer every open interrupt the canonical way (see :meth:`resume`)."""
        return self.run(resume=self.resume(approved, answer), busy_retry_seconds=busy_retry_seconds)

    def refused(self, status: int, **extra: Any) -> str:
        """Post a request that must be refused with HTTP ``status``; returns the reply's ``detail`` text."""
        reply = self.post(**extra)
        assert reply.status_code == status, reply.text
        detail = reply.json().get("detail")
        return detail if isinstance(detail, str) else json.dumps(detail)


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "RUN_ERROR"]


def request_arguments(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The arguments of each ``function_approval_request`` CUSTOM event (request data, type, answer slot)."""
    found = []
    for event in events:
        if event["type"] == "CUSTOM" and event["name"] == "function_approval_request":
            arguments = event["value"]["function_call"]["arguments"]
            found.append(json.loads(arguments) if isinstance(arguments, str) else arguments)
    return found


def request_data(events: list[dict[str, Any]]) -> list[Any]:
    """The request data of each ``function_approval_request`` CUSTOM event."""
    return [arguments["data"] for arguments in request_arguments(events)]
