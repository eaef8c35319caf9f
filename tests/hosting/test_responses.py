"""The Responses host, ``agent_framework_functional.hosting.responses_app``, over real HTTP.

Each test serves the app on a real loopback socket (uvicorn, port 0) and drives it with plain HTTP (httpx)
or the ``openai`` client. A pause is the ``function_call`` + ``mcp_approval_request`` output items of a
``completed`` response; the answer is an ``mcp_approval_response`` or ``function_call_output`` input item,
sent with ``previous_response_id`` (immutable snapshots) or ``conversation`` (one mutable head).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from agent_framework import AgentSession, RunContext, SessionStore
from agent_framework_hosting_responses import responses_to_run
from hosting_support import DEPLOYS, ROOT, HangUps, deployer, iter_sse, releaser, reviewer, run_sample_self_check
from request_ids import core_id
from responses_support import Responses, approval_items, approve, published, serve_agent, text_of

from agent_framework_functional import responses_approval_messages, responses_to_run_with_approvals, workflow
from agent_framework_functional.hosting import responses_app

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out


@workflow(name="breaker", description="Asks one bool approval, then fails.")
async def breaker(text: str, ctx: RunContext) -> str:
    """Pauses once on ``auto::0``; the approved resume raises."""
    if await ctx.request_info({"action": "break", "target": text}, response_type=bool):
        raise RuntimeError(f"broken after the approval: {text}")
    return f"kept: {text}"


class SlowSessionStore(SessionStore):
    """An in-memory session store whose writes of a session with state (a paused conversation's token) take until
    a client hangs up, at most 0.3 s: a remote store that a closed connection overtakes."""

    def __init__(self, hang_ups: HangUps) -> None:
        super().__init__()
        self.hang_ups = hang_ups
        self.writing = threading.Event()  # set (for the test's thread) when a held write has started
        self.written = threading.Event()  # and when it has finished
        self.session: AgentSession | None = None  # the last session written with state

    async def set(self, session_id: str, session: AgentSession) -> None:
        if session.state:
            self.writing.set()
            await self.hang_ups.wait(timeout=0.3)
        await super().set(session_id, session)
        if session.state:
            self.session = session
            self.written.set()


@pytest.fixture
def client(serve: Any, http: httpx.Client) -> Responses:
    return serve_agent(serve, http, deployer)


@pytest.fixture
def two_step_client(serve: Any, http: httpx.Client) -> Responses:
    return serve_agent(serve, http, releaser)


# The adapter on its own.


def test_approval_items_become_function_approval_responses() -> None:
    body = {"input": [approve("auto::0", True), approve("auto::1", False)]}
    (message,) = responses_approval_messages(body)
    assert message.role == "user"
    assert [(c.type, c.id, c.approved) for c in message.contents] == [
        ("function_approval_response", "auto::0", True),
        ("function_approval_response", "auto::1", False),
    ]
    assert [c.function_call.call_id for c in message.contents] == ["auto::0", "auto::1"]
    assert responses_approval_messages({"input": "hello"}) == []
    assert responses_approval_messages({"input": [{"role": "user", "content": "hi"}]}) == []


@pytest.mark.parametrize(
    "item",
    [
        {"type": "mcp_approval_response", "approve": True},
        {"type": "mcp_approval_response", "approval_request_id": "", "approve": True},
        {"type": "mcp_approval_response", "approval_request_id": "auto::0", "approve": "yes"},
    ],
)
def test_malformed_approval_items_are_refused(item: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="mcp_approval_response"):
        responses_approval_messages({"input": [item]})


def test_run_args_keep_options_and_put_the_approvals_last() -> None:
    body = {"input": [{"role": "user", "content": "note"}, approve("auto::0")], "stream": True, "temperature": 0.5}
    run = responses_to_run_with_approvals(body)
    assert run["stream"] is True
    assert run["options"] == responses_to_run({**body, "input": "x"})["options"]
    assert [[c.type for c in m.contents] for m in run["messages"]] == [["text"], ["function_approval_response"]]
    only = responses_to_run_with_approvals({"previous_response_id": "resp_1", "input": [approve("auto::0")]})
    assert [[c.type for c in m.contents] for m in only["messages"]] == [["function_approval_response"]]
    plain = {"input": "hello"}
    assert responses_to_run_with_approvals(plain)["messages"][0].text == responses_to_run(plain)["messages"][0].text


def test_the_unadapted_parser_refuses_the_approval_item() -> None:
    """Why the adapter exists: the hosting package's own parser rejects the standard answer."""
    with pytest.raises(ValueError, match="Unsupported Responses input content type"):
        responses_to_run({"input": [approve("auto::0")]})


# The route over HTTP.


def test_non_streaming_round_trip_with_previous_response_id(client: Responses) -> None:
    paused = client.call({"input": "deploy app"})
    assert paused["status"] == "completed"
    (request,) = approval_items(paused)
    assert core_id(request["id"]) == "auto::0"
    assert request["name"] == "request_info"
    assert json.loads(request["arguments"])["data"] == {"action": "deploy", "target": "deploy app"}

    done = client.call({"previous_response_id": paused["id"], "input": [approve(request["id"])]})
    assert done["status"] == "completed"
    assert approval_items(done) == []
    assert text_of(done) == "deployed: deploy app"


def test_streaming_round_trip_with_conversation(client: Responses) -> None:
    conversation = "conv_stream_one"
    _, paused = client.stream({"input": "deploy web", "conversation": conversation})
    assert paused["status"] == "completed"
    (request,) = approval_items(paused)
    assert core_id(request["id"]) == "auto::0"

    events, done = client.stream({"conversation": conversation, "input": [approve(request["id"], False)]})
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "not deployed: deploy web"
    assert text_of(done) == "not deployed: deploy web"


def test_two_approvals_in_one_run(two_step_client: Responses) -> None:
    first = two_step_client.call({"input": "v5", "conversation": "conv_two_step"})
    assert [core_id(i["id"]) for i in approval_items(first)] == ["auto::0"]
    second = two_step_client.call({"conversation": "conv_two_step", "input": [approve(published(first))]})
    (request,) = approval_items(second)
    assert request["id"] == published(second, "auto::1")
    assert json.loads(request["arguments"])["data"]["gate"] == "release"
    done = two_step_client.call({"conversation": "conv_two_step", "input": [approve(request["id"])]})
    assert text_of(done) == "v5: build=True release=True"


def test_str_request_answered_by_a_plain_text_reply(serve: Any, http: httpx.Client) -> None:
    client = serve_agent(serve, http, reviewer)
    paused = client.call({"input": "the post"})
    (request,) = approval_items(paused)
    assert json.loads(request["arguments"])["response_type"] == "str"
    done = client.call({"previous_response_id": paused["id"], "input": "ship it"})
    assert text_of(done) == "published: the post (ship it)"


def test_two_conversations_interleaved_on_one_agent(client: Responses) -> None:
    paused_a = client.call({"input": "alpha", "conversation": "conv_A"})
    paused_b = client.call({"input": "beta", "conversation": "conv_B"})  # A still paused
    assert [json.loads(i["arguments"])["data"]["target"] for i in approval_items(paused_a)] == ["alpha"]
    assert [json.loads(i["arguments"])["data"]["target"] for i in approval_items(paused_b)] == ["beta"]
    assert (
        text_of(client.call({"conversation": "conv_A", "input": [approve(published(paused_a))]})) == "deployed: alpha"
    )
    assert text_of(client.call({"conversation": "conv_B", "input": [approve(published(paused_b), False)]})) == (
        "not deployed: beta"
    )


def test_replaying_a_spent_branch_is_refused(client: Responses) -> None:
    """``previous_response_id`` snapshots can branch; the pause's token is single use, so only one branch
    may answer it: the second answer (approve again, or decline) is refused with 409 and runs nothing."""
    paused = client.call({"input": "deploy once"})
    answer = {"previous_response_id": paused["id"], "input": [approve(published(paused))]}
    assert text_of(client.call(answer)) == "deployed: deploy once"
    for replay in (answer, {"previous_response_id": paused["id"], "input": [approve(published(paused), False)]}):
        refused = client.post(replay)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "continuation_refused"


@pytest.mark.parametrize("session", ["previous_response_id", "conversation"])
def test_client_that_hangs_up_at_the_approval_request_can_still_answer_it(
    serve: Any, http: httpx.Client, session: str
) -> None:
    """The route stores the session before the terminal event, so closing the SSE connection right after the
    approval request loses nothing, even when the session store is slower than the hang-up. The hosting
    package streams only text as it comes; the ``mcp_approval_request`` item arrives in the terminal
    ``response.completed`` event, and the client hangs up there, before the body ends. (A route that stored
    the session after the last event lost the pause here: Starlette cancels the response, and that write with
    it, when it sees the hang-up; the answer got 409 ``ContinuationAuthorityError``.) Replaying the answer is
    refused (409) and deploys nothing."""
    hang_ups = HangUps()
    app = responses_app(deployer.build().as_agent(name="deployer"), session_store=SlowSessionStore(hang_ups))
    client = Responses(http, serve(hang_ups.watch(app)).base)
    target = f"deploy hangup {session}"
    body: dict[str, Any] = {"input": target, "stream": True}
    if session == "conversation":
        body["conversation"] = "conv_hangup"
    seen: list[str] = []
    with http.stream("POST", client.url, json=body) as reply:
        assert reply.status_code == 200
        for event in iter_sse(reply.iter_lines()):
            seen.append(event["data"]["type"])
            if event["data"]["type"] == "response.completed":
                paused = event["data"]["response"]
                break  # hang up: leave the with block without reading the rest
    assert seen[0] == "response.created" and seen[-1] == "response.completed"
    (request,) = approval_items(paused)
    assert json.loads(request["arguments"])["data"] == {"action": "deploy", "target": target}

    head = (
        {"previous_response_id": paused["id"]} if session == "previous_response_id" else {"conversation": "conv_hangup"}
    )
    answer = {**head, "input": [approve(request["id"])]}
    done = client.call(answer)
    assert text_of(done) == f"deployed: {target}"
    assert DEPLOYS[target] == 1

    refused = client.post(answer)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "continuation_refused"
    assert DEPLOYS[target] == 1


@pytest.mark.parametrize("session", ["previous_response_id", "conversation"])
def test_client_that_hangs_up_while_the_pause_is_being_stored_can_still_answer_it(
    serve: Any, http: httpx.Client, session: str
) -> None:
    """A client that hangs up after the run paused but before the terminal event (a client timeout, say),
    while the session store is still writing the session that holds the token: the write is shielded from the
    response's cancellation, so the conversation keeps its pause and the answer deploys once. (Without the
    shield Starlette cancelled the write: the answer got 409 ``ContinuationAuthorityError`` and every new
    input 409 ``PendingContinuationError``, for good.)"""
    hang_ups = HangUps()
    store = SlowSessionStore(hang_ups)
    agent = deployer.build().as_agent(name="deployer")
    client = Responses(http, serve(hang_ups.watch(responses_app(agent, session_store=store))).base)
    target = f"deploy early hangup {session}"
    body: dict[str, Any] = {"input": target, "stream": True}
    if session == "conversation":
        body["conversation"] = "conv_early_hangup"
    with http.stream("POST", client.url, json=body) as reply:
        assert reply.status_code == 200
        events = iter_sse(reply.iter_lines())  # kept: a dropped line iterator may close the connection early
        created = next(events)["data"]
        assert created["type"] == "response.created"
        assert store.writing.wait(10)  # paused; the session with its token is being written: hang up now
        del events
    head = (
        {"previous_response_id": created["response"]["id"]}
        if session == "previous_response_id"
        else {"conversation": "conv_early_hangup"}
    )
    # The client comes back later (once the write is done) and answers the request of the pause, which it never
    # saw: its id is unique to the pause, so the test reads it from the agent (a real client from its logs, say).
    assert store.written.wait(10), "the write of the paused session was cancelled with the response"
    assert store.session is not None
    (request_id,) = agent.pending_requests_for(store.session)
    done = client.call({**head, "input": [approve(request_id)]})
    assert text_of(done) == f"deployed: {target}"
    assert DEPLOYS[target] == 1


def test_new_input_on_a_paused_conversation_is_a_conflict(client: Responses) -> None:
    paused = client.call({"input": "deploy first", "conversation": "conv_busy"})
    refused = client.post({"input": "something else", "conversation": "conv_busy"})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "pending_request"
    assert refused.headers["x-should-retry"] == "false"
    message = refused.json()["error"]["message"]  # what to send next over HTTP, no Python call
    assert "function_call_output" in message and "new conversation" in message
    assert "abandon_continuation" not in message
    done = client.call({"conversation": "conv_busy", "input": [approve(published(paused))]})
    assert text_of(done) == "deployed: deploy first"


def test_host_responses_sample_self_check() -> None:
    out = run_sample_self_check(ROOT / "samples" / "host_responses.py")
    assert "self-check passed: deployed: ship it" in out


def test_a_conversation_whose_resume_failed_takes_new_input(serve: Any, http: httpx.Client) -> None:
    """The route writes the session also when the agent's run raises, so the conversation drops the spent token
    and takes new input. The workflow's own failure is the one 500, with a fixed message (no details)."""
    client = serve_agent(serve, http, breaker)
    head = {"conversation": "conv_failed_resume"}
    paused = client.call({**head, "input": "first"})
    (request,) = approval_items(paused)
    failed = client.post({**head, "input": [approve(request["id"])]})
    assert failed.status_code == 500
    assert failed.json()["error"]["code"] == "server_error"
    assert "broken" not in failed.text
    again = client.call({**head, "input": "second"})
    (request,) = approval_items(again)
    assert json.loads(request["arguments"])["data"] == {"action": "break", "target": "second"}


def test_bench_hosts_quick_prints_every_row() -> None:
    """Smoke run of ``benchmarks/bench_hosts.py`` (tiny N; the figures are not checked, only that both sides of
    each host ran and no conversation was wrong)."""
    from script_runner import assert_ok, run_script

    out = assert_ok(run_script(ROOT / "benchmarks" / "bench_hosts.py", "--quick", timeout=240))
    rows = [line.split() for line in out.splitlines() if line.startswith(("responses ", "agui ", "devui "))]
    expected = [(host, side, "5") for host in ("responses", "agui", "devui") for side in ("ours", "core")]
    assert [(row[0], row[1], row[2]) for row in rows] == expected, out
    assert [row[-1] for row in rows] == ["0"] * 6, out
