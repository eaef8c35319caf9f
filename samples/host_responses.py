"""Serve a FunctionalWorkflowAgent over the OpenAI Responses API in one call: ``responses_app(agent)``.

What it shows: the route (``POST /v1/responses``, JSON or SSE, ``previous_response_id`` or
``conversation``) comes from ``agent_framework_functional.hosting.responses_app``; a pause is a
``completed`` response with a ``function_call`` item and an ``mcp_approval_request`` item (both carry the
request id), and the ``openai`` client answers it with an ``mcp_approval_response`` input item.

Run it (needs ``pip install "agent-framework-functional[hosting]"``; no API key):

    python samples/host_responses.py            # self-check: serve on 127.0.0.1, one approval round trip, exit
    python samples/host_responses.py --serve    # serve on http://127.0.0.1:16790/v1/responses until Ctrl+C

then, while serving::

    curl -s localhost:16790/v1/responses -H 'content-type: application/json' -d '{"input": "ship it"}'
    curl -s localhost:16790/v1/responses -H 'content-type: application/json' -d '{"previous_response_id":
      "<id>", "input": [{"type": "mcp_approval_response", "approval_request_id": "<ID>", "approve": true}]}'

(``<id>``: the paused response's ``id``; ``<ID>``: its ``mcp_approval_request`` item's ``id``, unique to the pause).
"""

from __future__ import annotations

import asyncio
import sys

import uvicorn
from openai import AsyncOpenAI

from agent_framework_functional import RunContext, workflow
from agent_framework_functional.hosting import responses_app

PORT = 16790


@workflow(name="deployer", description="Asks one approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """Pause once for a bool approval (core's request id ``auto::0``), then answer with text."""
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    return f"deployed: {text}" if approved else f"not deployed: {text}"


async def self_check() -> str:
    """Serve on a free loopback port, pause, approve with ``previous_response_id``, return the final text."""
    app = responses_app(deployer.build().as_agent(name="deployer"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # startup failed: raise its error
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        paused = await client.responses.create(model="deployer", input="ship it")
        (request,) = [item for item in paused.output if item.type == "mcp_approval_request"]
        print(f"Paused: {request.name} {request.arguments} (id {request.id})")
        answer = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        done = await client.responses.create(model="deployer", previous_response_id=paused.id, input=[answer])
        return done.output_text
    finally:
        server.should_exit = True
        await serving


async def main() -> None:
    """Self-check by default; ``--serve`` serves on 127.0.0.1:16790 until interrupted."""
    if "--serve" in sys.argv[1:]:
        app = responses_app(deployer.build().as_agent(name="deployer"))
        print(f"Serving the Responses API on http://127.0.0.1:{PORT}/v1/responses (Ctrl+C stops)")
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=PORT, log_level="info")).serve()
        return
    text = await self_check()
    assert text == "deployed: ship it", text
    print(f"self-check passed: {text}")


if __name__ == "__main__":
    asyncio.run(main())
