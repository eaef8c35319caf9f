"""DevUI through ``devui_app`` / ``serve_devui``, serving one FunctionalWorkflowAgent, driven over HTTP like its page.

The page's protocol: ``POST /v1/conversations`` (DevUI keeps ONE ``AgentSession`` per conversation id), then
``POST /v1/responses`` with ``metadata.entity_id`` and ``conversation``; a pause arrives as the SSE event
``response.function_approval.requested`` and is answered with a user message whose content is
``{"type": "function_approval_response", "request_id", "approved"}``. DevUI always calls
``agent.run(..., stream=True, session=<the conversation's session>)``; ``stream: false`` aggregates that
stream into one JSON response. Every test runs the real ``DevServer`` app on a loopback socket.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hosting_support import (
    CHROMIUM,
    DEPLOYS,
    PUBLISHED,
    ROOT,
    editor,
    iter_sse,
    make_agent,
    node_env,
    parse_sse,
    releaser,
    reviewer,
    run_node,
    run_sample_self_check,
    screenshot_dir,
    sse_data,
)
from request_ids import core_id

from agent_framework_functional import FunctionalWorkflowAgent
from agent_framework_functional.hosting import devui_app

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_global_tracer_provider")]

TOKEN = "hosting-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class DevUI:
    """A started DevUI server and the calls its web page makes."""

    def __init__(self, http: httpx.Client, base: str, agent: FunctionalWorkflowAgent | None = None) -> None:
        self.http = http
        self.base = base
        self.agent = agent
        entities = http.get(f"{base}/v1/entities", headers=AUTH).json()["entities"]
        assert len(entities) == 1
        assert entities[0]["type"] == "agent"
        self.entity_id: str = entities[0]["id"]

    def conversation(self) -> str:
        reply = self.http.post(
            f"{self.base}/v1/conversations", json={"metadata": {"agent_id": self.entity_id}}, headers=AUTH
        )
        reply.raise_for_status()
        return reply.json()["id"]

    def body(self, conversation: str | None, input_: Any, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"metadata": {"entity_id": self.entity_id}, "input": input_, "stream": stream}
        if conversation is not None:
            body["conversation"] = conversation
        return body

    def stream(self, conversation: str | None, input_: Any) -> list[dict[str, Any]]:
        reply = self.http.post(
            f"{self.base}/v1/responses", json=self.body(conversation, input_, stream=True), headers=AUTH
        )
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"].startswith("text/event-stream")
        return sse_data(parse_sse(reply.text))

    def call(self, conversation: str | None, input_: Any) -> dict[str, Any]:
        reply = self.http.post(
            f"{self.base}/v1/responses", json=self.body(conversation, input_, stream=False), headers=AUTH
        )
        assert reply.status_code == 200, reply.text
        return reply.json()


def approval(request_id: str, approved: bool = True) -> list[dict[str, Any]]:
    """The page's answer: one user message with a ``function_approval_response`` content."""
    content = {"type": "function_approval_response", "request_id": request_id, "approved": approved}
    return [{"type": "message", "role": "user", "content": [content]}]


def approval_requests(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("type") == "response.function_approval.requested"]


def completed_text(events: list[dict[str, Any]]) -> str:
    """The text of the ``response.completed`` event (fails on ``response.failed`` or an ``error`` event)."""
    kinds = [e.get("type") for e in events]
    assert "error" not in kinds and "response.failed" not in kinds, json.dumps(events)[:2000]
    (done,) = [e for e in events if e.get("type") == "response.completed"]
    assert done["response"]["status"] == "completed"
    return output_text(done["response"])


def output_text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response["output"]
        if item.get("type") == "message"
        for part in item.get("content", [])
    )


def failure_message(events: list[dict[str, Any]]) -> str:
    (failed,) = [e for e in events if e.get("type") == "response.failed"]
    return failed["response"]["error"]["message"]


def start_devui(serve: Any, http: httpx.Client, agent: FunctionalWorkflowAgent) -> DevUI:
    return DevUI(http, serve(devui_app(agent, auth_token=TOKEN)).base, agent)


@pytest.fixture
def devui(serve: Any, http: httpx.Client) -> DevUI:
    return start_devui(serve, http, make_agent())


def test_streaming_approval_round_trip(devui: DevUI) -> None:
    conversation = devui.conversation()
    paused = devui.stream(conversation, "deploy app")
    (request,) = approval_requests(paused)
    assert core_id(request["request_id"]) == "auto::0"
    assert request["function_call"]["name"] == "request_info"
    assert request["function_call"]["arguments"]["data"] == {"action": "deploy", "target": "deploy app"}
    assert completed_text(paused) == ""

    done = devui.stream(conversation, approval(request["request_id"]))
    assert not approval_requests(done)
    deltas = "".join(e["delta"] for e in done if e.get("type") == "response.output_text.delta")
    assert deltas == "deployed: deploy app"
    assert completed_text(done) == "deployed: deploy app"


def test_streaming_two_approvals_in_one_run(serve: Any, http: httpx.Client) -> None:
    devui = start_devui(serve, http, make_agent(releaser))
    conversation = devui.conversation()
    (first,) = approval_requests(devui.stream(conversation, "v2"))
    assert core_id(first["request_id"]) == "auto::0"
    assert first["function_call"]["arguments"]["data"]["gate"] == "build"
    (second,) = approval_requests(devui.stream(conversation, approval(first["request_id"], True)))
    assert core_id(second["request_id"]) == "auto::1"
    assert second["function_call"]["arguments"]["data"]["gate"] == "release"
    done = devui.stream(conversation, approval(second["request_id"], False))
    assert completed_text(done) == "v2: build=True release=False"


def test_str_request_answered_by_a_plain_text_reply(serve: Any, http: httpx.Client) -> None:
    """A ``str`` request: the user just types the answer in the conversation (the request says it wants str)."""
    devui = start_devui(serve, http, make_agent(reviewer))
    conversation = devui.conversation()
    (request,) = approval_requests(devui.stream(conversation, "the post"))
    assert request["function_call"]["arguments"]["response_type"] == "str"
    assert completed_text(devui.stream(conversation, "ship it")) == "published: the post (ship it)"


def test_non_streaming_approval_round_trip(devui: DevUI) -> None:
    """``stream: false``: DevUI drops its custom approval event when it aggregates, but keeps function calls.

    The agent puts a ``function_call`` content (call id = request id, name ``request_info``) before each
    approval request, so the aggregated JSON shows the request as a ``function_call`` output item.
    """
    conversation = devui.conversation()
    paused = devui.call(conversation, "deploy web")
    assert paused["status"] == "completed"
    calls = [item for item in paused["output"] if item.get("type") == "function_call"]
    assert [(core_id(c["call_id"]), c["name"]) for c in calls] == [("auto::0", "request_info")]
    assert json.loads(calls[0]["arguments"])["data"] == {"action": "deploy", "target": "deploy web"}

    done = devui.call(conversation, approval(calls[0]["call_id"], approved=False))
    assert done["status"] == "completed"
    assert output_text(done) == "not deployed: deploy web"


def test_two_conversations_interleaved_on_one_agent(devui: DevUI) -> None:
    conv_a, conv_b = devui.conversation(), devui.conversation()
    (request_a,) = approval_requests(devui.stream(conv_a, "alpha"))
    (request_b,) = approval_requests(devui.stream(conv_b, "beta"))  # A still paused
    # Core's ids repeat across workflow runs (auto::0); the published ones are unique to their pause.
    assert core_id(request_a["request_id"]) == core_id(request_b["request_id"]) == "auto::0"
    assert request_a["request_id"] != request_b["request_id"]
    assert request_a["function_call"]["arguments"]["data"]["target"] == "alpha"
    assert request_b["function_call"]["arguments"]["data"]["target"] == "beta"

    assert completed_text(devui.stream(conv_a, approval(request_a["request_id"], True))) == "deployed: alpha"
    assert completed_text(devui.stream(conv_b, approval(request_b["request_id"], False))) == "not deployed: beta"
    # Both conversations are finished: each takes new input again.
    assert approval_requests(devui.stream(conv_a, "gamma"))
    assert approval_requests(devui.stream(conv_b, "delta"))


def test_client_that_hangs_up_at_the_approval_request_can_still_answer_it(devui: DevUI) -> None:
    """The pause is saved before the approval event is sent, so closing the SSE connection there loses nothing."""
    conversation = devui.conversation()
    body = devui.body(conversation, "deploy hangup", stream=True)
    seen: list[str] = []
    request_id = ""
    with devui.http.stream("POST", f"{devui.base}/v1/responses", json=body, headers=AUTH) as reply:
        assert reply.status_code == 200
        for event in iter_sse(reply.iter_lines()):
            data = event["data"]
            kind = data.get("type") if isinstance(data, dict) else data
            seen.append(kind)
            if kind == "response.function_approval.requested":
                request_id = data["request_id"]
                break  # hang up: leave the with block without reading the rest
    assert seen[-1] == "response.function_approval.requested"
    assert "response.completed" not in seen

    done = devui.stream(conversation, approval(request_id))
    assert completed_text(done) == "deployed: deploy hangup"
    assert DEPLOYS["deploy hangup"] == 1


def test_an_earlier_rounds_approval_replayed_after_the_next_pause_fails_the_turn(devui: DevUI) -> None:
    """Core numbers requests per run (``auto::0`` again in the next turn's pause); the published ids are unique to
    their pause, so round one's approval sent again (a double click, a retry) approves nothing of round two."""
    conversation = devui.conversation()
    target = f"deploy round one {conversation}"
    (first,) = approval_requests(devui.stream(conversation, target))
    round_one = approval(first["request_id"])  # the exact answer, kept by the page
    assert completed_text(devui.stream(conversation, round_one)) == f"deployed: {target}"
    (second,) = approval_requests(devui.stream(conversation, f"{target}, round two"))
    assert core_id(second["request_id"]) == core_id(first["request_id"])  # core's id is the same in both rounds
    refused = devui.stream(conversation, round_one)  # DevUI drops an approval of a request it no longer has open
    assert "did not contain any supported message content" in failure_message(refused)
    assert DEPLOYS[f"{target}, round two"] == 0  # nothing ran
    done = devui.stream(conversation, approval(second["request_id"], False))
    assert completed_text(done) == f"not deployed: {target}, round two"


def test_a_turn_without_a_conversation_is_refused_and_runs_nothing(devui: DevUI) -> None:
    """DevUI runs a turn whose conversation is missing or was dropped by the bounds with ``session=None``;
    every such turn would share the agent's one session-less conversation (a pause there would block the
    next). The turn is refused up front, naming what to do; conversations are not affected.
    """
    for conversation in (None, "conv_dropped_or_never_created"):
        refused = devui.stream(conversation, "deploy nosession")
        assert "Start a new conversation" in failure_message(refused)
        assert not approval_requests(refused)
    assert devui.agent is not None and not devui.agent.pending_requests  # the session-less one holds nothing

    conversation = devui.conversation()
    (request,) = approval_requests(devui.stream(conversation, "deploy session"))
    assert completed_text(devui.stream(conversation, approval(request["request_id"]))) == "deployed: deploy session"


def test_fifty_concurrent_conversations_on_one_agent(serve: Any) -> None:
    """50 conversations pause at once on one agent, then all answer at once: each gets its own result, once."""
    count = 50
    limits = httpx.Limits(max_connections=count + 5, max_keepalive_connections=count + 5)
    with httpx.Client(timeout=120, trust_env=False, limits=limits) as http:
        devui = start_devui(serve, http, make_agent())
        conversations = [devui.conversation() for _ in range(count)]
        targets = [f"deploy many {conversation}" for conversation in conversations]
        with ThreadPoolExecutor(max_workers=count) as pool:
            paused = list(pool.map(devui.stream, conversations, targets))
            assert [
                [r["function_call"]["arguments"]["data"]["target"] for r in approval_requests(e)] for e in paused
            ] == [[target] for target in targets]
            answers = [approval(r["request_id"]) for events in paused for r in approval_requests(events)]
            done = list(pool.map(devui.stream, conversations, answers))
    assert [completed_text(events) for events in done] == [f"deployed: {target}" for target in targets]
    assert [DEPLOYS[target] for target in targets] == [1] * count


@pytest.mark.parametrize("case", ["malformed JSON", "200,000-deep JSON", "10 MB body", "unknown request id"])
def test_hostile_request_fails_and_the_conversation_stays_answerable(devui: DevUI, case: str) -> None:
    """Bad bodies get DevUI's 4xx (a 10 MB message, if DevUI reads it, is new input the paused agent refuses);
    DevUI itself drops an approval for a request it never issued, failing that turn; each time the pause is kept
    and the honest answer deploys once."""
    conversation = devui.conversation()
    target = f"deploy hostile {conversation}"
    (request,) = approval_requests(devui.stream(conversation, target))
    url = f"{devui.base}/v1/responses"
    headers = {**AUTH, "Content-Type": "application/json"}
    if case == "malformed JSON":
        reply = devui.http.post(url, content=b'{"input": "x", ', headers=headers)
        assert 400 <= reply.status_code < 500, reply.text[:300]
    elif case == "200,000-deep JSON":
        reply = devui.http.post(url, content=("[" * 200_000 + "]" * 200_000).encode(), headers=headers)
        assert 400 <= reply.status_code < 500, reply.text[:300]
    elif case == "10 MB body":
        body = devui.body(conversation, [{"type": "message", "role": "user", "content": "a" * 10_000_000}], stream=True)
        reply = devui.http.post(url, json=body, headers=AUTH)
        assert reply.status_code == 200 or 400 <= reply.status_code < 500, reply.status_code
        if reply.status_code == 200:  # DevUI reads it: the agent refuses new input while the pause is pending
            assert "pending" in failure_message(sse_data(parse_sse(reply.text)))
    else:
        refused = devui.stream(conversation, approval("auto::9"))  # DevUI drops an approval it never issued
        assert "did not contain any supported message content" in failure_message(refused)
    assert DEPLOYS[target] == 0
    assert completed_text(devui.stream(conversation, approval(request["request_id"]))) == f"deployed: {target}"
    assert DEPLOYS[target] == 1


MALFORMED_AUTH = {
    "a non-ASCII token": b"Bearer \xff",
    "the token and a non-ASCII byte": b"Bearer " + TOKEN.encode() + b"\xe9",
    "latin-1 text": "Bearer jeton-\u00e9t\u00e9".encode("latin-1"),
    "a non-ASCII scheme": b"B\xe9arer " + TOKEN.encode(),
    "no scheme": TOKEN.encode(),
    "a scheme without a token": b"Bearer",
}


@pytest.mark.parametrize("case", sorted(MALFORMED_AUTH))
def test_a_malformed_authorization_header_is_a_401_never_a_500(devui: DevUI, case: str) -> None:
    """DevUI compares tokens with ``secrets.compare_digest``, which raises on non-ASCII text (a 500 and a
    traceback); every malformed header is DevUI's 401, and the right token still works."""
    header = {"Authorization": MALFORMED_AUTH[case]}
    conversation = devui.conversation()
    for method, path, body in (
        ("GET", "/v1/entities", None),
        ("POST", "/v1/responses", devui.body(conversation, "deploy x", stream=True)),
    ):
        reply = devui.http.request(method, f"{devui.base}{path}", json=body, headers=header)
        assert reply.status_code == 401, reply.text[:300]
        assert reply.json()["error"]["type"] == "authentication_error"
    assert approval_requests(devui.stream(conversation, f"deploy after {case}"))


@pytest.mark.parametrize("token", ["", "jeton-\u00e9t\u00e9"])
def test_devui_app_refuses_a_token_it_could_not_compare(token: str) -> None:
    with pytest.raises(ValueError, match="ASCII"):
        devui_app(make_agent(), auth_token=token)


@pytest.mark.parametrize(
    ("agent_name", "mode", "typed", "expected"),
    [
        ("deployer", "approve", None, "deployed: deploy from browser"),
        (
            "editor",
            "typed",
            '{"title": "Browser launch", "body": "Edited in the page.", "approved": true}',
            "published: Browser launch / Edited in the page.",
        ),
    ],
)
def test_devui_page_in_headless_chromium(
    serve: Any, http: httpx.Client, tmp_path: Path, agent_name: str, mode: str, typed: str | None, expected: str
) -> None:
    """The real web page (playwright-core): send a message, see the approval card with the request data, answer
    (click Approve, or type the edited draft as JSON), see the final text. The screenshots go to a temporary
    folder (``scripts/refresh_docs_images.sh`` saves them to ``docs/``, where the DevUI docs page shows them)."""
    assert Path(CHROMIUM).exists(), "Chromium is missing: scripts/services/chromium.sh installs it"
    devui = start_devui(serve, http, make_agent(editor) if agent_name == "editor" else make_agent())
    message = "Browser draft" if agent_name == "editor" else "deploy from browser"
    shots = screenshot_dir(tmp_path)
    args = [devui.base, TOKEN, message, str(shots), mode, *([typed] if typed else []), expected]
    proc = run_node("devui_browser.mjs", *args, timeout=180)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert f"final text shown: {expected}" in proc.stdout
    for shot in (f"devui_{mode}_request.png", f"devui_{mode}_answered.png"):
        assert (shots / shot).stat().st_size > 10_000


def test_structured_request_answered_by_a_typed_json_reply(serve: Any, http: httpx.Client) -> None:
    """The page can only Approve / Reject; for a ``Draft`` request the person types the edited draft as JSON. The
    request shows the draft (its data) and the type it expects; the workflow gets the edited ``Draft``, once."""
    devui = start_devui(serve, http, make_agent(editor))
    conversation = devui.conversation()
    (request,) = approval_requests(devui.stream(conversation, "DevUI launch"))
    arguments = request["function_call"]["arguments"]
    assert arguments["data"] == {"title": "DevUI launch", "body": "About DevUI launch.", "approved": False}
    assert arguments["response_type"] == "Draft"
    edited = {"title": "DevUI launch!", "body": "Edited.", "approved": True}
    assert completed_text(devui.stream(conversation, json.dumps(edited))) == "published: DevUI launch! / Edited."
    assert PUBLISHED["DevUI launch!"] == 1


def test_typed_reply_of_the_wrong_shape_names_the_field_and_keeps_the_pause(serve: Any, http: httpx.Client) -> None:
    devui = start_devui(serve, http, make_agent(editor))
    conversation = devui.conversation()
    assert approval_requests(devui.stream(conversation, "DevUI wrong"))
    refused = devui.stream(conversation, json.dumps({"title": ["x"], "body": "b", "approved": True}))
    message = failure_message(refused)
    assert "still pending" in message
    assert "title" in message  # the field at fault
    done = devui.stream(conversation, json.dumps({"title": "DevUI right", "body": "b", "approved": True}))
    assert completed_text(done) == "published: DevUI right / b"


def test_serve_devui_prints_the_url_and_the_token(http: httpx.Client) -> None:
    """``serve_devui`` (the sample's ``--serve --port 0``) prints where it listens and the bearer token, which the
    API then requires."""
    env = node_env()
    env["DEVUI_AUTH_TOKEN"] = "printed-token"
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", str(ROOT / "samples" / "host_devui.py"), "--serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url_line = proc.stdout.readline()
        token_line = proc.stdout.readline()
        assert url_line.startswith("DevUI: http://127.0.0.1:"), url_line
        assert token_line.strip() == "DevUI auth token: printed-token"
        base = url_line.split()[1]
        assert http.get(f"{base}/v1/entities").status_code == 401
        entities = http.get(f"{base}/v1/entities", headers={"Authorization": "Bearer printed-token"})
        assert entities.status_code == 200
        assert [e["name"] for e in entities.json()["entities"]] == ["editor"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_host_devui_sample_self_check() -> None:
    out = run_sample_self_check(ROOT / "samples" / "host_devui.py")
    assert "self-check passed: published: Launch day" in out
