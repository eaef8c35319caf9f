"""Serve a FunctionalWorkflowAgent as an MCP tool in one call: ``mcp_app(agent, key=...)``.

What it shows: calling the tool runs the workflow; its pause comes back as an MCP ``input_required``
result with a form elicitation (the answer's schema) and a sealed ``requestState``; the ``mcp`` client
answers the form through its ``elicitation_callback`` and retries by itself, and the tool returns the
workflow's text.

Run it (needs ``pip install "agent-framework-functional[mcp]"``; no API key):

    python samples/host_mcp.py            # self-check: serve on 127.0.0.1, one approval round trip, exit
    python samples/host_mcp.py --serve    # serve on http://127.0.0.1:16794/mcp until Ctrl+C

The key seals the paused state the client carries; use 32 random bytes from your secret store and the
same key on every worker (this sample makes one per run).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import uvicorn
from mcp import Client, types

from agent_framework_functional import RunContext, workflow
from agent_framework_functional.hosting import mcp_app
from agent_framework_functional.hosting.mcp import first_text

PORT = 16794


@workflow(name="deployer", description="Asks one approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """Pause once for a bool approval (core's request id ``auto::0``), then answer with text."""
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    return f"deployed: {text}" if approved else f"not deployed: {text}"


async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    """The client's side of the form: print what the tool asks, then approve."""
    print(f"Paused: {params.message} (form: {params.requested_schema})")  # pyright: ignore[reportAttributeAccessIssue]
    return types.ElicitResult(action="accept", content={"answer": True})


async def self_check() -> str:
    """Serve on a free loopback port, call the tool, approve its elicitation, return the tool's text."""
    app = mcp_app(deployer.build().as_agent(name="deployer"), key=os.urandom(32))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # startup failed: raise its error
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with Client(f"http://127.0.0.1:{port}/mcp", elicitation_callback=approve) as client:
            return first_text(await client.call_tool("deployer", {"task": "ship it"}))
    finally:
        server.should_exit = True
        await serving


async def main() -> None:
    """Self-check by default; ``--serve`` serves on 127.0.0.1:16794 until interrupted."""
    if "--serve" in sys.argv[1:]:
        app = mcp_app(deployer.build().as_agent(name="deployer"), key=os.urandom(32))
        print(f"Serving MCP on http://127.0.0.1:{PORT}/mcp (Ctrl+C stops)")
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=PORT, log_level="info")).serve()
        return
    text = await self_check()
    assert text == "deployed: ship it", text
    print(f"self-check passed: {text}")


if __name__ == "__main__":
    asyncio.run(main())
