"""``responses_app`` under contention and hostile input: nothing a client sends is a 500, nothing runs twice.

Every case runs over real HTTP on a loopback socket; after each refusal the conversation is still
answerable. The branch race holds the resumed workflow on a ``threading.Event`` the test controls, so the
second request surely arrives while the first is running (no sleeps, no timing assertions).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from agent_framework import RunContext, SessionStore
from fastapi import HTTPException, Request
from hosting_support import DEPLOYS, deployer
from request_ids import core_id
from responses_support import Responses, answering, approval_items, approve, published, serve_agent, text_of

from agent_framework_functional import (
    ContinuationAuthorityError,
    PendingContinuationError,
    ResponseMismatchError,
    WorkflowRunningError,
    workflow,
)
from agent_framework_functional.hosting import responses_app

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

GATE = threading.Event()  # the test opens it; the approved resume of slow_deployer waits for it
ENTERED = threading.Event()  # set by slow_deployer once its approved resume runs
SLOW_DEPLOYS: collections.Counter[str] = collections.Counter()


@workflow(name="slow_deployer", description="Asks one bool approval, then deploys once the test lets it.")
async def slow_deployer(text: str, ctx: RunContext) -> str:
    """Like ``deployer``, but the approved resume waits for ``GATE`` (counted outside any step)."""
    if not await ctx.request_info({"action": "deploy", "target": text}, response_type=bool):
        return f"not deployed: {text}"
    ENTERED.set()
    await asyncio.to_thread(GATE.wait, 30)
    SLOW_DEPLOYS[text] += 1
    return f"deployed: {text}"


@workflow(name="copier", description="Asks how many copies (an int), then makes them.")
async def copier(text: str, ctx: RunContext) -> str:
    copies = await ctx.request_info({"copies_of": text}, response_type=int)
    return f"{copies!r} copies of {text}"


@pytest.fixture
def client(serve: Any, http: httpx.Client) -> Responses:
    return serve_agent(serve, http, deployer)


@pytest.fixture
def gate() -> Any:
    GATE.clear()
    ENTERED.clear()
    yield GATE
    GATE.set()  # never leave a server thread waiting


@pytest.mark.parametrize("second", ["new text", "the same answer"])
def test_a_request_on_a_branch_whose_resume_is_running_is_a_409_with_retry_after(
    serve: Any, http: httpx.Client, gate: threading.Event, second: str
) -> None:
    """New text (or the answer again) on a ``previous_response_id`` branch while that branch's resume runs:
    409 ``conversation_busy`` with ``Retry-After`` (it was a 500: ``WorkflowRunningError`` was not mapped and
    each request took a lock of its own); the running resume completes and deploys once."""
    client = serve_agent(serve, http, slow_deployer)
    target = f"race {second}"
    paused = client.call({"input": target})
    answer = {"previous_response_id": paused["id"], "input": [approve(published(paused))]}
    with ThreadPoolExecutor(1) as pool, httpx.Client(timeout=60, trust_env=False) as other:
        resume = pool.submit(other.post, client.url, json=answer)
        assert ENTERED.wait(30), "the resume did not start"
        new_text = {"previous_response_id": paused["id"], "input": "deploy something else"}
        body = new_text if second == "new text" else answer
        refused = client.post(body)
        gate.set()
        done = resume.result(timeout=60)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "conversation_busy"
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["x-should-retry"] == "true"
    assert done.status_code == 200, done.text
    assert text_of(done.json()) == f"deployed: {target}"
    assert SLOW_DEPLOYS[target] == 1
    replay = client.post(answer)  # the branch's pause was answered: refused for good, nothing runs
    assert replay.status_code == 409
    assert replay.json()["error"]["code"] == "continuation_refused"
    message = replay.json()["error"]["message"]  # what to send next over HTTP, no Python call
    assert "latest response" in message and "checkpoint_id" not in message and "session" not in message
    assert SLOW_DEPLOYS[target] == 1


def test_a_second_request_of_a_conversation_while_it_runs_is_a_409_with_retry_after(
    serve: Any, http: httpx.Client, gate: threading.Event
) -> None:
    client = serve_agent(serve, http, slow_deployer)
    head = {"conversation": "conv_busy_twice"}
    busy = client.call({**head, "input": "busy"})
    with ThreadPoolExecutor(1) as pool, httpx.Client(timeout=60, trust_env=False) as other:
        answer = {**head, "input": [approve(published(busy))], "stream": True}
        resume = pool.submit(other.post, client.url, json=answer)
        assert ENTERED.wait(30)
        refused = client.post({**head, "input": "next", "stream": True})
        gate.set()
        done = resume.result(timeout=60)
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/json")  # a status, not an SSE error
    assert refused.headers["retry-after"] == "1"
    assert done.status_code == 200 and "response.completed" in done.text
    assert SLOW_DEPLOYS["busy"] == 1
    paused = client.call({**head, "input": "next"})  # the retry after it ended is taken
    assert [core_id(item["id"]) for item in approval_items(paused)] == ["auto::0"]


def _token_in(store: SessionStore, key: str) -> Any:
    """The continuation token the agent keeps in a stored session (read from the test's thread)."""
    session = asyncio.run(store.get(key))
    assert session is not None
    (entry,) = session.state["agent_framework_functional"].values()
    return entry["continuation_token"]


HOSTILE_RAW = {
    "malformed JSON": b'{"conversation": "conv_x", "input": [',
    "200,000-deep JSON": b'{"input": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    "10 MB body": b'{"input": "' + b"x" * (10 * 1024 * 1024) + b'"}',
    "not an object": b'["input"]',
    "not UTF-8": b'{"input": "\xff\xfe"}',
    "an unpaired surrogate": b'{"input": "deploy \\ud800"}',
}


@pytest.mark.parametrize("case", sorted(HOSTILE_RAW))
def test_hostile_raw_bodies_are_refused_and_the_conversation_stays_answerable(
    client: Responses, http: httpx.Client, case: str
) -> None:
    head = {"conversation": f"conv_raw_{len(case)}"}
    paused = client.call({**head, "input": f"raw {case}"})
    refused = http.post(client.url, content=HOSTILE_RAW[case], headers={"content-type": "application/json"})
    assert refused.status_code == (413 if case == "10 MB body" else 400), refused.text[:300]
    assert refused.json()["error"]["code"] in ("invalid_json", "body_too_large")
    assert text_of(client.call({**head, "input": [approve(published(paused))]})) == f"deployed: raw {case}"


DEEP_OUTPUT = "[" * 200_000 + "]" * 200_000

HOSTILE_BODIES: dict[str, tuple[dict[str, Any], int, str, str | None]] = {
    # name: (body added to the conversation's head, status, error code, param)
    "unknown request id": ({"input": [approve("auto::9")]}, 400, "answer_mismatch", "input[0].approval_request_id"),
    # The id is at fault, not the value: param names the call_id, not the output.
    "output for an unknown call_id": (
        {"input": [{"type": "function_call_output", "call_id": "auto::9", "output": "true"}]},
        400,
        "answer_mismatch",
        "input[0].call_id",
    ),
    # The refused answer is the second item, though the message also names the valid first one's id.
    "a valid answer, then an unknown one": (
        {"input": [approve("auto::0"), approve("auto::9")]},
        400,
        "answer_mismatch",
        "input[1].approval_request_id",
    ),
    "approval that is not a bool": (
        {"input": [{"type": "mcp_approval_response", "approval_request_id": "auto::0", "approve": "yes"}]},
        400,
        "invalid_request",
        "input[0]",
    ),
    "output that is not text": (
        {"input": [{"type": "function_call_output", "call_id": "auto::0", "output": {"approve": True}}]},
        400,
        "invalid_request",
        "input[0]",
    ),
    "output of the wrong type": (
        {"input": [{"type": "function_call_output", "call_id": "auto::0", "output": '"maybe"'}]},
        400,
        "answer_mismatch",
        "input[0].output",
    ),
    "200,000-deep output": (
        {"input": [{"type": "function_call_output", "call_id": "auto::0", "output": DEEP_OUTPUT}]},
        400,
        "invalid_request",
        "input[0]",
    ),
    "new text while paused": ({"input": "something else"}, 409, "pending_request", None),
    "unsupported input item": ({"input": [{"type": "function_call", "call_id": "x"}]}, 400, "invalid_request", "input"),
    "no input": ({}, 400, "invalid_request", "input"),
    "stream not a bool": ({"input": "x", "stream": "yes"}, 400, "invalid_request", "stream"),
    "background": ({"input": "x", "background": True}, 400, "invalid_request", "background"),
    "two session fields": ({"input": "x", "previous_response_id": "resp_1"}, 400, "invalid_request", "conversation"),
    "a huge conversation id": ({"conversation": "c" * 10_000, "input": "x"}, 400, "invalid_request", "conversation"),
    # A malformed conversation is not "no conversation": that would start a new one and drop this one's pause.
    "conversation without id": ({"conversation": {"x": 1}, "input": "x"}, 400, "invalid_request", "conversation"),
    "a conversation object with more than id": (
        {"conversation": {"id": "c", "x": 1}, "input": "x"},
        400,
        "invalid_request",
        "conversation",
    ),
    "a conversation id not text": ({"conversation": {"id": 7}, "input": "x"}, 400, "invalid_request", "conversation"),
    "a conversation that is a number": ({"conversation": 7, "input": "x"}, 400, "invalid_request", "conversation"),
    "a conversation that is a list": ({"conversation": ["c"], "input": "x"}, 400, "invalid_request", "conversation"),
    "a conversation that is false": ({"conversation": False, "input": "x"}, 400, "invalid_request", "conversation"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_BODIES))
def test_hostile_bodies_get_a_4xx_naming_the_field_and_the_conversation_stays_answerable(
    client: Responses, case: str
) -> None:
    body, status, code, param = HOSTILE_BODIES[case]
    head = {"conversation": f"conv_hostile_{sorted(HOSTILE_BODIES).index(case)}"}
    paused = client.call({**head, "input": f"hostile {case}"})
    body = answering(body, paused)  # the answers name the ids this pause published
    for stream in (False, True):  # streaming refusals are HTTP statuses too
        refused = client.post({**head, **body, "stream": stream} if "stream" not in body else {**head, **body})
        assert refused.status_code == status, refused.text[:300]
        assert refused.headers["content-type"].startswith("application/json")
        error = refused.json()["error"]
        assert (error["code"], error["param"]) == (code, param), error
    assert text_of(client.call({**head, "input": [approve(published(paused))]})) == f"deployed: hostile {case}"


def test_a_conversation_object_names_the_same_conversation_as_its_id(client: Responses) -> None:
    paused = client.call({"conversation": {"id": "conv_object"}, "input": "object"})
    done = client.call({"conversation": "conv_object", "input": [approve(published(paused))]})
    assert text_of(done) == "deployed: object"


@pytest.mark.parametrize("output", ["true", '"3"', '" 3 "', '"3.0"'])
def test_an_int_request_takes_only_a_json_number(serve: Any, http: httpx.Client, output: str) -> None:
    """The request's JSON Schema says integer: JSON true and numeric text are refused (core takes true for an int,
    pydantic "3"), with the field named and the pause kept; the JSON number then answers it."""
    client = serve_agent(serve, http, copier)
    head = {"conversation": f"conv_int_{output}"}
    (request,) = approval_items(client.call({**head, "input": "memo"}))
    assert json.loads(request["arguments"])["response_schema"] == {"type": "integer"}

    def answer(text: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": request["id"], "output": text}

    for stream in (False, True):
        refused = client.post({**head, "input": [answer(output)], "stream": stream})
        assert refused.status_code == 400, refused.text[:300]
        error = refused.json()["error"]
        assert (error["code"], error["param"]) == ("answer_mismatch", "input[0].output"), error
        assert "valid integer" in error["message"] and "still pending" in error["message"]
    assert text_of(client.call({**head, "input": [answer("3")]})) == "3 copies of memo"


def test_unknown_previous_response_id_is_a_400(client: Responses) -> None:
    refused = client.post({"previous_response_id": "resp_unknown", "input": [approve("auto::0")]})
    assert refused.status_code == 400
    assert refused.json()["error"] | {"message": ""} == {
        "type": "invalid_request_error",
        "code": "previous_response_not_found",
        "message": "",
        "param": "previous_response_id",
    }


def test_a_token_of_another_conversation_is_refused_and_both_stay_answerable(serve: Any, http: httpx.Client) -> None:
    store = SessionStore()
    client = serve_agent(serve, http, deployer, session_store=store)
    paused_a = client.call({"conversation": "conv_tok_a", "input": "a"})
    paused_b = client.call({"conversation": "conv_tok_b", "input": "b"})
    token_b = _token_in(store, "conversation:conv_tok_b")
    for body in (
        {"conversation": "conv_tok_a", "input": [approve(published(paused_b))], "continuation_token": token_b},
        {"conversation": "conv_tok_a", "input": "x", "continuation_token": token_b},
    ):
        refused = client.post(body)
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "continuation_token"
        assert json.dumps(token_b["token"]) not in refused.text
    declined = client.call({"conversation": "conv_tok_b", "input": [approve(published(paused_b), False)]})
    assert text_of(declined) == "not deployed: b"
    assert (
        text_of(client.call({"conversation": "conv_tok_a", "input": [approve(published(paused_a))]})) == "deployed: a"
    )


def test_a_replayed_answer_is_refused_and_the_conversation_takes_new_input(client: Responses) -> None:
    head = {"conversation": "conv_replay"}
    paused = client.call({**head, "input": "replay me"})
    answer = {**head, "input": [approve(published(paused))]}
    assert text_of(client.call(answer)) == "deployed: replay me"
    for stream in (False, True):
        refused = client.post({**answer, "stream": stream})
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "continuation_refused"
    assert DEPLOYS["replay me"] == 1
    assert approval_items(client.call({**head, "input": "again"}))


@pytest.mark.parametrize("item", ["mcp_approval_response", "function_call_output"])
def test_an_earlier_rounds_answer_replayed_after_the_next_pause_is_an_answer_mismatch(
    client: Responses, item: str
) -> None:
    """Core numbers requests per run (``auto::0`` again in round two); the ids the agent publishes are unique to
    their pause, so round one's exact request sent again (a double click, a retry) answers nothing of round two."""
    head = {"conversation": f"conv_rounds_{item}"}
    first = client.call({**head, "input": "round one"})
    if item == "mcp_approval_response":
        answer, param = {**head, "input": [approve(published(first))]}, "input[0].approval_request_id"
    else:
        output = {"type": "function_call_output", "call_id": published(first), "output": "true"}
        answer, param = {**head, "input": [output]}, "input[0].call_id"
    assert text_of(client.call(answer)) == "deployed: round one"
    second = client.call({**head, "input": "round two"})
    assert core_id(published(second)) == core_id(published(first))  # core's id is the same in both rounds
    for stream in (False, True):
        refused = client.post({**answer, "stream": stream})
        assert refused.status_code == 400, refused.text
        assert (refused.json()["error"]["code"], refused.json()["error"]["param"]) == ("answer_mismatch", param)
    assert DEPLOYS["round two"] == 0  # nothing ran
    assert text_of(client.call({**head, "input": [approve(published(second), False)]})) == "not deployed: round two"


async def test_fifty_concurrent_conversations_through_one_app(serve: Any) -> None:
    """50 conversations at once (half ``conversation``, half ``previous_response_id``; half streaming): each
    gets its own answer once, and the route holds nothing afterwards (no busy keys, no runs)."""
    app = responses_app(deployer.build().as_agent(name="deployer"))
    url = f"{serve(app).base}/v1/responses"

    async def one(index: int, client: httpx.AsyncClient) -> str:
        target = f"fleet {index}"
        head: dict[str, Any] = {"conversation": f"conv_fleet_{index}"} if index % 2 else {}
        stream = index % 4 < 2
        first = await client.post(url, json={**head, "input": target})
        assert first.status_code == 200, first.text
        if not head:
            head = {"previous_response_id": first.json()["id"]}
        (request,) = approval_items(first.json())
        answer = {**head, "input": [approve(request["id"], index % 5 != 0)], "stream": stream}
        reply = await client.post(url, json=answer)
        assert reply.status_code == 200, reply.text
        if not stream:
            return text_of(reply.json())
        return "".join(
            json.loads(line[5:])["delta"]
            for line in reply.text.splitlines()
            if line.startswith("data:") and '"response.output_text.delta"' in line
        )

    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(timeout=120, trust_env=False, limits=limits) as client:
        texts = await asyncio.gather(*(one(index, client) for index in range(50)))
    expected = [f"{'deployed' if index % 5 else 'not deployed'}: fleet {index}" for index in range(50)]
    assert texts == expected
    assert all(DEPLOYS[f"fleet {index}"] == (1 if index % 5 else 0) for index in range(50))
    host = app.state.responses_host
    assert host.turns.busy == set()
    assert host.tasks == set()


def test_importing_the_package_needs_no_host_package() -> None:
    code = (
        "import sys, agent_framework_functional, agent_framework_functional.hosting as h; "
        "assert 'fastapi' not in sys.modules and 'agent_framework_hosting_responses' not in sys.modules; "
        "assert h.__all__ == ['ReleaseFreeMemory', 'ThreadSnapshotStore', 'a2a_app', 'agui_endpoint', 'devui_app', "
        "'mcp_app', 'responses_app', 'serve_devui']; "
        "assert callable(h.responses_app); "
        "assert 'agent_framework_hosting_responses' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("error", "status", "code", "retry"),
    [
        (WorkflowRunningError("running"), 409, "workflow_running", True),
        (PendingContinuationError("pending"), 409, "pending_request", False),
        (ContinuationAuthorityError(), 409, "continuation_refused", False),
        (ResponseMismatchError("request 'auto::0': draft.body: Field required"), 400, "answer_mismatch", False),
        (RuntimeError("a bug"), None, None, None),
    ],
)
def test_the_error_mapping(error: Exception, status: int | None, code: str | None, retry: bool | None) -> None:
    """Each error the agent raises on purpose has its status (only what retrying can fix says to retry);
    anything else is not the client's doing (None: the route answers 500 without details)."""
    from agent_framework_functional.hosting.responses import refusal_for

    refusal = refusal_for(error)
    if status is None:
        assert refusal is None
        return
    assert refusal is not None
    assert (refusal.status, refusal.code, refusal.retry) == (status, code, retry)


def test_scope_keeps_each_callers_conversations_apart(serve: Any, http: httpx.Client) -> None:
    """With ``scope=`` (here: the user a header names, as an authentication middleware would set it), the same
    conversation id of two users is two conversations, a response id of one user is unknown to the other, and
    a caller without a scope is refused by the app's own ``HTTPException``."""

    def user(request: Request) -> str:
        name = request.headers.get("x-user")
        if not name:
            raise HTTPException(status_code=401, detail="who are you?")
        return name

    app = responses_app(deployer.build().as_agent(name="deployer"), scope=user)
    url = f"{serve(app).base}/v1/responses"
    ann, bob = {"x-user": "ann"}, {"x-user": "bob"}
    paused = http.post(url, json={"conversation": "conv_shared", "input": "ann's"}, headers=ann).json()
    assert approval_items(paused)
    bobs = http.post(url, json={"conversation": "conv_shared", "input": "bob's"}, headers=bob)
    assert bobs.status_code == 200 and approval_items(bobs.json())  # not ann's pause: a conversation of his own
    answer = [approve(published(paused))]
    stolen = http.post(url, json={"previous_response_id": paused["id"], "input": answer}, headers=bob)
    assert stolen.status_code == 400
    assert stolen.json()["error"]["code"] == "previous_response_not_found"
    assert http.post(url, json={"input": "anonymous"}).status_code == 401
    done = http.post(url, json={"conversation": "conv_shared", "input": answer}, headers=ann)
    assert text_of(done.json()) == "deployed: ann's"


@pytest.mark.parametrize("options", [{"max_body_bytes": 0}, {"max_body_bytes": 1.5}, {"retry_after": -1}])
def test_bad_settings_are_refused_at_the_call(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        responses_app(deployer.build().as_agent(name="deployer"), **options)


def test_a_client_that_hangs_up_inside_its_body_is_not_a_server_error(
    serve: Any, http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """A body cut short by a hang-up (Content-Length promised more) ran nothing and logged no error: the route read
    starlette's ``ClientDisconnect`` as a failed session store, a 500 with a traceback in the server log."""
    import socket
    import time

    client = serve_agent(serve, http, deployer)
    head = {"conversation": "conv_truncated"}
    paused = client.call({**head, "input": "truncated"})
    port = int(client.url.split(":")[2].split("/")[0])
    with caplog.at_level(logging.ERROR):
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.sendall(
                b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 5000\r\n\r\n"
                + json.dumps({**head, "input": [approve(published(paused))]}).encode()[:20]
            )
            time.sleep(0.2)
        time.sleep(0.5)  # let the server notice the hang-up and finish the request
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == [], [r.getMessage() for r in caplog.records]
    assert DEPLOYS["truncated"] == 0
    assert text_of(client.call({**head, "input": [approve(published(paused))]})) == "deployed: truncated"
