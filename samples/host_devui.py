"""Serve a FunctionalWorkflowAgent in DevUI (agent-framework-devui), the Agent Framework web UI.

What it shows: DevUI needs no adapter. Give it the agent; its page (or any client of its OpenAI-style
API) creates a conversation, sends a message, shows the pause as an "Approval Required" card and sends
the answer as a ``function_approval_response``. DevUI keeps one ``AgentSession`` per conversation, so one
agent serves many conversations at once, each with its own pause. Use a conversation: without one DevUI
passes no session and drops the response's continuation token, so an answer cannot be resumed.

Run it (needs ``pip install "agent-framework-functional[hosting]"``):

    python samples/host_devui.py            # self-check: serve on 127.0.0.1, one approval round trip over HTTP, exit
    python samples/host_devui.py --serve    # the web UI on http://127.0.0.1:16791 until Ctrl+C

With ``--serve``, DevUI protects its API with a bearer token: the sample uses ``DEVUI_AUTH_TOKEN`` or
prints a generated one; the page asks for it once.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from typing import Any

import httpx
import uvicorn
from agent_framework_devui import DevServer

from agent_framework_functional import FunctionalWorkflowAgent, RunContext, workflow

PORT = 16791


@workflow(name="deployer", description="Asks one approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """Pause once for a bool approval (request id ``auto::0``), then answer with text."""
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    return f"deployed: {text}" if approved else f"not deployed: {text}"


def build_agent() -> FunctionalWorkflowAgent:
    """One agent for every DevUI conversation."""
    return deployer.build().as_agent(name="deployer")


def build_app(agent: FunctionalWorkflowAgent, token: str) -> Any:
    """DevUI's FastAPI app with the agent registered (at startup) and bearer-token auth."""
    server = DevServer(host="127.0.0.1", port=PORT, auth_enabled=True, auth_token=token, ui_enabled=True)
    server.set_pending_entities([agent])
    return server.get_app()


def sse_events(body: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body (``data:`` lines; ``[DONE]`` skipped)."""
    events = []
    for line in body.splitlines():
        if line.startswith("data:") and line[5:].strip().startswith("{"):
            events.append(json.loads(line[5:]))
    return events


async def self_check() -> str:
    """Serve on a free loopback port, pause in a conversation, approve, return the final text."""
    token = secrets.token_urlsafe(16)
    server = uvicorn.Server(
        uvicorn.Config(build_app(build_agent(), token), host="127.0.0.1", port=0, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # startup failed: raise its error
            await asyncio.sleep(0.02)
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30, trust_env=False) as client:
            entity_id = (await client.get("/v1/entities")).json()["entities"][0]["id"]
            conversation = (await client.post("/v1/conversations", json={"metadata": {"agent_id": entity_id}})).json()
            body = {"metadata": {"entity_id": entity_id}, "conversation": conversation["id"], "stream": True}
            paused = sse_events((await client.post("/v1/responses", json={**body, "input": "ship it"})).text)
            (request,) = [e for e in paused if e["type"] == "response.function_approval.requested"]
            print(f"Paused: {request['function_call']['name']} {request['function_call']['arguments']}")
            answer = {"type": "function_approval_response", "request_id": request["request_id"], "approved": True}
            message = {"type": "message", "role": "user", "content": [answer]}
            done = sse_events((await client.post("/v1/responses", json={**body, "input": [message]})).text)
            return "".join(e["delta"] for e in done if e["type"] == "response.output_text.delta")
    finally:
        server.should_exit = True
        await serving


async def main() -> None:
    """Self-check by default; ``--serve`` serves the web UI on 127.0.0.1:16791 until interrupted."""
    if "--serve" in sys.argv[1:]:
        token = os.environ.get("DEVUI_AUTH_TOKEN") or secrets.token_urlsafe(16)
        print(f"DevUI on http://127.0.0.1:{PORT} (bearer token: {token}; Ctrl+C stops)")
        await uvicorn.Server(uvicorn.Config(build_app(build_agent(), token), host="127.0.0.1", port=PORT)).serve()
        return
    text = await self_check()
    assert text == "deployed: ship it", text
    print(f"self-check passed: {text}")


if __name__ == "__main__":
    asyncio.run(main())
