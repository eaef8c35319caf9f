"""Soak: many conversations through each host over time; does the server's memory, fds or latency drift?

Each host runs as a server subprocess on 127.0.0.1 (``--serve``): Responses (``hosting.responses_app``),
AG-UI (``hosting.agui_endpoint``), DevUI (``hosting.devui_app``), A2A (``hosting.a2a_app``, driven with
a2a-sdk's client) and MCP (``hosting.mcp_app``, driven with ``mcp.Client``), each with the stores its call makes
by default (``--cap N``: the session store's ``max_entries``, as a user sets it; MCP keeps none), serving one
pausing agent (a ``bool`` approval). The driver (this process) runs, per host:

1. ``sequential``: N conversations one after another (text, then the approval);
2. ``concurrent``: C clients for S seconds, each running conversations back to back;
3. ``paused``: P conversations left paused (never answered), then NOTHING sent for one TTL plus one sweep
   interval and ``--idle-margin`` (the server is started with a short ``continuation_ttl``; the hosts' sweep
   interval is min(60 s, TTL / 4)); reclaimed means the agent keeps no live instance and the host's store no
   entry, which only the host's sweep task can have done.

Every ``--interval`` seconds it samples the server's RSS and open file descriptors (``/proc``), and
the server reports the agent's live instances and the host's session-store size (``/_soak``: the
``InMemorySessionStore`` records, sessions or AG-UI snapshots; DevUI's conversations). Approval turns are timed.

Printed per host: RSS slope after warm-up (KB per 1,000 answered conversations, least squares over
the samples after the first ``--warmup`` conversations), the slope over the second half of the answered
conversations (``rss_slope_second_half_kb_per_1000``), the same slope within each phase after its own
warm-up (sequential: past ``--warmup``; concurrent: past its first window, since the step RSS makes when
``--clients`` conversations go in flight at once is paid once, not per conversation), fds first/last,
store size, approval p50/p99 in the first and last window of the concurrent phase, and the paused
phase's outcome (``reclaimed_without_traffic``, RSS right after the pauses and after the idle wait).
``steady_released_slope_kb_per_1000``: the steady slope over the RSS the server reads right after each of its
releases of free heap pages (``ReleaseFreeMemory``: at most one a minute after requests, and one after each sweep
that dropped something), so a page the allocator keeps for up to a minute between releases does not count as
growth. Goals and figures: benchmarks/README.md "Soak".

For a steady-state figure: ``--rate R`` starts the concurrent phase's conversations at R per second (the
clients cap how many are in flight), and ``--settle S`` leaves its first S seconds out of the ``steady``
slope and the p99 windows (``--window``, 60 s for "the first and last minute"); S must exceed the longest
retention window (the TTL: the stores, AG-UI's answered approvals, the spent-token notes) so that every
window is full when the slope starts. ``--diagnose`` prints, at ``--settle`` and twice more, what grew in
the server (object counts by type; with ``SOAK_TRACEMALLOC=<frames>`` in the environment, ``tracemalloc``
growth by traceback, traced from the first report on: it slows the server, so its RSS figures do not count).

Run:
    python benchmarks/soak_hosts.py                 # moderate: a few minutes on 2 cores
    python benchmarks/soak_hosts.py --quick         # smoke run (the tests run it), numbers meaningless
    python benchmarks/soak_hosts.py --cap 300 --warmup 1000   # every bound passed during warm-up
    python benchmarks/soak_hosts.py --sequential 200 --seconds 360 --rate 10 --settle 120 --window 60 \
        --paused 300 --ttl 5 --cap 300 --interval 2           # steady rate, slope past the windows
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import statistics
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import agent_framework
import httpx
from agent_framework import RunContext

from agent_framework_functional import workflow

HOSTS = ("responses", "agui", "devui", "a2a", "mcp")
TOKEN = "soak-token"
MCP_KEY = b"soak-host-key-0123456789abcdef012"

warnings.filterwarnings("ignore", category=agent_framework._feature_stage.ExperimentalWarning)  # pyright: ignore


@workflow(name="deployer")
async def deployer(text: str, ctx: RunContext) -> str:
    """One ``bool`` approval, then the answer's text."""
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    return f"deployed: {text}" if approved else f"not deployed: {text}"


# ---------------------------------------------------------------------------------------------- server side


def serve(host: str, ttl: float | None, cap: int | None) -> None:
    """Serve one host on a free loopback port; print the port on stdout, then serve until killed.

    Each host is what its hosting call gives by default: Responses and AG-UI keep their sessions and
    thread snapshots in the bounded ``InMemorySessionStore`` the call makes (the agent's
    ``continuation_ttl``, 10,000 entries). ``cap`` is that store's ``max_entries``, as a user sets it:
    ``responses_app(agent, session_store=InMemorySessionStore(max_entries=cap, ttl=...))``, and AG-UI's
    ``agui_endpoint(..., snapshot_store=InMemorySessionStore(...))`` (kept through ``ThreadSnapshotStore``).
    DevUI keeps its conversations in the store ``devui_app`` bounds (the agent's ``continuation_ttl``,
    ``max_conversations``: ``cap``). A2A keeps its sessions as Responses does (``a2a_app(session_store=)``),
    and a2a-sdk's ``InMemoryTaskStore`` its tasks; MCP keeps none (the client carries the sealed session).
    Every host runs its sweep task at its default interval.
    """
    import socket

    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from agent_framework_functional import InMemorySessionStore
    from agent_framework_functional._session import attached_instances

    logging.getLogger("agent_framework_devui._tracing").setLevel(logging.ERROR)  # "no real TracerProvider"
    agent = deployer.build(continuation_ttl=ttl).as_agent(name="deployer")
    store = None if cap is None else InMemorySessionStore(ttl=agent.continuation_ttl, max_entries=cap)
    port = 0
    if host == "a2a":  # the agent card names the URL: pick the port first
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    app = host_app(host, agent, store, cap, port)
    store_size = store_sizer(host, app, store)
    released = track_releases()

    async def stats(_: Request) -> JSONResponse:
        live, size = attached_instances(agent.workflow), store_size()
        sweeps = sum(sweep.sweeps for sweep in getattr(app.state, "expiry_sweeps", []))
        return JSONResponse(
            {
                "live": live,
                "store": size,
                "releases": released["count"],
                "released_rss": released["rss"],
                "sweeps": sweeps,
            }
        )

    growth = memory_growth()

    async def memory(_: Request) -> JSONResponse:
        return JSONResponse(await growth())

    app.router.routes[:0] = [Route("/_soak", stats), Route("/_soak/memory", memory)]  # ahead of DevUI's UI mount
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", backlog=2048, timeout_keep_alive=120)
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.ensure_future(server.serve())
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for "started"
            await asyncio.sleep(0.02)
        print(server.servers[0].sockets[0].getsockname()[1], flush=True)
        await task

    asyncio.run(run())


def host_app(host: str, agent: Any, store: Any, cap: int | None, port: int) -> Any:
    """The app the host's one call makes: ``store`` (``--cap``) as its session store, if given."""
    from fastapi import FastAPI

    from agent_framework_functional.hosting import a2a_app, agui_endpoint, devui_app, mcp_app, responses_app

    if host == "responses":
        return responses_app(agent, session_store=store)
    if host == "agui":
        app = FastAPI()
        agui_endpoint(app, agent, "/agent", snapshot_store=store, single_user=True)
        return app
    if host == "a2a":
        return a2a_app(agent, url=f"http://127.0.0.1:{port}/", session_store=store)
    if host == "mcp":
        return mcp_app(agent, key=MCP_KEY)
    from opentelemetry import trace

    trace.set_tracer_provider(trace.NoOpTracerProvider())
    return devui_app(agent, auth_token=TOKEN, **({"max_conversations": cap} if cap else {}))


def store_sizer(host: str, app: Any, store: Any) -> Any:
    """How many entries the store the hosting call made (or was given) holds; the store is found once.

    MCP keeps none (the client carries the session, sealed).
    """
    from agent_framework_functional import InMemorySessionStore

    kept: list[Any] = [store] if store is not None else []
    if host == "devui":
        kept = [app.state.devui_conversations]  # devui_app's bounded conversation store

    def store_size() -> int:
        if host == "mcp":
            return 0
        kept[:] = kept or [obj for obj in gc.get_objects() if isinstance(obj, InMemorySessionStore)]
        return sum(len(found) for found in kept)

    return store_size


def track_releases() -> dict[str, int]:
    """Count the host's releases of free heap pages and read RSS right after each (this server process only).

    Both kinds count: after a request (``ReleaseFreeMemory``, at most one a minute) and right after a sweep that
    dropped something (``ReleaseFreeMemory.release_now``, which the first also calls).
    """
    from agent_framework_functional.hosting import ReleaseFreeMemory

    released = {"count": 0, "rss": 0}
    release_now = ReleaseFreeMemory.release_now

    def release_and_read() -> bool:
        if did := release_now():
            with open("/proc/self/status") as status:
                released["rss"] = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
            released["count"] += 1
        return did

    ReleaseFreeMemory.release_now = staticmethod(release_and_read)  # type: ignore[method-assign]
    return released


def heap_figures() -> dict[str, int]:
    """Where the server's memory sits: Python's allocated blocks, threads, glibc's heap (``mallinfo2``, KB)."""
    import ctypes
    import threading

    figures = {"py_blocks": sys.getallocatedblocks(), "threads": threading.active_count()}
    fields = ["arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks"]

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in [*fields, "keepcost"]]

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
        figures |= {
            f"glibc_{name}_kb": getattr(info, name) // 1024 for name in ("arena", "hblkhd", "uordblks", "fordblks")
        }
    return figures


def memory_growth() -> Any:
    """A ``/_soak/memory`` handler: what grew since its last call (``--diagnose``).

    Counts of live objects by type (``gc.get_objects()``) and, when the server runs with
    ``SOAK_TRACEMALLOC=<frames>``, ``tracemalloc``'s growth by allocating traceback; both after a full
    collection. Tracing starts at the first call (it slows the server), so compare the later calls.
    """
    import tracemalloc

    frames = int(os.environ.get("SOAK_TRACEMALLOC", "0"))
    last: dict[str, Any] = {}

    async def growth() -> dict[str, Any]:
        gc.collect()
        counts: dict[str, int] = {}
        for obj in gc.get_objects():
            name = type(obj).__qualname__
            counts[name] = counts.get(name, 0) + 1
        before = last.get("counts", {})
        grown = sorted(((n - before.get(t, 0), t) for t, n in counts.items()), reverse=True)[:25]
        found: dict[str, Any] = {"types": [(t, d) for d, t in grown if d], "heap": heap_figures()}
        if frames and not tracemalloc.is_tracing():
            tracemalloc.start(frames)
        elif frames:
            snapshot = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
            )
            if "snapshot" in last:
                stats = snapshot.compare_to(last["snapshot"], "traceback")
                found["traced_kb"] = round(sum(s.size_diff for s in stats) / 1024, 1)
                found["lines"] = [
                    (round(s.size_diff / 1024, 1), s.count_diff, [str(f) for f in s.traceback][-frames:])
                    for s in sorted(stats, key=lambda s: -s.size_diff)[:20]
                ]
            last["snapshot"] = snapshot
        last["counts"] = counts
        return found

    return growth


# ---------------------------------------------------------------------------------------------- conversations


def _sse(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and "{" in line[:8]]


class Client:
    """One host's conversations over HTTP: ``pause`` (returns what the answer needs) and ``answer`` (timed)."""

    def __init__(self, host: str, base: str, http: httpx.AsyncClient) -> None:
        self.host, self.base, self.http = host, base, http
        self.entity: str | None = None
        self.headers = {"Authorization": f"Bearer {TOKEN}"} if host == "devui" else {}
        self.last_reply = ""  # the status and body of the last answer (why a wrong one was wrong)
        self.protocol: Any = None  # the a2a-sdk or mcp client (``open``)

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        """Connect the protocol's own client (A2A: a2a-sdk's, from the agent card; MCP: ``mcp.Client``)."""
        if self.host == "a2a":
            from a2a.client import ClientConfig, create_client

            self.protocol = await create_client(f"{self.base}/", ClientConfig(httpx_client=self.http, streaming=False))
        elif self.host == "mcp":
            from mcp import Client as MCPClient

            self.protocol = await stack.enter_async_context(MCPClient(f"{self.base}/mcp"))

    async def pause(self, target: str) -> Any:
        """Start a conversation that pauses for the approval; returns what :meth:`answer` needs."""
        if self.host in ("a2a", "mcp"):
            return await self._protocol_pause(target)
        if self.host == "responses":
            paused = (await self.http.post(f"{self.base}/v1/responses", json={"input": target})).json()
            (request_id,) = [item["id"] for item in paused["output"] if item["type"] == "mcp_approval_request"]
            return paused["id"], request_id  # the request id is unique to the pause
        if self.host == "agui":
            thread = uuid.uuid4().hex
            events = await self._agui(thread, [{"id": uuid.uuid4().hex, "role": "user", "content": target}])
            finished = next(e for e in events if e["type"] in ("RUN_FINISHED", "RUN_ERROR"))
            (interrupt,) = finished["outcome"]["interrupts"]
            transcript = next(e["messages"] for e in events if e["type"] == "MESSAGES_SNAPSHOT")
            return thread, interrupt["id"], transcript
        if self.entity is None:
            listed = await self.http.get(f"{self.base}/v1/entities", headers=self.headers)
            self.entity = listed.json()["entities"][0]["id"]
        created = await self.http.post(
            f"{self.base}/v1/conversations", json={"metadata": {"agent_id": self.entity}}, headers=self.headers
        )
        body = {"metadata": {"entity_id": self.entity}, "conversation": created.json()["id"], "stream": True}
        reply = await self.http.post(f"{self.base}/v1/responses", json={**body, "input": target}, headers=self.headers)
        (request,) = [e for e in _sse(reply.text) if e["type"] == "response.function_approval.requested"]
        return body, request["request_id"]

    async def _protocol_pause(self, target: str) -> Any:
        if self.host == "a2a":
            from a2a.helpers import new_text_part

            return await self._a2a_send([new_text_part(target)])
        result = await self.protocol.session.call_tool("deployer", {"task": target}, allow_input_required=True)
        (request_id,) = result.input_requests or {}  # the id the pause published (unique to it)
        return result.request_state, request_id

    async def _a2a_send(self, parts: list[Any], task: Any = None) -> Any:
        from a2a.types import Message, Role, SendMessageRequest

        message = Message(role=Role.ROLE_USER, parts=parts, message_id=uuid.uuid4().hex)
        if task is not None:
            message.task_id, message.context_id = task.id, task.context_id
        events = [event async for event in self.protocol.send_message(SendMessageRequest(message=message))]
        return events[-1].task

    async def _protocol_answer(self, target: str, paused: Any) -> str:
        if self.host == "a2a":
            from agent_framework_functional.hosting.a2a import new_answer_part

            done = await self._a2a_send([new_answer_part(True)], paused)  # the task's one pending request
            self.last_reply = str(done.status)
            return "".join(part.text for artifact in done.artifacts for part in artifact.parts)
        from mcp import types

        request_state, request_id = paused
        answers = {request_id: types.ElicitResult(action="accept", content={"answer": True})}
        done = await self.protocol.call_tool(
            "deployer", {"task": target}, input_responses=answers, request_state=request_state
        )
        self.last_reply = str(done)
        return "".join(c.text for c in done.content if isinstance(c, types.TextContent))

    async def answer(self, target: str, paused: Any) -> tuple[float, bool]:
        """Approve the pause; returns (seconds of the approval turn, whether the reply was right)."""
        started = time.perf_counter()
        if self.host in ("a2a", "mcp"):
            text = await self._protocol_answer(target, paused)
        elif self.host == "responses":
            response_id, request_id = paused
            answer = {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": True}
            done = await self.http.post(
                f"{self.base}/v1/responses", json={"previous_response_id": response_id, "input": [answer]}
            )
            self.last_reply = f"{done.status_code} {done.text}"
            payload = done.json()
            text = "".join(
                p["text"] for item in payload.get("output", []) if item["type"] == "message" for p in item["content"]
            )
        elif self.host == "agui":
            thread, interrupt, transcript = paused
            resume = [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": True}}]
            events = await self._agui(thread, transcript, resume=resume)
            self.last_reply = json.dumps(events)
            text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        else:
            body, request_id = paused
            answer = {"type": "function_approval_response", "request_id": request_id, "approved": True}
            message = {"type": "message", "role": "user", "content": [answer]}
            done = await self.http.post(
                f"{self.base}/v1/responses", json={**body, "input": [message]}, headers=self.headers
            )
            self.last_reply = f"{done.status_code} {done.text}"
            text = "".join(e["delta"] for e in _sse(done.text) if e["type"] == "response.output_text.delta")
        return time.perf_counter() - started, text == f"deployed: {target}"

    async def _agui(self, thread: str, messages: list[Any], **extra: Any) -> list[Any]:
        body = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": messages, "tools": [], "context": []}
        reply = await self.http.post(f"{self.base}/agent", json={**body, "state": {}, "forwardedProps": {}, **extra})
        return [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]


# ---------------------------------------------------------------------------------------------- driver


@dataclass
class Soak:
    """What one host's run measured."""

    host: str
    answered: int = 0
    wrong: int = 0
    # (t, answered, rss KB, fds, live instances, session-store size)
    samples: list[tuple[float, int, int, int, int, int]] = field(default_factory=list)
    # (t, answered, RSS KB read right after the server's release of free heap pages): one per release
    released: list[tuple[float, int, int]] = field(default_factory=list)
    turns: list[tuple[float, float]] = field(default_factory=list)  # (t, ms) of the concurrent phase
    sequential_answered: int = 0  # answered when the concurrent phase started
    concurrent_started: float = 0.0  # its start (seconds since the run started)
    paused_live_before: int = 0
    paused_live_after: int = 0
    paused_store_after: int = 0
    rss_paused: int = 0  # KB, right after the unanswered pauses
    rss_idle: int = 0  # KB, after the idle wait
    idle_seconds: float = 0.0
    sweeps: int = 0  # sweeps the server's sweep task had done by the end


def proc_stats(pid: int) -> tuple[int, int]:
    """(RSS in KB, open fds) of process ``pid``."""
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def server_stats(http: httpx.AsyncClient, base: str) -> dict[str, int]:
    """The server's live instances and session-store size (``/_soak``)."""
    reply = await http.get(f"{base}/_soak", headers={"Authorization": f"Bearer {TOKEN}"})
    if reply.status_code != 200:
        raise RuntimeError(f"/_soak answered {reply.status_code}: {reply.text[:200]}")
    return reply.json()


async def sample(soak: Soak, pid: int, http: httpx.AsyncClient, base: str, started: float) -> None:
    rss, fds = proc_stats(pid)
    stats = await server_stats(http, base)
    now = time.perf_counter() - started
    soak.samples.append((now, soak.answered, rss, fds, stats["live"], stats["store"]))
    if stats["releases"] and len(soak.released) < stats["releases"]:
        soak.released.append((now, soak.answered, stats["released_rss"]))


async def conversation(client: Client, soak: Soak, index: str, timed: list[tuple[float, float]] | None) -> None:
    target = f"{soak.host} {index}"
    try:
        paused = await client.pause(target)
        seconds, right = await client.answer(target, paused)
    except Exception as exc:
        soak.wrong += 1
        note_wrong(soak, target, repr(exc))
        return
    soak.answered += right
    soak.wrong += not right
    if not right:
        note_wrong(soak, target, client.last_reply)
    if timed is not None and right:
        timed.append((time.perf_counter(), seconds * 1000))


def note_wrong(soak: Soak, target: str, detail: str) -> None:
    """Say why a conversation went wrong (stderr; the first five of a run)."""
    if soak.wrong <= 5:
        print(f"wrong: {target}: {detail[:600]}", file=sys.stderr)


async def concurrent_phase(
    client: Client, soak: Soak, args: argparse.Namespace, http: httpx.AsyncClient, base: str
) -> None:
    """``--clients`` workers for ``--seconds``; with ``--rate``, conversation k starts at k / rate (not before)."""
    start = time.perf_counter()
    deadline = start + args.seconds
    counter = iter(range(10**9))

    async def worker() -> None:
        while time.perf_counter() < deadline:
            index = next(counter)
            if args.rate:
                await asyncio.sleep(max(0.0, start + index / args.rate - time.perf_counter()))
            await conversation(client, soak, f"c{index}", soak.turns)

    async def diagnose() -> None:
        await asyncio.sleep(args.settle)
        await memory_report(http, base, "settled", soak)
        await asyncio.sleep(max(0.0, (deadline - time.perf_counter()) / 3))
        await memory_report(http, base, "a third later", soak)
        await asyncio.sleep(max(0.0, deadline - time.perf_counter()))

    await asyncio.gather(*(worker() for _ in range(args.clients)), *([diagnose()] if args.diagnose else []))


async def memory_report(http: httpx.AsyncClient, base: str, label: str, soak: Soak) -> None:
    """Print what grew in the server since the previous report (stderr; ``--diagnose``)."""
    reply = await http.get(f"{base}/_soak/memory", headers={"Authorization": f"Bearer {TOKEN}"})
    found = reply.json()
    print(f"--- {soak.host} {label}: answered {soak.answered}", file=sys.stderr)
    print("types:", found.get("types"), "traced KB:", found.get("traced_kb"), file=sys.stderr)
    print("heap:", found.get("heap"), file=sys.stderr)
    for size_kb, count, where in found.get("lines", []):
        print(f"  {size_kb:+9.1f} KB {count:+7d}  {' <- '.join(reversed(where))}", file=sys.stderr)
    sys.stderr.flush()


async def soak_host(host: str, args: argparse.Namespace) -> Soak:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--serve",
        host,
        "--ttl",
        str(args.ttl),
        *(["--cap", str(args.cap)] if args.cap else []),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        port = int(await process.stdout.readline())
        base = f"http://127.0.0.1:{port}"
        soak = Soak(host)
        limits = httpx.Limits(max_connections=args.clients + 2, max_keepalive_connections=args.clients + 2)
        async with (
            httpx.AsyncClient(timeout=120, trust_env=False, limits=limits) as http,
            contextlib.AsyncExitStack() as stack,
        ):
            client = Client(host, base, http)
            await client.open(stack)
            started = time.perf_counter()
            stop = asyncio.Event()

            async def sampler() -> None:
                while not stop.is_set():
                    await sample(soak, process.pid, http, base, started)
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), args.interval)

            sampling = asyncio.ensure_future(sampler())
            for index in range(args.sequential):
                await conversation(client, soak, f"s{index}", None)
            soak.sequential_answered, soak.concurrent_started = soak.answered, time.perf_counter() - started
            await concurrent_phase(client, soak, args, http, base)
            stop.set()
            await sampling
            await sample(soak, process.pid, http, base, started)
            if args.diagnose:  # after the last sample: the report's full collection and object census cost memory
                await memory_report(http, base, "end", soak)
            await paused_phase(client, soak, args, process.pid)
        return soak
    finally:
        process.kill()
        await process.wait()


async def paused_phase(client: Client, soak: Soak, args: argparse.Namespace, pid: int) -> None:
    """Conversations nobody answers, then nothing at all is sent for one TTL plus one sweep interval (and a margin).

    Reclaimed: the agent keeps no instance and the host's store nothing, so the sweep task released them (no
    request could: the only one after the pauses is the ``/_soak`` read at the end, which touches neither).
    """
    for index in range(args.paused):
        await client.pause(f"{soak.host} p{index}")
    before = await server_stats(client.http, client.base)
    soak.paused_live_before, soak.rss_paused = before["live"], proc_stats(pid)[0]
    soak.idle_seconds = args.ttl + min(60.0, args.ttl / 4) + args.idle_margin  # the hosts' default sweep interval
    await asyncio.sleep(soak.idle_seconds)
    soak.rss_idle = proc_stats(pid)[0]  # read before the /_soak request below
    after = await server_stats(client.http, client.base)
    soak.paused_live_after, soak.paused_store_after = after["live"], after["store"]
    soak.sweeps = after["sweeps"]


def slope_kb_per_1000(samples: list[tuple[float, int, int, int, int, int]], warmup: int) -> float:
    """Least-squares slope of RSS (KB) over answered conversations, after ``warmup`` answered, per 1,000."""
    points = [(answered, rss) for _, answered, rss, *_ in samples if answered >= warmup]
    if len(points) < 3 or points[-1][0] == points[0][0]:
        return float("nan")
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    numerator = sum((x - mean_x) * (y - mean_y) for x, y in points)
    denominator = sum((x - mean_x) ** 2 for x, _ in points)
    return numerator / denominator * 1000 if denominator else float("nan")


def phase_slopes(soak: Soak, args: argparse.Namespace) -> tuple[float, float]:
    """RSS slope (KB per 1,000 answered) within each phase, after its own warm-up.

    Sequential: the samples after ``--warmup`` answered, up to the concurrent phase's start. Concurrent:
    the samples after its first window (the first p99 window: ``--clients`` conversations in flight and
    their connections make a one-off step in RSS when the phase starts, which is not a cost per
    conversation), to its end.
    """
    window = min(60.0, args.seconds / 3)
    sequential = [s for s in soak.samples if s[1] <= soak.sequential_answered]
    concurrent = [s for s in soak.samples if s[0] >= soak.concurrent_started + window]
    return slope_kb_per_1000(sequential, args.warmup), slope_kb_per_1000(concurrent, 0)


def released_slope(soak: Soak, args: argparse.Namespace, half: int | None = None) -> float:
    """RSS slope (KB per 1,000 answered) over the RSS read right after each release, in the steady window.

    Between two releases (``ReleaseFreeMemory``, at most one a minute) RSS also holds the pages requests
    freed since the last one; right after a release it holds what is in use, so these points tell what
    stays from what the allocator keeps for up to a minute. ``half`` (0 or 1) takes only the first or the
    second half of the steady window's releases: growth that levels off (the allocator's pools filling up)
    shows as a first half that grows and a second that does not; a leak grows in both.
    """
    steady = [
        (t, answered, rss, 0, 0, 0) for t, answered, rss in soak.released if t >= soak.concurrent_started + args.settle
    ]
    if half is not None:
        middle = len(steady) // 2
        steady = steady[:middle] if half == 0 else steady[middle:]
    return slope_kb_per_1000(steady, 0)


def steady_samples(soak: Soak, args: argparse.Namespace) -> list[tuple[float, int, int, int, int, int]]:
    """The concurrent phase's samples past its first ``--settle`` seconds (the retention windows full)."""
    return [s for s in soak.samples if s[0] >= soak.concurrent_started + args.settle]


def window_percentiles(turns: list[tuple[float, float]], window: float, last: bool) -> tuple[float, float]:
    if not turns:
        return float("nan"), float("nan")
    edge = turns[-1][0] - window if last else turns[0][0] + window
    chosen = sorted(ms for t, ms in turns if (t >= edge if last else t <= edge))
    if not chosen:
        return float("nan"), float("nan")
    return statistics.median(chosen), chosen[min(len(chosen) - 1, round(0.99 * (len(chosen) - 1)))]


def report(soak: Soak, args: argparse.Namespace) -> dict[str, Any]:
    first, last = soak.samples[0], soak.samples[-1]
    window = args.window or min(60.0, args.seconds / 3)
    settled = soak.turns[0][0] + args.settle if soak.turns else 0.0
    turns = [(t, ms) for t, ms in soak.turns if t >= settled]
    p50_first, p99_first = window_percentiles(turns, window, last=False)
    p50_last, p99_last = window_percentiles(turns, window, last=True)
    steady = steady_samples(soak, args)
    quarters = [steady[round(i * (len(steady) - 1) / 4)][2] for i in range(5)] if steady else []
    seconds = soak.samples[-1][0] - soak.concurrent_started
    concurrent = soak.answered - soak.sequential_answered
    return {
        "host": soak.host,
        "answered": soak.answered,
        "wrong": soak.wrong,
        "rss_mb_first_last": (round(first[2] / 1024, 1), round(last[2] / 1024, 1)),
        "rss_slope_kb_per_1000": round(slope_kb_per_1000(soak.samples, args.warmup), 1),
        "rss_slope_second_half_kb_per_1000": round(slope_kb_per_1000(soak.samples, soak.answered // 2), 1),
        "rss_slope_sequential_concurrent": tuple(round(slope, 1) for slope in phase_slopes(soak, args)),
        "rss_slope_steady_kb_per_1000": round(slope_kb_per_1000(steady, 0), 1),
        "steady_answered": steady[-1][1] - steady[0][1] if steady else 0,
        "steady_rss_mb_by_quarter": [round(kb / 1024, 2) for kb in quarters],
        "steady_released_slope_kb_per_1000": round(released_slope(soak, args), 1),
        "steady_released_slope_by_half": [round(released_slope(soak, args, half), 1) for half in (0, 1)],
        "steady_releases": len([r for r in soak.released if r[0] >= soak.concurrent_started + args.settle]),
        "concurrent_rate_per_s": round(concurrent / seconds, 1) if seconds > 0 else None,
        "fds_first_last": (first[3], last[3]),
        "live_last": last[4],
        "store_last": last[5],
        "p50_p99_first_ms": (round(p50_first, 1), round(p99_first, 1)),
        "p50_p99_last_ms": (round(p50_last, 1), round(p99_last, 1)),
        "p99_last_over_first": round(p99_last / p99_first, 2) if p99_first == p99_first and p99_first else None,
        "paused": args.paused,
        "paused_live_before_after_idle": (soak.paused_live_before, soak.paused_live_after),
        "store_after_idle": soak.paused_store_after,
        "reclaimed_without_traffic": soak.paused_live_after == 0 and soak.paused_store_after == 0,
        "idle_seconds": round(soak.idle_seconds, 2),
        "rss_mb_paused_idle": (round(soak.rss_paused / 1024, 1), round(soak.rss_idle / 1024, 1)),
        "sweeps": soak.sweeps,
    }


def dump(path: Path, soak: Soak) -> None:
    """Write a host's raw samples, releases and approval turns as JSON (``--dump``), for a look at their shape."""
    path.write_text(json.dumps({"samples": soak.samples, "released": soak.released, "turns": soak.turns}))


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for host in args.hosts.split(","):
        soak = await soak_host(host, args)
        results.append(report(soak, args))
        print(json.dumps(results[-1]), flush=True)
        if args.dump:
            dump(Path(f"{args.dump}.{host}.json"), soak)
    return results


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=HOSTS, help=argparse.SUPPRESS)
    parser.add_argument("--hosts", default=",".join(HOSTS))
    parser.add_argument("--sequential", type=int, default=1500, help="conversations one after another")
    parser.add_argument("--seconds", type=float, default=40.0, help="length of the concurrent phase")
    parser.add_argument("--clients", type=int, default=10, help="concurrent clients")
    parser.add_argument("--paused", type=int, default=500, help="conversations left paused")
    parser.add_argument("--ttl", type=float, default=5.0, help="the server's continuation_ttl (seconds)")
    parser.add_argument(
        "--idle-margin", type=float, default=2.0, help="seconds waited past TTL + sweep interval with no request"
    )
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--warmup", type=int, default=300, help="answered conversations before the slope counts")
    parser.add_argument("--rate", type=float, default=0.0, help="conversations started per second (0: no pacing)")
    parser.add_argument(
        "--settle", type=float, default=0.0, help="seconds of the concurrent phase before the steady slope and p99"
    )
    parser.add_argument("--window", type=float, default=0.0, help="p99 window (s; 0: a third of the phase, <= 60)")
    parser.add_argument("--diagnose", action="store_true", help="print what grew in the server (stderr)")
    parser.add_argument(
        "--cap", type=int, help="the session store's max_entries (DevUI: max_conversations), as a user would set it"
    )
    parser.add_argument("--dump", help="write each host's raw samples, releases and turns to DUMP.<host>.json")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, numbers meaningless")
    args = parser.parse_args(argv)
    if args.quick:
        args.sequential, args.seconds, args.clients, args.paused = 5, 1.0, 2, 5
        args.ttl, args.interval, args.warmup, args.rate = 3.0, 0.2, 0, 20.0
    return args


if __name__ == "__main__":
    arguments = parse()
    if arguments.serve:
        serve(arguments.serve, arguments.ttl, arguments.cap)
    else:
        asyncio.run(main(arguments))
