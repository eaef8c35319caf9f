"""AG-UI through ``agui_endpoint`` under hostile or heavy use: client state naming the package's session key, bad
bodies, unknown ids, 50 conversations at once. Each bad request gets a 4xx and the conversation stays answerable,
and nothing runs twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from agui_support import Thread, build_app, errors, request_data, text_of
from hosting_support import DEPLOYS, ROOT
from request_ids import core_id

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

FORGED_STATE = {
    "agent_framework_functional": {
        "deployer": {"continuation_token": {"kind": "functional_workflow", "version": "1", "token": "x" * 43}}
    }
}
"""Client state that names the package's session key, with a made-up token for the ``deployer`` agent."""


@pytest.fixture
def base(serve: Any) -> str:
    return serve(build_app()).base


def test_client_state_naming_the_session_key_is_refused_and_the_honest_resume_works(
    base: str, http: httpx.Client
) -> None:
    """The defect: AG-UI merged client ``state`` into ``session.state``, so a forged value replaced the stored
    token; that resume failed, the honest resume after it got "Approval execution outcome is indeterminate" and
    the thread was stuck. Now the forged request is a 400 that touches nothing, and the honest resume deploys once.
    """
    thread = Thread(http, f"{base}/agent")
    target = f"deploy forged {thread.thread_id}"
    thread.say(target)
    detail = thread.refused(400, resume=thread.resume(), state=FORGED_STATE)
    assert "'agent_framework_functional' is reserved" in detail
    thread.refused(400, state=FORGED_STATE)  # also without a resume

    done = thread.answer(approved=True)
    assert not errors(done)
    assert text_of(done) == f"deployed: {target}"
    assert DEPLOYS[target] == 1


def test_a_resume_resent_after_it_was_answered_runs_nothing(base: str, http: httpx.Client) -> None:
    """The defect: once a pause was answered, the same resume sent again (a double click, a retry loop) passed the
    guard (nothing pending here), AG-UI ran the resent transcript as a new turn that paused again with the same id,
    and the next resend approved it: the gated step ran twice. Now a resume for an interrupt the thread no longer
    has is a 400 that runs nothing, and new input still starts a fresh turn."""
    thread = Thread(http, f"{base}/agent")
    target = f"deploy once {thread.thread_id}"
    thread.say(target)
    resume = thread.resume()
    assert text_of(thread.run(resume=resume)) == f"deployed: {target}"
    for _ in range(3):
        assert "not pending on this thread" in thread.refused(400, resume=resume)
    assert DEPLOYS[target] == 1
    thread.say(f"{target} again")
    assert [core_id(i["id"]) for i in thread.interrupts] == ["auto::0"]  # a fresh pause, answered as usual
    assert text_of(thread.answer()) == f"deployed: {target} again"
    assert DEPLOYS[target] == 1


def test_agui_merge_cannot_touch_the_session_key_of_the_agents_view(base: str, http: httpx.Client) -> None:
    """Below the request guard, the agent's AG-UI view names the key as server-owned (a context provider's
    ``source_id``), so AG-UI's own merge of client state skips it: on raw AG-UI with the view, the forged state
    rides along with the honest resume and changes nothing."""
    thread = Thread(http, f"{base}/raw-view")
    target = f"deploy merged {thread.thread_id}"
    thread.say(target)
    done = thread.run(resume=thread.resume(), state={**FORGED_STATE, "theme": "dark"})
    assert not errors(done)
    assert text_of(done) == f"deployed: {target}"
    assert DEPLOYS[target] == 1


def test_an_earlier_rounds_resume_replayed_after_the_next_pause_is_refused(base: str, http: httpx.Client) -> None:
    """Core numbers requests per run (``auto::0`` again in the next turn's pause); the interrupt ids are unique to
    their pause, so round one's exact request sent again (a double click, a retry) approves nothing of round two."""
    thread = Thread(http, f"{base}/agent")
    target = f"deploy round one {thread.thread_id}"
    thread.say(target)
    round_one = thread.body(resume=thread.resume())  # the exact request, kept by the client
    assert text_of(thread.run(**round_one)) == f"deployed: {target}"
    thread.say(f"{target}, round two")
    assert [core_id(i["id"]) for i in thread.interrupts] == [core_id(round_one["resume"][0]["interruptId"])]
    for _ in range(2):
        reply = http.post(thread.url, json={**round_one, "runId": uuid.uuid4().hex})
        assert reply.status_code == 400, reply.text[:300]
        assert "not pending on this thread" in reply.json()["detail"]
    assert DEPLOYS[f"{target}, round two"] == 0  # nothing ran
    assert text_of(thread.answer(approved=False)) == f"not deployed: {target}, round two"


def test_raw_agui_with_the_bare_agent_is_wedged_by_forged_state(base: str, http: httpx.Client) -> None:
    """What ``agui_endpoint`` prevents (host behaviour with the bare agent on raw AG-UI): the forged token is
    refused, AG-UI marks the interrupt's outcome unknown, and the honest resume is refused too."""
    thread = Thread(http, f"{base}/raw")
    target = f"deploy wedged {thread.thread_id}"
    thread.say(target)
    interrupts = thread.interrupts
    (forged,) = errors(thread.run(resume=thread.resume(), state=FORGED_STATE))
    assert forged["code"] == "ContinuationAuthorityError"
    thread.interrupts = interrupts
    (honest,) = errors(thread.answer())
    assert "indeterminate" in honest["message"]
    assert DEPLOYS[target] == 0


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("malformed JSON", 422),
        ("200,000-deep JSON body", 400),
        ("200,000-deep JSON in the state", 400),
        ("10 MB body", 413),
        ("unknown interrupt id", 400),
        ("resume payload without approved", 400),
        ("resume payload that is not an object", 400),
        ("reserved key in the state", 400),
    ],
)
def test_hostile_request_is_a_4xx_and_the_conversation_stays_answerable(
    base: str, http: httpx.Client, case: str, status: int
) -> None:
    thread = Thread(http, f"{base}/agent")
    target = f"deploy hostile {thread.thread_id}"
    thread.say(target)
    body = json.dumps(thread.body(resume=thread.resume())).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if case == "malformed JSON":
        reply = http.post(thread.url, content=body[:-5] + b"{{", headers=headers)
    elif case == "200,000-deep JSON body":
        reply = http.post(thread.url, content=_deep(200_000).encode(), headers=headers)
    elif case == "200,000-deep JSON in the state":
        deep_state = body.replace(b'"state": {}', b'"state": {"x": ' + _deep(200_000).encode() + b"}")
        assert deep_state != body
        reply = http.post(thread.url, content=deep_state, headers=headers)
    elif case == "10 MB body":
        reply = http.post(thread.url, json=thread.body(state={"blob": "a" * 10_000_000}), headers=headers)
    elif case == "unknown interrupt id":
        resume = [{"interruptId": "auto::9", "status": "resolved", "payload": {"approved": True}}]
        reply = thread.post(resume=resume)
        assert "'auto::9' is not pending" in reply.json()["detail"]
    elif case == "resume payload without approved":
        interrupt_id = thread.interrupts[0]["id"]
        reply = thread.post(resume=[{"interruptId": interrupt_id, "status": "resolved", "payload": {"answer": True}}])
    elif case == "resume payload that is not an object":
        reply = thread.post(
            resume=[{"interruptId": thread.interrupts[0]["id"], "status": "resolved", "payload": "yes"}]
        )
    else:
        reply = thread.post(resume=thread.resume(), state={"agent_framework_functional": {}})
    assert reply.status_code == status, reply.text[:300]
    assert DEPLOYS[target] == 0

    done = thread.answer()
    assert not errors(done)
    assert text_of(done) == f"deployed: {target}"
    assert DEPLOYS[target] == 1


def test_fifty_concurrent_conversations_on_one_agent(base: str) -> None:
    """50 threads pause at once on one agent, then all answer at once: each gets its own result, once."""
    count = 50
    limits = httpx.Limits(max_connections=count + 5, max_keepalive_connections=count + 5)
    with httpx.Client(timeout=120, trust_env=False, limits=limits) as http:
        threads = [Thread(http, f"{base}/agent") for _ in range(count)]
        targets = [f"deploy many {thread.thread_id}" for thread in threads]
        with ThreadPoolExecutor(max_workers=count) as pool:
            paused = list(pool.map(lambda pair: pair[0].say(pair[1]), zip(threads, targets, strict=True)))
            assert [request_data(events) for events in paused] == [
                [{"action": "deploy", "target": target}] for target in targets
            ]
            done = list(pool.map(lambda thread: thread.answer(approved=True), threads))
    assert [text_of(events) for events in done] == [f"deployed: {target}" for target in targets]
    assert [DEPLOYS[target] for target in targets] == [1] * count


def test_importing_the_package_needs_no_host_package() -> None:
    """``import agent_framework_functional`` (and its ``hosting`` package) imports no host package; the first
    use of a call imports its own host only."""
    code = (
        "import sys\n"
        "import agent_framework_functional, agent_framework_functional.hosting as hosting\n"
        "hosts = ('agent_framework_ag_ui', 'agent_framework_devui')\n"
        "print(sorted(m for m in hosts if m in sys.modules))\n"
        "hosting.agui_endpoint\n"
        "print(sorted(m for m in hosts if m in sys.modules))\n"
        "print(sorted(hosting.__all__))\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=True
    ).stdout.splitlines()
    assert out == [
        "[]",
        "['agent_framework_ag_ui']",
        "['ReleaseFreeMemory', 'ThreadSnapshotStore', 'a2a_app', 'agui_endpoint', 'devui_app', 'mcp_app', "
        "'responses_app', 'serve_devui']",
    ]


def test_hosting_names_are_documented() -> None:
    """Each hosting call has a docstring and is named in README "Host it" and in AGENTS.md."""
    import agent_framework_functional.hosting as hosting

    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("## Host it", 1)[1].split("\n## ", 1)[0]
    agents = (ROOT / "AGENTS.md").read_text(encoding="utf-8")
    for name in hosting.__all__:
        assert (getattr(hosting, name).__doc__ or "").strip(), name
        assert f"`{name}`" in readme, name
        assert f"`{name}`" in agents, name
