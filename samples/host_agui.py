"""Serve a FunctionalWorkflowAgent over AG-UI (CopilotKit and other AG-UI clients) with one call.

What it shows: ``agui_endpoint`` serves the agent at ``POST /agent`` with the settings a pausing agent needs
(a snapshot store, detached runs, the session key kept from client state; "AG-UI" in the docs). A pause ends the run
with ``RUN_FINISHED`` whose outcome is an ``interrupt``; the client answers with a new run on the same thread that
resends the transcript and ``resume: [{"interruptId": ..., "status": "resolved", "payload": {"approved": true}}]``
(add ``"answer": <JSON>`` for a request that expects something other than a bool).

Run it (needs ``pip install "agent-framework-functional[hosting]"``):

    python samples/host_agui.py            # self-check: serve on a free port, one approval over HTTP, exit
    python samples/host_agui.py --serve    # serve POST http://127.0.0.1:16792/agent until Ctrl+C
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import httpx
import uvicorn
from agent_framework_ag_ui import InMemoryAGUIThreadSnapshotStore
from fastapi import FastAPI

from agent_framework_functional import RunContext, workflow
from agent_framework_functional.hosting import agui_endpoint


@workflow(name="deployer", description="Asks one approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """Pause once for a bool approval (core's request id ``auto::0``), then answer with text."""
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    return f"deployed: {text}" if approved else f"not deployed: {text}"


app = FastAPI()
agui_endpoint(
    app, deployer.build().as_agent(), "/agent", snapshot_store=InMemoryAGUIThreadSnapshotStore(), single_user=True
)


async def self_check() -> str:
    """Serve on a free loopback port, pause, answer the canonical way, return the final text."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()  # startup failed: raise its error
        await asyncio.sleep(0.02)
    base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30, trust_env=False) as client:
            body = {"threadId": uuid.uuid4().hex, "tools": [], "context": [], "state": {}, "forwardedProps": {}}
            messages = [{"id": uuid.uuid4().hex, "role": "user", "content": "ship it"}]
            resume: list[dict[str, Any]] | None = None
            for _ in range(2):  # the turn, then its answer
                run = {
                    **body,
                    "runId": uuid.uuid4().hex,
                    "messages": messages,
                    **({"resume": resume} if resume else {}),
                }
                reply = await client.post("/agent", json=run)
                events = [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
                messages = next(e["messages"] for e in events if e["type"] == "MESSAGES_SNAPSHOT")
                outcome = next(e for e in events if e["type"] == "RUN_FINISHED").get("outcome") or {}
                resume = [  # each interrupt's id is unique to its pause (the request id and a tag)
                    {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
                    for interrupt in outcome.get("interrupts") or []
                ]
            return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    finally:
        server.should_exit = True
        await serving


async def main() -> None:
    """Self-check by default; ``--serve`` serves the endpoint on 127.0.0.1:16792 until interrupted."""
    if "--serve" in sys.argv[1:]:
        print("AG-UI endpoint: POST http://127.0.0.1:16792/agent (Ctrl+C stops)")
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=16792)).serve()
        return
    text = await self_check()
    assert text == "deployed: ship it", text
    print(f"self-check passed: {text}")


if __name__ == "__main__":
    asyncio.run(main())
