"""Hosts under load: N concurrent conversations over loopback HTTP, our approval turn next to the host's own agent.

For each host, two sides are served on 127.0.0.1 (uvicorn in a thread, its own event loop) and driven by
N concurrent clients (``httpx.AsyncClient`` on the main thread):

* ``ours``: a :class:`FunctionalWorkflowAgent` behind our one-call host; each conversation sends text
  (the workflow pauses for a ``bool`` approval), then the approval; the approval turn is timed.
* ``core``: the host's own route with a plain core ``Agent`` over ``OpenAIChatClient`` whose OpenAI
  HTTP is faked with respx (no network, an instant model); each conversation does one turn, timed.

Printed per host and N: p50 / p99 of the timed turn in milliseconds, throughput (conversations per
second, wall time from the first request to the last answer), and ``wrong`` (conversations whose
answer was not the expected text, lost or duplicated, or whose connection failed: must be 0). The
machine is small and shared: compare the sides of one run, not runs of different days.

Hosts plug in as one function each in ``HOSTS`` (an async function taking N and returning its rows):
Responses (``agent_framework_functional.hosting.responses_app``), AG-UI (``hosting.agui_endpoint``: a
snapshot store, detached runs) and DevUI (``hosting.devui_app``: its API with a bearer token, in
conversations). The plain core ``Agent`` side is served by each host's own call.

Run:
    python benchmarks/bench_hosts.py            # N = 50 and 500
    python benchmarks/bench_hosts.py --quick    # smoke run: N = 5, numbers meaningless
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import statistics
import threading
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import agent_framework
import httpx
import respx
import uvicorn
from agent_framework import Agent, RunContext
from agent_framework.openai import OpenAIChatClient
from agent_framework_ag_ui import InMemoryAGUIThreadSnapshotStore, add_agent_framework_fastapi_endpoint
from agent_framework_devui import DevServer
from agent_framework_hosting import AgentState
from agent_framework_hosting_responses import create_response_id, responses_from_run, responses_session_id
from agent_framework_hosting_responses import responses_to_run as host_responses_to_run
from fastapi import Body, FastAPI
from openai import AsyncOpenAI

from agent_framework_functional import FunctionalWorkflowAgent, workflow
from agent_framework_functional.hosting import agui_endpoint, responses_app
from agent_framework_functional.hosting import devui_app as hosting_devui_app

warnings.filterwarnings("ignore", category=agent_framework._feature_stage.ExperimentalWarning)  # pyright: ignore

OPENAI = "https://api.openai.com/v1"
DEPLOYS: collections.Counter[str] = collections.Counter()


@workflow(name="deployer", description="Asks one bool approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """One pause (core's ``auto::0``); an approval counts one deploy (outside any step: a second run counts twice)."""
    if not await ctx.request_info({"action": "deploy", "target": text}, response_type=bool):
        return f"not deployed: {text}"
    DEPLOYS[text] += 1
    return f"deployed: {text}"


@dataclass(frozen=True)
class Row:
    """One measured side: its host, N, the timed turn's p50 / p99 (ms), conversations per second, wrong ones."""

    host: str
    side: str
    n: int
    p50_ms: float
    p99_ms: float
    per_second: float
    wrong: int


HostBench = Callable[[int], Awaitable[list[Row]]]


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve ``app`` on a free loopback port in a thread; yield its base URL; stop it after."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", backlog=2048, timeout_keep_alive=120)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def drive(
    host: str, side: str, n: int, conversation: Callable[[httpx.AsyncClient, int], Awaitable[tuple[float, bool]]]
) -> Row:
    """Run one warm-up, then ``n`` conversations at once; each returns (seconds of its timed turn, right or not)."""
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(timeout=300, trust_env=False, limits=limits) as client:
        await conversation(client, -1)  # warm-up (first imports, connections), not counted
        started = time.perf_counter()
        results = await asyncio.gather(*(guarded(conversation, client, index) for index in range(n)))
        wall = time.perf_counter() - started
    turns = [seconds * 1000 for seconds, right in results if right] or [float("nan")]
    wrong = sum(1 for _, right in results if not right)
    return Row(host, side, n, statistics.median(turns), percentile(turns, 0.99), n / wall, wrong)


Conversation = Callable[[httpx.AsyncClient, int], Awaitable[tuple[float, bool]]]


FAILURES: collections.Counter[str] = collections.Counter()
"""Why conversations failed (exception type and message), printed after the table."""


async def guarded(conversation: Conversation, client: httpx.AsyncClient, index: int) -> tuple[float, bool]:
    """One conversation; a failure (a dropped connection, a reply of the wrong shape) counts as wrong."""
    try:
        return await conversation(client, index)
    except Exception as exc:
        FAILURES[f"{type(exc).__name__}: {str(exc)[:160]}"] += 1
        return float("nan"), False


def model_response(status: str = "completed") -> dict[str, Any]:
    """A Responses API ``response`` object: one assistant message "done" (no output while in progress)."""
    message = {"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant", "content": [TEXT]}
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 1_764_000_000,
        "status": status,
        "model": "gpt-4o-mini",
        "output": [message] if status == "completed" else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


TEXT = {"type": "output_text", "text": "done", "annotations": []}


def model_reply(request: httpx.Request) -> httpx.Response:
    """The faked OpenAI Responses API, at once: JSON, or the service's event sequence when asked to stream."""
    if not json.loads(request.content).get("stream"):
        return httpx.Response(200, json=model_response())
    item = {"type": "message", "id": "msg_fake", "status": "in_progress", "role": "assistant", "content": []}
    part = {"item_id": "msg_fake", "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": model_response("in_progress")},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", **part, "part": {**TEXT, "text": ""}},
        {"type": "response.output_text.delta", **part, "delta": "done", "logprobs": []},
        {"type": "response.output_text.done", **part, "text": "done", "logprobs": []},
        {"type": "response.content_part.done", **part, "part": TEXT},
        {"type": "response.output_item.done", "output_index": 0, "item": model_response()["output"][0]},
        {"type": "response.completed", "response": model_response()},
    ]
    body = "".join(
        f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': number})}\n\n"
        for number, event in enumerate(events)
    )
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


@contextmanager
def faked_openai() -> Iterator[None]:
    """Respx answers OpenAI; loopback requests (the benchmark's own) pass through."""
    with respx.mock(assert_all_called=False) as mock:
        mock.post(f"{OPENAI}/responses").mock(side_effect=model_reply)
        mock.route(host="127.0.0.1").pass_through()
        yield


def plain_agent() -> Agent:
    """Core's ``Agent`` over ``OpenAIChatClient``; its HTTP goes through ``httpx``, where respx fakes OpenAI."""
    client = AsyncOpenAI(api_key="sk-bench", base_url=OPENAI, http_client=httpx.AsyncClient())
    return Agent(client=OpenAIChatClient(model="gpt-4o-mini", async_client=client), name="plain")


def host_responses_route(agent: Agent) -> FastAPI:
    """The Responses route as ``agent-framework-hosting-responses`` documents it, for a plain agent."""
    app = FastAPI()
    state = AgentState(agent)

    @app.post("/v1/responses")
    async def responses(body: dict[str, Any] = Body(...)) -> Any:  # noqa: B008 - FastAPI's way to take a body
        run = host_responses_to_run(body)
        session_id, is_conversation = responses_session_id(body)
        response_id = create_response_id()
        session = await state.get_or_create_session(session_id or response_id)
        result = await (await state.get_target()).run(run["messages"], session=session)
        await state.set_session(session_id if is_conversation else response_id, session)
        return responses_from_run(result, response_id=response_id, conversation_id=None)

    return app


def output_text(payload: dict[str, Any]) -> str:
    return "".join(p["text"] for item in payload["output"] if item["type"] == "message" for p in item["content"])


async def bench_responses(n: int) -> list[Row]:
    """Responses: ``responses_app`` (text, then the timed approval) and the host's route over a plain agent."""
    rows: list[Row] = []
    with serving(responses_app(deployer.build().as_agent(name="deployer"))) as base:
        url = f"{base}/v1/responses"

        async def approval(client: httpx.AsyncClient, index: int) -> tuple[float, bool]:
            target = f"responses {n} {index}"
            paused = (await client.post(url, json={"input": target})).json()
            (request_id,) = [item["id"] for item in paused["output"] if item["type"] == "mcp_approval_request"]
            answer = {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": True}
            started = time.perf_counter()
            done = await client.post(url, json={"previous_response_id": paused["id"], "input": [answer]})
            seconds = time.perf_counter() - started
            return seconds, done.status_code == 200 and output_text(done.json()) == f"deployed: {target}"

        rows.append(await drive("responses", "ours", n, approval))
    rows[-1] = _with_duplicates(rows[-1], [f"responses {n} {index}" for index in range(n)])

    with faked_openai(), serving(host_responses_route(plain_agent())) as base:
        url = f"{base}/v1/responses"

        async def one_turn(client: httpx.AsyncClient, index: int) -> tuple[float, bool]:
            started = time.perf_counter()
            done = await client.post(url, json={"input": f"hello {index}"})
            seconds = time.perf_counter() - started
            return seconds, done.status_code == 200 and output_text(done.json()) == "done"

        rows.append(await drive("responses", "core", n, one_turn))
    return rows


def agui_app(agent: Any, *, pausing: bool) -> FastAPI:
    """AG-UI's endpoint at ``/agent``; a pausing agent needs the snapshot store and detached runs."""
    app = FastAPI()
    if pausing:
        agui_endpoint(app, agent, "/agent", snapshot_store=InMemoryAGUIThreadSnapshotStore(), single_user=True)
    else:
        add_agent_framework_fastapi_endpoint(app, agent, "/agent", single_user=True)
    return app


async def agui_run(client: httpx.AsyncClient, url: str, thread: str, messages: list[Any], **extra: Any) -> list[Any]:
    """One AG-UI run; its events (the JSON ``data:`` lines of the SSE reply)."""
    body = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": messages, "tools": [], "context": []}
    reply = await client.post(url, json={**body, "state": {}, "forwardedProps": {}, **extra})
    return [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]


def agui_text(events: list[Any]) -> str:
    errors = [event for event in events if event["type"] == "RUN_ERROR"]
    return "" if errors else "".join(event["delta"] for event in events if event["type"] == "TEXT_MESSAGE_CONTENT")


async def bench_agui(n: int) -> list[Row]:
    """AG-UI: the pausing agent on AG-UI's endpoint (text, then the timed ``resume``) and a plain agent's turn."""
    rows: list[Row] = []
    with serving(agui_app(deployer.build().as_agent(name="deployer"), pausing=True)) as base:
        url = f"{base}/agent"

        async def approval(client: httpx.AsyncClient, index: int) -> tuple[float, bool]:
            target, thread = f"agui {n} {index}", uuid.uuid4().hex
            paused = await agui_run(client, url, thread, [{"id": uuid.uuid4().hex, "role": "user", "content": target}])
            (finished,) = [event for event in paused if event["type"] in ("RUN_FINISHED", "RUN_ERROR")]
            if finished["type"] == "RUN_ERROR":
                raise RuntimeError(f"RUN_ERROR: {finished.get('message')}")
            (interrupt,) = finished["outcome"]["interrupts"]
            transcript = next(event["messages"] for event in paused if event["type"] == "MESSAGES_SNAPSHOT")
            resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
            started = time.perf_counter()
            done = await agui_run(client, url, thread, transcript, resume=resume)
            return time.perf_counter() - started, agui_text(done) == f"deployed: {target}"

        rows.append(await drive("agui", "ours", n, approval))
    rows[-1] = _with_duplicates(rows[-1], [f"agui {n} {index}" for index in range(n)])

    with faked_openai(), serving(agui_app(plain_agent(), pausing=False)) as base:
        url = f"{base}/agent"

        async def one_turn(client: httpx.AsyncClient, index: int) -> tuple[float, bool]:
            started = time.perf_counter()
            message = {"id": uuid.uuid4().hex, "role": "user", "content": f"hello {index}"}
            done = await agui_run(client, url, uuid.uuid4().hex, [message])
            # AG-UI repeats the faked model's text once (its delta, then the completed item): the turn is right.
            return time.perf_counter() - started, agui_text(done) in ("done", "donedone")

        rows.append(await drive("agui", "core", n, one_turn))
    return rows


def _with_duplicates(row: Row, targets: list[str]) -> Row:
    """Count a target deployed more than once as wrong too (a duplicated resume; a lost one has no right text)."""
    extra = sum(1 for target in targets if DEPLOYS[target] > 1)
    return Row(row.host, row.side, row.n, row.p50_ms, row.p99_ms, row.per_second, row.wrong + extra)


def devui_app(agent: Any, token: str) -> Any:
    """DevUI's app with bearer-token auth: ours through ``hosting.devui_app``, a plain agent through DevUI's own."""
    if isinstance(agent, FunctionalWorkflowAgent):
        return hosting_devui_app(agent, auth_token=token)
    server = DevServer(host="127.0.0.1", port=0, auth_enabled=True, auth_token=token, ui_enabled=False)
    server.set_pending_entities([agent])
    return server.get_app()


def sse_payloads(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and "{" in line[:8]]


async def devui_side(side: str, n: int, agent: Any, turn: Callable[..., Awaitable[tuple[float, bool]]]) -> Row:
    """Serve ``agent`` in DevUI; each conversation is created, then ``turn(client, base body, index)`` runs."""
    token = uuid.uuid4().hex
    with serving(devui_app(agent, token)) as base:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60, trust_env=False) as setup:
            entity = (await setup.get("/v1/entities")).json()["entities"][0]["id"]

        async def conversation(client: httpx.AsyncClient, index: int) -> tuple[float, bool]:
            created = await client.post(
                f"{base}/v1/conversations", json={"metadata": {"agent_id": entity}}, headers=headers
            )
            body = {"metadata": {"entity_id": entity}, "conversation": created.json()["id"], "stream": True}
            return await turn(client, f"{base}/v1/responses", headers, body, index)

        return await drive("devui", side, n, conversation)


async def bench_devui(n: int) -> list[Row]:
    """DevUI: the pausing agent (text, then the timed approval) and a plain agent's turn, both in conversations."""
    from opentelemetry import trace

    if type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":  # DevUI would install a global SDK one
        trace.set_tracer_provider(trace.NoOpTracerProvider())
    logging.getLogger("agent_framework_devui._tracing").setLevel(logging.ERROR)  # "no real TracerProvider", per run

    async def approval(client: httpx.AsyncClient, url: str, headers: Any, body: Any, index: int) -> tuple[float, bool]:
        target = f"devui {n} {index}"
        paused = sse_payloads((await client.post(url, json={**body, "input": target}, headers=headers)).text)
        (request,) = [event for event in paused if event["type"] == "response.function_approval.requested"]
        answer = {"type": "function_approval_response", "request_id": request["request_id"], "approved": True}
        message = {"type": "message", "role": "user", "content": [answer]}
        started = time.perf_counter()
        done = await client.post(url, json={**body, "input": [message]}, headers=headers)
        seconds = time.perf_counter() - started
        text = "".join(e["delta"] for e in sse_payloads(done.text) if e["type"] == "response.output_text.delta")
        return seconds, text == f"deployed: {target}"

    async def one_turn(client: httpx.AsyncClient, url: str, headers: Any, body: Any, index: int) -> tuple[float, bool]:
        started = time.perf_counter()
        done = await client.post(url, json={**body, "input": f"hello {index}"}, headers=headers)
        seconds = time.perf_counter() - started
        text = "".join(e["delta"] for e in sse_payloads(done.text) if e["type"] == "response.output_text.delta")
        return seconds, text.startswith("done")

    rows = [await devui_side("ours", n, deployer.build().as_agent(name="deployer"), approval)]
    rows[-1] = _with_duplicates(rows[-1], [f"devui {n} {index}" for index in range(n)])
    with faked_openai():
        rows.append(await devui_side("core", n, plain_agent(), one_turn))
    return rows


HOSTS: dict[str, HostBench] = {"responses": bench_responses, "agui": bench_agui, "devui": bench_devui}
"""Host name -> its benchmark: an async function of N returning its rows (ours, then core)."""


async def main() -> None:
    """Parse the arguments, run every host at every N, print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: N = 5")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 500], help="concurrent conversations")
    parser.add_argument("--hosts", nargs="+", default=list(HOSTS), choices=list(HOSTS))
    args = parser.parse_args()
    sizes = [5] if args.quick else args.sizes
    print(f"{'host':<11}{'side':<6}{'N':>5}{'p50 ms':>9}{'p99 ms':>9}{'conv/s':>9}{'wrong':>7}")
    for name in args.hosts:
        for n in sizes:
            for row in await HOSTS[name](n):
                print(
                    f"{row.host:<11}{row.side:<6}{row.n:>5}{row.p50_ms:>9.1f}{row.p99_ms:>9.1f}"
                    f"{row.per_second:>9.1f}{row.wrong:>7}"
                )
    print("ours: the timed turn is the approval (a resume); core: one turn of a plain agent (a faked model call)")
    for reason, count in FAILURES.most_common():
        print(f"failed {count}x: {reason}")


if __name__ == "__main__":
    asyncio.run(main())
