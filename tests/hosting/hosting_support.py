"""Helpers of the host integration tests: the workflows, a real uvicorn server in a thread, SSE and AG-UI checks.

Each host test starts the REAL host (DevUI's ``DevServer``, AG-UI's FastAPI endpoint, a Responses route built
from ``agent-framework-hosting-responses``) on a loopback socket and drives it over HTTP with the host's own
protocol. The workflows live at module level so core can checkpoint them without a ``replay_key``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import BaseModel
from script_runner import assert_ok, env_without_openai, run_command, run_script

from agent_framework_functional import FunctionalWorkflowAgent, RunContext, workflow

ROOT = Path(__file__).resolve().parents[2]
JS_DIR = Path(__file__).resolve().parent / "js"
CHROMIUM = "/usr/bin/chromium"


DEPLOYS: collections.Counter[str] = collections.Counter()
"""The side effect of ``deployer``: how many times each target was deployed (the test servers run in this process)."""


@workflow(name="deployer", description="Asks one bool approval, then answers with text.")
async def deployer(text: str, ctx: RunContext) -> str:
    """One pause: ``auto::0`` asks whether to deploy ``text``; an approval counts one deploy in ``DEPLOYS``.

    The count sits outside any step on purpose: it runs on every replay that gets past the approval, so a
    resume that ran twice would count twice (a step's cache could hide that).
    """
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    if not approved:
        return f"not deployed: {text}"
    DEPLOYS[text] += 1
    return f"deployed: {text}"


@workflow(name="releaser", description="Asks two bool approvals in a row, then answers with text.")
async def releaser(text: str, ctx: RunContext) -> str:
    """Two pauses in one run: ``auto::0`` (build) then ``auto::1`` (release)."""
    build = await ctx.request_info({"gate": "build", "target": text}, response_type=bool)
    release = await ctx.request_info({"gate": "release", "target": text}, response_type=bool)
    return f"{text}: build={build} release={release}"


def make_agent(definition: Any = deployer, name: str | None = None) -> FunctionalWorkflowAgent:
    """One workflow instance, one agent: what each host is given and keeps for all conversations."""
    return definition.build().as_agent(name=name or definition.name)


class ServerThread:
    """A real ``uvicorn.Server`` on 127.0.0.1 (port 0: the OS picks a free one) in a daemon thread.

    The app runs on the server thread's own event loop, as in production; the test talks to it over the
    socket only. ``start()`` waits until it listens (and the app's lifespan ran).
    """

    def __init__(self, app: Any, port: int = 0) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test-server", daemon=True)
        self.port = 0

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        assert not self.thread.is_alive(), "the test server did not stop"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class HangUps:
    """Notes when a client hangs up before its response ended: ``watch(app)`` wraps an ASGI app to see it.

    The server sees a hang-up as an ``http.disconnect`` message while the response is still open. :meth:`wait`
    lets server-side code (a slow store in a test) hold on until then, so a test can put the hang-up before a
    host's late write every time instead of racing it.
    """

    def __init__(self) -> None:
        self.seen = asyncio.Event()  # set and awaited on the server's loop; tests read is_set() from theirs

    def watch(self, app: Any) -> Any:
        """``app`` wrapped in ASGI middleware that sets :attr:`seen` on a hang-up."""

        async def watched(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            ended = False

            async def watched_send(message: Any) -> None:
                nonlocal ended
                if message["type"] == "http.response.body" and not message.get("more_body", False):
                    ended = True
                await send(message)

            async def watched_receive() -> Any:
                message = await receive()
                if message["type"] == "http.disconnect" and not ended:
                    self.seen.set()
                return message

            await app(scope, watched_receive, watched_send)

        return watched

    async def wait(self, timeout: float) -> None:
        """Return a moment after a client hung up mid-response, or after ``timeout`` seconds: how long a store
        write takes that a hang-up overtakes (still in flight when the host reacts to the hang-up)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.seen.wait(), timeout)
        await asyncio.sleep(0.02)  # the host's reaction (a cancellation) is scheduled as soon as it sees the hang-up


def _parse_block(block: str) -> dict[str, Any] | None:
    name: str | None = None
    data_lines: list[str] = []
    for line in block.split("\n"):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data_lines.append(line[5:].removeprefix(" "))
    if not data_lines and name is None:
        return None  # a comment (keep-alive) block
    raw = "\n".join(data_lines)
    try:
        data: Any = json.loads(raw)
    except ValueError:
        data = raw
    return {"event": name, "data": data}


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Parse a whole SSE body into ``[{"event": name or None, "data": parsed JSON or raw text}]``."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if block.strip() and (event := _parse_block(block)) is not None:
            events.append(event)
    return events


def iter_sse(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Parse SSE incrementally from ``httpx.Response.iter_lines()``: each event as soon as its block ends."""
    block: list[str] = []
    for line in lines:
        if line == "":
            if block and (event := _parse_block("\n".join(block))) is not None:
                yield event
            block = []
        else:
            block.append(line)
    if block and (event := _parse_block("\n".join(block))) is not None:
        yield event


def sse_data(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The JSON object payloads of parsed SSE events (drops ``[DONE]`` and other raw text)."""
    return [event["data"] for event in events if isinstance(event["data"], dict)]


class AGUIOrderError(AssertionError):
    """An AG-UI event stream that ``@ag-ui/client``'s ``verifyEvents`` would reject."""


def verify_agui_events(events: list[dict[str, Any]]) -> None:
    """Check AG-UI event order the way ``@ag-ui/client``'s ``verifyEvents`` does (1.0.0), raising on a breach.

    The rules (research report, ``verifyEvents``): the first event is ``RUN_STARTED`` (or ``RUN_ERROR``);
    after ``RUN_FINISHED`` only ``RUN_STARTED``/``RUN_ERROR``; after ``RUN_ERROR`` only ``RUN_STARTED``; no
    ``RUN_STARTED`` inside an active run; text message CONTENT/END need an open START with that
    ``messageId`` and a START may not repeat; tool call ARGS/END the same by ``toolCallId``;
    ``STEP_FINISHED`` needs its ``STEP_STARTED``; reasoning START/END pair up; ``RUN_FINISHED`` is refused
    while a text message, tool call, step or reasoning block is open; ``subagentRunId: null`` is refused.
    """
    order = _AGUIOrder(events)
    for index, event in enumerate(events):
        order.check(index, event)


# An event that opens, uses or closes a part: (the open set, the id field, what it does, the refusal).
_PARTS: dict[str, tuple[str, str, str, str]] = {
    "TEXT_MESSAGE_START": ("text messages", "messageId", "start", "text message {} already started"),
    "TEXT_MESSAGE_CONTENT": ("text messages", "messageId", "use", "no open TEXT_MESSAGE_START for {}"),
    "TEXT_MESSAGE_END": ("text messages", "messageId", "end", "no open TEXT_MESSAGE_START for {}"),
    "TOOL_CALL_START": ("tool calls", "toolCallId", "start", "tool call {} already started"),
    "TOOL_CALL_ARGS": ("tool calls", "toolCallId", "use", "no open TOOL_CALL_START for {}"),
    "TOOL_CALL_END": ("tool calls", "toolCallId", "end", "no open TOOL_CALL_START for {}"),
    "STEP_STARTED": ("steps", "stepName", "add", ""),
    "STEP_FINISHED": ("steps", "stepName", "end", "no STEP_STARTED for {}"),
    "REASONING_START": ("reasoning", "messageId", "add", ""),
    "REASONING_END": ("reasoning", "messageId", "end", "REASONING_END without REASONING_START"),
    "REASONING_MESSAGE_START": ("reasoning messages", "messageId", "add", ""),
    "REASONING_MESSAGE_CONTENT": (
        "reasoning messages",
        "messageId",
        "use",
        "reasoning message content/end without its start",
    ),
    "REASONING_MESSAGE_END": (
        "reasoning messages",
        "messageId",
        "end",
        "reasoning message content/end without its start",
    ),
}
_OPEN_AT_FINISH = ("text messages", "tool calls", "steps", "reasoning")  # RUN_FINISHED refuses these open


class _AGUIOrder:
    """The state ``verifyEvents`` keeps while it reads one event stream."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.active_run = self.finished = self.errored = False
        self.open: dict[str, set[str]] = {name: set() for name, *_ in _PARTS.values()}

    def fail(self, index: int, event: dict[str, Any], why: str) -> None:
        kinds = [e.get("type") for e in self.events]
        raise AGUIOrderError(f"event #{index} {event.get('type')}: {why}; events: {kinds}")

    def check(self, index: int, event: dict[str, Any]) -> None:
        kind = event.get("type")
        self.check_position(index, event, kind)
        if kind in _PARTS:
            self.check_part(index, event, *_PARTS[kind])
        elif kind == "RUN_STARTED":
            self.start_run(index, event)
        elif kind == "RUN_FINISHED":
            self.finish_run(index, event)
        elif kind == "RUN_ERROR":
            self.active_run, self.errored = False, True

    def start_run(self, index: int, event: dict[str, Any]) -> None:
        if self.active_run:
            self.fail(index, event, "RUN_STARTED inside an active run")
        self.active_run, self.finished, self.errored = True, False, False
        for parts in self.open.values():
            parts.clear()

    def finish_run(self, index: int, event: dict[str, Any]) -> None:
        for what in _OPEN_AT_FINISH:
            if self.open[what]:
                self.fail(index, event, f"RUN_FINISHED while {what} {sorted(self.open[what])} are open")
        self.active_run, self.finished = False, True

    def check_position(self, index: int, event: dict[str, Any], kind: Any) -> None:
        if "subagentRunId" in event and event["subagentRunId"] is None:
            self.fail(index, event, "subagentRunId is null (omit the field instead)")
        if index == 0 and kind not in ("RUN_STARTED", "RUN_ERROR"):
            self.fail(index, event, "the first event must be RUN_STARTED or RUN_ERROR")
        if self.errored and kind != "RUN_STARTED":
            self.fail(index, event, "only RUN_STARTED may follow RUN_ERROR")
        if self.finished and kind not in ("RUN_STARTED", "RUN_ERROR"):
            self.fail(index, event, "only RUN_STARTED or RUN_ERROR may follow RUN_FINISHED")

    def check_part(self, index: int, event: dict[str, Any], name: str, field: str, does: str, refusal: str) -> None:
        parts, part = self.open[name], event[field]
        if (part in parts) if does == "start" else (does in ("use", "end") and part not in parts):
            self.fail(index, event, refusal.format(part))
        if does == "end":
            parts.discard(part)
        elif does != "use":
            parts.add(part)


def screenshot_dir(tmp_path: Path) -> Path:
    """Where a browser test saves its screenshots: ``tmp_path``, or ``docs/`` under ``REFRESH_DOCS_IMAGES=1``.

    A test run leaves the repository as it was; ``scripts/refresh_docs_images.sh`` refreshes the docs' images.
    """
    return ROOT / "docs" if os.environ.get("REFRESH_DOCS_IMAGES") == "1" else tmp_path


def node_env() -> dict[str, str]:
    """The environment for the node scripts: no proxies, so loopback requests stay local."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    return env


def run_node(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``tests/hosting/js/<script>`` with node (its ``node_modules`` come from scripts/services/node.sh)."""
    node = shutil.which("node")
    assert node, "node is not on PATH (scripts/services/node.sh needs it)"
    assert (JS_DIR / "node_modules").is_dir(), "run scripts/services/node.sh first (npm ci in tests/hosting/js)"
    return run_command([node, str(JS_DIR / script), *args], stdin=None, timeout=timeout, cwd=JS_DIR, env=node_env())


def run_sample_self_check(path: Path, timeout: float = 120) -> str:
    """Run ``samples/host_*.py`` as a user would (its default self-check mode); return stdout, exit 0 asserted."""
    return assert_ok(run_script(path, stdin=None, timeout=timeout, env=env_without_openai(node_env())))


@workflow(name="reviewer", description="Asks for free-text feedback, then publishes.")
async def reviewer(text: str, ctx: RunContext) -> str:
    """One ``str`` request (``auto::0``): the user's plain text reply on the session answers it."""
    feedback = await ctx.request_info({"draft": text}, response_type=str)
    return f"published: {text} ({feedback})"


class Draft(BaseModel):
    """The draft an ``editor`` reviewer edits and approves (the structured answer)."""

    title: str
    body: str
    approved: bool


PUBLISHED: collections.Counter[str] = collections.Counter()
"""The side effect of ``editor``: how many times each title was published (outside any step, as ``DEPLOYS``)."""


@workflow(name="editor", description="Asks a reviewer to edit a draft and approve it, then publishes it.")
async def editor(text: str, ctx: RunContext) -> str:
    """One structured request (``auto::0``): the request data is the draft, the answer the edited draft."""
    draft = Draft(title=text, body=f"About {text}.", approved=False)
    reviewed = await ctx.request_info(draft, response_type=Draft)
    if not reviewed.approved:
        return f"not published: {reviewed.title}"
    PUBLISHED[reviewed.title] += 1
    return f"published: {reviewed.title} / {reviewed.body}"
