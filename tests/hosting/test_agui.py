"""AG-UI (``agent-framework-ag-ui``) serving one FunctionalWorkflowAgent, driven by an AG-UI client over HTTP.

``add_agent_framework_fastapi_endpoint`` registers one ``POST`` route that takes a RunAgentInput JSON body and
answers with an SSE stream of AG-UI events. AG-UI builds a NEW ``AgentSession`` for every request (its
``session_id`` is stable per thread) and restores ``session.state`` only from a ``snapshot_store``; the
agent keeps each conversation's pause (its token) in ``session.state``, so **the endpoint needs
``snapshot_store=``** for a resume to find its pause, and ``detached_runs=True`` for a client that hangs up
at the approval request (AG-UI saves the snapshot after it streamed the request, and by default cancels that
save too when the client hangs up). A pause ends the run with ``RUN_FINISHED`` whose ``outcome`` is an
``interrupt``; the canonical answer is a new run on the same thread that resends the transcript with
``resume: [{"interruptId", "status": "resolved", "payload": {"approved": true | false}}]``.

The Python client below checks every stream with :func:`verify_agui_events` (the ``@ag-ui/client`` rules);
the last tests run the official JS client (``@ag-ui/client`` ``HttpAgent``) with node.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest
from agent_framework_ag_ui import (
    AGUIThreadSnapshot,
    InMemoryAGUIThreadSnapshotStore,
    add_agent_framework_fastapi_endpoint,
)
from fastapi import FastAPI
from hosting_support import (
    DEPLOYS,
    ROOT,
    HangUps,
    iter_sse,
    make_agent,
    parse_sse,
    releaser,
    reviewer,
    run_node,
    run_sample_self_check,
    verify_agui_events,
)

from agent_framework_functional import FunctionalWorkflowAgent


def build_app(agent: FunctionalWorkflowAgent, second: FunctionalWorkflowAgent | None = None) -> FastAPI:
    """``/agent``: the documented setup (snapshot store); ``/agent-no-store``: the same agent without one;
    ``/releaser``: ``second`` (two approvals); ``/reviewer``: a workflow with a ``str`` request."""
    app = FastAPI()
    add_agent_framework_fastapi_endpoint(
        app, agent, "/agent", snapshot_store=InMemoryAGUIThreadSnapshotStore(), single_user=True
    )
    add_agent_framework_fastapi_endpoint(app, agent, "/agent-no-store", single_user=True)
    if second is not None:
        add_agent_framework_fastapi_endpoint(
            app, second, "/releaser", snapshot_store=InMemoryAGUIThreadSnapshotStore(), single_user=True
        )
    add_agent_framework_fastapi_endpoint(
        app, make_agent(reviewer), "/reviewer", snapshot_store=InMemoryAGUIThreadSnapshotStore(), single_user=True
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


def serve_with_slow_store(serve: Any, agent: FunctionalWorkflowAgent, *, detached_runs: bool) -> tuple[str, HangUps]:
    """The documented endpoint on a :class:`SlowSnapshotStore`; returns its URL and the server's hang-ups."""
    app = FastAPI()
    hang_ups = HangUps()
    add_agent_framework_fastapi_endpoint(
        app, agent, "/agent", snapshot_store=SlowSnapshotStore(hang_ups), single_user=True, detached_runs=detached_runs
    )
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
        """One run; with ``busy_retry_seconds`` it retries while AG-UI answers 409 (with ``detached_runs=True``
        a run of this thread whose client hung up is still finishing), as a reconnecting client does."""
        reply = self.post(**extra)
        deadline = time.monotonic() + busy_retry_seconds
        while reply.status_code == 409 and time.monotonic() < deadline:
            assert reply.json() == {"detail": "An AG-UI run is already active for this scoped thread."}
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
        """Send ``text`` and read the SSE stream only up to the first ``function_approval_request`` CUSTOM event,
        then close the connection (the rest, ``MESSAGES_SNAPSHOT`` and ``RUN_FINISHED``, is never read).

        The interrupts are taken from that event, as a client that closed there knows them: AG-UI's interrupt
        id is the request's tool call id (``value.id``). Returns the events read.
        """
        self.messages = [*self.messages, {"id": uuid.uuid4().hex, "role": "user", "content": text}]
        events: list[dict[str, Any]] = []
        headers = {"Accept": "text/event-stream"}
        with self.http.stream("POST", self.url, json=self.body(), headers=headers) as reply:
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

    def answer(self, approved: bool = True, *, busy_retry_seconds: float = 0) -> list[dict[str, Any]]:
        """Answer every open interrupt the canonical way: ``resolved`` with ``{"approved": true | false}``."""
        assert self.interrupts, "nothing to answer"
        resume = [
            {"interruptId": i["id"], "status": "resolved", "payload": {"approved": approved}} for i in self.interrupts
        ]
        return self.run(resume=resume, busy_retry_seconds=busy_retry_seconds)

    def cancel(self) -> list[dict[str, Any]]:
        assert self.interrupts, "nothing to cancel"
        return self.run(resume=[{"interruptId": i["id"], "status": "cancelled"} for i in self.interrupts])


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "RUN_ERROR"]


def request_data(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request data of each ``function_approval_request`` CUSTOM event."""
    found = []
    for event in events:
        if event["type"] == "CUSTOM" and event["name"] == "function_approval_request":
            arguments = event["value"]["function_call"]["arguments"]
            found.append((json.loads(arguments) if isinstance(arguments, str) else arguments)["data"])
    return found


@pytest.fixture
def base(serve: Any) -> str:
    return serve(build_app(make_agent(), make_agent(releaser))).base


def test_approval_round_trip_with_canonical_resume(base: str, http: httpx.Client) -> None:
    thread = Thread(http, f"{base}/agent")
    paused = thread.say("deploy app")
    assert not errors(paused)
    assert [(i["id"], i["toolCallId"]) for i in thread.interrupts] == [("auto::0", "auto::0")]
    # The request_info tool call is opened before AG-UI closes it for the approval (verifyEvents needs it).
    kinds = [(e["type"], e.get("toolCallId")) for e in paused]
    assert kinds.index(("TOOL_CALL_START", "auto::0")) < kinds.index(("TOOL_CALL_END", "auto::0"))
    starts = [e for e in paused if e["type"] == "TOOL_CALL_START" and e["toolCallId"] == "auto::0"]
    assert starts[0]["toolCallName"] == "request_info"
    assert request_data(paused) == [{"action": "deploy", "target": "deploy app"}]

    done = thread.answer(approved=True)  # resends the transcript, with the resume
    assert not errors(done)
    assert text_of(done) == "deployed: deploy app"
    assert thread.interrupts == []


def test_decline_with_approved_false(base: str, http: httpx.Client) -> None:
    """``resolved`` + ``{"approved": false}`` declines; AG-UI delivers it to the agent as a rejection."""
    thread = Thread(http, f"{base}/agent")
    thread.say("deploy prod")
    done = thread.answer(approved=False)
    assert not errors(done)
    assert text_of(done) == "not deployed: deploy prod"
    assert thread.interrupts == []


def test_cancelled_resume_never_reaches_the_agent(base: str, http: httpx.Client) -> None:
    """Host behaviour: ``status: "cancelled"`` makes AG-UI drop its interrupt and finish the run without
    calling the agent, so the workflow gets no answer (decline with ``{"approved": false}`` instead)."""
    thread = Thread(http, f"{base}/agent")
    thread.say("deploy prod")
    cancelled = thread.cancel()
    assert [e["type"] for e in cancelled] == ["RUN_STARTED", "RUN_FINISHED"]
    assert thread.interrupts == []


def test_two_approvals_in_one_run(base: str, http: httpx.Client) -> None:
    thread = Thread(http, f"{base}/releaser")
    first = thread.say("v3")
    assert [i["id"] for i in thread.interrupts] == ["auto::0"]
    assert request_data(first) == [{"gate": "build", "target": "v3"}]
    second = thread.answer()
    assert not errors(second)
    assert [i["id"] for i in thread.interrupts] == ["auto::1"]
    assert request_data(second) == [{"gate": "release", "target": "v3"}]
    done = thread.answer()
    assert text_of(done) == "v3: build=True release=True"


def test_next_turn_on_the_same_thread_gets_only_the_new_text(base: str, http: httpx.Client) -> None:
    """A ``str`` workflow receives the last user message's text, not the resent transcript joined."""
    thread = Thread(http, f"{base}/agent")
    thread.say("deploy app")
    assert text_of(thread.answer()) == "deployed: deploy app"
    again = thread.say("deploy db")
    assert request_data(again) == [{"action": "deploy", "target": "deploy db"}]
    assert text_of(thread.answer()) == "deployed: deploy db"


def test_two_threads_interleaved_on_one_agent(base: str, http: httpx.Client) -> None:
    one, two = Thread(http, f"{base}/agent"), Thread(http, f"{base}/agent")
    assert request_data(one.say("alpha")) == [{"action": "deploy", "target": "alpha"}]
    paused_two = two.say("beta")  # thread one still paused
    assert not errors(paused_two)
    assert request_data(paused_two) == [{"action": "deploy", "target": "beta"}]
    assert text_of(one.answer(approved=True)) == "deployed: alpha"
    assert text_of(two.answer(approved=True)) == "deployed: beta"


def test_plain_text_reply_to_a_pending_interrupt_is_refused_by_ag_ui(base: str, http: httpx.Client) -> None:
    """Host behaviour: while an interrupt is open AG-UI itself requires a ``resume`` entry for it and refuses
    a plain user message (``@ag-ui/client`` refuses it before sending), so on AG-UI a ``str`` request cannot
    take a typed answer; the request still says which type it expects."""
    thread = Thread(http, f"{base}/reviewer")
    paused = thread.say("the post")
    assert [i["id"] for i in thread.interrupts] == ["auto::0"]
    (call,) = [e for e in paused if e["type"] == "CUSTOM" and e["name"] == "function_approval_request"]
    arguments = call["value"]["function_call"]["arguments"]
    assert (json.loads(arguments) if isinstance(arguments, str) else arguments)["response_type"] == "str"
    refused = thread.say("ship it")
    (error,) = errors(refused)
    assert error["code"] == "APPROVAL_RESUME_REQUIRED"


def test_without_a_snapshot_store_the_resume_cannot_find_its_pause(base: str, http: httpx.Client) -> None:
    """Host requirement: without ``snapshot_store=`` AG-UI hands every request an empty session, so the
    pause's token (kept in ``session.state``) is gone on the resume and the answer is refused."""
    thread = Thread(http, f"{base}/agent-no-store")
    thread.say("deploy app")
    assert [i["id"] for i in thread.interrupts] == ["auto::0"]
    refused = thread.answer()
    (error,) = errors(refused)
    assert error["code"] == "ContinuationAuthorityError"
    assert "deployed" not in text_of(refused)


def test_client_that_hangs_up_at_the_approval_request_can_still_answer_it(serve: Any, http: httpx.Client) -> None:
    """With ``detached_runs=True`` AG-UI finishes a run whose client hung up, so the snapshot save after the
    approval request (it carries the session state: the pause's token) still happens; the answer resumes the
    pause and the deploy runs once. Replaying the same answer deploys nothing: AG-UI drops a ``resume`` for an
    interrupt it no longer has and runs the transcript, whose last user message starts the workflow again, and
    it asks again (host behaviour)."""
    url, hang_ups = serve_with_slow_store(serve, make_agent(), detached_runs=True)
    thread = Thread(http, url)
    target = f"deploy hangup {thread.thread_id}"
    read = thread.say_and_hang_up_at_the_approval_request(target)
    assert request_data(read) == [{"action": "deploy", "target": target}]
    assert "RUN_FINISHED" not in [e["type"] for e in read]
    stale = [*thread.interrupts]

    # The transcript this client has (its own message) and the canonical resume, retried while AG-UI still
    # finishes the hung-up run (409).
    done = thread.answer(busy_retry_seconds=10)
    assert hang_ups.seen.is_set()  # the server saw the hang-up (before its snapshot save: SlowSnapshotStore)
    assert not errors(done)
    assert text_of(done) == "deployed: " + target
    assert DEPLOYS[target] == 1

    thread.interrupts = stale
    replayed = thread.answer()
    assert not errors(replayed)
    assert request_data(replayed) == [{"action": "deploy", "target": target}]
    assert DEPLOYS[target] == 1


def test_without_detached_runs_a_hang_up_before_the_snapshot_save_loses_the_pause(
    serve: Any, http: httpx.Client
) -> None:
    """Host requirement: by default (``detached_runs=False``) AG-UI cancels what is left of a run when its client
    hangs up, including the snapshot save that stores the session state, which comes AFTER the streamed
    approval request. When the hang-up lands before that save (a slow store, or bad luck with a fast one), the
    pause's token is gone: the answer is refused (``RUN_ERROR ContinuationAuthorityError``) and deploys nothing,
    and the thread's workflow stays paused, so new input is refused too (``PendingContinuationError``) until the
    owner abandons it (``agent.abandon_continuation(force=True, session=...)`` with AG-UI's session id for the
    thread). The agent cannot see the hang-up: AG-UI read its stream to the end before the save. Serve
    pausing agents with ``detached_runs=True`` (the test above)."""
    url, hang_ups = serve_with_slow_store(serve, make_agent(), detached_runs=False)
    thread = Thread(http, url)
    target = f"deploy lost {thread.thread_id}"
    thread.say_and_hang_up_at_the_approval_request(target)

    refused = thread.answer()
    assert hang_ups.seen.is_set()
    (error,) = errors(refused)
    assert error["code"] == "ContinuationAuthorityError"
    assert DEPLOYS[target] == 0
    (blocked,) = errors(thread.say("deploy something else"))
    assert blocked["code"] == "PendingContinuationError"


@pytest.mark.parametrize(
    ("path", "text", "expected"),
    [("/agent", "deploy js", "deployed: deploy js"), ("/releaser", "v4", "v4: build=True release=True")],
)
def test_official_js_client_accepts_the_stream_and_resumes(base: str, path: str, text: str, expected: str) -> None:
    """``@ag-ui/client``'s ``HttpAgent`` (its own verifier and ``buildResumeArray``) completes the round trip."""
    proc = run_node("agui_client.mjs", f"{base}{path}", text, expected)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert f"final text: {expected}" in proc.stdout


def test_verifier_rejects_what_the_js_client_rejects() -> None:
    """The Python order check catches the stream the plain agent sent before (TOOL_CALL_END with no START)."""
    bad = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "TOOL_CALL_END", "toolCallId": "auto::0"},
    ]
    with pytest.raises(AssertionError, match="no open TOOL_CALL_START"):
        verify_agui_events(bad)
    with pytest.raises(AssertionError, match="RUN_FINISHED while text messages"):
        verify_agui_events(
            [
                {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
                {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
                {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
            ]
        )
    with pytest.raises(AssertionError, match="first event"):
        verify_agui_events([{"type": "TEXT_MESSAGE_START", "messageId": "m"}])


def test_host_agui_sample_self_check() -> None:
    out = run_sample_self_check(ROOT / "samples" / "host_agui.py")
    assert "self-check passed: deployed: ship it" in out
