"""AG-UI through ``agui_endpoint``: approval round trips (bool, str, structured) over real HTTP, with the Python
client of ``agui_support`` and the official JS client (``@ag-ui/client`` ``HttpAgent``, run with node).

The last tests drive raw AG-UI (``add_agent_framework_fastapi_endpoint``) to show what the call's settings are
for: without a snapshot store a resume cannot find its pause, and without detached runs a hang-up loses it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

import httpx
import pytest
from agent_framework import AgentResponse, AgentSession, SessionStore
from agent_framework_ag_ui import AGUIThreadSnapshot, InMemoryAGUIThreadSnapshotStore
from agui_support import (
    Thread,
    build_app,
    errors,
    request_arguments,
    request_data,
    serve_with_slow_store,
    text_of,
)
from fastapi import FastAPI
from hosting_support import DEPLOYS, PUBLISHED, ROOT, make_agent, run_node, run_sample_self_check, verify_agui_events
from request_ids import core_id

from agent_framework_functional import RunContext, workflow
from agent_framework_functional._core_compat import agui_session_id_for_thread
from agent_framework_functional.hosting import agui_endpoint
from agent_framework_functional.hosting._agui_approvals import UnsavedThreads
from agent_framework_functional.hosting._turn import ConversationBusy
from agent_framework_functional.hosting.agui import AGUIAgent

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out


@pytest.fixture
def base(serve: Any) -> str:
    return serve(build_app()).base


def test_approval_round_trip_with_canonical_resume(base: str, http: httpx.Client) -> None:
    thread = Thread(http, f"{base}/agent")
    paused = thread.say("deploy app")
    assert not errors(paused)
    (interrupt,) = thread.interrupts
    assert core_id(interrupt["id"]) == "auto::0" and interrupt["toolCallId"] == interrupt["id"]
    # The request_info tool call is opened before AG-UI closes it for the approval (verifyEvents needs it).
    kinds = [(e["type"], e.get("toolCallId")) for e in paused]
    assert kinds.index(("TOOL_CALL_START", interrupt["id"])) < kinds.index(("TOOL_CALL_END", interrupt["id"]))
    (arguments,) = request_arguments(paused)
    assert arguments["data"] == {"action": "deploy", "target": "deploy app"}
    assert arguments["answer"] is None  # the slot a typed answer fills

    done = thread.answer(approved=True)  # resends the transcript, with the resume
    assert not errors(done)
    assert text_of(done) == "deployed: deploy app"
    assert thread.interrupts == []


def test_decline_with_approved_false(base: str, http: httpx.Client) -> None:
    thread = Thread(http, f"{base}/agent")
    thread.say("deploy prod")
    done = thread.answer(approved=False)
    assert not errors(done)
    assert text_of(done) == "not deployed: deploy prod"


def test_a_bool_request_also_takes_a_typed_answer(base: str, http: httpx.Client) -> None:
    thread = Thread(http, f"{base}/agent")
    thread.say("deploy typed")
    assert text_of(thread.answer(answer=False)) == "not deployed: deploy typed"


def test_a_cancelled_resume_is_refused_and_the_pause_stays_answerable(base: str, http: httpx.Client) -> None:
    """The defect: ``status: "cancelled"`` made AG-UI drop its interrupt and finish the run without calling the
    agent; the workflow stayed paused and every later request on the thread failed (new text, a decline, a resend).
    Now the cancel is a 400 that touches nothing, and the decline it points to works."""
    thread = Thread(http, f"{base}/agent")
    thread.say("deploy prod")
    detail = thread.refused(400, resume=[{"interruptId": i["id"], "status": "cancelled"} for i in thread.interrupts])
    assert "approved" in detail and "cancelled" in detail
    assert text_of(thread.answer(approved=False)) == "not deployed: deploy prod"


def test_two_approvals_in_one_run(base: str, http: httpx.Client) -> None:
    thread = Thread(http, f"{base}/releaser")
    assert request_data(thread.say("v3")) == [{"gate": "build", "target": "v3"}]
    second = thread.answer()
    assert [core_id(i["id"]) for i in thread.interrupts] == ["auto::1"]
    assert request_data(second) == [{"gate": "release", "target": "v3"}]
    assert text_of(thread.answer()) == "v3: build=True release=True"


def test_next_turn_on_the_same_thread_gets_only_the_new_text(base: str, http: httpx.Client) -> None:
    thread = Thread(http, f"{base}/agent")
    thread.say("deploy app")
    assert text_of(thread.answer()) == "deployed: deploy app"
    assert request_data(thread.say("deploy db")) == [{"action": "deploy", "target": "deploy db"}]
    assert text_of(thread.answer()) == "deployed: deploy db"


def test_two_threads_interleaved_on_one_agent(base: str, http: httpx.Client) -> None:
    one, two = Thread(http, f"{base}/agent"), Thread(http, f"{base}/agent")
    assert request_data(one.say("alpha")) == [{"action": "deploy", "target": "alpha"}]
    assert request_data(two.say("beta")) == [{"action": "deploy", "target": "beta"}]  # thread one still paused
    assert text_of(one.answer()) == "deployed: alpha"
    assert text_of(two.answer()) == "deployed: beta"


def test_str_request_answered_with_a_typed_answer(base: str, http: httpx.Client) -> None:
    """A plain user message cannot answer an open interrupt (AG-UI requires a ``resume`` entry); the answer
    rides in the payload: ``{"approved": true, "answer": "ship it"}``."""
    thread = Thread(http, f"{base}/reviewer")
    (arguments,) = request_arguments(thread.say("the post"))
    assert arguments["response_type"] == "str"
    interrupts = thread.interrupts
    (error,) = errors(thread.say("ship it"))
    assert error["code"] == "APPROVAL_RESUME_REQUIRED"
    thread.interrupts = interrupts
    done = thread.answer(answer="ship it")
    assert not errors(done)
    assert text_of(done) == "published: the post (ship it)"


def test_structured_answer_approve_with_edits(base: str, http: httpx.Client) -> None:
    """The reviewer gets the draft as the request data, edits two fields and approves; the workflow receives the
    edited ``Draft`` (a pydantic model) and publishes it once."""
    thread = Thread(http, f"{base}/editor")
    title = f"Launch {thread.thread_id}"
    (arguments,) = request_arguments(thread.say(title))
    draft = arguments["data"]
    assert draft == {"title": title, "body": f"About {title}.", "approved": False}
    assert arguments["response_type"] == "Draft"

    edited = {**draft, "title": f"{title} (edited)", "body": "Shorter.", "approved": True}
    done = thread.answer(answer=edited)
    assert not errors(done)
    assert text_of(done) == f"published: {title} (edited) / Shorter."
    assert PUBLISHED[f"{title} (edited)"] == 1


def test_structured_answer_of_the_wrong_shape_is_400_naming_the_field_and_keeps_the_pause(
    base: str, http: httpx.Client
) -> None:
    thread = Thread(http, f"{base}/editor")
    title = f"Wrong {thread.thread_id}"
    thread.say(title)
    detail = thread.refused(400, resume=thread.resume(answer={"title": ["not", "text"], "body": "b", "approved": True}))
    assert "title" in detail  # the field at fault
    assert "still pending" in detail
    detail = thread.refused(400, resume=thread.resume(approved=False))  # a Draft request needs a value
    assert "Draft" in detail

    done = thread.answer(answer={"title": title, "body": "b", "approved": True})
    assert text_of(done) == f"published: {title} / b"
    assert PUBLISHED[title] == 1


@workflow(name="copier", description="Asks how many copies (an int), then makes them.")
async def copier(text: str, ctx: RunContext) -> str:
    copies = await ctx.request_info({"copies_of": text}, response_type=int)
    return f"{copies!r} copies of {text}"


def test_an_int_request_takes_only_a_json_number(serve: Any, http: httpx.Client) -> None:
    """The request's schema says integer: an ``answer`` of true, "3" or " 3 " is a 400 naming the request (core
    would take true, and a string kept as result text would read as 3); the pause stays and 3 answers it."""
    app = FastAPI()
    store = InMemoryAGUIThreadSnapshotStore()
    agui_endpoint(app, make_agent(copier), "/copier", snapshot_store=store, single_user=True)
    thread = Thread(http, f"{serve(app).base}/copier")
    (arguments,) = request_arguments(thread.say("memo"))
    assert arguments["response_schema"] == {"type": "integer"}
    for lax in (True, "3", " 3 "):
        detail = thread.refused(400, resume=thread.resume(answer=lax))
        assert "valid integer" in detail and "still pending" in detail
    done = thread.answer(answer=3)
    assert not errors(done)
    assert text_of(done) == "3 copies of memo"


def test_client_that_hangs_up_at_the_approval_request_can_still_answer_it(serve: Any, http: httpx.Client) -> None:
    """``agui_endpoint`` runs detached: AG-UI finishes a run whose client hung up, so the snapshot save after the
    approval request (it carries the pause's token) still happens; the answer, retried while AG-UI answers 409,
    resumes the pause and the deploy runs once. Replaying the same answer is refused (400) and deploys nothing."""
    url, hang_ups = serve_with_slow_store(serve, make_agent(), raw_without_detached_runs=False)
    thread = Thread(http, url)
    target = f"deploy hangup {thread.thread_id}"
    read = thread.say_and_hang_up_at_the_approval_request(target)
    assert request_data(read) == [{"action": "deploy", "target": target}]
    assert "RUN_FINISHED" not in [e["type"] for e in read]
    stale = [*thread.interrupts]

    done = thread.answer(busy_retry_seconds=10)
    assert hang_ups.seen.is_set()  # the server saw the hang-up (before its snapshot save: SlowSnapshotStore)
    assert not errors(done)
    assert text_of(done) == "deployed: " + target
    assert DEPLOYS[target] == 1

    thread.interrupts = stale
    assert "not pending on this thread" in thread.refused(400, resume=thread.resume())  # the replay runs nothing
    assert DEPLOYS[target] == 1


def test_agui_endpoint_refuses_a_core_session_store_and_needs_an_authorization_mode() -> None:
    with pytest.raises(TypeError, match="thread snapshots, not core sessions"):
        agui_endpoint(FastAPI(), make_agent(), "/a", snapshot_store=SessionStore(), single_user=True)
    with pytest.raises(ValueError, match="exactly one of single_user=True"):
        agui_endpoint(FastAPI(), make_agent(), "/a", snapshot_store=InMemoryAGUIThreadSnapshotStore())


def test_raw_agui_without_a_snapshot_store_cannot_resume(base: str, http: httpx.Client) -> None:
    """Why ``agui_endpoint`` always has a snapshot store (a bounded in-memory one by default): AG-UI hands every
    request an empty session, so the pause's token (kept in ``session.state``) is gone on the resume and the
    answer is refused."""
    thread = Thread(http, f"{base}/raw-no-store")
    thread.say("deploy app")
    (error,) = errors(thread.answer())
    assert error["code"] == "ContinuationAuthorityError"


def test_raw_agui_without_detached_runs_loses_the_pause_on_a_hang_up(serve: Any, http: httpx.Client) -> None:
    """Why ``detached_runs=True``: by default AG-UI cancels what is left of a run when its client hangs up,
    including the snapshot save that stores the pause's token, which comes AFTER the streamed approval request.
    The answer is then refused and deploys nothing."""
    url, hang_ups = serve_with_slow_store(serve, make_agent(), raw_without_detached_runs=True)
    thread = Thread(http, url)
    target = f"deploy lost {thread.thread_id}"
    thread.say_and_hang_up_at_the_approval_request(target)
    (error,) = errors(thread.answer())
    assert hang_ups.seen.is_set()
    assert error["code"] == "ContinuationAuthorityError"
    assert DEPLOYS[target] == 0


@pytest.mark.parametrize(
    ("path", "text", "answer", "expected"),
    [
        ("/agent", "deploy js", "", "deployed: deploy js"),
        ("/releaser", "v4", "", "v4: build=True release=True"),
        ("/reviewer", "js post", '"from js"', "published: js post (from js)"),
        ("/editor", "JS launch", '{"title": "JS launch!", "body": "Edited in JS.", "approved": true}', None),
    ],
)
def test_official_js_client_round_trip(base: str, path: str, text: str, answer: str, expected: str | None) -> None:
    """``@ag-ui/client``'s ``HttpAgent`` (its own verifier and ``buildResumeArray``) completes the round trip,
    answering with ``{"approved": true}`` or with ``{"approved": true, "answer": <JSON>}``."""
    expected = expected or "published: JS launch! / Edited in JS."
    proc = run_node("agui_client.mjs", f"{base}{path}", text, expected, answer)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert f"final text: {expected}" in proc.stdout


def test_verifier_rejects_what_the_js_client_rejects() -> None:
    """The Python order check catches the stream the plain agent sent before (TOOL_CALL_END with no START)."""
    with pytest.raises(AssertionError, match="no open TOOL_CALL_START"):
        verify_agui_events(
            [{"type": "RUN_STARTED", "threadId": "t", "runId": "r"}, {"type": "TOOL_CALL_END", "toolCallId": "a"}]
        )
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


def test_review_with_edits_sample_through_the_official_js_client(serve: Any) -> None:
    """``samples/review_with_edits.py``'s AG-UI host, answered by ``@ag-ui/client`` with the edited ``Review``."""
    spec = importlib.util.spec_from_file_location("review_with_edits", ROOT / "samples" / "review_with_edits.py")
    assert spec is not None and spec.loader is not None
    sample = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = sample  # pydantic resolves the models' annotations through the module
    spec.loader.exec_module(sample)
    server = serve(sample.agui_app(sample.publisher.build().as_agent(name="publisher")))
    review = sample.reviewer_edits({"title": "Tea", "body": "A first draft about tea.", "tags": ["tea"]})
    proc = run_node("agui_client.mjs", f"{server.base}/agent", "tea", sample.EXPECTED, json.dumps(review))
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert f"final text: {sample.EXPECTED}" in proc.stdout


def test_a_single_user_conversation_runs_on_the_event_loop(
    serve: Any, http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``single_user=True``'s scope is an async dependency: FastAPI runs a plain function in a worker thread on every
    request, and each thread that allocates adds a C heap of its own to the process (RSS that steps up, not down)."""
    import fastapi.dependencies.utils as solving

    threaded: list[Any] = []
    run_in_threadpool = solving.run_in_threadpool

    async def counted(call: Any, *args: Any, **kwargs: Any) -> Any:
        threaded.append(call)
        return await run_in_threadpool(call, *args, **kwargs)

    monkeypatch.setattr(solving, "run_in_threadpool", counted)
    thread = Thread(http, f"{serve(build_app()).base}/agent")
    assert not errors(thread.say("deploy threads"))
    assert text_of(thread.answer(approved=True)) == "deployed: deploy threads"
    assert threaded == []


async def test_a_thread_runs_one_turn_at_a_time_and_stays_unsaved_until_its_snapshot_is_saved() -> None:
    """Each AG-UI run is a ``Turn`` of its thread (``hosting/_turn.py``) while its stream runs; it stays unsaved (no
    orphaned-pause check) until AG-UI saves its snapshot. A save AG-UI never makes must not block the thread."""
    agent = make_agent()
    snapshots = UnsavedThreads(InMemoryAGUIThreadSnapshotStore(), agent)
    view = AGUIAgent(agent, snapshots)
    session_id = agui_session_id_for_thread(scope="s", thread_id="t")
    session = AgentSession(session_id=session_id)
    stream = view.run("deploy turn", stream=True, session=session)
    assert snapshots.unsaved("s", "t")
    with pytest.raises(ConversationBusy, match="still running"):
        view.run("deploy again", stream=True, session=session)
    async for _ in stream:
        pass
    assert snapshots.unsaved("s", "t")  # the run ended; its snapshot is not saved yet
    second = view.run("deploy turn", stream=True, session=AgentSession(session_id=session_id))  # not blocked
    async for _ in second:
        pass
    await snapshots.save(scope="s", thread_id="t", snapshot=AGUIThreadSnapshot())
    assert snapshots.unsaved("s", "t")  # one of its two runs is saved
    await snapshots.save(scope="s", thread_id="t", snapshot=AGUIThreadSnapshot())
    assert not snapshots.unsaved("s", "t")
    with pytest.raises(ValueError, match="Nothing to run"):  # a run that fails ends its turn: no snapshot comes
        view.run(None, stream=True, session=AgentSession(session_id=session_id))
    assert not snapshots.unsaved("s", "t")


async def test_a_run_closed_mid_stream_is_neither_running_nor_unsaved() -> None:
    """AG-UI closing our stream at an update (``GeneratorExit``, no snapshot comes) ends the turn and its unsaved
    mark; a finished stream keeps the agent's final response."""
    agent = make_agent()
    snapshots = UnsavedThreads(InMemoryAGUIThreadSnapshotStore(), agent)
    view = AGUIAgent(agent, snapshots)
    session_id = agui_session_id_for_thread(scope="s", thread_id="closed")
    stream = view.run("deploy closed", stream=True, session=AgentSession(session_id=session_id))
    async for _ in stream:
        break
    await stream.close()
    assert not snapshots.unsaved("s", "closed")
    assert not snapshots.turns.busy
    other = agui_session_id_for_thread(scope="s", thread_id="finished")
    final = await view.run("deploy finished", stream=True, session=AgentSession(session_id=other)).get_final_response()
    assert isinstance(final, AgentResponse)
    assert final.continuation_token is not None
