"""Approve with edits: the reviewer changes fields of a draft (a pydantic model), then approves it.

What it shows: a workflow asks for a structured answer (``response_type=Review``, a pydantic model that
holds the edited draft); the host surfaces the request with the draft as its data and the answer's JSON
Schema (``response_schema`` in the ``function_call`` item's arguments), and the reviewer's answer,
the JSON of a ``Review``, comes back through the host and reaches the workflow as a ``Review``. A wrong
shape is refused (HTTP 400 naming the field) and the pause stays answerable.

Each host is one check in ``HOST_CHECKS``: how to serve the agent, and how a client of that host answers.
Responses: ``responses_app(agent)``, answered by the ``openai`` client with a ``function_call_output``
item whose ``output`` is the JSON text of the ``Review``. AG-UI: ``agui_endpoint(...)``; the pause is
``RUN_FINISHED`` with an ``interrupt`` whose metadata carries the request, answered by a ``resume`` whose
payload is ``{"approved": true, "answer": <the Review>}`` (any AG-UI client; ``tests/hosting`` also
answers it with the official ``@ag-ui/client``).

Run it (needs ``pip install "agent-framework-functional[hosting]"``; no API key):

    python samples/review_with_edits.py     # serves each host on 127.0.0.1 (free port), one review each, exits
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import uvicorn
from agent_framework_ag_ui import InMemoryAGUIThreadSnapshotStore
from fastapi import FastAPI
from openai import AsyncOpenAI, BadRequestError
from pydantic import BaseModel

from agent_framework_functional import FunctionalWorkflowAgent, RunContext, workflow
from agent_framework_functional.hosting import agui_endpoint, responses_app


class Draft(BaseModel):
    """What the workflow wrote and the reviewer may edit."""

    title: str
    body: str
    tags: list[str] = []


class Review(BaseModel):
    """The reviewer's answer: the draft as edited, and whether to publish it."""

    approved: bool
    draft: Draft
    note: str = ""


@workflow(name="publisher", description="Writes a draft, asks for a review with edits, publishes the result.")
async def publisher(topic: str, ctx: RunContext) -> str:
    """One structured request (``auto::0``): the draft as data, a ``Review`` as the answer."""
    draft = Draft(title=topic.capitalize(), body=f"A first draft about {topic}.", tags=[topic])
    review = await ctx.request_info(draft, response_type=Review)
    if not review.approved:
        return f"not published: {draft.title}"
    edited = review.draft
    return f"published: {edited.title} | {edited.body} | tags={','.join(edited.tags)} | note={review.note}"


def reviewer_edits(draft: dict[str, Any]) -> dict[str, Any]:
    """What the person does: sharpen the title, add a tag, approve (JSON of a ``Review``)."""
    edited = {**draft, "title": "Tea, brewed right", "tags": [*draft["tags"], "howto"]}
    return {"approved": True, "draft": edited, "note": "title sharpened"}


EXPECTED = "published: Tea, brewed right | A first draft about tea. | tags=tea,howto | note=title sharpened"


async def check_responses(base_url: str) -> str:
    """The Responses host, with the ``openai`` client: pause, a wrong shape (400), then the edited review."""
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    paused = await client.responses.create(model="publisher", input="tea")
    (call,) = [item for item in paused.output if item.type == "function_call"]
    request = json.loads(call.arguments)  # {"request_id", "data": the draft, "response_type", "response_schema"}
    print(f"Responses paused: {call.call_id} asks for a {request['response_type']} about {request['data']}")

    def answer(value: Any) -> list[Any]:
        return [{"type": "function_call_output", "call_id": call.call_id, "output": json.dumps(value)}]

    try:  # a review without the draft is refused, naming the field; the pause stays
        await client.responses.create(model="publisher", previous_response_id=paused.id, input=answer({"approved": 1}))
        raise AssertionError("a review without its draft was accepted")
    except BadRequestError as exc:
        print(f"Responses refused a wrong shape: {exc.status_code} {exc.body}")
    review = reviewer_edits(request["data"])
    done = await client.responses.create(model="publisher", previous_response_id=paused.id, input=answer(review))
    return done.output_text


def agui_app(agent: FunctionalWorkflowAgent) -> FastAPI:
    """The AG-UI host: ``POST /agent`` through ``agui_endpoint`` (a snapshot store is required)."""
    app = FastAPI()
    agui_endpoint(app, agent, "/agent", snapshot_store=InMemoryAGUIThreadSnapshotStore(), single_user=True)
    return app


async def check_agui(base_url: str) -> str:
    """The AG-UI host, over its HTTP wire: pause (an interrupt), a wrong shape (400), then the edited review."""
    thread = {"threadId": uuid.uuid4().hex, "tools": [], "context": [], "state": {}, "forwardedProps": {}}
    messages: list[Any] = [{"id": uuid.uuid4().hex, "role": "user", "content": "tea"}]
    async with httpx.AsyncClient(base_url=base_url, timeout=30, trust_env=False) as client:

        async def run(resume: list[Any] | None = None) -> httpx.Response:
            extra = {"resume": resume} if resume else {}
            return await client.post(
                "/agent", json={**thread, "runId": uuid.uuid4().hex, "messages": messages, **extra}
            )

        def events(reply: httpx.Response) -> list[dict[str, Any]]:
            return [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]

        paused = events(await run())
        messages = next(e["messages"] for e in paused if e["type"] == "MESSAGES_SNAPSHOT")  # the client's transcript
        (interrupt,) = paused[-1]["outcome"]["interrupts"]
        request = interrupt["metadata"]["agent_framework"]["function_call"]["arguments"]
        print(f"AG-UI paused: {interrupt['id']} asks for a {request['response_type']} about {request['data']}")

        def answer(value: Any) -> list[Any]:
            return [
                {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True, "answer": value}}
            ]

        refused = await run(answer({"approved": 1}))  # a review without the draft: 400 naming the field
        assert refused.status_code == 400, refused.text
        print(f"AG-UI refused a wrong shape: {refused.status_code} {refused.json()}")
        done = events(await run(answer(reviewer_edits(request["data"]))))
    return "".join(e["delta"] for e in done if e["type"] == "TEXT_MESSAGE_CONTENT")


HOST_CHECKS: dict[str, tuple[Callable[[FunctionalWorkflowAgent], Any], Callable[[str], Awaitable[str]]]] = {
    "responses": (responses_app, check_responses),
    "agui": (agui_app, check_agui),
}
"""Host name -> (make the ASGI app for an agent, a client's check against its base URL returning the final text)."""


async def serve_and_check(app: Any, check: Callable[[str], Awaitable[str]]) -> str:
    """Serve ``app`` on a free loopback port, run ``check`` against it, stop the server."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # startup failed: raise its error
            await asyncio.sleep(0.02)
        return await check(f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}")
    finally:
        server.should_exit = True
        await serving


async def main() -> None:
    """One review with edits through each host; exits non-zero if any result differs."""
    for name, (make_app, check) in HOST_CHECKS.items():
        text = await serve_and_check(make_app(publisher.build().as_agent(name="publisher")), check)
        assert text == EXPECTED, (name, text)
        print(f"{name}: {text}")
    print(f"self-check passed: {', '.join(HOST_CHECKS)}")


if __name__ == "__main__":
    asyncio.run(main())
