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

Hosts plug in as one function each in ``HOSTS`` (an async function taking N and returning its rows);
Responses (``agent_framework_functional.hosting.responses_app``) is here.

Run:
    python benchmarks/bench_hosts.py            # N = 50 and 500
    python benchmarks/bench_hosts.py --quick    # smoke run: N = 5, numbers meaningless
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import threading
import time
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
from agent_framework_hosting import AgentState
from agent_framework_hosting_responses import create_response_id, responses_from_run, responses_session_id
from agent_framework_hosting_responses import responses_to_run as host_responses_to_run
from fastapi import Body, FastAPI
from openai import AsyncOpenAI

from agent_framework_functional import workflow
from agent_framework_functional.hosting import responses_app

warnings.filterwarnings("ignore", category=agent_framework._feature_stage.ExperimentalWarning)  # pyright: ignore

OPENAI = "https://api.openai.com/v1"
DEPLOYS: collections.Counter[str] = collections.Counter()


@workflow(name="deployer", description="Asks one bool approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """One pause (``auto::0``); an approval counts one deploy (outside any step: a second run counts twice)."""
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


async def guarded(conversation: Conversation, client: httpx.AsyncClient, index: int) -> tuple[float, bool]:
    """One conversation; a transport error (a connection the loaded server dropped) counts as wrong."""
    try:
        return await conversation(client, index)
    except httpx.HTTPError:
        return float("nan"), False


def model_reply(request: httpx.Request) -> httpx.Response:
    """The faked OpenAI Responses API: one assistant message, at once."""
    return httpx.Response(
        200,
        json={
            "id": "resp_fake",
            "object": "response",
            "created_at": 1_764_000_000,
            "status": "completed",
            "model": "gpt-4o-mini",
            "output": [
                {
                    "type": "message",
                    "id": "msg_fake",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "done", "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
    )


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
            answer = {"type": "mcp_approval_response", "approval_request_id": "auto::0", "approve": True}
            started = time.perf_counter()
            done = await client.post(url, json={"previous_response_id": paused["id"], "input": [answer]})
            seconds = time.perf_counter() - started
            return seconds, done.status_code == 200 and output_text(done.json()) == f"deployed: {target}"

        rows.append(await drive("responses", "ours", n, approval))
    rows[-1] = _with_duplicates(rows[-1], [f"responses {n} {index}" for index in range(n)])

    with respx.mock(assert_all_called=False) as mock:
        mock.post(f"{OPENAI}/responses").mock(side_effect=model_reply)
        mock.route(host="127.0.0.1").pass_through()
        with serving(host_responses_route(plain_agent())) as base:
            url = f"{base}/v1/responses"

            async def one_turn(client: httpx.AsyncClient, index: int) -> tuple[float, bool]:
                started = time.perf_counter()
                done = await client.post(url, json={"input": f"hello {index}"})
                seconds = time.perf_counter() - started
                return seconds, done.status_code == 200 and output_text(done.json()) == "done"

            rows.append(await drive("responses", "core", n, one_turn))
    return rows


def _with_duplicates(row: Row, targets: list[str]) -> Row:
    """Count a target deployed other than once as wrong (a lost or duplicated resume)."""
    extra = sum(1 for target in targets if DEPLOYS[target] != 1)
    return Row(row.host, row.side, row.n, row.p50_ms, row.p99_ms, row.per_second, row.wrong + extra)


HOSTS: dict[str, HostBench] = {"responses": bench_responses}
"""Host name -> its benchmark (``agui`` and ``devui`` plug in here as one function each)."""


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


if __name__ == "__main__":
    asyncio.run(main())
