"""``agui_endpoint``'s guard reads a resume in every place and shape AG-UI acts on ("AG-UI" in the docs).

AG-UI takes a resume from the top-level ``resume`` (a list, one entry object, ``{"interrupts": [...]}``,
``{"interrupt": [...]}``; ``payload``, ``value`` or ``response``), else ``forwardedProps.command.resume`` (what
CopilotKit sends), else ``forwardedProps.resume``. Each form x {bad answer, cancelled, replay}: refused with 400
before AG-UI claims the interrupt, the thread stays answerable, nothing runs twice. The pin tests compare the
guard's reading (``_agui_resume``) with AG-UI's own, so they fail when AG-UI changes its reading.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from agent_framework_ag_ui import AGUIRequest, InMemoryAGUIThreadSnapshotStore, add_agent_framework_fastapi_endpoint
from agent_framework_ag_ui._agent_run import _canonical_approval_decision  # pyright: ignore[reportPrivateUsage]
from agent_framework_ag_ui._run_common import (  # pyright: ignore[reportPrivateUsage]
    _extract_resume_payload,
    _normalize_resume_interrupts,
    _strict_resume_entries,
)
from agui_support import Thread, build_app, errors, text_of
from fastapi import FastAPI
from fastapi.routing import APIRoute
from hosting_support import PUBLISHED, editor, make_agent, parse_sse
from request_ids import core_id, naming

from agent_framework_functional._answers import value_result
from agent_framework_functional.hosting import agui_endpoint
from agent_framework_functional.hosting._agui_resume import ResumeAnswer, payload_answer, read_answers, read_request

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

BAD: dict[str, Any] = {"approved": True, "answer": {"title": 5}}


def good(title: str) -> dict[str, Any]:
    return {"approved": True, "answer": {"title": title, "body": "edited", "approved": True}}


def entry(payload: Any, *, key: str = "payload", status: str = "resolved") -> dict[str, Any]:
    return {"interruptId": "auto::0", "status": status, key: payload}


FORMS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "resume list": lambda e: {"resume": [e]},
    "resume entry object": lambda e: {"resume": e},
    "resume.interrupts": lambda e: {"resume": {"interrupts": [e]}},
    "resume.interrupt": lambda e: {"resume": {"interrupt": [e]}},
    "forwardedProps.command.resume": lambda e: {"forwardedProps": {"command": {"resume": [e]}}},
    "forwardedProps.command.resume entry object": lambda e: {"forwardedProps": {"command": {"resume": e}}},
    "forwardedProps.resume": lambda e: {"forwardedProps": {"resume": [e]}},
    "forwarded_props.resume.interrupts": lambda e: {"forwarded_props": {"resume": {"interrupts": [e]}}},
}


@pytest.fixture
def base(serve: Any) -> str:
    return serve(build_app()).base


def _editor(http: httpx.Client, base: str, title: str) -> Thread:
    thread = Thread(http, f"{base}/editor")
    thread.say(title)
    assert [core_id(i["id"]) for i in thread.interrupts] == ["auto::0"]
    return thread


def _post(thread: Thread, extra: dict[str, Any]) -> httpx.Response:
    # forwardedProps in ``extra`` replaces the body's empty one; a forwarded_props key sits beside it. Core's ids
    # in ``extra`` become the ones the thread's pause published.
    body = {**thread.body(), **naming(extra, [i["id"] for i in thread.interrupts])}
    if "forwarded_props" in extra:
        del body["forwardedProps"]
    return thread.http.post(thread.url, json=body, headers={"Accept": "text/event-stream"})


def _still_answerable(thread: Thread, title: str) -> None:
    done = thread.answer(**good(title))
    assert not errors(done), errors(done)
    assert text_of(done) == f"published: {title} / edited"
    assert PUBLISHED[title] == 1


@pytest.mark.parametrize("form", FORMS)
def test_a_bad_answer_in_any_form_is_refused_and_the_thread_stays_answerable(
    base: str, http: httpx.Client, form: str
) -> None:
    """The defect: a resume outside the top-level list skipped the guard; AG-UI claimed the interrupt, the agent
    refused the answer, and every later answer got "Approval execution outcome is indeterminate"."""
    title = f"bad {form} {id(http)}"
    thread = _editor(http, base, title)
    reply = _post(thread, FORMS[form](entry(BAD)))
    assert reply.status_code == 400, reply.text[:300]
    assert "cannot be converted to Draft" in reply.json()["detail"]
    _still_answerable(thread, title)


@pytest.mark.parametrize("form", FORMS)
def test_a_cancelled_interrupt_in_any_form_is_refused(base: str, http: httpx.Client, form: str) -> None:
    title = f"cancelled {form} {id(http)}"
    thread = _editor(http, base, title)
    reply = _post(thread, FORMS[form]({"interruptId": "auto::0", "status": "cancelled"}))
    assert reply.status_code == 400, reply.text[:300]
    assert "Only status 'resolved'" in reply.json()["detail"]
    _still_answerable(thread, title)


@pytest.mark.parametrize("form", FORMS)
def test_an_answer_in_any_form_runs_once_and_its_replay_is_refused(base: str, http: httpx.Client, form: str) -> None:
    """The defect: the same approval resent in forwardedProps.command.resume passed the guard, AG-UI ran the
    resent transcript as a new turn that paused again, and the next resend approved it: published twice."""
    title = f"replay {form} {id(http)}"
    thread = _editor(http, base, title)
    first = _post(thread, FORMS[form](entry(good(title))))
    assert first.status_code == 200, first.text[:300]
    events = [e["data"] for e in parse_sse(first.text) if isinstance(e["data"], dict)]
    assert not errors(events) and text_of(events) == f"published: {title} / edited"
    for _ in range(2):
        replay = _post(thread, FORMS[form](entry(good(title))))
        assert replay.status_code == 400, replay.text[:300]
        assert f"{thread.interrupts[0]['id']!r} is not pending" in replay.json()["detail"]
    assert PUBLISHED[title] == 1


@pytest.mark.parametrize(
    ("case", "extra", "detail"),
    [
        (
            "two places",
            {"resume": [entry(good("x"))], "forwardedProps": {"command": {"resume": [entry(BAD)]}}},
            "a resume in 2 places",
        ),
        (
            "forwarded ids that disagree",
            {"forwardedProps": {"command": {"resume": [{**entry(BAD), "id": "auto::9"}]}}},
            "several interrupt ids",
        ),
        ("payload under 'value'", {"resume": [entry(BAD, key="value")]}, "cannot be converted to Draft"),
        ("payload under 'response'", {"resume": [entry(BAD, key="response")]}, "cannot be converted to Draft"),
        ("payload as JSON text", {"resume": [entry(json.dumps(BAD))]}, "cannot be converted to Draft"),
        ("'accepted' for 'approved'", {"resume": [entry({"accepted": True, "answer": {"title": 5}})]}, "Draft"),
        (
            "answer in editedArgs",
            {"resume": [entry({"approved": True, "editedArgs": {"answer": {"title": 5}}})]},
            "cannot be converted to Draft",
        ),
        ("forwarded resume of no known shape", {"forwardedProps": {"resume": {"answer": 1}}}, "is not a list"),
    ],
)
def test_readings_that_differ_or_hide_the_answer_are_refused(
    base: str, http: httpx.Client, case: str, extra: dict[str, Any], detail: str
) -> None:
    title = f"{case} {id(http)}"
    thread = _editor(http, base, title)
    reply = _post(thread, extra)
    assert reply.status_code == 400, reply.text[:300]
    assert detail in reply.json()["detail"]
    _still_answerable(thread, title)


def test_a_legacy_tool_message_approval_with_a_bad_answer_is_refused(base: str, http: httpx.Client) -> None:
    """AG-UI reads a trailing ``tool`` message whose JSON content has ``accepted`` as the approval of the call."""
    title = f"legacy {id(http)}"
    thread = _editor(http, base, title)
    content = json.dumps({"accepted": True, "answer": {"title": 5}})
    message = {"id": "m-tool", "role": "tool", "toolCallId": "auto::0", "content": content}
    reply = _post(thread, {"messages": [*thread.messages, message]})
    assert reply.status_code == 400, reply.text[:300]
    assert "cannot be converted to Draft" in reply.json()["detail"]
    _still_answerable(thread, title)


# ------------------------------------------------------------------------------ pinned against AG-UI's reading


PIN_BODIES = [
    {"forwardedProps": {"command": {"resume": [entry(BAD)]}}},
    {"forwardedProps": {"command": {"resume": entry(BAD, key="value")}}},
    {"forwardedProps": {"resume": {"interrupts": [entry(BAD), {"id": "auto::1", "response": {"approved": False}}]}}},
    {"forwarded_props": {"resume": {"interrupt": [{"interrupt_id": "auto::0", "status": "cancelled"}]}}},
    {"forwardedProps": {"command": {"resume": [{"toolCallId": "auto::0", "approved": True, "answer": 1}]}}},
    {"resume": [{"id": "auto::0", "interruptId": "auto::0", "payload": {"approved": True}}]},
    {"resume": {"interruptId": "auto::0", "value": BAD}},
    {"resume": {"interrupts": [entry(BAD, status="cancelled")]}},
    {"forwardedProps": {"command": {"x": 1}, "resume": [entry(BAD)]}},
]


@pytest.mark.parametrize("extra", PIN_BODIES)
def test_the_guard_reads_each_resume_as_agui_does(extra: dict[str, Any]) -> None:
    request = read_request({"messages": [], "threadId": "t", **extra})
    assert request is not None
    ours = [(a.interrupt_id, a.status, a.payload) for a in read_answers(request)]
    raw = _extract_resume_payload(request)
    strict, error = _strict_resume_entries(raw)
    assert error is None
    assert ours == [(e["interrupt_id"], e["status"], e["payload"]) for e in strict]
    assert [a[0] for a in ours] == [n["id"] for n in _normalize_resume_interrupts(raw)]


@pytest.mark.parametrize(
    "payload",
    [
        {"approved": True},
        {"approved": False, "answer": 1},
        {"approved": True, "answer": {"title": "x"}},
        {"accepted": True, "answer": "text"},
        {"approved": True, "accepted": False, "answer": 2},
        {"approved": True, "editedArgs": {"data": 1, "answer": [1]}},
        json.dumps({"approved": True, "answer": "json text"}),
    ],
)
def test_the_guard_decides_each_approval_as_agui_does(payload: Any) -> None:
    original = json.dumps({"data": 1, "answer": None})
    accepted, _, merged, error = _canonical_approval_decision(
        payload, interrupt_id="auto::0", original_arguments_text=original, server_label=None
    )
    assert error is None and merged is not None
    answer = payload_answer("auto::0", payload)
    if accepted and merged["answer"] is not None:
        assert answer.to_dict() == value_result("auto::0", merged["answer"]).to_dict()
    else:
        assert (answer.type, answer.approved) == ("function_approval_response", accepted)


def test_agui_reads_its_endpoint_body_with_the_public_request_model() -> None:
    app = FastAPI()
    add_agent_framework_fastapi_endpoint(app, make_agent(), "/x", single_user=True)
    (route,) = [r for r in app.routes if isinstance(r, APIRoute) and r.path == "/x"]
    annotation = inspect.signature(route.endpoint).parameters["request_body"].annotation
    assert annotation in (AGUIRequest, "AGUIRequest")
    assert ResumeAnswer("a", "resolved", None).from_tool_message is False


def test_a_pause_no_worker_here_can_resume_is_a_400_not_a_claimed_interrupt(serve: Any, http: httpx.Client) -> None:
    """Two workers share a snapshot store but no continuation store: the one that did not pause cannot resume,
    and says so with 400 before AG-UI claims the interrupt (it was ``RUN_ERROR``); the pausing worker still can."""
    snapshots = InMemoryAGUIThreadSnapshotStore()
    bases = []
    for _ in range(2):
        app = FastAPI()
        agui_endpoint(app, make_agent(editor), "/editor", snapshot_store=snapshots, single_user=True)
        bases.append(serve(app).base)
    title = f"memory only {id(http)}"
    thread = _editor(http, bases[0], title)
    thread.url = f"{bases[1]}/editor"
    assert "can no longer be resumed" in thread.refused(400, resume=thread.resume(**good(title)))
    thread.url = f"{bases[0]}/editor"
    _still_answerable(thread, title)
