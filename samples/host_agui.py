"""Serve a FunctionalWorkflowAgent over AG-UI (agent-framework-ag-ui), for CopilotKit and other AG-UI clients.

What it shows: ``add_agent_framework_fastapi_endpoint`` serves the agent as is, with one requirement: pass
``snapshot_store=`` (and ``detached_runs=True`` for clients that hang up, see below). AG-UI builds a new
``AgentSession`` for every request and restores its ``state`` only from the snapshot store; the agent keeps
each thread's pause (its token) in that state, so without a store a resume cannot find its pause. A pause
ends the run with ``RUN_FINISHED`` whose outcome is an ``interrupt``; the client answers with a new run on
the same thread that resends the transcript and
``resume: [{"interruptId": ..., "status": "resolved", "payload": {"approved": true}}]``
(``{"approved": false}`` declines; ``"status": "cancelled"`` never reaches the agent, AG-UI only drops its
interrupt), which is what ``@ag-ui/client``'s ``buildResumeArray`` produces. One agent serves many threads.

``detached_runs=True`` lets a client hang up at the approval request: AG-UI saves the snapshot (with the
token) after it streamed the request, and by default cancels what is left of the run, that save included,
when the client hangs up; the answer would then be refused and the thread stay paused. A detached run
finishes its save; a client that reconnects at once may get 409 until it did, and retries.

Run it (needs ``pip install "agent-framework-functional[hosting]"``):

    python samples/host_agui.py            # self-check: serve on 127.0.0.1, one approval round trip over HTTP, exit
    python samples/host_agui.py --serve    # serve POST http://127.0.0.1:16792/agent until Ctrl+C

``single_user=True`` keeps the sample short; a multi-user app passes ``authorization_scope_resolver=`` so
each user's threads stay apart.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import httpx
import uvicorn
from agent_framework_ag_ui import InMemoryAGUIThreadSnapshotStore, add_agent_framework_fastapi_endpoint
from fastapi import FastAPI

from agent_framework_functional import FunctionalWorkflowAgent, RunContext, workflow

PORT = 16792


@workflow(name="deployer", description="Asks one approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """Pause once for a bool approval (request id ``auto::0``), then answer with text."""
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    return f"deployed: {text}" if approved else f"not deployed: {text}"


def build_app(agent: FunctionalWorkflowAgent) -> FastAPI:
    """A FastAPI app with the AG-UI endpoint at ``/agent``; the snapshot store carries session state."""
    app = FastAPI()
    add_agent_framework_fastapi_endpoint(
        app, agent, "/agent", snapshot_store=InMemoryAGUIThreadSnapshotStore(), single_user=True, detached_runs=True
    )
    return app


async def run_agui(client: httpx.AsyncClient, thread_id: str, messages: list[Any], **extra: Any) -> list[Any]:
    """POST one AG-UI run; return its events (the JSON ``data:`` lines of the SSE reply)."""
    body = {"threadId": thread_id, "runId": uuid.uuid4().hex, "messages": messages, "tools": [], "context": []}
    reply = await client.post("/agent", json={**body, "state": {}, "forwardedProps": {}, **extra})
    return [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]


async def self_check() -> str:
    """Serve on a free loopback port, pause, resume the canonical way, return the final text."""
    server = uvicorn.Server(
        uvicorn.Config(build_app(deployer.build().as_agent()), host="127.0.0.1", port=0, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # startup failed: raise its error
            await asyncio.sleep(0.02)
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        async with httpx.AsyncClient(base_url=base, timeout=30, trust_env=False) as client:
            thread_id = f"thread-{uuid.uuid4().hex[:8]}"
            transcript = [{"id": uuid.uuid4().hex, "role": "user", "content": "ship it"}]
            paused = await run_agui(client, thread_id, transcript)
            (finished,) = [e for e in paused if e["type"] == "RUN_FINISHED"]
            (interrupt,) = finished["outcome"]["interrupts"]
            print(f"Paused: interrupt {interrupt['id']} ({interrupt['reason']})")
            transcript = next(e["messages"] for e in paused if e["type"] == "MESSAGES_SNAPSHOT")
            resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
            done = await run_agui(client, thread_id, transcript, resume=resume)
            assert not [e for e in done if e["type"] == "RUN_ERROR"], done
            return "".join(e["delta"] for e in done if e["type"] == "TEXT_MESSAGE_CONTENT")
    finally:
        server.should_exit = True
        await serving


async def main() -> None:
    """Self-check by default; ``--serve`` serves the endpoint on 127.0.0.1:16792 until interrupted."""
    if "--serve" in sys.argv[1:]:
        print(f"AG-UI endpoint: POST http://127.0.0.1:{PORT}/agent (Ctrl+C stops)")
        app = build_app(deployer.build().as_agent())
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=PORT)).serve()
        return
    text = await self_check()
    assert text == "deployed: ship it", text
    print(f"self-check passed: {text}")


if __name__ == "__main__":
    asyncio.run(main())
