"""Two workers, one client: each host runs as two server processes on loopback sharing Redis, then PostgreSQL.

Both workers use the production set-up of "Run it in production" in the docs: the backend's continuation store,
checkpoint storage and session store (AG-UI's thread snapshots kept in the same session store). The client
alternates between them: a conversation pauses on worker 1 and is answered on worker 2 (bool, str,
structured), a worker restarts between the pause and the answer, and a replay on the other worker is refused.
One pair of workers per backend serves every case of this module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agui_support import Thread, errors, text_of
from postgres_server import setup_schema
from responses_support import Responses, approval_items

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

APP = Path(__file__).resolve().parent / "two_workers_app.py"

ANSWERS: dict[str, Any] = {"bool": True, "str": "ship it", "draft": {"title": "Edited", "approved": True}}
"""The answer each kind of request gets (``two_workers_app.typed_approval``)."""


class Worker:
    """One host worker process (``two_workers_app.py``); ``restart()`` stops it and starts it again."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.process: subprocess.Popen[str] | None = None
        self.base = ""

    def start(self) -> Worker:
        self.process = subprocess.Popen(
            [sys.executable, str(APP), *self.args], stdout=subprocess.PIPE, text=True, cwd=APP.parent
        )
        assert self.process.stdout is not None
        port = self.process.stdout.readline().strip()
        if not port.isdigit():
            code = self.process.poll()
            self.stop()  # reap it and close its pipe now, not in some later test's garbage collection
            raise AssertionError(f"the worker did not start (exit code {code})")
        self.base = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


class Pair:
    """Two workers on one backend, and the file where the workflow records each publish."""

    def __init__(self, backend: str, url: str, directory: Path) -> None:
        self.effects = directory / "effects.txt"
        self.effects.touch()
        tag = f"w_{uuid.uuid4().hex[:12]}"
        if backend == "postgres":
            setup_schema(url, tag)
        self.workers = [Worker(backend, url, tag, str(self.effects)) for _ in range(2)]

    def published(self, text: str) -> int:
        return self.effects.read_text(encoding="utf-8").splitlines().count(text)


@pytest.fixture(scope="module", params=["redis", "postgres"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    url = request.getfixturevalue(f"{request.param}_server")
    pair = Pair(request.param, url, tmp_path_factory.mktemp(f"two-workers-{request.param}"))
    try:
        for worker in pair.workers:
            worker.start()
        yield pair
    finally:
        for worker in pair.workers:
            worker.stop()


def _responses(http: httpx.Client, worker: Worker) -> Responses:
    return Responses(http, worker.base)


def _responses_answer(kind: str, pause: dict[str, Any]) -> list[dict[str, Any]] | str:
    """The Responses input that answers ``pause``'s one request with ``ANSWERS[kind]``."""
    (call,) = [item for item in pause["output"] if item["type"] == "function_call"]
    if kind == "bool":
        (approval,) = approval_items(pause)
        return [{"type": "mcp_approval_response", "approval_request_id": approval["id"], "approve": True}]
    if kind == "str":
        return ANSWERS["str"]
    return [{"type": "function_call_output", "call_id": call["call_id"], "output": json.dumps(ANSWERS["draft"])}]


def _text(response: dict[str, Any]) -> str:
    return "".join(p["text"] for item in response["output"] if item["type"] == "message" for p in item["content"])


@pytest.mark.parametrize("kind", ["bool", "str", "draft"])
def test_responses_pause_on_one_worker_answer_on_the_other(pair: Pair, http: httpx.Client, kind: str) -> None:
    one, two = (_responses(http, worker) for worker in pair.workers)
    text, conversation = f"{kind}:{uuid.uuid4().hex[:8]}", f"conv-{uuid.uuid4().hex}"
    pause = one.call({"input": text, "conversation": conversation})
    done = two.call({"input": _responses_answer(kind, pause), "conversation": conversation})
    assert _text(done).startswith(f"{text} -> "), done
    assert pair.published(text) == 1


def test_responses_replay_on_the_other_worker_is_refused(pair: Pair, http: httpx.Client) -> None:
    one, two = (_responses(http, worker) for worker in pair.workers)
    text = f"bool:{uuid.uuid4().hex[:8]}"
    pause = one.call({"input": text})
    answer = {"input": _responses_answer("bool", pause), "previous_response_id": pause["id"]}
    assert _text(two.call(answer)) == f"{text} -> True"
    replay = one.post(answer)  # the same answer to the same response, on the worker that paused
    assert replay.status_code == 409, replay.text
    assert replay.json()["error"]["code"] == "continuation_refused"
    assert pair.published(text) == 1


def test_responses_a_worker_restarts_between_the_pause_and_the_answer(pair: Pair, http: httpx.Client) -> None:
    text, conversation = f"draft:{uuid.uuid4().hex[:8]}", f"conv-{uuid.uuid4().hex}"
    pause = _responses(http, pair.workers[0]).call({"input": text, "conversation": conversation})
    pair.workers[0].restart()
    done = _responses(http, pair.workers[0]).call(
        {"input": _responses_answer("draft", pause), "conversation": conversation}
    )
    assert _text(done).startswith(f"{text} -> "), done
    assert pair.published(text) == 1


def _agui_answer(kind: str) -> dict[str, Any]:
    return {} if kind == "bool" else {"answer": ANSWERS[kind]}


@pytest.mark.parametrize("kind", ["bool", "str", "draft"])
def test_agui_pause_on_one_worker_answer_on_the_other(pair: Pair, http: httpx.Client, kind: str) -> None:
    thread = Thread(http, f"{pair.workers[0].base}/agui")
    text = f"{kind}:{uuid.uuid4().hex[:8]}"
    thread.say(text)
    assert thread.interrupts
    thread.url = f"{pair.workers[1].base}/agui"
    done = thread.answer(True, **_agui_answer(kind))
    assert not errors(done), errors(done)
    assert text_of(done).startswith(f"{text} -> ")
    assert pair.published(text) == 1


def test_agui_replay_on_the_other_worker_is_refused(pair: Pair, http: httpx.Client) -> None:
    thread = Thread(http, f"{pair.workers[0].base}/agui")
    text = f"bool:{uuid.uuid4().hex[:8]}"
    thread.say(text)
    stale = thread.interrupts
    thread.url = f"{pair.workers[1].base}/agui"
    assert text_of(thread.answer(True)) == f"{text} -> True"
    thread.url, thread.interrupts = f"{pair.workers[0].base}/agui", stale
    replay = thread.post(resume=thread.resume())
    # Worker 0 still holds the pause in memory, but the thread's snapshot says it was answered: refused before
    # any run (it was a 200 whose run the agent refused with the spent token).
    assert replay.status_code == 400, replay.text
    assert "not pending" in replay.json()["detail"]
    assert pair.published(text) == 1


def test_agui_a_worker_restarts_between_the_pause_and_the_answer(pair: Pair, http: httpx.Client) -> None:
    thread = Thread(http, f"{pair.workers[1].base}/agui")
    text = f"str:{uuid.uuid4().hex[:8]}"
    thread.say(text)
    pair.workers[1].restart()
    thread.url = f"{pair.workers[1].base}/agui"
    done = thread.answer(True, answer="after restart")
    assert not errors(done), errors(done)
    assert text_of(done) == f"{text} -> 'after restart'"
    assert pair.published(text) == 1


AGUI_FORMS: dict[str, Any] = {
    "resume": lambda entries: {"resume": entries},
    "forwardedProps.command.resume": lambda entries: {"forwardedProps": {"command": {"resume": entries}}},
}
"""A resume where an AG-UI client puts it: top level, or where CopilotKit sends it."""


@pytest.mark.parametrize("form", AGUI_FORMS)
def test_agui_a_bad_answer_on_the_other_worker_is_refused_and_the_pause_stays_answerable(
    pair: Pair, http: httpx.Client, form: str
) -> None:
    """The defect: the worker that never saw the pause checked only that the interrupt was open in the snapshot;
    AG-UI claimed it, the agent refused the answer (RUN_ERROR) and the interrupt was lost for every worker."""
    thread = Thread(http, f"{pair.workers[0].base}/agui")
    text = f"draft:{uuid.uuid4().hex[:8]}"
    thread.say(text)
    thread.url = f"{pair.workers[1].base}/agui"
    bad = thread.resume(True, answer={"title": 5, "approved": True})
    detail = thread.refused(400, **AGUI_FORMS[form](bad))
    assert "cannot be converted to Draft" in detail and "title" in detail
    cancelled = [{"interruptId": "auto::0", "status": "cancelled"}]
    assert "Only status 'resolved'" in thread.refused(400, **AGUI_FORMS[form](cancelled))
    done = thread.run(**AGUI_FORMS[form](thread.resume(True, answer=ANSWERS["draft"])))
    assert not errors(done), errors(done)
    assert text_of(done).startswith(f"{text} -> ")
    assert pair.published(text) == 1
    thread.url = f"{pair.workers[0].base}/agui"  # the replay, on a worker whose memory knows nothing newer
    thread.interrupts = [{"id": "auto::0"}]
    replay = thread.post(**AGUI_FORMS[form](thread.resume(True, answer=ANSWERS["draft"])))
    assert replay.status_code in (200, 400), replay.text
    assert pair.published(text) == 1
