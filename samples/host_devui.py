"""Serve a FunctionalWorkflowAgent in DevUI, the Agent Framework web UI, with one call.

What it shows: ``serve_devui`` serves the agent's page and API, printing the URL and the bearer token the page
asks for once ("DevUI" in the docs). The reviewer sees the draft in an "Approval Required" card and answers by
typing the edited draft as JSON (``{"title": ..., "body": ..., "approved": true}``); the workflow gets a
``Draft``. A wrong shape is refused with a message naming the field, and the draft stays pending.

Run it (needs ``pip install "agent-framework-functional[hosting]"``):

    python samples/host_devui.py                # self-check: serve on a free port, one review over HTTP, exit
    python samples/host_devui.py --serve        # the web UI on http://127.0.0.1:16791 until Ctrl+C
    python samples/host_devui.py --serve --port 0   # any free port (printed)

The token is ``DEVUI_AUTH_TOKEN`` when set, else a fresh one (printed).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys

import httpx
import uvicorn
from pydantic import BaseModel

from agent_framework_functional import RunContext, workflow
from agent_framework_functional.hosting import devui_app, serve_devui


class Draft(BaseModel):
    """What the reviewer edits and approves."""

    title: str
    body: str
    approved: bool


@workflow(name="editor", description="Asks a reviewer to edit a draft and approve it, then publishes it.")
async def editor(text: str, ctx: RunContext) -> str:
    """Pause once with the draft as the request; the answer is the edited draft."""
    reviewed = await ctx.request_info(Draft(title=text, body=f"About {text}.", approved=False), response_type=Draft)
    return f"published: {reviewed.title}" if reviewed.approved else f"not published: {reviewed.title}"


async def self_check() -> str:
    """Serve on a free loopback port, pause in a conversation, answer with an edited draft, return the text."""
    token = secrets.token_urlsafe(16)
    server = uvicorn.Server(
        uvicorn.Config(devui_app(editor.build().as_agent(), auth_token=token), port=0, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()  # startup failed: raise its error
        await asyncio.sleep(0.02)
    base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30, trust_env=False) as client:
            entity = (await client.get("/v1/entities")).json()["entities"][0]["id"]
            conversation = (await client.post("/v1/conversations", json={"metadata": {"agent_id": entity}})).json()
            body = {"metadata": {"entity_id": entity}, "conversation": conversation["id"], "stream": False}
            await client.post("/v1/responses", json={**body, "input": "Launch"})
            edited = json.dumps({"title": "Launch day", "body": "We ship.", "approved": True})
            done = (await client.post("/v1/responses", json={**body, "input": edited})).json()
            return "".join(p.get("text", "") for i in done["output"] if i["type"] == "message" for p in i["content"])
    finally:
        server.should_exit = True
        await serving


async def main() -> None:
    """Self-check by default; ``--serve [--port N]`` serves the web UI until interrupted."""
    args = sys.argv[1:]
    if "--serve" in args:
        port = int(args[args.index("--port") + 1]) if "--port" in args else 16791
        await serve_devui(editor.build().as_agent(), port=port)
        return
    text = await self_check()
    assert text == "published: Launch day", text
    print(f"self-check passed: {text}")


if __name__ == "__main__":
    asyncio.run(main())
