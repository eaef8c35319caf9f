"""Serve a FunctionalWorkflowAgent to other agents over A2A in one call: ``a2a_app(agent, url=...)``.

What it shows: a pause is an A2A task in ``input-required`` whose status message carries the request
(``request_id``, ``data``, ``response_schema``) as a data part; the ``a2a-sdk`` client answers on the same
task with a data part ``{"request_id": ..., "answer": true}`` and the task completes with the workflow's text.

Run it (needs ``pip install "agent-framework-functional[a2a]"``; no API key):

    python samples/host_a2a.py            # self-check: serve on 127.0.0.1, one approval round trip, exit
    python samples/host_a2a.py --serve    # serve on http://127.0.0.1:16793/ until Ctrl+C (card at
                                          # /.well-known/agent-card.json; A2AAgent(url=...) talks to it)
"""

from __future__ import annotations

import asyncio
import socket
import sys
import uuid

import httpx
import uvicorn
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_data_parts, new_text_part
from a2a.types import Message, Role, SendMessageRequest

from agent_framework_functional import RunContext, workflow
from agent_framework_functional.hosting import a2a_app
from agent_framework_functional.hosting.a2a import new_answer_part

PORT = 16793


@workflow(name="deployer", description="Asks one approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """Pause once for a bool approval (core's request id ``auto::0``), then answer with text."""
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    return f"deployed: {text}" if approved else f"not deployed: {text}"


async def self_check() -> str:
    """Serve on a free loopback port, pause, approve on the same task, return the task's output text."""
    with socket.socket() as probe:  # the agent card names the URL, so pick the port first
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    app = a2a_app(deployer.build().as_agent(name="deployer"), url=url)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # startup failed: raise its error
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
            client = await create_client(url, ClientConfig(httpx_client=http, streaming=False))
            start = Message(role=Role.ROLE_USER, parts=[new_text_part("ship it")], message_id=uuid.uuid4().hex)
            async for event in client.send_message(SendMessageRequest(message=start)):
                paused = event.task
            (request,) = get_data_parts(paused.status.message.parts)
            print(f"Paused: task {paused.id} is input-required: {request}")
            answer = Message(
                role=Role.ROLE_USER,
                parts=[new_answer_part(True, request["request_id"])],
                message_id=uuid.uuid4().hex,
                task_id=paused.id,
                context_id=paused.context_id,
            )
            async for event in client.send_message(SendMessageRequest(message=answer)):
                done = event.task
            return "".join(part.text for artifact in done.artifacts for part in artifact.parts)
    finally:
        server.should_exit = True
        await serving


async def main() -> None:
    """Self-check by default; ``--serve`` serves on 127.0.0.1:16793 until interrupted."""
    if "--serve" in sys.argv[1:]:
        app = a2a_app(deployer.build().as_agent(name="deployer"), url=f"http://127.0.0.1:{PORT}/")
        print(f"Serving A2A on http://127.0.0.1:{PORT}/ (Ctrl+C stops)")
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=PORT, log_level="info")).serve()
        return
    text = await self_check()
    assert text == "deployed: ship it", text
    print(f"self-check passed: {text}")


if __name__ == "__main__":
    asyncio.run(main())
